"""Log-probs of packed action tokens, forward and backward: the naive full logits, TRL's two, Liger's, and ours.

For d = 576 (SmolLM2) and d = 512: T in {2048, 8192} tokens at V = 49152 and T in {2048, 4096} at V = 152064, a
frozen fp32 LM head (LoRA's case) and a gradient for the hidden states. Each variant of each case runs in a fresh
process (`bench/logprobs_peak.py`, whose docstring says how peak memory is read); rounds interleave the variants
case by case, and each figure is the best time over the rounds with the spread (min-max) beside it. Every variant's
log-probs and gradient are checked against the naive ones. The floor is what any implementation must hold: h, W,
the gradient of h and the log-probs. Writes bench/RESULTS.md, sections "logprobs d=576" and "logprobs d=512".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from typing import Any

import pytest

from bench.results import markdown_table, record

COMMAND = "pytest bench/test_logprobs_bench.py --benchmark-only -p no:xdist"
WIDTHS = (576, 512)
CASES = ((2048, 49152), (8192, 49152), (2048, 152064), (4096, 152064))  # (tokens, vocabulary)
VARIANTS = ("naive", "trl_selective", "trl_chunked", "liger", "ours")
ROUNDS = 2
MB = 2**20

Case = tuple[int, int, int]  # (width, tokens, vocabulary)


def run_variant(variant: str, case: Case) -> dict[str, Any]:
    width, tokens, vocab = case
    command = [sys.executable, "-m", "bench.logprobs_peak", variant, "--tokens", str(tokens), "--vocab", str(vocab),
               "--width", str(width)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=1800)
    return json.loads(done.stdout.strip().splitlines()[-1])


def floor_bytes(case: Case) -> int:
    width, tokens, vocab = case
    return 4 * (tokens * width + vocab * width + tokens * width + tokens)  # h, W, grad h, log-probs (fp32)


@pytest.mark.parametrize("width", WIDTHS)
def test_logprobs(benchmark: Any, width: int) -> None:
    cases = [(width, tokens, vocab) for tokens, vocab in CASES]
    runs: dict[tuple[Case, str], list[dict[str, Any]]] = defaultdict(list)
    unavailable: dict[str, str] = {}
    loads: list[float] = []  # the machine is shared: its load beside the figures

    def one_round() -> None:
        loads.append(os.getloadavg()[0])
        for case in cases:
            for variant in VARIANTS:
                if variant in unavailable:
                    continue
                result = run_variant(variant, case)
                if "error" in result:
                    unavailable[variant] = str(result["error"])
                else:
                    runs[case, variant].append(result)

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    for (case, variant), results in runs.items():
        naive = runs[case, "naive"][0]
        for result in results:  # the same work: equal log-probs and gradients
            for key in ("logprob_sum", "grad_norm"):
                assert result[key] == pytest.approx(naive[key], rel=1e-4), (case, variant, key)
    loads.append(os.getloadavg()[0])
    load = f"1-minute load average at the rounds' starts and end: {', '.join(f'{x:.1f}' for x in loads)}"
    record(f"logprobs d={width}", f"{report(cases, runs, unavailable)}\n- {load}", f"{COMMAND} -k {width}")


def report(cases: list[Case], runs: dict[tuple[Case, str], list[dict[str, Any]]],
           unavailable: dict[str, str]) -> str:
    rows = []
    for case in cases:
        naive_time = min(min(r["times"]) for r in runs[case, "naive"])
        naive_peak = max(r["peak_bytes"] for r in runs[case, "naive"])
        for variant in VARIANTS:
            if not runs.get((case, variant)):
                continue
            times = [t for r in runs[case, variant] for t in r["times"]]
            peaks = [r["peak_bytes"] for r in runs[case, variant]]
            best, peak = min(times), max(peaks)
            rows.append([case[0], case[1], case[2], variant, f"{best:.2f} ({min(times):.2f}-{max(times):.2f})",
                         f"{best / naive_time:.2f}", f"{peak / MB:.0f} ({min(peaks) / MB:.0f}-{peak / MB:.0f})",
                         f"{peak / naive_peak:.1%}", f"{peak / floor_bytes(case):.2f}"])
    table = markdown_table(["d", "T", "V", "variant", "fwd+bwd s, best (spread)", "time / naive",
                            "peak MB (spread)", "peak / naive", "peak / floor"], rows)
    notes = "\n".join([*targets(cases, runs),
                       *(f"- `{variant}` did not run here: {error}" for variant, error in sorted(unavailable.items()))])
    return (f"Frozen fp32 LM head, gradient for h; {ROUNDS} interleaved rounds, one fresh process per variant, case "
            f"and round. Peak: input bytes + growth of the resident set's high-water mark during the first "
            f"forward+backward (see bench/logprobs_peak.py). Floor: h, W, grad h, log-probs.\n\n{table}\n\n{notes}")


def targets(cases: list[Case], runs: dict[tuple[Case, str], list[dict[str, Any]]]) -> list[str]:
    """The issue's targets for ours at the largest case of each vocabulary, each read from the figures above."""
    lines = []
    for vocab in sorted({case[2] for case in cases}):
        case = max((c for c in cases if c[2] == vocab), key=lambda c: c[1])
        ours, naive = runs[case, "ours"], runs[case, "naive"]
        peak, naive_peak = max(r["peak_bytes"] for r in ours), max(r["peak_bytes"] for r in naive)
        time = min(min(r["times"]) for r in ours) / min(min(r["times"]) for r in naive)
        checks = [(f"peak {peak / naive_peak:.1%} of naive", peak <= 0.15 * naive_peak),
                  (f"{peak / floor_bytes(case):.2f}x the floor", peak <= 1.5 * floor_bytes(case)),
                  (f"time {time:.2f}x naive", time <= 0.8)]
        lines.append(f"- Targets at T={case[1]}, V={vocab} (peak <= 15% of naive, <= 1.5x floor, time <= 0.8x): "
                     + ", ".join(f"{text} ({'met' if ok else 'missed'})" for text, ok in checks))
    return lines
