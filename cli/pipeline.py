"""`tracec pipeline CONFIG.toml [--set key=value ...] [--out DIR]`: TRACE end to end over one run folder.

collect -> discover -> label -> select -> environments -> train -> route -> evaluate, then `report.md` and
`report.png`. One progress line per step goes to stderr (`--verbose` adds each step's own lines: episodes,
iterations, routes); stdout gets the evaluation table and the report's path at the end. Run it again on the same
folder and the steps whose inputs did not change are skipped: a killed run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracec.cli.analyze import USER_ERRORS as ANALYSIS_ERRORS
from tracec.cli.errors import EXIT_OK
from tracec.cli.paths import input_file, work_folder
from tracec.trace_rl.llm.options import BackendChoiceError
from tracec.trace_rl.targeting.adapters import AdapterError
from tracec.trace_rl.targeting.evaluate import EvalError
from tracec.trace_rl.targeting.pipeline import layout
from tracec.trace_rl.targeting.pipeline.config import load_pipeline_config
from tracec.trace_rl.targeting.pipeline.steps import PipelineFailed
from tracec.trace_rl.targeting.routing import RouteError
from tracec.trace_rl.targeting.synth.reference import MissingReference

from tracec.config_io import ConfigError
from tracec.throttle import Throttle

# Each message says what to fix; an ImportError is an optional backend (vLLM) missing, its message the install hint.
# TemplateError is named, not imported: its module imports torch (see `tracec.cli`).
USER_ERRORS = (ConfigError, PipelineFailed, AdapterError, RouteError, EvalError, MissingReference, BackendChoiceError,
               "tracec.trace_rl.rollouts.turns:TemplateError", ImportError, *ANALYSIS_ERRORS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", type=Path, help="the pipeline's TOML config (examples/pipeline/*.toml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set train.run.iterations=2 --set evaluate.tasks=4")
    parser.add_argument("--out", type=Path, help="the run folder (default: run.out of the config)")
    parser.add_argument("--verbose", action="store_true",
                        help="every progress line of each step (without it: at most one every 10 s)")


def run(args: argparse.Namespace) -> int:
    config = load_pipeline_config(input_file(args.config), args.overrides)
    out = work_folder(args.out or Path(config.run.out))
    # After the config and the folder: the steps import torch, transformers and textworld.
    from tracec.trace_rl.targeting.pipeline.run import run_pipeline

    result = run_pipeline(config, out=out, report=_say, detail=_say if args.verbose else Throttle(_say, 10.0))
    table = result.out / layout.EVALUATE / layout.EVALUATION_TABLE
    sys.stdout.write(table.read_text(encoding="utf-8"))
    print(f"report: {result.report}")
    return EXIT_OK


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
