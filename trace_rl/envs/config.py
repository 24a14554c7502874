"""The `[env]` section of a config: which environment a run plays (`kind`), its task seeds, and one sub-section per
kind (`[env.capability]`, `[env.textworld]`, `[env.tau2]`, `[env.toolsandbox]`, `[env.python]`, `[env.mixture]`).

    section = EnvSection(kind="textworld", textworld=TextWorldEnvSection(challenge="tw-simple"))
    make = environment_factory(section)     # tracec.trace_rl.envs.registry: fresh environments of that kind

Frozen keyword-only sections, each checked where it is declared (`__post_init__`, through `config_io.require` and
`choice`), so the trainer's config (`grpo.config.TrainConfig.env`) and the TRACE pipeline's targets read the same
settings with the same errors. ToolSandbox's scenario names are checked against the shipped scenarios (package
data, read once) where they are declared. Left out: reading files (`registry` does, when the environments are made;
the trainer's preflight checks them earlier) and making paths absolute (the config's reader does, for every
section).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tracec.trace_rl.envs.toolcall import CALL_FORMATS, DEFAULT_CALL_FORMAT
from tracec.trace_rl.envs.toolsandbox.scenarios import select_scenarios, shipped_scenarios

from tracec.config_io import FieldError, choice, require

__all__ = ["KINDS", "CapabilityEnvSection", "EnvSection", "MixtureEnvSection", "PythonEnvSection", "Tau2EnvSection",
           "TextWorldEnvSection", "ToolSandboxEnvSection", "check_toolsandbox_scenarios"]

KINDS = ("capability", "textworld", "tau2", "toolsandbox", "python", "mixture")  # what `[env] kind` may name


@dataclass(frozen=True, kw_only=True)
class CapabilityEnvSection:
    path: str = ""  # the `.rubric` file holding the environment
    name: str = ""  # which environment of the file; "" = its only one
    user: str = "scripted"  # scripted: consents, closes on "done" | llm: user_model plays the task's user (LLMUser)
    user_model: str = "smollm2-135m-instruct"  # the llm user's model (no adapter): a name, a folder, or "tiny"

    def __post_init__(self) -> None:
        choice("user", self.user, ("scripted", "llm"))


@dataclass(frozen=True, kw_only=True)
class TextWorldEnvSection:
    game: str = ""  # a game file (.z8 or .ulx) every seed plays; "" = a task family: seed N makes game N
    challenge: str = "custom"  # the family: custom | tw-simple | tw-cooking (`tw-make` challenges)
    world_size: int = 3  # custom: rooms; tw-cooking: 1, 6, 9 or 12
    nb_objects: int = 5  # custom
    quest_length: int = 3  # custom: actions of the quest
    rewards: str = "dense"  # tw-simple: dense | balanced | sparse
    goal: str = "detailed"  # tw-simple: detailed | brief | none
    recipe: int = 1  # tw-cooking: ingredients
    take: int = 1  # tw-cooking: of which to find
    skills: tuple[str, ...] = ()  # tw-cooking: open, cook, cut, drop
    show_admissible: bool = True  # list the admissible commands in each observation
    cache: str = ""  # where made games are kept; "" = $TRACEC_CACHE_DIR/textworld (default ~/.cache/tracec)

    def __post_init__(self) -> None:
        choice("challenge", self.challenge, ("custom", "tw-simple", "tw-cooking"))
        for name in ("world_size", "nb_objects", "quest_length", "recipe"):
            require(getattr(self, name) >= 1, name, getattr(self, name), "an integer >= 1")
        choice("rewards", self.rewards, ("dense", "balanced", "sparse"))
        choice("goal", self.goal, ("detailed", "brief", "none"))
        require(0 <= self.take <= self.recipe, "take", self.take, f"an integer in 0..recipe ({self.recipe})")
        for skill in self.skills:
            choice("skills", skill, ("open", "cook", "cut", "drop"))
        require(self.challenge != "tw-cooking" or self.world_size in (1, 6, 9, 12), "world_size", self.world_size,
                 "tw-cooking games have 1, 6, 9 or 12 rooms")


@dataclass(frozen=True, kw_only=True)
class Tau2EnvSection:
    domain: str = "airline"  # airline | retail
    data: str = ""  # the tau2-bench data folder; "" = $TRACEC_TAU2_DATA or shared/data/tau2 beside the repo
    user: str = "llm"  # llm: the benchmark's user simulator on user_model | scripted: opens, consents, never ends
    user_model: str = "smollm2-135m-instruct"  # the simulator's model (no adapter): a name, a folder, or "tiny"

    def __post_init__(self) -> None:
        choice("domain", self.domain, ("airline", "retail"))
        choice("user", self.user, ("llm", "scripted"))


@dataclass(frozen=True, kw_only=True)
class ToolSandboxEnvSection:
    scenarios: tuple[str, ...] = ()  # scenario names or categories (e.g. "state_dependency"); () = all 101 transcribed
    user: str = "scripted"  # scripted: the scenario's fixed replies, then it ends | llm: the benchmark's simulator
    user_model: str = "smollm2-135m-instruct"  # the llm user's model (no adapter): a name, a folder, or "tiny"

    def __post_init__(self) -> None:
        check_toolsandbox_scenarios(self.scenarios)
        choice("user", self.user, ("scripted", "llm"))


def check_toolsandbox_scenarios(scenarios: tuple[str, ...]) -> None:
    """A FieldError unless every entry is a shipped ToolSandbox scenario's name or a category."""
    if not scenarios:
        return
    try:
        select_scenarios(shipped_scenarios(), scenarios)
    except ValueError as error:
        raise FieldError("scenarios", scenarios, str(error)) from None


@dataclass(frozen=True, kw_only=True)
class PythonEnvSection:
    factory: str = ""  # "package.module:function": called with no arguments, it returns a fresh environment

    def __post_init__(self) -> None:
        require(not self.factory or re.fullmatch(r"[\w.]+:[\w.]+", self.factory) is not None, "factory",
                 self.factory, "write \"package.module:function\" (a callable returning a fresh environment)")


@dataclass(frozen=True, kw_only=True)
class MixtureEnvSection:
    paths: tuple[str, ...] = ()  # capability environments' `.rubric` files (each file's only environment)
    weights: tuple[float, ...] = ()  # one per path, in proportion; () = uniform

    def __post_init__(self) -> None:
        require(not self.weights or len(self.weights) == len(self.paths), "weights", self.weights,
                 f"give one weight per path ({len(self.paths)}), or leave it out for uniform weights")
        require(all(w >= 0 for w in self.weights) and (not self.weights or sum(self.weights) > 0), "weights",
                 self.weights, "non-negative numbers, not all 0 (a seed's component is drawn in proportion)")

    @property
    def resolved_weights(self) -> tuple[float, ...]:
        return self.weights or (1.0,) * len(self.paths)


@dataclass(frozen=True, kw_only=True)
class EnvSection:
    kind: str = "capability"  # capability | textworld | tau2 | toolsandbox | python (your own class) | mixture
    first_seed: int = 0  # task instances are seeds first_seed .. first_seed + num_seeds - 1
    num_seeds: int = 1000
    max_turns: int = 8  # agent turns per episode; the environment may end it sooner
    capability: CapabilityEnvSection = CapabilityEnvSection()
    textworld: TextWorldEnvSection = TextWorldEnvSection()
    tau2: Tau2EnvSection = Tau2EnvSection()
    toolsandbox: ToolSandboxEnvSection = ToolSandboxEnvSection()
    python: PythonEnvSection = PythonEnvSection()
    mixture: MixtureEnvSection = MixtureEnvSection()  # multi-capability GRPO: capability environments, weighted
    call_format: str = DEFAULT_CALL_FORMAT  # tool environments (capability, tau2, toolsandbox): native (tools as
    #   JSON schemas through the chat template, calls as <tool_call>{...}</tool_call>) | text (tools listed in the
    #   system prompt, <action>)

    def __post_init__(self) -> None:
        choice("call_format", self.call_format, CALL_FORMATS)
        choice("kind", self.kind, KINDS)
        require(self.first_seed >= 0, "first_seed", self.first_seed, "seeds are integers >= 0")
        require(self.num_seeds >= 1, "num_seeds", self.num_seeds, "an integer >= 1")
        require(1 <= self.max_turns <= 1000, "max_turns", self.max_turns, "an integer in 1..1000")
        require(self.kind != "capability" or bool(self.capability.path), "capability.path", self.capability.path,
                 "a capability environment needs its `.rubric` file, e.g. "
                 "env.capability.path = \"examples/envs/tool_calling_precision.rubric\"")
        require(self.kind != "python" or bool(self.python.factory), "python.factory", self.python.factory,
                 "name the factory of your environment, e.g. env.python.factory = \"mypackage.envs:make_env\"")
        require(self.kind != "mixture" or bool(self.mixture.paths), "mixture.paths", self.mixture.paths,
                 "a mixture names its capability environments, e.g. env.mixture.paths = "
                 "[\"examples/envs/multi_step_completion.rubric\", \"examples/envs/precondition_verification.rubric\"]")
