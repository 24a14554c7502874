"""Labeling: every trajectory x capability gets NA, PRESENT or LACKING; one run file per labeling run.

Two labelers, one output (TRACE's run-file format, `runs.py`):
- the LLM labeler, batched as one prompt per trajectory holding every capability; the reply must be
  `{"labels": {capability: "NA" | "PRESENT" | "LACKING"}}` with exactly the dictionary's names (schema-checked,
  repaired within the bound). Run r samples under its own seed, so runs are independent draws whose disagreement
  the k-of-n filter of selection measures. A trajectory the labeler cannot label within the bound fails the run
  (its progress is kept, so a rerun resumes), unless `skip_failed`, which leaves it out of that run's totals and
  lists it under `unlabeled`.
- the deterministic labeler: the `capability` blocks of a `.rubric` file, through the compiled kernels
  (`runtime.capabilities`), over trajectory JSONL. It needs no LLM and gives one run (every run would agree).

Each run records the dictionary it was labelled against (`runs.DictionaryStamp`): a dictionary file's `stamp`, or a
rubric's (`rubric_stamp`: its text, since its blocks' code is what labels, and all its blocks, however many a run
labels).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tracec.compiler.backends import Backend, compile_kernel
from tracec.compiler.pipeline import compile_capability
from tracec.dsl.check import check_source
from tracec.dsl.errors import NOWHERE, CheckError, Diagnostic
from tracec.dsl.source_file import read_source
from tracec.runtime.capabilities import label_episodes
from tracec.runtime.facts.fact_batch import build_fact_batch
from tracec.runtime.facts.trajectories.files import require_known_facts
from tracec.runtime.facts.trajectories.jsonl import Episode
from tracec.runtime.scoring import default_cache
from tracec.trace_rl.llm.calls import CallLog
from tracec.trace_rl.llm.chat import Sampling, SamplingBackend
from tracec.trace_rl.llm.repair import TRIES, RepairFailed, ask_json
from tracec.trace_rl.targeting.analysis.cases import Case, CaseError
from tracec.trace_rl.targeting.analysis.dictionary import Capability, stamp
from tracec.trace_rl.targeting.analysis.discover import run_seed
from tracec.trace_rl.targeting.analysis.progress import Progress
from tracec.trace_rl.targeting.analysis.runs import DictionaryStamp, write_run
from tracec.trace_rl.targeting.usage import Ticker

from tracec.json_key import json_key

LABELS = ("NA", "PRESENT", "LACKING")
SAMPLING = Sampling(temperature=0.7, max_tokens=512)
Labels = dict[str, str]  # capability -> NA | PRESENT | LACKING


@dataclass(frozen=True, kw_only=True)
class LabelSettings:
    runs: int = 1
    first_run: int = 1
    case_chars: int = 4000
    tries: int = TRIES
    seed: int = 0  # run r samples under seed * 10^6 + r * 1000 (+ attempt), as discovery's runs
    skip_failed: bool = False
    sampling: Sampling = SAMPLING

    def __post_init__(self) -> None:
        for name in ("runs", "first_run", "tries"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")


class LabelingFailed(Exception):
    """Some trajectories could not be labeled within the bound; the message names them and the log."""


def labeling_schema(capabilities: Sequence[Capability]) -> dict[str, Any]:
    names = [c.name for c in capabilities]
    return {"type": "object", "required": ["labels"],
            "properties": {"labels": {"type": "object", "required": names, "additionalProperties": False,
                                      "properties": {n: {"enum": list(LABELS)} for n in names}}}}


def labeling_prompt(case: Case, capabilities: Sequence[Capability], case_chars: int) -> list[dict[str, str]]:
    listed = "\n".join(f"- {c.name}: {c.description}" for c in capabilities)
    system = ("You label an AI agent's trajectory against a fixed list of capabilities. For each capability answer "
              "NA (the task did not need it), PRESENT (needed, and the agent showed it) or LACKING (needed, and the "
              "agent did not show it). A trajectory can fail for reasons unrelated to a capability: on a failed "
              "trajectory say LACKING only when that capability's absence caused a failure; when unsure between "
              "PRESENT and LACKING, say PRESENT.")
    outcome = "FAILED" if not case.success else "PASSED"
    example = ", ".join(f'"{c.name}": "NA|PRESENT|LACKING"' for c in capabilities[:2])  # no value favoured
    user = (f"Capabilities:\n{listed}\n\n### trajectory {case.id} ({outcome}, reward {case.reward:g})\n"
            f"{case.excerpt(case_chars)}\n\nLabel every capability, using the names exactly as listed. Reply with "
            f'only a JSON object: {{"labels": {{{example}, ...}}}}')
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def label_with_llm(backend: SamplingBackend, cases: Sequence[Case], capabilities: Sequence[Capability],
                   settings: LabelSettings, *, out_dir: Path, log: CallLog, progress: Progress,
                   report: Callable[[str], None], dictionary: DictionaryStamp | None = None) -> list[Path]:
    """Write `run_NN.json` for each run into `out_dir`, each recording `dictionary` (by default `capabilities`'
    stamp, its file unnamed); returns their paths."""
    schema = labeling_schema(capabilities)
    written = []
    for run in range(settings.first_run, settings.first_run + settings.runs):
        sampling = replace(settings.sampling, seed=run_seed(settings.seed, run))
        labels: dict[str, Labels] = {}
        failures: dict[str, str] = {}
        ticker = Ticker(report, f"label run {run}", len(cases))
        for done, case in enumerate(cases, 1):
            ticker.tick(done - 1)
            key = f"{run}/{case.id}"
            if key not in progress.done:
                try:
                    accepted = ask_json(backend, labeling_prompt(case, capabilities, settings.case_chars), schema,
                                        log=log, purpose=f"label {case.id} run {run}", tries=settings.tries,
                                        sampling=sampling)
                except RepairFailed as error:
                    failures[case.id] = error.problems[-1]
                    continue
                progress.record(key, accepted.value["labels"])
            labels[case.id] = progress.done[key]
        ticker.tick(len(cases))
        if failures and not settings.skip_failed:
            named = "; ".join(f"{i}: {p}" for i, p in list(failures.items())[:3])
            raise LabelingFailed(f"run {run}: {len(failures)} of {len(cases)} trajectories got no valid labels in "
                                 f"{settings.tries} tries ({named}); every attempt is in {log.path}. Rerun to "
                                 "retry them (finished labels are kept), or pass --skip-failed")
        if not labels:
            raise LabelingFailed(f"run {run}: none of the {len(cases)} trajectories got valid labels in "
                                 f"{settings.tries} tries; every attempt is in {log.path}; no run file written")
        path = out_dir / f"run_{run:02d}.json"
        write_labels(path, run, [c for c in cases if c.id in labels], labels, capabilities, sorted(failures),
                     dictionary=dictionary)
        report(f"{path}: {len(labels)} trajectories labeled" + (f", {len(failures)} left out" if failures else ""))
        written.append(path)
    return written


def write_labels(path: Path, run: int, cases: Sequence[Case], labels: dict[str, Labels],
                 capabilities: Sequence[Capability], unlabeled: Sequence[str] = (), *,
                 dictionary: DictionaryStamp | None = None) -> None:
    """One run file from per-trajectory labels, recording `dictionary` (by default `capabilities`' stamp)."""
    buckets: dict[str, dict[str, list[str]]] = {c.name: {} for c in capabilities}
    for case in cases:
        side = "failed" if not case.success else "passed"
        for capability in capabilities:
            label = labels[case.id][capability.name].lower()
            buckets[capability.name].setdefault(f"{label}_{side}", []).append(case.id)
    failed = sum(not c.success for c in cases)
    write_run(path, attempt=run, total_failed=failed, total_passed=len(cases) - failed, labels=buckets,
              unlabeled=unlabeled, dictionary=dictionary or stamp(capabilities))


def rubric_stamp(rubric: str | os.PathLike[str]) -> DictionaryStamp:
    """The dictionary that a `.rubric` file is: all its capability blocks, fingerprinted by its text."""
    text = read_source(str(rubric))
    names = tuple(check_source(text, str(rubric)).capabilities)
    return DictionaryStamp(fingerprint=json_key(["rubric", text]), capabilities=names, file=str(rubric))


def label_with_rubric(rubric: str | os.PathLike[str], cases: Sequence[Case], names: Sequence[str], *,
                      backend: Backend = "numba") -> tuple[list[Capability], dict[str, Labels]]:
    """The capabilities of a `.rubric` file (all, or those named) and each case's labels through the kernels."""
    checked = check_source(read_source(str(rubric)), str(rubric))
    chosen = list(names) or list(checked.capabilities)
    unknown = [n for n in chosen if n not in checked.capabilities]
    if unknown or not chosen:
        have = ", ".join(checked.capabilities) or "none"
        what = f"no capability {', '.join(map(repr, unknown))}" if unknown else "no capability blocks"
        raise CheckError([Diagnostic(str(rubric), NOWHERE, f"{what} in this file (capabilities: {have})")])
    without = [c.id for c in cases if c.episode is None]
    if without:
        raise CaseError(f"rubric labels read the facts of trajectory JSONL; {len(without)} trajectories (such as "
                        f"{without[0]!r}) come from a result file without facts")
    files: dict[str, list[Episode]] = {}  # each file checked on its own, as `tracec score` checks it
    for case in cases:
        assert case.episode is not None  # refused above
        files.setdefault(case.source, []).append(case.episode)
    labels: dict[str, Labels] = {c.id: {} for c in cases}
    capabilities = []
    for name in chosen:
        compiled = compile_capability(checked.capabilities[name])
        kernel = compile_kernel(compiled.program, backend, default_cache() if backend != "interp" else None)
        for source, episodes in files.items():
            batch = build_fact_batch(episodes, compiled.plan)
            require_known_facts(source, batch, compiled.plan, episodes)
            for case_id, label in zip(batch.episodes, label_episodes(compiled, kernel, batch)):
                labels[case_id][name] = label.name
        capabilities.append(Capability(name=name, description=compiled.description))
    return capabilities, labels
