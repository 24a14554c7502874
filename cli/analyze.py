"""`tracec analyze discover | label | select`: TRACE's capability analysis from the command line.

    tracec analyze discover TRAJ... -o candidates.json [--runs 3] [LLM flags]
    tracec analyze label TRAJ... --capabilities candidates.json -o runs/ [--runs 10] [--skip-failed] [LLM flags]
    tracec analyze label TRAJ.jsonl --rubric FILE.rubric [--capability NAME]... -o runs/
    tracec analyze select RUNS... [--rho 0.10] [--delta 0.20] [--k 8] [--candidates FILE] -o selected.json

TRAJ: trajectory JSONL or tau2-bench result files. RUNS: run files or folders of `run_*.json`. Every LLM call is
logged beside the outputs (`llm_calls.jsonl`); a killed discover or label resumes from its progress file.
Exit 0 on success, 1 on a user error or a failed step (a message that says which and why), 2 on a usage error.
Its errors are mapped to exit codes by `tracec.cli`, as every command's are; `USER_ERRORS` are the analysis's own
(the pipeline's analysis steps raise them too).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType

from tracec.cli.llm_flags import add_llm_arguments, backend_settings
from tracec.cli.paths import output_file, work_folder
from tracec.trace_rl.llm.calls import LLMError
from tracec.trace_rl.llm.chat import SamplingBackend
from tracec.trace_rl.llm.options import BackendChoiceError, BackendSettings
from tracec.trace_rl.llm.repair import RepairFailed
from tracec.trace_rl.policy.catalog import ModelError
from tracec.trace_rl.targeting.analysis.cases import CaseError
from tracec.trace_rl.targeting.analysis.dictionary import DictionaryError
from tracec.trace_rl.targeting.analysis.label import LabelingFailed
from tracec.trace_rl.targeting.analysis.runs import RUN_FILES, RunFileError
from tracec.trace_rl.targeting.usage import UsageProblem

from tracec.arguments import integer, number

__all__ = ["USAGE_ERRORS", "USER_ERRORS", "add_arguments", "run"]
USAGE_ERRORS = (BackendChoiceError, UsageProblem)
USER_ERRORS = (CaseError, DictionaryError, RunFileError, LLMError, RepairFailed, LabelingFailed, ModelError)
CASE_CHARS = 200  # the shortest transcript excerpt shown (the bound of analysis.discover.DiscoverSettings)


def add_arguments(analyze: argparse.ArgumentParser) -> None:
    steps = analyze.add_subparsers(dest="step", required=True, metavar="STEP")

    discover = steps.add_parser("discover", help="propose a capability dictionary from successes and failures")
    discover.add_argument("trajectories", nargs="+", type=Path, help="trajectory JSONL or tau2-bench result files")
    discover.add_argument("-o", "--output", type=Path, required=True, help="the dictionary (JSON)")
    discover.add_argument("--runs", type=integer(1), default=3, help="independent discovery runs, merged (default 3)")
    discover.add_argument("--max-candidates", type=integer(1), default=10,
                          help="capabilities a run may propose (default 10)")
    discover.add_argument("--cases-per-run", type=integer(1), default=16,
                          help="trajectories shown per run (default 16)")
    discover.add_argument("--case-chars", type=integer(CASE_CHARS), default=1500,
                          help=f"characters of each transcript shown (at least {CASE_CHARS}; default 1500)")
    add_llm_arguments(discover)

    label = steps.add_parser("label", help="label trajectory x capability as NA / PRESENT / LACKING")
    label.add_argument("trajectories", nargs="+", type=Path, help="trajectory JSONL or tau2-bench result files")
    source = label.add_mutually_exclusive_group(required=True)
    source.add_argument("--capabilities", type=Path, help="a capability dictionary: label with the LLM")
    source.add_argument("--rubric", type=Path, help="a .rubric file: label with its capability blocks")
    label.add_argument("--capability", action="append", default=[], help="with --rubric: only these (repeatable)")
    label.add_argument("--kernel", choices=("numba", "c", "interp"), default="numba", help="with --rubric")
    label.add_argument("-o", "--output", type=Path, required=True, help="folder for run_NN.json")
    label.add_argument("--runs", type=integer(1), default=1, help="LLM labeling runs (default 1; TRACE uses 10)")
    label.add_argument("--first-run", type=integer(1), default=1, help="number of the first run file (default 1)")
    label.add_argument("--case-chars", type=integer(CASE_CHARS), default=4000,
                       help=f"characters of each transcript shown (at least {CASE_CHARS}; default 4000)")
    label.add_argument("--skip-failed", action="store_true",
                       help="leave trajectories the LLM cannot label out of a run instead of failing it")
    label.add_argument("--force", action="store_true", help="relabel runs whose file already exists")
    add_llm_arguments(label)

    select = steps.add_parser("select", help="contrastive selection across runs (TRACE's aggregation)")
    select.add_argument("runs", nargs="+", type=Path, help="run files, or folders of run_*.json")
    select.add_argument("-o", "--output", type=Path, required=True, help="selected_capabilities.json")
    select.add_argument("--rho", type=number(0, 1), default=0.10, help="coverage threshold (default 0.10)")
    select.add_argument("--delta", type=number(-1, 1), default=0.20, help="contrastive-gap threshold (default 0.20)")
    select.add_argument("--k", type=integer(1), default=8, help="runs a capability must pass (default 8)")
    select.add_argument("--candidates", type=Path, help="the dictionary, for descriptions (default: "
                        "candidate_capabilities.json in a RUNS folder, if there)")
    select.add_argument("--chart", type=Path, help="the PNG chart (default: OUTPUT with .png)")


def run(args: argparse.Namespace) -> int:
    if args.step == "label":  # the outputs, before any LLM is called
        work_folder(args.output)
    else:
        output_file(args.output, inputs=_inputs(args))
    if args.step == "select" and args.chart is not None:
        output_file(args.chart, inputs=_inputs(args))
    if args.step == "select":
        return _commands().select(args.runs, args.output, rho=args.rho, delta=args.delta, k=args.k,
                                  candidates=args.candidates, chart=args.chart)
    llm = backend_settings(args)  # flags that name no usable backend: said before any import or input
    commands = _commands()
    if args.step == "discover":
        return commands.discover(args.trajectories, args.output, runs=args.runs, max_candidates=args.max_candidates,
                                 cases_per_run=args.cases_per_run, case_chars=args.case_chars, tries=args.tries,
                                 max_tokens=args.max_tokens, temperature=args.temperature,
                                 llm=llm, open_llm=_open_backend)
    return commands.label(args.trajectories, args.output, dictionary=args.capabilities, rubric=args.rubric,
                          only=args.capability, kernel=args.kernel, runs=args.runs, first_run=args.first_run,
                          case_chars=args.case_chars, skip_failed=args.skip_failed, force=args.force,
                          tries=args.tries, max_tokens=args.max_tokens, temperature=args.temperature,
                          llm=llm, open_llm=_open_backend)


def _commands() -> ModuleType:
    """What the steps do, imported once the arguments are checked (it imports the compiler and numpy)."""
    from tracec.trace_rl.targeting.analysis import commands

    return commands


def _inputs(args: argparse.Namespace) -> list[Path]:
    """The files a discover or a select reads (a folder of runs: its run files), which its outputs must not
    replace; one that is missing is said when it is read."""
    if args.step == "discover":
        return list(args.trajectories)
    runs = [file for given in args.runs for file in (sorted(given.glob(RUN_FILES)) if given.is_dir() else [given])]
    return [*runs, *([args.candidates] if args.candidates is not None else [])]


def _open_backend(settings: BackendSettings) -> SamplingBackend:
    """The LLM, opened only by the steps that ask one: a local model imports torch."""
    from tracec.trace_rl.llm.backends import open_backend

    return open_backend(settings)
