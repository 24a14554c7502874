"""One GRPO iteration, single-turn, the same work on every side: ours against TRL's `GRPOTrainer`.

The work (`bench/grpo_step.py`): an iteration is 4 prompts x 8 completions (groups of 8) of up to 32 tokens,
SmolLM2-135M-Instruct + LoRA r16 on q, k, v, o, 4 optimizer steps of 8 completions, the same reward. Sides, each in a fresh process per
round (model loading and imports untimed; one warm-up iteration, then one timed):
- `ours`: `train()` with the 4 groups decoded as one batch of 32 by the KV-cache sampler (the adapter merged), the
  sampler's log-probs as the old ones, packed sequences, the LM head on completion tokens only;
- `TRL, generation batch 32`: `GRPOTrainer` told to generate all 32 completions at once (`generation_batch_size`),
  the closest TRL comes to the same decode batch (it then recomputes the old log-probs, the policy moving between
  its 4 steps);
- `TRL, generation batch 8`: what its defaults give (one group per generate call, one optimizer step each).
TRL 1.16 on the CPU: `use_cpu`, fp32, no gradient checkpointing (it only slows a model this small), `beta=0`.
Every side runs one torch thread (the machine's two cores are shared with other work).
Completion tokens/s = completion tokens of the iteration / its seconds; rounds interleave the sides; each figure is
a side's best round. Target: ours >= 1.5x TRL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench.results import markdown_table, record

ROUNDS = 2
SIDES = {"ours": ["ours"], "TRL, generation batch 32": ["trl", "--generation-batch", "32"],
         "TRL, generation batch 8": ["trl", "--generation-batch", "8"]}
SCRIPT = Path(__file__).with_name("grpo_step.py")


def _side(args: list[str], out: Path) -> dict[str, float]:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(SCRIPT), args[0], str(out), *args[1:]], env=env, capture_output=True,
                          text=True, check=False, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{args}: exit {done.returncode}\n{done.stderr[-3000:]}")
    (row,) = json.loads(out.read_text())
    return row


@pytest.mark.slow
def test_one_grpo_iteration_ours_vs_trl(benchmark: Any, tmp_path: Path) -> None:
    results: dict[str, list[dict[str, float]]] = {name: [] for name in SIDES}

    def one_round() -> None:
        for name, args in SIDES.items():
            results[name].append(_side(args, tmp_path / f"{name.replace(' ', '_').replace(',', '')}.json"))

    started = time.perf_counter()
    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    wall = time.perf_counter() - started
    best = {name: min(rows, key=lambda r: r["seconds"]) for name, rows in results.items()}
    ours = best["ours"]["tokens"] / best["ours"]["seconds"]
    rows = []
    for name, row in best.items():
        rate = row["tokens"] / row["seconds"]
        rest = row["seconds"] - row["generate"]
        rows.append([name, f"{row['seconds']:.1f}", int(row["tokens"]), f"{rate:.1f}", f"{row['generate']:.1f}",
                     f"{rest:.1f}", f"{ours / rate:.2f}x"])
    spread = {name: [f"{r['seconds']:.1f}" for r in rows_] for name, rows_ in results.items()}
    body = ("4 prompts x 8 completions of up to 32 tokens, SmolLM2-135M-Instruct + LoRA r16 (q, k, v, o), fp32 on "
            f"the CPU, 4 optimizer steps of 8 completions; best of {ROUNDS} interleaved rounds, each side in a fresh "
            f"process ({wall:.0f} s in all). 'generation' is ours' rollout (the engine) and TRL's time inside "
            "`generate`; 'the rest' is scoring and learning (ours: "
            f"{best['ours'].get('score', 0):.2f} s scoring, {best['ours'].get('learn', 0):.1f} s learning). "
            f"Seconds per round: {json.dumps(spread)}. Target: ours >= 1.5x TRL.\n\n"
            + markdown_table(["side", "iteration s", "completion tokens", "completion tokens/s", "generation s",
                              "the rest s", "ours vs this side"], rows))
    record("grpo iteration vs TRL", body, "pytest bench/test_grpo_bench.py --benchmark-only -p no:xdist")
