"""`tracec train CONFIG.toml [--set key=value ...] [--out DIR] [--resume]`: the command line of the trainer.

The same arguments work under torchrun (`python -m tracec.trace_rl.train ...`). Progress goes to stderr: a bar over
the iterations and one line of metrics per iteration (rank 0 only); stdout gets one line at the end (the run folder,
the adapter, the last reward). A config or model mistake is a one-line error and exit 1, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_OK, EXIT_USER, EXIT_USAGE = 0, 1, 2


HELP = "GRPO training of one LoRA adapter on one environment (GRPO or TRCA advantages)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", type=Path, help="the run's TOML config (examples/train/*.toml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set iterations=1 --set rollout.group_size=8")
    parser.add_argument("--out", type=Path, help="the run folder (default: run.out of the config)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or per-iteration lines")


def train_command(argv: list[str]) -> int:
    """Parse `argv` (what follows `tracec train`) and run."""
    parser = argparse.ArgumentParser(prog="tracec train", description=HELP)
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return EXIT_OK if exit_.code in (0, None) else EXIT_USAGE
    return run(args)


def run(args: argparse.Namespace) -> int:
    from tracec.dsl.errors import RubricError
    from tracec.trace_rl.models import ModelError
    from tracec.trace_rl.train import train
    from tracec.trace_rl.train_config import ConfigError, load_config
    from tracec.trace_rl.turns import TemplateError

    try:
        config = load_config(args.config, args.overrides)
        bar, report = _progress(config.run.iterations, quiet=args.quiet)
        try:
            result = train(config, out=args.out, resume=args.resume, on_iteration=report)
        finally:
            bar.close()
    except (ConfigError, ModelError, TemplateError) as error:
        print(f"tracec train: {error}", file=sys.stderr)
        return EXIT_USER
    except RubricError as error:
        print(error.format(), file=sys.stderr)
        return EXIT_USER
    except ImportError as error:  # an optional backend (vLLM) that is not installed: its hint says what to do
        print(f"tracec train: {error}", file=sys.stderr)
        return EXIT_USER
    last = result.metrics[-1] if result.metrics else {}
    print(f"{result.run_dir}: {len(result.metrics)} iterations, reward {last.get('reward_mean', float('nan')):.3f}, "
          f"success {last.get('success_rate', float('nan')):.2f}; adapter: {result.adapter}")
    return EXIT_OK


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, *, quiet: bool):  # type: ignore[no-untyped-def]
    from tracec.trace_rl.train_report import console_line

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
