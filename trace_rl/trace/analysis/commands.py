"""What `tracec analyze discover | label | select` do, given parsed arguments: read, run, write, report.

Outputs are written atomically; progress to stderr, the selection table to stdout. `USER_ERRORS` are the
exceptions that mean "the input or the model is at fault" (exit 1, message only); `UsageProblem` means flags that
do not make sense (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tracec.trace_rl.llm.calls import CallLog, LLMError, log_path_beside
from tracec.trace_rl.llm.repair import RepairFailed
from tracec.trace_rl.policy.catalog import ModelError
from tracec.trace_rl.trace.analysis.cases import CaseError, read_cases
from tracec.trace_rl.trace.analysis.dictionary import Capability, DictionaryError, read_dictionary
from tracec.trace_rl.trace.analysis.label import LabelingFailed
from tracec.trace_rl.trace.analysis.progress import Progress, fingerprint
from tracec.trace_rl.trace.analysis.runs import RunFileError, read_run, run_files

from tracec.atomic import atomic_open


class UsageProblem(Exception):
    """Flags that parse but do not make sense."""


USER_ERRORS = (CaseError, DictionaryError, RunFileError, LLMError, RepairFailed, LabelingFailed, ModelError)
S = TypeVar("S")


def settings(make: Callable[..., S], **values: Any) -> S:
    try:
        return make(**values)
    except ValueError as error:
        raise UsageProblem(str(error)) from None


def report(message: str) -> None:
    print(message, file=sys.stderr)


def sampling_from(args: argparse.Namespace, default: Any) -> Any:
    from dataclasses import replace

    overrides = {k: v for k, v in (("max_tokens", args.max_tokens), ("temperature", args.temperature))
                 if v is not None}
    return settings(lambda **changes: replace(default, **changes), **overrides) if overrides else default


def discover(args: argparse.Namespace) -> int:
    from tracec.trace_rl.llm.options import open_backend
    from tracec.trace_rl.trace.analysis.discover import SAMPLING, DiscoverSettings
    from tracec.trace_rl.trace.analysis.discover import discover as run_discovery

    chosen = settings(DiscoverSettings, runs=args.runs, max_candidates=args.max_candidates,
                      cases_per_run=args.cases_per_run, case_chars=args.case_chars, tries=args.tries,
                      seed=args.seed, sampling=sampling_from(args, SAMPLING))
    cases = read_cases(args.trajectories)
    backend = open_backend(args)
    log = CallLog(log_path_beside(args.output), command="analyze discover")
    progress = Progress(args.output.with_name(args.output.stem + ".progress.jsonl"),
                        fingerprint([c.id for c in cases], [c.transcript for c in cases], chosen, backend.name))
    report(f"discover: {len(cases)} trajectories, {chosen.runs} runs with {backend.name}")
    dictionary = run_discovery(backend, cases, chosen, log=log, progress=progress)
    with atomic_open(args.output) as handle:
        json.dump(dictionary, handle, indent=2, ensure_ascii=False)
        handle.write("\n")
    progress.finish()
    names = ", ".join(f"{c['name']} ({c['proposed_in']}/{chosen.runs})" for c in dictionary["candidates"])
    report(f"{args.output}: {len(dictionary['candidates'])} capabilities: {names}; calls in {log.path}")
    return 0


def label(args: argparse.Namespace) -> int:
    from tracec.trace_rl.trace.analysis.label import (
        LabelSettings,
        label_with_llm,
        label_with_rubric,
        write_labels,
    )

    cases = read_cases(args.trajectories)
    out: Path = args.output
    if args.capability and args.rubric is None:
        raise UsageProblem("--capability selects capability blocks of a --rubric file")
    if args.rubric is not None:
        capabilities, labels = label_with_rubric(args.rubric, cases, args.capability, backend=args.kernel)
        path = out / f"run_{args.first_run:02d}.json"
        write_labels(path, args.first_run, cases, labels, capabilities)
        report(f"{path}: {len(cases)} trajectories x {len(capabilities)} capabilities, labeled by {args.rubric}")
        return 0
    from tracec.trace_rl.llm.options import open_backend
    from tracec.trace_rl.trace.analysis.label import SAMPLING

    capabilities = read_dictionary(args.capabilities)
    first = args.first_run
    runs = [r for r in range(first, first + args.runs) if args.force or not _kept(out / f"run_{r:02d}.json", capabilities)]
    for done in sorted(set(range(first, first + args.runs)) - set(runs)):
        report(f"{out / f'run_{done:02d}.json'}: exists, kept (--force relabels it)")
    if not runs:
        return 0
    backend = open_backend(args)
    out.mkdir(parents=True, exist_ok=True)
    log = CallLog(log_path_beside(out), command="analyze label")
    progress = Progress(out / "labels.progress.jsonl",
                        fingerprint([c.transcript for c in cases], capabilities, backend.name, args.seed,
                                    args.case_chars, args.temperature, args.max_tokens))
    report(f"label: {len(cases)} trajectories x {len(capabilities)} capabilities, runs {runs[0]}..{runs[-1]}, "
           f"with {backend.name}")
    for run in runs:
        chosen = settings(LabelSettings, runs=1, first_run=run, case_chars=args.case_chars, tries=args.tries,
                          seed=args.seed, skip_failed=args.skip_failed, sampling=sampling_from(args, SAMPLING))
        label_with_llm(backend, cases, capabilities, chosen, out_dir=out, log=log, progress=progress, report=report)
    progress.finish()
    return 0


def _kept(path: Path, capabilities: Sequence[Capability]) -> bool:
    """Whether an existing run file stands: it labelled some trajectory against exactly these capabilities. A run
    of another dictionary is refused (select would mix them); an empty one (nothing was labelled) is redone."""
    if not path.exists():
        return False
    run = read_run(path)
    names = {c.name for c in capabilities}
    if set(run.labels) != names:
        raise UsageProblem(f"{path}: labelled against the capabilities {', '.join(sorted(run.labels))}, not this "
                           f"dictionary's ({', '.join(sorted(names))}); pass --force to relabel it, or choose another -o")
    return run.total_failed + run.total_passed > 0


def select(args: argparse.Namespace) -> int:
    from tracec.trace_rl.trace.analysis.chart import write_chart
    from tracec.trace_rl.trace.analysis.select import Thresholds, render_table, selected, summarize

    thresholds = settings(Thresholds, rho=args.rho, delta=args.delta, k=args.k)
    paths = run_files(args.runs)
    runs = [read_run(p) for p in paths]
    mixed = [r.path for r in runs if set(r.labels) != set(runs[0].labels)]
    if mixed:
        raise UsageProblem(f"{mixed[0]}: labelled against other capabilities than {runs[0].path} "
                           f"({', '.join(sorted(runs[0].labels))}); select compares runs of one dictionary")
    if thresholds.k > len(runs):
        report(f"select: note: --k {thresholds.k} is more than the {len(runs)} runs given; nothing can be kept")
    candidates = args.candidates or next((p / "candidate_capabilities.json" for p in args.runs
                                          if (p / "candidate_capabilities.json").is_file()), None)
    descriptions = {c.name: c.description for c in read_dictionary(candidates)} if candidates else {}
    summaries = summarize(runs, thresholds, descriptions)
    kept = selected(summaries)
    with atomic_open(args.output) as handle:
        json.dump([s.record() for s in kept], handle, indent=2, ensure_ascii=False)
        handle.write("\n")
    chart = args.chart or args.output.with_suffix(".png")
    write_chart(chart, summaries, thresholds, len(runs))
    sys.stdout.write(render_table(summaries, thresholds, runs))
    report(f"{args.output}: {len(kept)} of {len(summaries)} capabilities from {len(runs)} runs; chart {chart}")
    return 0
