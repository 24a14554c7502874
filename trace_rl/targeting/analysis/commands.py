"""What `tracec analyze discover | label | select` do, given their typed inputs: read, run, write, report.

Outputs are written atomically; progress to stderr, the selection table to stdout. `UsageProblem` means inputs that
do not make sense (exit 2); the errors that mean "the input or the model is at fault" (exit 1, message only) are the
command line's `USER_ERRORS` (`tracec.cli.analyze`), whose flags the messages name. The LLM comes through
`open_llm` (a local one imports torch, `llm/backends.py`), so that `select` and the rubric labeler never load it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tracec.trace_rl.llm.calls import CallLog, log_path_beside
from tracec.trace_rl.llm.chat import SamplingBackend
from tracec.trace_rl.llm.options import BackendSettings
from tracec.trace_rl.targeting.analysis.cases import read_cases
from tracec.trace_rl.targeting.analysis.chart import write_chart
from tracec.trace_rl.targeting.analysis.dictionary import read_dictionary, stamp
from tracec.trace_rl.targeting.analysis.discover import SAMPLING as DISCOVER_SAMPLING
from tracec.trace_rl.targeting.analysis.discover import DiscoverSettings
from tracec.trace_rl.targeting.analysis.discover import discover as run_discovery
from tracec.trace_rl.targeting.analysis.label import SAMPLING as LABEL_SAMPLING
from tracec.trace_rl.targeting.analysis.label import (
    LabelSettings,
    label_with_llm,
    label_with_rubric,
    rubric_stamp,
    write_labels,
)
from tracec.trace_rl.targeting.analysis.progress import Progress, fingerprint
from tracec.trace_rl.targeting.analysis.runs import DictionaryStamp, check_one_dictionary, read_run, run_files
from tracec.trace_rl.targeting.analysis.select import Thresholds, render_table, selected, summarize
from tracec.trace_rl.targeting.usage import UsageProblem, report

from tracec.atomic import atomic_open

if TYPE_CHECKING:
    from tracec.compiler.backends import Backend


S = TypeVar("S")


def settings(make: Callable[..., S], **values: Any) -> S:
    try:
        return make(**values)
    except ValueError as error:
        raise UsageProblem(str(error)) from None


def sampling_from(default: Any, *, max_tokens: int | None, temperature: float | None) -> Any:
    """`default` with the values given (None: the default's)."""
    overrides = {k: v for k, v in (("max_tokens", max_tokens), ("temperature", temperature)) if v is not None}
    return settings(lambda **changes: replace(default, **changes), **overrides) if overrides else default


def discover(trajectories: Sequence[Path], output: Path, *, runs: int, max_candidates: int, cases_per_run: int,
             case_chars: int, tries: int, max_tokens: int | None, temperature: float | None,
             llm: BackendSettings, open_llm: Callable[[BackendSettings], SamplingBackend]) -> int:
    """The capability dictionary of `trajectories` in `output`; `llm.seed` seeds the runs as it does the backend,
    which `open_llm` opens once the inputs are read."""
    chosen = settings(DiscoverSettings, runs=runs, max_candidates=max_candidates, cases_per_run=cases_per_run,
                      case_chars=case_chars, tries=tries, seed=llm.seed,
                      sampling=sampling_from(DISCOVER_SAMPLING, max_tokens=max_tokens, temperature=temperature))
    cases = read_cases(trajectories)
    backend = open_llm(llm)
    log = CallLog(log_path_beside(output), command="analyze discover")
    progress = Progress(output.with_name(output.stem + ".progress.jsonl"),
                        fingerprint([c.id for c in cases], [c.transcript for c in cases], chosen, backend.name))
    report(f"discover: {len(cases)} trajectories, {chosen.runs} runs with {backend.name}")
    dictionary = run_discovery(backend, cases, chosen, log=log, progress=progress, report=report)
    with atomic_open(output) as handle:
        json.dump(dictionary, handle, indent=2, ensure_ascii=False)
        handle.write("\n")
    progress.finish()
    names = ", ".join(f"{c['name']} ({c['proposed_in']}/{chosen.runs})" for c in dictionary["candidates"])
    report(f"{output}: {len(dictionary['candidates'])} capabilities: {names}; calls in {log.path}")
    return 0


def label(trajectories: Sequence[Path], out: Path, *, dictionary: Path | None, rubric: Path | None,
          only: Sequence[str], kernel: Backend, runs: int, first_run: int, case_chars: int, skip_failed: bool,
          force: bool, tries: int, max_tokens: int | None, temperature: float | None, llm: BackendSettings,
          open_llm: Callable[[BackendSettings], SamplingBackend]) -> int:
    """`run_NN.json` files in `out`: by the capability blocks of `rubric` (all, or those named `only`) through
    `kernel`, or by the LLM `open_llm` opens against `dictionary`, `runs` runs from `first_run` (existing ones kept
    unless `force`)."""
    cases = read_cases(trajectories)
    if only and rubric is None:
        raise UsageProblem("--capability selects capability blocks of a --rubric file")
    if rubric is not None:
        capabilities, labels = label_with_rubric(rubric, cases, only, backend=kernel)
        path = out / f"run_{first_run:02d}.json"
        write_labels(path, first_run, cases, labels, capabilities, dictionary=rubric_stamp(rubric))
        report(f"{path}: {len(cases)} trajectories x {len(capabilities)} capabilities, labeled by {rubric}")
        return 0
    assert dictionary is not None  # labels come from a rubric or a dictionary
    capabilities = read_dictionary(dictionary)
    labelled_against = stamp(capabilities, dictionary)
    todo = [r for r in range(first_run, first_run + runs)
            if force or not _kept(out / f"run_{r:02d}.json", labelled_against)]
    for done in sorted(set(range(first_run, first_run + runs)) - set(todo)):
        report(f"{out / f'run_{done:02d}.json'}: exists, kept (--force relabels it)")
    if not todo:
        return 0
    backend = open_llm(llm)
    out.mkdir(parents=True, exist_ok=True)
    log = CallLog(log_path_beside(out), command="analyze label")
    progress = Progress(out / "labels.progress.jsonl",
                        fingerprint([c.transcript for c in cases], capabilities, backend.name, llm.seed,
                                    case_chars, temperature, max_tokens))
    report(f"label: {len(cases)} trajectories x {len(capabilities)} capabilities, runs {todo[0]}..{todo[-1]}, "
           f"with {backend.name}")
    for run in todo:
        chosen = settings(LabelSettings, runs=1, first_run=run, case_chars=case_chars, tries=tries, seed=llm.seed,
                          skip_failed=skip_failed,
                          sampling=sampling_from(LABEL_SAMPLING, max_tokens=max_tokens, temperature=temperature))
        label_with_llm(backend, cases, capabilities, chosen, out_dir=out, log=log, progress=progress, report=report,
                       dictionary=labelled_against)
    progress.finish()
    return 0


def _kept(path: Path, dictionary: DictionaryStamp) -> bool:
    """Whether an existing run file stands: it was labelled against `dictionary` (by the dictionary it records; one
    that records none, written before runs did, by labelling exactly its capabilities, as our labeler always did)
    and labelled some trajectory. A run of another dictionary is refused (select would refuse to mix them); an empty
    one (nothing was labelled) is redone."""
    if not path.exists():
        return False
    run = read_run(path)
    if run.dictionary is not None and run.dictionary.fingerprint != dictionary.fingerprint:
        raise UsageProblem(f"{path}: labelled against {run.dictionary.describe()}, not {dictionary.describe()}; "
                           "pass --force to relabel it, or choose another -o")
    names = set(dictionary.capabilities)
    if run.dictionary is None and set(run.labels) != names:
        raise UsageProblem(f"{path}: labelled against the capabilities {', '.join(sorted(run.labels))}, not those "
                           f"of {dictionary.describe()} ({', '.join(sorted(names))}); pass --force to relabel it, "
                           "or choose another -o")
    return run.total_failed + run.total_passed > 0


def select(given: Sequence[Path], output: Path, *, rho: float, delta: float, k: int, candidates: Path | None,
           chart: Path | None) -> int:
    """The capabilities the run files (or folders of them) `given` select, in `output`, with their chart (by
    default beside it) and the table on stdout; descriptions from `candidates` or a folder's dictionary."""
    thresholds = settings(Thresholds, rho=rho, delta=delta, k=k)
    paths = run_files(given)
    runs = [read_run(p) for p in paths]
    check_one_dictionary(runs)  # by the dictionary each records: a run may omit a capability, as TRACE's do
    if thresholds.k > len(runs):  # the default k = 8 of TRACE's ten LLM runs keeps nothing from one run
        report(f"select: note: --k {thresholds.k} is more than the {len(runs)} run(s) given, so no capability can be "
               f"kept; pass --k {len(runs)} or less (a rubric's labels are one run: --k 1)")
    candidates = candidates or next((p / "candidate_capabilities.json" for p in given
                                     if (p / "candidate_capabilities.json").is_file()), None)
    descriptions = {c.name: c.description for c in read_dictionary(candidates)} if candidates else {}
    summaries = summarize(runs, thresholds, descriptions)
    kept = selected(summaries)
    with atomic_open(output) as handle:
        json.dump([s.record() for s in kept], handle, indent=2, ensure_ascii=False)
        handle.write("\n")
    chart = chart or output.with_suffix(".png")
    write_chart(chart, summaries, thresholds, len(runs))
    sys.stdout.write(render_table(summaries, thresholds, runs))
    report(f"{output}: {len(kept)} of {len(summaries)} capabilities from {len(runs)} runs; chart {chart}")
    return 0
