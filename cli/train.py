"""`tracec train CONFIG.toml [--set key=value ...] [--out DIR] [--resume]`: the command line of the trainer.

The same arguments work under torchrun (`python -m tracec.cli train ...`). Progress goes to stderr: a bar over
the iterations and one line of metrics per iteration (rank 0 only); stdout gets one line at the end (the run folder,
the adapter, the last reward). A config or model mistake is a one-line error and exit 1, never a traceback, and
every file the config names is checked before any model loads (`trace_rl.grpo.preflight`), in well under a second.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracec.cli.errors import EXIT_OK
from tracec.cli.paths import kernel_cache, work_folder
from tracec.trace_rl.grpo.config import ConfigError
from tracec.trace_rl.grpo.run_folder import check_run_dir
from tracec.trace_rl.llm.calls import LLMError
from tracec.trace_rl.policy.catalog import ModelError

# Each message says what to fix; an LLMError here is vLLM missing, its message the install hint. TemplateError is
# named, not imported: its module imports torch (see `tracec.cli`).
USER_ERRORS = (ConfigError, ModelError, "tracec.trace_rl.rollouts.turns:TemplateError", LLMError)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", type=Path, help="the run's TOML config (examples/train/*.toml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set iterations=1 --set rollout.group_size=8")
    parser.add_argument("--out", type=Path, help="the run folder (default: run.out of the config)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or per-iteration lines")


def run(args: argparse.Namespace) -> int:
    from tracec.trace_rl.grpo.config import load_config
    from tracec.trace_rl.grpo.preflight import check_located

    config = load_config(args.config, args.overrides)
    check_located(config, args.config, args.overrides)  # its files, model, environment: before torch is imported
    out = args.out or Path(config.run.out)
    work_folder(out)  # the trainer makes it, once the run starts
    check_run_dir(out, config, args.resume)  # a new run into an old one, or nothing to resume: before any model
    if config.advantage.kind == "trca":
        kernel_cache()  # the rubric's kernels are compiled into it
    from tracec.trace_rl.grpo.report import no_signal_warning
    from tracec.trace_rl.grpo.train import train

    bar, report = _progress(config.run.iterations, quiet=args.quiet)
    try:
        result = train(config, out=args.out, resume=args.resume, on_iteration=report)
    finally:
        bar.close()
    last = result.metrics[-1] if result.metrics else {}
    steps = sum(int(m.get("optimizer_steps", 0)) for m in result.metrics)
    warning = no_signal_warning(result.metrics)
    if warning is not None:
        print(f"tracec train: warning: {warning}", file=sys.stderr, flush=True)
    print(f"{result.run_dir}: {len(result.metrics)} iterations, {steps} optimizer steps"
          f"{' (no learning signal)' if warning is not None else ''}, reward "
          f"{last.get('reward_mean', float('nan')):.3f}, success {last.get('success_rate', float('nan')):.2f}; "
          f"adapter: {result.adapter}")
    return EXIT_OK


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, *, quiet: bool):  # type: ignore[no-untyped-def]
    from tracec.trace_rl.grpo.report import console_line

    if quiet:
        return _NoBar(), None
    from tqdm import tqdm

    bar = tqdm(total=total, desc="train", unit="iter", file=sys.stderr, dynamic_ncols=True)
    started = {"first": True}

    def report(record: dict) -> None:  # type: ignore[type-arg]
        if started["first"]:  # a resumed run begins past 0
            bar.update(record["iteration"] - 1)
            started["first"] = False
        bar.write(console_line(record, total), file=sys.stderr)
        bar.update(1)

    return bar, report
