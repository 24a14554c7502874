"""What a run reports: one JSON line of metrics per iteration, a console line, and a PNG learning curve at the end.

`metrics.jsonl` is appended once per iteration (flushed, so a killed run keeps every finished iteration). A resumed
run first rewrites it, atomically, without the iterations after its checkpoint: those are run again, and the file
then reads as one uninterrupted run. The curve plots reward, success rate and the constant-group fraction against
the iteration, with the trust region beside them: the ratio's worst p99 and the approximate KL to the sampling
policy per iteration, the clip fraction and the KL to the base (matplotlib, the `train` extra: a bare `Figure` on
the Agg canvas, never `pyplot`, so no global backend is set). The console line carries the same diagnostics.
Left out: TensorBoard and W&B writers (the JSONL file is what they would read).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

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
            kept = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
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
