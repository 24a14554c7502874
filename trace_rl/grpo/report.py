"""What a run reports: one JSON line of metrics per iteration, a console line, and a PNG learning curve at the end.

`metrics.jsonl` is appended once per iteration (flushed, so a killed run keeps every finished iteration). A resumed
run first rewrites it, atomically, without the iterations after its checkpoint: those are run again, and the file
then reads as one uninterrupted run; a last line cut short (a run killed while writing it) is such an iteration,
dropped with a warning. With `run.report_to = ["tensorboard"]` the same scalars also go to TensorBoard event files
(`TensorBoardLog`, tensorboardX: protobuf is its only dependency, where `tensorboard` itself pulls grpcio and a web
server). The curve plots reward, success rate and the constant-group fraction against
the iteration, with the trust region beside them: the ratio's worst p99 and the approximate KL to the sampling
policy per iteration, the clip fraction and the KL to the base (matplotlib, the `train` extra: a bare `Figure` on
the Agg canvas, never `pyplot`, so no global backend is set). The console line carries the same diagnostics.
Left out: W&B, and the per-optimizer-step diagnostics (`steps`) in TensorBoard (they stay in the JSONL file).
"""

from __future__ import annotations

import json
import math
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from tracec.trace_rl.grpo.config import ConfigError

from tracec.atomic import write_atomic

CONSOLE_KEYS = (("reward_mean", "reward", ".3f"), ("success_rate", "success", ".2f"),
                ("constant_fraction", "const", ".2f"), ("hinted_fraction", "hinted", ".2f"),
                ("clip_fraction", "clip", ".3f"), ("kl", "kl", ".4f"),
                ("ratio_p99", "ratio p99", ".2f"), ("approx_kl", "kl(old)", ".4f"), ("grad_norm", "|g|", ".2f"),
                ("entropy", "entropy", ".2f"), ("tokens_per_s", "tok/s", ".0f"), ("time_rollout", "rollout s", ".1f"),
                ("time_score", "score s", ".2f"), ("time_learn", "learn s", ".1f"))


class MetricsLog:
    def __init__(self, path: Path, *, keep_through: int, enabled: bool = True) -> None:
        self.path, self.enabled = path, enabled
        self._records: list[dict[str, Any]] = []
        if path.exists():
            kept = _read_records(path, warn=enabled)
            self._records = [r for r in kept if r.get("iteration", 0) <= keep_through]
            if enabled:
                write_atomic(path, [json.dumps(r) + "\n" for r in self._records])

    def append(self, record: dict[str, Any]) -> None:
        self._records.append(record)
        if self.enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")

    def records(self) -> list[dict[str, Any]]:
        return list(self._records)


def _read_records(path: Path, *, warn: bool) -> list[dict[str, Any]]:
    """The records of a metrics file; a last line cut short is dropped (said on stderr when `warn`), any other line
    that is not a record is an error at its line."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines) and not text.endswith("\n"):  # each record is written with its newline
                if warn:
                    print(f"{path}:{number}: warning: dropped its last line, cut short by a run killed while writing "
                          "it (an iteration after the last checkpoint, which the resumed run does again)",
                          file=sys.stderr, flush=True)
                continue
            problem = error.msg
        else:
            problem = "" if isinstance(record, dict) else f"a JSON {type(record).__name__}"
        if problem:
            raise ConfigError(f"{path}:{number}: error: not a metrics record ({problem}); delete this line and the "
                              "ones after it to resume from the run's checkpoints")
        records.append(record)
    return records


class TensorBoardLog:
    """Each record's numbers as TensorBoard scalars `train/KEY` at step `iteration`, in event files of `folder`.

    Every run or resume opens a file of its own (a unique name: files are never rewritten) that begins with a purge at
    `first_iteration`: TensorBoard then drops what earlier files logged from there on, the iterations after the
    checkpoint that the resumed run does again, as `MetricsLog` drops their lines."""

    def __init__(self, folder: Path, *, first_iteration: int) -> None:
        summary_writer = import_tensorboardx()
        self._writer = summary_writer(str(folder), purge_step=first_iteration,
                                      filename_suffix=f".{uuid.uuid4().hex[:12]}")

    def append(self, record: dict[str, Any]) -> None:
        for key, value in record.items():
            if key != "iteration" and isinstance(value, (int, float)):  # bools as 0 / 1; lists stay in the JSONL
                self._writer.add_scalar(f"train/{key}", float(value), record["iteration"])
        self._writer.flush()  # a killed run keeps every finished iteration, as in metrics.jsonl

    def close(self) -> None:
        self._writer.close()


def check_reporters(report_to: Sequence[str]) -> None:
    """The install hint of each reporter `run.report_to` names (a ConfigError), before anything loads."""
    if "tensorboard" in report_to:
        import_tensorboardx()


def open_reporters(report_to: Sequence[str], run_dir: Path, *, first_iteration: int) -> list[TensorBoardLog]:
    """The logs besides `metrics.jsonl` that `run.report_to` names, open for appending from `first_iteration`."""
    return [TensorBoardLog(run_dir / "tensorboard", first_iteration=first_iteration)] if "tensorboard" in report_to \
        else []


def import_tensorboardx() -> Any:
    """tensorboardX's SummaryWriter, or a ConfigError saying how to install it."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise ConfigError("run.report_to = [\"tensorboard\"] writes with tensorboardX, which is not installed: "
                          "pip install tensorboardX (or the `train` extra: pip install -e '.[train]')") from None
    return SummaryWriter


def no_signal_warning(records: Sequence[dict[str, Any]]) -> str | None:
    """What to say when no iteration of a run had a group to learn from (all its groups' advantages were 0)."""
    if not records or not all(r.get("no_signal") for r in records):
        return None
    steps = sum(int(r.get("optimizer_steps", 0)) for r in records)
    batches = sum(1 + int(r.get("resample_batches", 0)) for r in records)
    outcome = "0 optimizer steps were taken: the adapter is its initial state" if not steps else \
        f"its {steps} optimizer steps had nothing to learn from"
    iterations = "its only iteration" if len(records) == 1 else f"any of its {len(records)} iterations"
    return (f"no group had a learning signal in {iterations} ({batches} batch{'es' if batches > 1 else ''} of groups "
            f"sampled, resampling included): every episode of each group scored alike, so {outcome}; raise "
            "rollout.group_size or advantage.max_resample_batches, choose easier tasks, or give step rewards "
            "(advantage.kind = \"trca\")")


def console_line(record: dict[str, Any], total: int) -> str:
    fields = [f"{label} {record[key]:{spec}}" for key, label, spec in CONSOLE_KEYS
              if isinstance(record.get(key), (int, float)) and math.isfinite(record[key])]
    return f"iter {record['iteration']}/{total}  " + "  ".join(fields)


def plot_curve(records: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """The learning curve as a PNG; None (and no file) when there is nothing to plot."""
    if not records:
        return None
    x = [r["iteration"] for r in records]
    figure = Figure(figsize=(11, 4))
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2)
    for key, label in (("reward_mean", "reward (mean)"), ("success_rate", "success rate"),
                       ("constant_fraction", "constant groups")):
        left.plot(x, [r.get(key, math.nan) for r in records], marker="o", markersize=3, label=label)
    left.set_xlabel("iteration")
    left.legend()
    left.grid(alpha=0.3)
    for key, label in (("ratio_p99", "ratio p99 (worst step) - 1"), ("approx_kl", "KL to the sampler (k3)"),
                       ("clip_fraction", "clip fraction"), ("kl", "KL to the base (k3)")):
        values = [r.get(key, math.nan) for r in records]
        if key == "ratio_p99":
            values = [v - 1 for v in values]
        right.plot(x, values, marker="o", markersize=3, label=label)
    right.set_xlabel("iteration")
    right.legend()
    right.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with_png = path.with_suffix(".png")
    staging = with_png.parent / f".{with_png.name}.tmp.png"
    figure.savefig(staging, dpi=110)
    staging.replace(with_png)
    return with_png
