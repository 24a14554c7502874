"""The four targets behind the one environment protocol, played by the one `run_episode`; the protocol's defaults.

For each target (a capability environment, tau2-bench, ToolSandbox, TextWorld): the scripted solver (gold agent,
walkthrough) wins with reward 1 on the last step and 0 before it; an agent that does nothing loses; the trajectory
is scored by the target's shipped rubric (the solver reaches execution operators, the idle agent none); and the
same seed gives the same episode, from fresh environments made by one factory (a GRPO group), while other seeds
give other tasks.
The protocol's parts with defaults (`hint`, `admissible_commands`, `close`): a subclass inherits them, a user's
factory object that does not subclass the protocol gets them at set-up, and every path that makes environments
(the rollout engine, a mixture, `evaluate`) closes each one it made exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from toy_env import BareLetterEnv, LetterEnv
from tracec.runtime.facts.trajectories.records import write_records
from tracec.runtime.scoring import RubricScorer
from tracec.trace_rl.envs import tau2
from tracec.trace_rl.envs.agent import Agent, Message, run_episode
from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.envs.capability.validate import GoldAgent, NullAgent
from tracec.trace_rl.envs.config import EnvSection, PythonEnvSection
from tracec.trace_rl.envs.mixture import MixtureEnvironment
from tracec.trace_rl.envs.protocol import Environment as EnvironmentProtocol
from tracec.trace_rl.envs.protocol import Observation, StepResult
from tracec.trace_rl.envs.registry import environment_factory
from tracec.trace_rl.envs.textworld.agents import WalkthroughAgent
from tracec.trace_rl.envs.textworld.env import SimpleGame, TextWorldEnvironment
from tracec.trace_rl.envs.toolsandbox import ToolSandboxEnvironment, shipped_scenarios
from tracec.trace_rl.envs.toolsandbox.replay import GoldAgent as ToolSandboxGold
from tracec.trace_rl.envs.user_factory import FactoryEnvironment, lists_commands, made_environment
from tracec.trace_rl.policy.tiny import build_tokenizer
from tracec.trace_rl.rollouts.engine import GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.script_sampler import ScriptSampler
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate
from tracec.trace_rl.targeting.evaluate import Condition, EvalDomain, evaluate

from tracec.config_io import ConfigError, FieldError

REPO = Path(__file__).resolve().parents[2]
TRIPS = REPO / "tests" / "data" / "cancel_trip.rubric"


class Recording(EnvironmentProtocol):
    """An environment that keeps every observation and step result of the one it wraps; it is itself an
    `Environment`, so `run_episode` needs nothing more than the protocol."""

    def __init__(self, env: EnvironmentProtocol) -> None:
        self.env = env
        self.first: Observation | None = None
        self.results: list[StepResult] = []

    @property
    def system_prompt(self) -> str:
        return self.env.system_prompt

    def reset(self, seed: int) -> Observation:
        self.first, self.results = self.env.reset(seed), []
        return self.first

    def step(self, action: str) -> StepResult:
        self.results.append(self.env.step(action))
        return self.results[-1]

    def trajectory(self, episode: str) -> dict[str, Any]:
        return self.env.trajectory(episode)


class Idle:
    """Does nothing useful: says the same thing every turn."""

    def __init__(self, text: str) -> None:
        self.text = text

    def act(self, messages: Sequence[Message]) -> str:
        return self.text


@dataclass(frozen=True)
class Target:
    make: Callable[[], Any]  # a fresh environment (the factory of a group)
    solver: Callable[[Any], Agent]  # the scripted agent that solves it, given its environment
    idle: Agent
    rubric: Path
    seeds: tuple[int, int]  # two seeds of different tasks
    max_turns: int


@pytest.fixture(params=["capability", "tau2", "toolsandbox", pytest.param("textworld", marks=pytest.mark.slow)])
def target(request: pytest.FixtureRequest) -> Any:
    if request.param == "capability":
        program = load_environment(str(TRIPS))
        yield Target(make=lambda: CapabilityEnvironment(program), solver=GoldAgent, idle=NullAgent(),
                     rubric=REPO / "examples" / "toolenv.rubric", seeds=(3, 4), max_turns=30)
    elif request.param == "tau2":
        domain = request.getfixturevalue("domains")["retail"]
        gold: dict[str, Any] = {}  # the gold databases, replayed once for every environment of the group
        mutations = [t.id for t in domain.tasks.values() if any(a.name.startswith("cancel") for a in t.actions)]
        yield Target(make=lambda: tau2.Tau2Environment(domain, user=tau2.gold_user(), task_ids=mutations[:2],
                                                       gold=gold),
                     solver=tau2.GoldAgent, idle=Idle("All done. I am sorry, I cannot help with that."),
                     rubric=REPO / "examples" / "tau2.rubric", seeds=(0, 1), max_turns=60)
    elif request.param == "toolsandbox":
        names = ["send_message_with_contact_content_cellular_off_multiple_user_turn", "turn_on_wifi_low_battery_mode"]
        yield Target(make=lambda: ToolSandboxEnvironment(shipped_scenarios(), names=names), solver=ToolSandboxGold,
                     idle=Idle("I am sorry, I cannot help with that."),
                     rubric=REPO / "examples" / "toolsandbox.rubric", seeds=(0, 1), max_turns=30)
    else:
        game: Path = request.getfixturevalue("textworld_game")
        opened: list[TextWorldEnvironment] = []

        def make() -> TextWorldEnvironment:
            opened.append(TextWorldEnvironment(SimpleGame(), cache_dir=game.parent.parent, max_steps=40))
            return opened[-1]

        # Seed 2 is the session's game (already made); seed 3 makes one more.
        yield Target(make=make, solver=WalkthroughAgent, idle=Idle("<action>look</action>"),
                     rubric=REPO / "examples" / "textworld.rubric", seeds=(2, 3), max_turns=40)
        for env in opened:
            env.close()


def test_the_solver_wins_with_reward_one_on_the_last_step(target: Target) -> None:
    env = Recording(target.make())
    record = run_episode(env, target.solver(env.env), target.seeds[0], target.max_turns, episode="solver")
    assert record["success"] is True and record["env_reward"] == 1.0 and record["episode"] == "solver"
    *before, last = env.results
    assert last.done and last.reward == 1.0
    assert before and all(not r.done and r.reward == 0.0 for r in before)
    assert len(record["actions"]) == len(env.results) and len(record["states"]) == len(env.results) + 1
    assert [r.state for r in env.results] == record["states"][1:]
    assert [r.action for r in env.results] == record["actions"]
    assert all(r.action["text"] for r in env.results)
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("one turn too many")


def test_an_idle_agent_loses(target: Target) -> None:
    env = Recording(target.make())
    record = run_episode(env, target.idle, target.seeds[0], target.max_turns)
    assert record["success"] is False and record["env_reward"] < 1.0
    assert env.results[-1].done and env.results[-1].reward == record["env_reward"]
    assert all(not r.done and r.reward == 0.0 for r in env.results[:-1])


def test_trajectories_are_scored_by_the_shipped_rubric(target: Target, tmp_path: Path) -> None:
    env = target.make()
    solver = run_episode(env, target.solver(env), target.seeds[0], target.max_turns, episode="solver")
    idle = run_episode(env, target.idle, target.seeds[0], target.max_turns, episode="idle")
    write_records([solver, idle], tmp_path / "episodes.jsonl")
    scorer = RubricScorer.from_file(target.rubric, backend="interp", cache=None)
    result = scorer.score(tmp_path / "episodes.jsonl")
    assert list(result.batch.episodes) == ["solver", "idle"]
    assert list(result.batch.env_reward) == [solver["env_reward"], idle["env_reward"]]
    execution = [j for j, op in enumerate(scorer.compiled.operators) if op.category == "execution"]
    offsets = result.batch.episode_offsets
    fired = [result.fired[offsets[e]:offsets[e + 1]][:, execution].sum() for e in range(2)]
    assert offsets[1] == len(solver["actions"]) and offsets[2] - offsets[1] == len(idle["actions"])
    assert fired[0] > 0 and fired[1] == 0
    solver_return, idle_return = result.episode_returns()
    assert solver_return > idle_return


def test_the_same_seed_gives_the_same_episode_and_other_seeds_other_tasks(target: Target) -> None:
    group = [target.make() for _ in range(3)]  # K environments of one group, reset with one seed
    firsts = [env.reset(target.seeds[0]) for env in group]
    assert firsts[0] == firsts[1] == firsts[2] and firsts[0].role == "user"
    assert len({env.system_prompt for env in group}) == 1
    records = [run_episode(env, target.solver(env), target.seeds[0], target.max_turns, episode="e") for env in group]
    assert records[0] == records[1] == records[2]
    again = run_episode(group[0], target.solver(group[0]), target.seeds[0], target.max_turns, episode="e")
    assert again == records[0]  # and the same environment replays it after another reset
    other = run_episode(group[1], target.solver(group[1]), target.seeds[1], target.max_turns, episode="e")
    assert other["task"] != records[0]["task"] and other["instruction"] != records[0]["instruction"]
    assert other["success"] is True


def test_observations_come_in_the_role_of_their_source(target: Target) -> None:
    env = Recording(target.make())
    run_episode(env, target.solver(env.env), target.seeds[0], target.max_turns)
    assert env.first is not None and env.first.role == "user"
    roles = {r.action.get("kind", "command"): r.observation.role for r in env.results}
    if "message" in roles:  # tool environments: a message is answered by the user, a tool call by the tool
        assert roles.pop("message") == "user" and set(roles.values()) == {"tool"}
    else:  # TextWorld: the game answers every command as the user side of the conversation
        assert set(roles.values()) == {"user"}


# ---------------------------------------------------------------------------------------------- the defaults


class Minimal(EnvironmentProtocol):
    """The protocol's own parts only: `hint`, `admissible_commands` and `close` are the defaults it inherits."""

    system_prompt = "Say anything."

    def reset(self, seed: int) -> Observation:
        self.said: list[str] = []
        return Observation(text=f"Task {seed}.")

    def step(self, action: str) -> StepResult:
        self.said.append(action)
        return StepResult(observation=Observation(text="Noted."), done=len(self.said) >= 2, reward=0.0, state={},
                          action={"text": action})

    def trajectory(self, episode: str) -> dict[str, Any]:
        return {"episode": episode, "task": "minimal", "states": [{}], "actions": [], "env_reward": 0.0,
                "success": False}


class Counted(Minimal):
    """Counts its closes; every instance is kept in `made`, so a test sees each environment a path made."""

    def __init__(self, made: list[Counted]) -> None:
        self.closes = 0
        made.append(self)

    def close(self) -> None:
        self.closes += 1


class Commands(Minimal):
    @property
    def admissible_commands(self) -> tuple[str, ...]:
        return ("look", "go north")


class Plain:
    """A user's class with every part of the protocol, defaulted ones included, and one of its own, subclassing
    nothing."""

    system_prompt = "Choose a command."

    def __init__(self) -> None:
        self.closes = 0
        self.tools: list[dict[str, Any]] = []

    def reset(self, seed: int) -> Observation:
        return Observation(text=f"Room {seed}.")

    def step(self, action: str) -> StepResult:
        return StepResult(observation=Observation(text="Done."), done=True, reward=1.0, state={}, action={})

    def trajectory(self, episode: str) -> dict[str, Any]:
        return {"episode": episode}

    def hint(self) -> str:
        return "go north"

    @property
    def admissible_commands(self) -> tuple[str, ...]:
        return ("go north",)

    def close(self) -> None:
        self.closes += 1


def test_an_environment_that_subclasses_the_protocol_inherits_its_defaults() -> None:
    env = Minimal()
    env.reset(0)
    assert env.hint() is None and env.admissible_commands is None
    env.close()  # nothing to let go: the default does nothing, and may be called again
    env.close()
    assert env.step("hi").observation.text == "Noted."
    assert not lists_commands(env) and lists_commands(Commands()) and Commands().admissible_commands == \
        ("look", "go north")


def test_a_factory_object_that_does_not_subclass_the_protocol_gets_its_defaults_at_set_up() -> None:
    make = environment_factory(EnvSection(kind="python", python=PythonEnvSection(factory="toy_env:bare_letter_env")))
    env = make()
    assert isinstance(env, FactoryEnvironment) and isinstance(env.made, BareLetterEnv)
    assert env.reset(3) == LetterEnv().reset(3) and env.system_prompt == LetterEnv.system_prompt
    assert env.hint() is None and env.admissible_commands is None and not lists_commands(env)
    env.step("abc")
    assert env.step("klm").done and env.trajectory("e")["task"] == "letters/3"
    assert env.letters is env.made.letters  # any other attribute is its own
    env.close()
    subclassed = made_environment("toy_env:letter_env", LetterEnv)
    assert type(subclassed) is LetterEnv  # used as made


def test_a_factory_objects_own_parts_are_used_where_it_has_them() -> None:
    env = made_environment("mine:Plain", Plain)
    assert isinstance(env, FactoryEnvironment) and lists_commands(env)
    env.reset(1)
    assert env.hint() == "go north" and env.admissible_commands == ("go north",) and env.tools == []
    env.close()
    assert env.closes == 1


def test_a_factory_object_lacking_a_part_without_a_default_is_refused_naming_it() -> None:
    class Half:
        system_prompt = "Half an environment."

        def reset(self, seed: int) -> Observation:
            return Observation(text="start")

    with pytest.raises(FieldError, match=r"^env\.python\.factory = \"mine:Half\": Half\(\) made a Half, not an "
                                         r"environment \(it has no step, trajectory; see"):
        made_environment("mine:Half", Half)


# ---------------------------------------------------------------------------------------------- one close each


def test_the_rollout_engine_closes_every_environment_it_makes_once() -> None:
    made: list[Counted] = []
    template = TurnTemplate(build_tokenizer())
    script = ScriptSampler(template, lambda key, turn: f"<action>turn {turn}</action>")
    engine = RolloutEngine(script, template, lambda: Counted(made), RolloutSection(hint_ratio=(0.5, 0.5)),
                           max_turns=2)
    episodes = engine.run([GroupTask(group=0, seed=1), GroupTask(group=1, seed=2)], group_size=2, seed=0, iteration=0)
    assert len(episodes) == 4 and not any(e.hinted for e in episodes)  # hinted members: the default hint is None
    assert len(made) == 4 and [env.closes for env in made] == [1] * 4
    engine.opening_state(5)
    assert len(made) == 5 and made[-1].closes == 1
    tight = RolloutEngine(script, template, lambda: Counted(made),
                          RolloutSection(max_new_tokens=8, max_context_tokens=9), max_turns=2)
    with pytest.raises(ConfigError, match="leaves no room for a turn"):
        tight.run([GroupTask(group=0, seed=1)], group_size=2, seed=0, iteration=0)
    assert len(made) == 6 and made[-1].closes == 1


def test_a_mixture_closes_each_component_it_made_once() -> None:
    made: list[Counted] = []
    mixture = MixtureEnvironment([("a", lambda: Counted(made)), ("b", lambda: Counted(made))], weights=(1.0, 1.0))
    for seed in range(8):
        mixture.reset(seed)
        assert mixture.hint() is None and mixture.admissible_commands is None  # the component's defaults
    mixture.close()
    assert len(made) == 2 and [env.closes for env in made] == [1, 1]


def test_evaluate_closes_each_environment_once_even_when_the_agent_fails(tmp_path: Path) -> None:
    made: list[Counted] = []
    domains = [EvalDomain(name="minimal", make_env=lambda: Counted(made), seeds=(0, 1))]
    evaluate(domains, [Condition(name="idle", make_agent=lambda env: Idle("hi"))], tmp_path / "ok", max_turns=2,
             fingerprint={"t": 1})
    assert len(made) == 2 and [env.closes for env in made] == [1, 1]
    with pytest.raises(ZeroDivisionError):
        evaluate(domains, [Condition(name="failing", make_agent=lambda env: Failing())], tmp_path / "failed",
                 max_turns=2, fingerprint={"t": 1})
    assert len(made) == 3 and made[-1].closes == 1


class Failing:
    def act(self, messages: Sequence[Message]) -> str:
        return str(1 / 0)
