"""Writing a capability environment: the library first, else the LLM, checked, validated and calibrated.

For a capability (name, description, excerpts of trajectories that failed for lack of it):
1. the library (`library.py`): a shipped environment for the capability, by name or by the LLM's judgement;
2. otherwise the LLM writes one `.rubric` environment from a prompt with the language guide's sections on types,
   environments and errors, two shipped environments, the capability and the excerpts, and, when the target's
   tools are known (`Target.tools`), their JSON schemas: the environment declares those the capability needs, with
   their names, parameter names and types, and says in a `# transfer: ...` comment why the skill transfers;
3. every candidate then passes its checks in order, and the first that fails is the problem the model gets
   back, with the rest of the repair loop's bound (`llm.repair`):
   - check: the compiler's located errors (`file:line:col`, the line, a caret);
   - schema (with `Target.tools`): every difference from the target's schemas (`tool_schemas.differences`), and a
     missing transfer comment;
   - validate (`trace_rl.envs.capability.validate`): the gold solution scores 1, doing nothing scores below 1, random
     calls do not hit the task, distinct seeds give distinct tasks, the `hint` (which the prompt asks for as TRACE's
     generation prompt does: abstract guidance, never the calls) gives away no gold call;
   - calibrate (`calibration.py`, when a policy is given): the base policy's rewards fall inside the bands.
Each attempt's source, and its calibration and rollouts when it got that far, is kept under `attempts/`; the call log
under `llm_calls.jsonl`. An environment the library supplies is not rewritten when calibration fails: the failure says
why, and `--no-library` asks the LLM instead. The environment runs sandboxed by construction: the language has no
I/O, and the interpreter enforces its limits (`dsl.env_model.Limits`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracec.dsl.errors import CheckError, ParseError
from tracec.runtime.facts.trajectories.records import write_records
from tracec.trace_rl.envs.capability import compile_environment
from tracec.trace_rl.envs.capability.validate import validate
from tracec.trace_rl.envs.toolcall import CALL_FORMATS, DEFAULT_CALL_FORMAT
from tracec.trace_rl.llm.calls import CallLog
from tracec.trace_rl.llm.chat import Sampling, SamplingBackend
from tracec.trace_rl.llm.repair import TRIES, RepairFailed, ask
from tracec.trace_rl.llm.replies import ReplyProblem
from tracec.trace_rl.targeting.synth.calibration import Bands, Calibration, calibrate
from tracec.trace_rl.targeting.synth.library import LibraryEnvironment, match_by_judgement, match_by_name
from tracec.trace_rl.targeting.synth.reference import example_text, guide_sections, rubric_source
from tracec.trace_rl.targeting.synth.rollouts import policy_rollouts
from tracec.trace_rl.targeting.synth.tool_schemas import DECLARING, TargetTools, differences, transfer_rationale

from tracec.atomic import write_atomic

SAMPLING = Sampling(temperature=0.4, max_tokens=2048)
# What TRACE's environment generation asks of a hint (hinted rollouts see it; `guidance.py`), for the writer.
HINT_REQUEST = ("expert guidance for a rollout that is stuck, like a tutor's: what to pay attention to, in which order "
                "to find the information, what to check before changing anything, which mistake to avoid. It must "
                "NOT give the solution: no tool call, no tool name with its arguments, no step-by-step plan, no "
                "answer (\"Call cancel_order with order_id=...\" or \"STEP 1: ... STEP 2: ...\" are bad hints; "
                "\"Check whether every precondition holds before you change anything\" is a good one). Aim at "
                "lifting a hinted rollout's success to about 60-80%, not to 100%.")
POLICY_SAMPLING = Sampling(temperature=1.0, max_tokens=128)  # diverse rollouts, short turns


@dataclass(frozen=True, kw_only=True)
class Target:
    """The capability an environment is for."""

    name: str
    description: str
    excerpts: tuple[str, ...] = ()  # transcripts of failures that lacked it
    tools: TargetTools | None = None  # the target's tool schemas the environment must keep; None: free tools


@dataclass(frozen=True, kw_only=True)
class CalibrationSettings:
    seeds: int = 8
    group_size: int = 4
    max_steps: int | None = None
    sampling: Sampling = POLICY_SAMPLING
    bands: Bands = field(default_factory=Bands)
    call_format: str = DEFAULT_CALL_FORMAT  # how the policy is given the tools: as it will be trained (`envs.toolcall`)

    def __post_init__(self) -> None:
        if self.seeds < 1 or self.group_size < 2:
            raise ValueError(f"calibration needs at least 1 seed and groups of at least 2 (got {self.seeds} seeds, "
                             f"groups of {self.group_size})")
        if self.call_format not in CALL_FORMATS:
            raise ValueError(f"call_format={self.call_format!r}: expected one of {', '.join(CALL_FORMATS)}")


@dataclass(frozen=True, kw_only=True)
class EnvSettings:
    tries: int = TRIES
    validate_seeds: int = 50
    excerpt_chars: int = 1500
    sampling: Sampling = SAMPLING
    calibration: CalibrationSettings | None = field(default_factory=CalibrationSettings)


@dataclass(frozen=True, kw_only=True)
class EnvResult:
    source: str  # the accepted `.rubric` text
    origin: str  # "library:PATH" or "llm"
    attempts: int
    validation: str
    calibration: Calibration | None
    transfer: str | None = None  # why the skill transfers to the target (the `# transfer:` comment)


class EnvFailed(Exception):
    """No environment passed the checks; the message says which check failed and why."""

    def __init__(self, message: str, calibration: Calibration | None = None) -> None:
        super().__init__(message)
        self.calibration = calibration


class StageFailed(ReplyProblem):
    """A candidate failed `stage` (check, validation or calibration) for `reason`; the message adds advice for the
    model that wrote it."""

    def __init__(self, stage: str, reason: str, advice: str) -> None:
        self.stage, self.reason = stage, reason
        super().__init__(f"{reason}{advice}")


class Checks:
    """Check, validate, calibrate one candidate source; the first failure is a `StageFailed` for the model.
    `last_calibration` keeps the latest calibration, passed or not, for the report."""

    def __init__(self, settings: EnvSettings, policy: SamplingBackend | None, attempts_dir: Path,
                 report: Callable[[str], None], tools: TargetTools | None = None) -> None:
        self.settings, self.policy, self.attempts_dir, self.report = settings, policy, attempts_dir, report
        self.tools = tools
        self.count = 0
        self.last_calibration: Calibration | None = None
        self.last_stage = "nothing"

    def _failed(self, stage: str, reason: str, advice: str = "") -> StageFailed:
        self.last_stage = stage
        self.report(f"attempt {self.count}: {stage} failed")
        return StageFailed(stage, reason, advice)

    def __call__(self, reply: str) -> EnvResult:
        self.count += 1
        source = rubric_source(reply)
        path = self.attempts_dir / f"attempt_{self.count}.rubric"
        write_atomic(path, [source])
        try:
            program = compile_environment(source, str(path.name))
        except (ParseError, CheckError) as error:
            raise self._failed("check", f"the checker rejects the environment:\n{error.format()}") from None
        transfer = transfer_rationale(source)
        if self.tools is not None:
            self._schema(program.tools.values(), transfer)
        validation = validate(program, seeds=self.settings.validate_seeds)
        if not validation.ok:
            raise self._failed("validation", f"validation over {validation.seeds} seeds failed: "
                              f"{'; '.join(validation.failures[:4])}", ". The gold solution must score 1 on every "
                              "seed, doing nothing must score below 1, each seed's task text must name what the "
                              "seed picked, and the `hint` must guide without giving the solution's calls away")
        calibration = self._calibrate(program)
        if calibration is not None and not calibration.ok:
            easier = calibration.metrics["mean_reward"] < self.settings.calibration.bands.mean_reward[0] \
                if self.settings.calibration else True
            raise self._failed("calibration", "a base policy's rewards make a poor training signal: "
                              f"{'; '.join(calibration.failures)}",
                              f". Make the task {'easier' if easier else 'harder'}"
                              " and keep the reward partial where the task allows (0.6 * state + 0.4 * report)")
        self.report(f"attempt {self.count}: accepted ({program.name})")
        return EnvResult(source=source, origin="llm", attempts=self.count, validation=validation.render(),
                         calibration=calibration, transfer=transfer)

    def _schema(self, tools: Any, transfer: str | None) -> None:
        assert self.tools is not None
        found = differences([t.info for t in tools], self.tools)
        if transfer is None:
            found.append(f"no `# transfer: ...` comment says why the skill transfers to {self.tools.name}")
        if found:
            raise self._failed("schema", f"the environment departs from the target's tools ({self.tools.name}):\n"
                               + "\n".join(f"- {d}" for d in found),
                               "\nDeclare only tools of the target's schemas, each with exactly its parameter names "
                               f"and types: {DECLARING}")

    def _calibrate(self, program: Any) -> Calibration | None:
        settings = self.settings.calibration
        if settings is None or self.policy is None:
            return None
        rollouts = policy_rollouts(program, self.policy, range(settings.seeds), group_size=settings.group_size,
                                   sampling=settings.sampling, max_steps=settings.max_steps,
                                   call_format=settings.call_format, report=self.report)
        result = calibrate(rollouts, settings.bands)
        self.last_calibration = result
        stem = self.attempts_dir / f"attempt_{self.count}"
        write_atomic(stem.with_suffix(".calibration.json"), [json.dumps(result.to_json(), indent=2)])
        # The rollouts themselves, to read as TRACE advises: do successes exercise the capability, or a shortcut?
        write_records((r.record for r in rollouts), stem.with_suffix(".rollouts.jsonl"))
        return result


def environment_prompt(target: Target, examples: Sequence[Path], excerpt_chars: int) -> list[dict[str, str]]:
    tools = target.tools
    schemas = (f"\nThe target agent's tools ({tools.name}), as JSON schemas:\n{tools.prompt_text()}\n\n"
               "Declare exactly the tools of this list that the capability needs (no others), each with exactly its "
               f"name and its parameter names and types: {DECLARING}. Keep the target's state and policy in the "
               "tables and the `require` lines, and add one comment line `# transfer: ...` saying why the skill "
               "learned here transfers to the target.\n") if tools is not None else ""

    guide = guide_sections((2, 7, 8))
    shown = "\n\n".join(f"```rubric\n{example_text(p)}\n```" for p in examples)
    excerpts = "\n\n".join(f"### failure {i + 1}\n{e[:excerpt_chars]}" for i, e in enumerate(target.excerpts))
    system = ("You write reinforcement-learning environments in the `.rubric` language: seeded synthetic tool-use "
              "tasks whose reward can be checked. The language has no I/O: only tables, tools, a task, a gold "
              "solution and a reward.")
    user = (
        f"The language, in brief:\n\n{guide}\n\nTwo complete environments:\n\n{shown}\n\n"
        f"Write one new environment that trains exactly this capability, and nothing else:\n"
        f"capability {target.name}: {target.description}\n"
        + (f"\nExcerpts of trajectories that failed for lack of it:\n\n{excerpts}\n" if excerpts else "")
        + schemas
        + f"\nRequirements: declare `capability {target.name}`; tables generated from the seed, so distinct seeds "
        "give distinct tasks whose text names what was picked; 2-5 tools; a `solution` that solves every seed; "
        "a reward over `state` and `report` that doing nothing does not earn; and one `hint \"...\"` line (plain "
        f"text, the same for every seed): {HINT_REQUEST} Reply with the environment only, in one ```rubric code "
        "block."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def choose_examples(target: Target, library: Sequence[LibraryEnvironment], count: int = 2) -> list[Path]:
    """The library environments whose descriptions share most words with the capability's (name order on ties)."""
    words = set(f"{target.name} {target.description}".lower().replace("_", " ").split())
    ranked = sorted(library, key=lambda e: (-len(words & set(f"{e.capability} {e.description}".lower()
                                                              .replace("_", " ").split())), e.path.name))
    return [e.path for e in ranked[:count]]


def synthesize(backend: SamplingBackend | None, target: Target, settings: EnvSettings, *,
               library: Sequence[LibraryEnvironment], use_library: bool, policy: SamplingBackend | None,
               out_dir: Path, log: CallLog | None, report: Callable[[str], None]) -> EnvResult:
    """The accepted environment, or `EnvFailed` saying which check failed and why (with the last calibration)."""
    checks = Checks(settings, policy, out_dir / "attempts", report, target.tools)
    if use_library:
        found = match_by_name(target.name, library)
        if found is None and backend is not None and log is not None:
            found = match_by_judgement(backend, target.name, target.description, library, log=log,
                                       tries=settings.tries)
        if found is not None:
            report(f"library: {found.path.name} ({found.name}) trains {target.name}")
            try:
                result = checks(found.path.read_text(encoding="utf-8"))
            except StageFailed as failed:
                raise EnvFailed(f"the library environment {found.path} fails its {failed.stage}: {failed.reason} "
                                "(--no-library asks the LLM to write one instead)", checks.last_calibration) from None
            return EnvResult(source=result.source, origin=f"library:{found.path}", attempts=0,
                             validation=result.validation, calibration=result.calibration,
                             transfer=result.transfer)
    if backend is None or log is None:
        raise EnvFailed(f"no library environment trains {target.name}, and no LLM was given to write one")
    messages = environment_prompt(target, choose_examples(target, library), settings.excerpt_chars)
    try:
        accepted = ask(backend, messages, checks, log=log, purpose=f"environment for {target.name}",
                       tries=settings.tries, sampling=settings.sampling,
                       instruction="Reply again with the whole corrected environment in one ```rubric code block.")
    except RepairFailed as failed:
        raise EnvFailed(f"no environment for {target.name} passed in {len(failed.problems)} tries; the last one "
                        f"failed its {checks.last_stage}: {failed.problems[-1]} (every attempt is in "
                        f"{out_dir / 'attempts'}, every call in {log.path})", checks.last_calibration) from None
    return accepted.value


