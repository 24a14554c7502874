"""Log-probs of packed action tokens, forward and backward: the naive full logits, TRL's two, Liger's, and ours.

d = 576 (SmolLM2's width): T in {2048, 8192} tokens at V = 49152 and T in {2048, 4096} at V = 152064, a frozen fp32
LM head (LoRA's case) and a gradient for the hidden states. Each variant of each case runs in a fresh process in
every round (`bench/logprobs_peak.py`, whose docstring says what each variant is and how peak memory is read); a
round runs every case's variants in turn (`bench.sides.collected`), over `sides.ROUNDS` rounds. Each time and peak
is the median over the rounds with their range; each ratio to naive (time, peak) the median of the per-round paired
ratios with their range; peak / floor is the peak's median and range over the floor, a constant. The targets (at
the largest T of each V) are read from those medians. Every variant's log-probs and gradient are checked against
the naive ones of the same round. The floor is what any implementation must hold: h, W, the gradient of h and the
log-probs.

d = 512 is not run by default: at 5 rounds the two widths would take about 40 minutes on the 2-core machine (d = 576
alone about 20: some 150-190 s of forward+backward and 55 s of process start-up a round), so only SmolLM2's width
is kept; `LOGPROBS_WIDTHS=576,512` runs both.

Environment (each one that is set is written into the section's Reproduce command):
- `LOGPROBS_ROUNDS`: the rounds (default `sides.ROUNDS`; fewer only for a smoke run).
- `LOGPROBS_CASES`: comma-separated `TxV`, e.g. `2048x49152` (default the four cases above).
- `LOGPROBS_WIDTHS`: comma-separated d (default `576`).
- `LOGPROBS_VARIANTS`: comma-separated variants of `bench/logprobs_peak.py` (default
  `naive,trl_selective,trl_chunked,liger,ours`; `ours_entropy` is there too).

Writes bench/RESULTS.md, section "logprobs d=576" (and "logprobs d=512" when asked for).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import version
from typing import Any

import pytest

from bench import sides
from bench.results import markdown_table, record
from bench.sides import Rounds, collected, describe, field, load_average

COMMAND = "pytest bench/test_logprobs_bench.py --benchmark-only -p no:xdist"
ENVIRONMENT = ("LOGPROBS_ROUNDS", "LOGPROBS_CASES", "LOGPROBS_WIDTHS", "LOGPROBS_VARIANTS")
DEFAULT_CASES = "2048x49152,8192x49152,2048x152064,4096x152064"  # tokens x vocabulary
ROUNDS = int(os.environ.get("LOGPROBS_ROUNDS", sides.ROUNDS))
CASES = tuple((int(t), int(v)) for t, v in (case.split("x") for case in
                                            os.environ.get("LOGPROBS_CASES", DEFAULT_CASES).split(",")))
WIDTHS = tuple(int(width) for width in os.environ.get("LOGPROBS_WIDTHS", "576").split(","))
VARIANTS = tuple(os.environ.get("LOGPROBS_VARIANTS", "naive,trl_selective,trl_chunked,liger,ours").split(","))
MB = 2**20
TARGETS = "peak <= 15% of naive, <= 1.5x the floor, time <= 0.8x naive"

Case = tuple[int, int, int]  # (width, tokens, vocabulary)
Reports = Mapping[str, Sequence[Mapping[str, float]]]

LABELS = {
    "naive": "full logits, log_softmax, gather",
    "trl_selective": "TRL {trl}'s `selective_log_softmax` utility over the full logits (completions of 512 tokens; a "
                     "torch loop on CPU). TRL's GRPO trainer does not call it: it scores through `trl_chunked`",
    "trl_chunked": "TRL {trl}'s `ChunkedLogProbFunction`, the chunked LM head its GRPO trainer patches in "
                   "(`add_fused_lm_head`), doing the trainer's work: log-probs and the entropy (no gradient through "
                   "it, at the trainer's default `entropy_coef=0`), vocabulary chunks of 32768. On this CPU it is "
                   "TRL's torch fallback path; its Triton kernels run on CUDA/XPU only",
    "liger": "Liger's fused linear cross-entropy (Triton, CUDA only)",
    "ours": "`token_logprobs`, log-probs only (like naive and trl_selective; `trl_chunked` also computes the entropy)",
    "ours_entropy": "`token_logprobs(..., with_entropy=True)`, the like-for-like side of `trl_chunked`",
}


def run_variant(variant: str, case: Case) -> dict[str, Any]:
    width, tokens, vocab = case
    command = [sys.executable, "-m", "bench.logprobs_peak", variant, "--tokens", str(tokens), "--vocab", str(vocab),
               "--width", str(width)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=1800)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


def floor_bytes(case: Case) -> int:
    width, tokens, vocab = case
    return 4 * (tokens * width + vocab * width + tokens * width + tokens)  # h, W, grad h, log-probs (fp32)


def side_name(case: Case, variant: str) -> str:
    return f"{case[1]}x{case[2]} {variant}"


def reproduce(width: int) -> str:
    """The command for this section, with any LOGPROBS_* setting it ran under."""
    settings = {key: os.environ[key] for key in ENVIRONMENT if key in os.environ and key != "LOGPROBS_WIDTHS"}
    if width != 576:
        settings["LOGPROBS_WIDTHS"] = str(width)
    prefix = "".join(f"{key}={value} " for key, value in settings.items())
    return f"{prefix}{COMMAND} -k {width}"


@pytest.mark.parametrize("width", WIDTHS)
def test_logprobs(benchmark: object, width: int) -> None:
    cases = [(width, tokens, vocab) for tokens, vocab in CASES]
    unavailable: dict[str, str] = {}
    loads: list[str] = []  # the machine is shared: its load beside the figures

    def side(case: Case, variant: str) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            if (case, variant) == (cases[0], VARIANTS[0]):
                loads.append(load_average())  # each round's start
            if variant in unavailable:
                return {}
            result = run_variant(variant, case)
            if "error" in result:
                unavailable[variant] = str(result["error"])
                return {}
            return {"seconds": statistics.median(result["times"]),
                    **{key: float(result[key]) for key in ("peak_bytes", "logprob_sum", "grad_norm", "threads")}}
        return run

    started = time.monotonic()
    reports = collected(benchmark, {side_name(case, variant): side(case, variant)
                                    for case in cases for variant in VARIANTS}, ROUNDS)
    minutes = (time.monotonic() - started) / 60
    loads.append(load_average())
    ran = {name: rows for name, rows in reports.items() if name.split()[1] not in unavailable}  # ran every round
    assert "naive" not in unavailable, unavailable["naive"]
    for case in cases:  # the same work: equal log-probs and gradients, round by round
        naive = ran[side_name(case, "naive")]
        for name in (side_name(case, variant) for variant in VARIANTS if side_name(case, variant) in ran):
            for got, want in zip(ran[name], naive, strict=True):
                for key in ("logprob_sum", "grad_norm"):
                    assert got[key] == pytest.approx(want[key], rel=1e-4), (name, key)
    threads = sorted({int(report["threads"]) for rows in ran.values() for report in rows})
    notes = [(f"- 1-minute load average at the rounds' starts and end: {', '.join(loads)}; the rounds took "
              f"{minutes:.1f} min.")]
    if width == 576 and WIDTHS == (576,):
        notes.append("- d=512 is not run by default (5 rounds of both widths would take about 40 min on this "
                     "machine, d=576 alone about 20); `LOGPROBS_WIDTHS=576,512` runs it.")
    body = report(cases, ran, unavailable, ", ".join(map(str, threads)))
    record(f"logprobs d={width}", body + "\n" + "\n".join(notes), reproduce(width))


def report(cases: list[Case], reports: Reports, unavailable: Mapping[str, str], threads: str) -> str:
    seconds, peaks = field(reports, "seconds"), field(reports, "peak_bytes")
    rows = []
    for case in cases:
        naive = side_name(case, "naive")
        for variant in VARIANTS:
            name = side_name(case, variant)
            if name not in reports:
                continue
            rows.append([case[0], case[1], case[2], f"`{variant}`", seconds.time(name).cell(),
                         seconds.ratio(name, naive).cell(2, "x"), peaks.time(name).scaled(1 / MB).cell(0),
                         peaks.ratio(name, naive).scaled(100).cell(1, "%"),
                         peaks.time(name).scaled(1 / floor_bytes(case)).cell(2, "x")])
    table = markdown_table(["d", "T", "V", "variant", "fwd+bwd s", "time / naive", "peak MB", "peak / naive",
                            "peak / floor"], rows)
    trl = version("trl")
    labels = [f"- `{variant}`: {LABELS[variant].format(trl=trl)}." for variant in VARIANTS
              if variant in LABELS and variant not in unavailable]
    notes = [*targets(cases, seconds, peaks),
             *(f"- `{variant}` did not run here: {error}" for variant, error in sorted(unavailable.items()))]
    where = describe(len(seconds), "command", f"{threads} (torch's default in each variant's process)")
    return (f"Frozen fp32 LM head, gradient for h; one fresh process per variant, case and round, a round running "
            f"every case's variants in turn. {where} Time: the first full-size forward+backward in that process "
            f"(start-up, imports, inputs and a warm-up on tiny inputs excluded). Peak: input bytes + growth of the "
            f"resident set's high-water mark during that forward+backward (see bench/logprobs_peak.py). Floor: h, W, "
            f"grad h, log-probs.\n\n" + "\n".join(labels) + f"\n\n{table}\n\n" + "\n".join(notes))


def targets(cases: list[Case], seconds: Rounds, peaks: Rounds) -> list[str]:
    """The issue's targets for ours at the largest case of each vocabulary, each read from the medians above."""
    if "ours" not in VARIANTS or side_name(cases[0], "ours") not in peaks.seconds:
        return []
    lines = []
    for vocab in sorted({case[2] for case in cases}):
        case = max((c for c in cases if c[2] == vocab), key=lambda c: c[1])
        ours, naive = side_name(case, "ours"), side_name(case, "naive")
        peak_share = peaks.ratio(ours, naive).median
        over_floor = peaks.time(ours).median / floor_bytes(case)
        time_share = seconds.ratio(ours, naive).median
        checks = [(f"peak {peak_share:.1%} of naive", peak_share <= 0.15),
                  (f"{over_floor:.2f}x the floor", over_floor <= 1.5),
                  (f"time {time_share:.2f}x naive", time_share <= 0.8)]
        lines.append(f"- Targets at T={case[1]}, V={vocab} ({TARGETS}; medians): "
                     + ", ".join(f"{text} ({'met' if ok else 'missed'})" for text, ok in checks))
    return lines
