"""The environments step: one validated, calibrated training environment per selected capability.

For each selected capability, in selection order: the library environment whose capability or name it is, else
(with `environments.synthesize` and an LLM) the one `[llm]` judges to fit, else one the LLM writes, through
`synth.env.synthesize` and its three checks (compiler, validation, calibration). Calibration plays the base model
(`calibration_seeds` x `group_size` sampled rollouts, TRACE's bands). With `require_calibrated` (the default) an
environment outside the bands is not used: a library one is then handed to the LLM to rewrite when there is one,
else the capability is dropped with the reason; without it, the environment is kept and the report flags it. Each
kept environment gets one successful example episode (its gold solution on seed 0), which routing shows.
Outputs: `NAME/NAME.rubric`, `NAME/validation.txt`, `NAME/calibration.{txt,json}`, `environments.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracec.trace_rl.envs.agent import run_episode
from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.envs.capability.validate import GoldAgent
from tracec.trace_rl.llm.backends import local_backend
from tracec.trace_rl.llm.calls import CallLog
from tracec.trace_rl.llm.chat import Sampling
from tracec.trace_rl.targeting.analysis.cases import read_cases
from tracec.trace_rl.targeting.pipeline.config import LIBRARY_FIX
from tracec.trace_rl.targeting.pipeline.context import Context
from tracec.trace_rl.targeting.pipeline.layout import BASE_TRAJECTORIES, MANIFEST, SELECTED, read_json
from tracec.trace_rl.targeting.pipeline.steps import PipelineFailed
from tracec.trace_rl.targeting.synth.calibration import Bands, calibrate
from tracec.trace_rl.targeting.synth.env import CalibrationSettings, EnvFailed, EnvSettings, Target, synthesize
from tracec.trace_rl.targeting.synth.library import load_library
from tracec.trace_rl.targeting.synth.reference import LIBRARY
from tracec.trace_rl.targeting.synth.rollouts import policy_rollouts
from tracec.trace_rl.targeting.synth.tool_schemas import TargetTools, ToolsFileError, load_tools, tau2_tools

from tracec.atomic import write_atomic


def environments(context: Context, folder: Path, collected: Path, selected: Path) -> str:
    config = context.config
    section = config.environments
    calibration = CalibrationSettings(
        seeds=section.calibration_seeds, group_size=section.group_size, max_steps=config.train.env.max_turns,
        sampling=Sampling(temperature=section.temperature, max_tokens=section.max_new_tokens),
        bands=Bands(mean_reward=(section.mean_band[0], section.mean_band[1]),
                    success_rate=(section.success_band[0], section.success_band[1]),
                    max_constant_groups=section.max_constant_groups),
        call_format=config.target.call_format) if section.calibrate else None
    library = load_library(Path(section.library) if section.library else LIBRARY, fix=LIBRARY_FIX)
    policy = local_backend(config.model.name, device=config.model.device, seed=config.run.seed,
                           max_new_tokens=section.max_new_tokens) if calibration is not None else None
    tools = _target_tools(context)
    cases = {c.id: c for c in read_cases([collected / BASE_TRAJECTORIES])}
    kept: list[dict[str, Any]] = []
    dropped: dict[str, str] = {}
    for entry in read_json(selected / SELECTED):
        name = entry["skill"]
        excerpts = tuple(cases[i].transcript for i in entry.get("example_failed_cases", [])[:3] if i in cases)
        settings = EnvSettings(tries=config.llm.tries, validate_seeds=section.validate_seeds,
                               calibration=calibration if section.require_calibrated else None)
        try:
            made = _environment(context, folder / name, Target(name=name, description=entry["description"],
                                                               excerpts=excerpts, tools=tools), settings, library,
                                policy)
        except PipelineFailed as failed:
            dropped[name] = str(failed)
            context.detail(f"environments: {name} dropped: {failed}")
            continue
        if made["calibration"] is None and calibration is not None and policy is not None:
            made["calibration"] = _calibrate(folder / name / f"{name}.rubric", policy, calibration)
        if made["calibration"] is not None:
            _write_calibration(folder / name, made["calibration"])
        kept.append({"name": name, "description": entry["description"], "origin": made["origin"],
                     "path": f"{name}/{name}.rubric", "example": _gold_example(folder / name / f"{name}.rubric"),
                     "calibration": None if made["calibration"] is None else made["calibration"].to_json(),
                     "tools": tools.name if tools else None, "transfer": made["transfer"]})
    write_atomic(folder / MANIFEST, [json.dumps({"environments": kept, "dropped": dropped}, indent=2) + "\n"])
    if not kept:
        raise PipelineFailed("environments: no selected capability got an environment (" + "; ".join(
            f"{n}: {why}" for n, why in dropped.items()) + ")")
    flagged = [e["name"] for e in kept if e["calibration"] is not None and not e["calibration"]["ok"]]
    return (f"{len(kept)} environments ({', '.join(e['name'] + ' from ' + e['origin'] for e in kept)})"
            + (f", outside the calibration bands: {', '.join(flagged)}" if flagged else "")
            + (f"; dropped: {', '.join(dropped)}" if dropped else ""))


def _target_tools(context: Context) -> TargetTools | None:
    """The tools environments keep: `environments.tools`, else a tau2 target's own; None when free."""
    section, target = context.config.environments, context.config.target
    if not section.keep_tools:
        return None
    try:
        if section.tools:
            return load_tools(Path(section.tools))
    except ToolsFileError as error:
        raise PipelineFailed(f"environments.tools: {error}") from None
    return tau2_tools(target.tau2.domains) if target.kind == "tau2" else None


def _environment(context: Context, out: Path, target: Target, settings: Any, library: Any,
                 policy: Any) -> dict[str, Any]:
    """The accepted environment of one capability written into `out`; `PipelineFailed` when there is none."""
    section = context.config.environments
    # Without synthesis the library is matched by name only: no LLM call at all.
    backend = context.analyst() if context.has_analyst() and section.synthesize else None
    log = CallLog(out / "llm_calls.jsonl", command="pipeline environments") if backend is not None else None
    name = target.name
    out.mkdir(parents=True, exist_ok=True)
    try:
        result = synthesize(backend, target, settings, library=library, use_library=True, policy=policy,
                            out_dir=out, log=log, report=context.detail)
    except EnvFailed as failed:
        if backend is None or "library environment" not in str(failed):
            raise PipelineFailed(str(failed)) from None
        context.detail(f"environments: {name}: {failed}; asking the LLM for one")
        try:
            result = synthesize(backend, target, settings, library=library, use_library=False, policy=policy,
                                out_dir=out, log=log, report=context.detail)
        except EnvFailed as again:
            raise PipelineFailed(str(again)) from None
    write_atomic(out / f"{name}.rubric", [result.source])
    write_atomic(out / "validation.txt", [result.validation + "\n"])
    origin = "llm" if result.origin == "llm" else "library:" + Path(result.origin.split(":", 1)[1]).name
    return {"origin": origin, "calibration": result.calibration, "transfer": result.transfer}


def _calibrate(path: Path, policy: Any, settings: Any) -> Any:
    rollouts = policy_rollouts(load_environment(str(path)), policy, range(settings.seeds),
                               group_size=settings.group_size, sampling=settings.sampling,
                               max_steps=settings.max_steps, call_format=settings.call_format)
    return calibrate(rollouts, settings.bands)


def _write_calibration(out: Path, calibration: Any) -> None:
    write_atomic(out / "calibration.txt", [calibration.render()])
    write_atomic(out / "calibration.json", [json.dumps(calibration.to_json(), indent=2) + "\n"])


def _gold_example(path: Path) -> str:
    """The environment's gold solution played on seed 0, as the transcript routing shows."""
    env = CapabilityEnvironment(load_environment(str(path)))
    record = run_episode(env, GoldAgent(env), 0, env.max_steps)
    lines = [f"user: {record['instruction']}"]
    lines += [f"assistant: {action.get('text', '')}" for action in record["actions"]]
    return "\n".join(lines)
