"""What `tracec synth env | rubric` do, given their typed inputs: gather the inputs, run the loop, write the results.

Outputs are written atomically; progress goes to stderr. A failure raises `SynthFailed` (exit 1) after writing
what there is: every attempt under the output, the call log, and the last calibration or report. `UsageProblem`
means inputs that do not make sense (exit 2); messages name the command line's flags (`tracec.cli.synth`). Opening a
local LLM imports torch (`llm/backends.py`): it is imported where a model opens, after every input is checked, so
that a mistake is said at once.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any

from tracec.compiler.load import chosen_declaration
from tracec.dsl import ast
from tracec.dsl.errors import NOWHERE, CheckError, Diagnostic
from tracec.dsl.parse import parse
from tracec.runtime.facts.trajectories.jsonl import read_trajectories
from tracec.runtime.facts.trajectories.records import write_records
from tracec.trace_rl.envs.capability import load_environment
from tracec.trace_rl.llm.calls import CallLog, log_path_beside
from tracec.trace_rl.llm.chat import Sampling
from tracec.trace_rl.llm.options import BackendSettings
from tracec.trace_rl.llm.repair import RepairFailed
from tracec.trace_rl.policy.catalog import require_device
from tracec.trace_rl.targeting.analysis.cases import read_cases, succeeded
from tracec.trace_rl.targeting.synth.calibration import Bands
from tracec.trace_rl.targeting.synth.env import CalibrationSettings, EnvFailed, EnvSettings, Target, synthesize
from tracec.trace_rl.targeting.synth.library import load_library, match_by_name
from tracec.trace_rl.targeting.synth.reference import EXAMPLES, LIBRARY
from tracec.trace_rl.targeting.synth.rollouts import scripted_episodes
from tracec.trace_rl.targeting.synth.rubric import Episodes, render_report, synthesize_rubric
from tracec.trace_rl.targeting.synth.tool_schemas import target_tools
from tracec.trace_rl.targeting.usage import UsageProblem, report

from tracec.atomic import atomic_open, write_atomic


class SynthFailed(Exception):
    """No candidate passed the checks."""


def text_argument(value: str | None, flag: str) -> str | None:
    """A flag's text, or the contents of the file after `@`."""
    if value is None or not value.startswith("@"):
        return value
    try:
        return Path(value[1:]).read_text(encoding="utf-8").strip()
    except OSError as error:
        raise UsageProblem(f"{flag} {value}: {error.strerror}") from None


def env(out: Path, *, capability: str | None, description: str | None, selected: Path | None,
        trajectories: Sequence[Path], excerpts: int, library: Path | None, use_library: bool, validate_seeds: int,
        calibrate: bool, policy: str, calibration_seeds: int, group_size: int, max_steps: int | None,
        policy_temperature: float, policy_max_tokens: int, mean_band: tuple[float, float],
        success_band: tuple[float, float], max_constant_groups: float, tries: int, llm: BackendSettings,
        tools: str | None = None) -> int:
    """An environment for one capability in the folder `out`: named by `capability` and `description` (or
    `@FILE`), or the entry of `selected` (named, else the top PENDING one; marked DONE on success). The calibration
    policy plays on `llm.device` with `llm.seed`: the command line has one `--device` and one `--seed`. `tools`
    (`tool_schemas.target_tools`: a JSON file, or `tau2[:DOMAINS]`) are the target's tools the environment keeps."""
    entry = _selected_entry(selected, capability) if selected is not None else None
    name = entry["skill"] if entry else capability
    description = entry["description"] if entry else text_argument(description, "--description")
    if not name or not description:
        raise UsageProblem("name the capability: --capability NAME --description TEXT, or --selected FILE")
    cases = read_cases(trajectories) if trajectories else []
    wanted = set(entry.get("example_failed_cases", [])) if entry else set()
    failed = [c for c in cases if not c.success and (not wanted or c.id in wanted)]
    shown = tuple(c.transcript for c in failed[:excerpts])
    try:
        calibration = CalibrationSettings(
            seeds=calibration_seeds, group_size=group_size, max_steps=max_steps,
            sampling=Sampling(temperature=policy_temperature, max_tokens=policy_max_tokens),
            bands=Bands(mean_reward=mean_band, success_rate=success_band, max_constant_groups=max_constant_groups),
        ) if calibrate else None
        chosen = EnvSettings(tries=tries, validate_seeds=validate_seeds, calibration=calibration)
    except ValueError as error:
        raise UsageProblem(str(error)) from None
    kept_tools = target_tools(tools) if tools else None  # a bad file is said before any model loads
    environments = load_library(library or LIBRARY)
    out.mkdir(parents=True, exist_ok=True)
    player = None
    if calibrate:
        require_device(llm.device, "--device")  # before the policy loads
        from tracec.trace_rl.llm.backends import local_backend  # torch: only once every input was checked

        player = local_backend(policy, device=llm.device, seed=llm.seed, max_new_tokens=policy_max_tokens)
    target = Target(name=name, description=description, excerpts=shown, tools=kept_tools)
    backend, log = _writer(target, environments, use_library=use_library, llm=llm, out=out)
    try:
        result = synthesize(backend, target, chosen, library=environments, use_library=use_library,
                            policy=player, out_dir=out, log=log, report=report)
    except EnvFailed as error:
        if error.calibration is not None:  # the table of the last calibration, passed or not
            _write_calibration(out, error.calibration)
        raise SynthFailed(str(error)) from None
    path = out / f"{name}.rubric"
    write_atomic(path, [result.source])
    write_atomic(out / "validation.txt", [result.validation + "\n"])
    if result.calibration is not None:
        _write_calibration(out, result.calibration)
    summary = {"capability": name, "environment": str(path), "origin": result.origin, "attempts": result.attempts,
               "calibrated": result.calibration is not None, "tools": kept_tools.name if kept_tools else None,
               "transfer": result.transfer}
    write_atomic(out / "result.json", [json.dumps(summary, indent=2) + "\n"])
    if selected is not None and entry is not None:
        _mark_done(selected, name, path, result.calibration)
    report(f"{path}: {result.origin}, {result.attempts} LLM attempts"
           + ("" if result.calibration is not None else ", not calibrated"))
    return 0


def _write_calibration(out: Path, calibration: Any) -> None:
    write_atomic(out / "calibration.txt", [calibration.render()])
    write_atomic(out / "calibration.json", [json.dumps(calibration.to_json(), indent=2) + "\n"])
    sys.stdout.write(calibration.render())


def _writer(target: Any, library: Any, *, use_library: bool, llm: BackendSettings,
            out: Path) -> tuple[Any, CallLog | None]:
    """The writing LLM and its log, opened only when the library cannot serve the capability by name."""
    if use_library and match_by_name(target.name, library) is not None:
        return None, None
    from tracec.trace_rl.llm.backends import open_backend  # torch: only once every input was checked

    return open_backend(llm), CallLog(log_path_beside(out), command="synth env")


def _selected_entry(selected: Path, capability: str | None) -> dict[str, Any]:
    """The entry of `selected` named `capability`, else the PENDING one of the largest gap."""
    try:
        entries = json.loads(selected.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise SynthFailed(f"{selected}:{error.lineno}:{error.colno}: error: not JSON: {error.msg}") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "skill" in e for e in entries):
        raise SynthFailed(f"{selected}: error: expected selected_capabilities.json (a list of {{skill, ...}})")
    if capability:
        entry = next((e for e in entries if e["skill"] == capability), None)
        if entry is None:
            raise SynthFailed(f"{selected}: error: no capability {capability!r}; it has "
                              f"{', '.join(e['skill'] for e in entries)}")
        return entry
    pending = sorted((e for e in entries if e.get("status", "PENDING") == "PENDING"),
                     key=lambda e: -float(e.get("mean_delta", 0.0)))
    if not entries:
        raise SynthFailed(f"{selected}: error: lists no capability (the selection kept none); select again with a "
                          "lower --rho or --delta, or name one: --capability NAME --description TEXT")
    if not pending:
        raise SynthFailed(f"{selected}: error: every capability is DONE ({', '.join(e['skill'] for e in entries)}); "
                          "pass --capability NAME to write one again")
    return pending[0]


def _mark_done(selected: Path, name: str, environment: Path, calibration: Any) -> None:
    """TRACE's last step: the entry becomes DONE, with where its environment is and its reward distribution."""
    entries = json.loads(selected.read_text(encoding="utf-8"))
    for entry in entries:
        if entry["skill"] == name:
            entry["status"], entry["environment_path"] = "DONE", str(environment)
            if calibration is not None:
                m = calibration.metrics
                entry["reward_distribution"] = {
                    "n_rollouts": m["num_rollouts"], "mean_reward": m["mean_reward"], "std_reward": m["std_reward"],
                    "success_rate": m["success_rate"], "zero_rate": m["zero_rate"],
                    "groups_all_perfect": round(m["all_success_group_rate"] * m["num_groups"]),
                    "groups_all_zero": round(m["all_zero_group_rate"] * m["num_groups"]),
                    "groups_mixed": round(m["informative_group_rate"] * m["num_groups"])}
    with atomic_open(selected) as handle:
        json.dump(entries, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


def rubric(out: Path, *, schema: str, schema_name: str | None, description: str | None,
           trajectories: Path | None, random_trajectories: Path | None, environment: Path | None, seeds: int,
           tries: int, llm: BackendSettings) -> int:
    """An operator library in the file `out` for `schema` (a `.rubric` file, or `toolenv`; `schema_name` picks one
    of the file's), validated on recorded episodes, or on `seeds` episodes of `environment` recorded here."""
    name, schema_text, append_schema = _schema(schema, schema_name)
    description = text_argument(description, "--description")
    episodes, recorded = _episodes(name, out, environment=environment, seeds=seeds,
                                   trajectories=trajectories, random_trajectories=random_trajectories)
    if description is None and environment is not None:
        description = f"a tool-use task: {load_environment(str(environment)).description}"
    if not description:
        raise UsageProblem("describe the benchmark's interaction: --description TEXT (or @FILE)")
    cases = read_cases([recorded]) if recorded is not None else []
    excerpts = [c.excerpt(1500) for c in ([next((c for c in cases if c.success), None),
                                           next((c for c in cases if not c.success), None)]) if c is not None]
    from tracec.trace_rl.llm.backends import open_backend  # torch: only once every input was checked

    backend = open_backend(llm)
    log = CallLog(log_path_beside(out), command="synth rubric")
    attempts = out.with_name(out.stem + ".attempts")
    example = EXAMPLES / ("tau2.rubric" if name == "toolenv" else "toolenv.rubric")  # another schema's
    try:
        result = synthesize_rubric(backend, schema_name=name, schema_text=schema_text, description=description,
                                   append_schema=append_schema, episodes=episodes, excerpts=excerpts,
                                   example=example, tries=tries, out_dir=attempts, log=log, report=report)
    except RepairFailed as error:
        raise SynthFailed(str(error)) from None
    table = render_report(result.operators, result.skipped)
    write_atomic(out, [result.source])
    write_atomic(out.with_name(out.stem + ".report.txt"), [table])
    write_atomic(out.with_name(out.stem + ".report.json"), [json.dumps({
        "operators": [asdict(o) for o in result.operators],
        "not_checked": list(result.skipped), "attempts": result.attempts}, indent=2) + "\n"])
    sys.stdout.write(table)
    report(f"{out}: 15 operators after {result.attempts} attempts; calls in {log.path}")
    return 0


def _schema(schema: str, name: str | None) -> tuple[str, str, bool]:
    """(schema name, its source text, whether the checked source must append it: a built-in one is known)."""
    if schema == "toolenv":
        text = resources.files("tracec.grammars").joinpath("toolenv.rubric").read_text(encoding="utf-8")
        return "toolenv", text, False
    path = Path(schema)
    source = path.read_text(encoding="utf-8")
    module = parse(source, str(path))
    schemas = [d for d in module.decls if isinstance(d, ast.Schema)]
    if not schemas:
        raise CheckError([Diagnostic(str(path), NOWHERE, "declares no schema; --schema names a .rubric file with a "
                                     "`schema` block (the benchmark's facts), or `toolenv`")])
    found = chosen_declaration({s.name: s for s in schemas}, name, "schema", str(path), " (--schema-name NAME)")
    following = [d.loc.line for d in module.decls if d.loc.line > found.loc.line]
    lines = source.splitlines()[found.loc.line - 1 : (min(following) - 1) if following else None]
    return found.name, "\n".join(lines).strip() + "\n", True


def _episodes(schema_name: str, out: Path, *, environment: Path | None, seeds: int, trajectories: Path | None,
              random_trajectories: Path | None) -> tuple[Any, Path | None]:
    """The validation episodes, and the recorded-trajectory file excerpts come from."""
    if environment is not None:
        if schema_name != "toolenv" or trajectories or random_trajectories:
            raise UsageProblem("--env records toolenv episodes: use it with --schema toolenv and without "
                               "--trajectories / --random-trajectories")
        played = scripted_episodes(load_environment(str(environment)), range(seeds))
        recorded = out.with_name(out.stem + ".episodes.jsonl")
        write_records([r for kind in ("gold", "null", "random") for r in played[kind]], recorded)
        episodes = read_trajectories(recorded)
        return Episodes(succeeded=tuple(e for e in episodes if e.episode.startswith("gold-")),
                        failed=tuple(e for e in episodes if e.episode.startswith("null-")),
                        random=tuple(e for e in episodes if e.episode.startswith("random-"))), recorded
    given = read_trajectories(trajectories) if trajectories else []
    random = read_trajectories(random_trajectories) if random_trajectories else []
    return Episodes(succeeded=tuple(e for e in given if succeeded(e)),
                    failed=tuple(e for e in given if not succeeded(e)), random=tuple(random)), trajectories
