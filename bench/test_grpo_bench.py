"""One GRPO iteration, single-turn, the same work on every side: ours against TRL's `GRPOTrainer`.

The work (`bench/grpo_step.py`): an iteration is 4 prompts x 8 completions (groups of 8) of up to 32 tokens,
SmolLM2-135M-Instruct + LoRA r16 on q, k, v, o, 4 optimizer steps of 8 completions, the same reward. Sides, each in
a fresh process per round (model loading and imports untimed; one warm-up iteration, then one timed):
- `ours`: `train()` with the 4 groups decoded as one batch of 32 by the KV-cache sampler (the adapter merged), the
  sampler's log-probs as the old ones, packed sequences, the LM head on completion tokens only;
- `TRL, generation batch 8`: what its defaults give (one group per generate call, one optimizer step each): the
  headline's side;
- `TRL, generation batch 32`: `GRPOTrainer` told to generate all 32 completions at once (`generation_batch_size`),
  the closest TRL comes to ours' decode batch; a generation batch larger than the per-device batch makes TRL run
  one more forward, without gradients, over all 32 sequences for the old log-probs (the policy moves between its
  4 steps), so this side does more work than the others (its 'old log-probs' column).
TRL 1.16 on the CPU: `use_cpu`, fp32, no gradient checkpointing (it only slows a model this small), `beta=0`.
Every side runs one torch thread (the machine's two cores are shared with other work).

Measuring (`bench/sides.py`): ROUNDS interleaved rounds; the headline is the median over rounds of the per-round
ratio TRL's seconds / ours' (each round's sides ran minutes apart, so drift lands on both), with its range; a
side's figure is the median of its rounds. Each side splits its iteration into phases and ours also measures floors
for its own sequences (`grpo_step.py` says how). Target: TRL (generation batch 8) / ours >= 1.5x.
GRPO_BENCH_ROUNDS overrides ROUNDS for a smoke run only: a table from fewer rounds is no result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from bench.results import markdown_table, record
from bench.sides import ROUNDS as SIDES_ROUNDS
from bench.sides import collected, derived, describe, field, load_average

ROUNDS = int(os.environ.get("GRPO_BENCH_ROUNDS", SIDES_ROUNDS))
OURS, TRL8, TRL32 = "ours", "TRL, generation batch 8", "TRL, generation batch 32 (+ old-log-prob forward)"
SIDES = {OURS: ["ours"], TRL8: ["trl", "--generation-batch", "8"], TRL32: ["trl", "--generation-batch", "32"]}
SCRIPT = Path(__file__).with_name("grpo_step.py")
PHASES = {"generation": "generation", "scoring": "scoring", "old_logprobs": "old log-probs", "forward": "forward",
          "backward": "backward", "optimizer": "optimizer step", "other": "other"}
TARGET = 1.5


def _side(args: list[str], out: Path) -> dict[str, float]:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(SCRIPT), args[0], str(out), *args[1:]], env=env, capture_output=True,
                          text=True, check=False, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{args}: exit {done.returncode}\n{done.stderr[-3000:]}")
    (row,) = json.loads(out.read_text())
    return dict(row)


def tables(reports: Mapping[str, Sequence[Mapping[str, float]]], wall: float, loads: tuple[str, str]) -> str:
    """The section's text: the headline, the iteration table, the phases, and ours against its floors."""
    rounds = len(reports[OURS])
    how = describe(rounds, "in-process", "1 torch thread each side")
    seconds = field(reports, "seconds")
    per_token = derived(reports, lambda r: r["seconds"] / r["tokens"])
    rate = derived(reports, lambda r: r["tokens"] / r["seconds"])
    headline = seconds.ratio(TRL8, OURS)
    met = sum(ratio >= TARGET for ratio in seconds.ratios(TRL8, OURS))
    rows = [[name, seconds.time(name).cell(1), field(reports, "cpu").time(name).cell(1),
             field(reports, "tokens").time(name).cell(0), rate.time(name).cell(1),
             "1" if name == OURS else seconds.ratio(name, OURS).cell(2, "x"),
             "1" if name == OURS else per_token.ratio(name, OURS).cell(2, "x")] for name in SIDES]
    phase_rows = [[name, seconds.time(name).cell(1), *(field(reports, key).time(name).cell(2) for key in PHASES)]
                  for name in SIDES]
    ours = {OURS: reports[OURS]}

    def versus(phase: str, work: Any, floor: str, bound: Any) -> list[str]:
        """A row: ours' `work` (of a report) against `bound`, the ratio paired within each round."""
        mine, least = derived(ours, work).time(OURS), derived(ours, bound).time(OURS)
        ratio = derived(ours, lambda r: work(r) / bound(r)).time(OURS)
        return [phase, mine.cell(2), floor, least.cell(2), ratio.cell(2, "x")]

    def fwd_bwd(r: Mapping[str, float]) -> float:
        return r["forward"] + r["backward"]

    prefill, decode = (field(ours, key).time(OURS).cell(2) for key in ("floor_prefill", "floor_decode"))
    floor_rows = [
        versus("generation (rollout)", lambda r: r["generation"],
               f"prefill of the 32 prompts ({prefill}) + decode steps for the longest completion at batch 32 "
               f"({decode}), KV cache", lambda r: r["floor_prefill"] + r["floor_decode"]),
        versus("forward + backward (4 mini-batches of 8)", fwd_bwd,
               "one forward + backward of all 32, padded, transformers' loss", lambda r: r["floor_fwd_bwd_padded"]),
        versus("forward + backward (4 mini-batches of 8)", fwd_bwd,
               "one forward + backward of all 32, packed (`sequence_logprobs`)", lambda r: r["floor_fwd_bwd_packed"]),
        versus("learning phase (forward, backward, 4 optimizer steps, the rest)", lambda r: r["learn"],
               "one forward + backward of all 32, padded", lambda r: r["floor_fwd_bwd_padded"]),
    ]
    return (
        f"**TRL (generation batch 8) / ours: {headline.cell(2, 'x')}** seconds per iteration, the median of "
        f"{rounds} per-round paired ratios (range in brackets); target >= {TARGET}x, met in {met} of {rounds} "
        "rounds. TRL with generation batch 32 (which adds a forward without gradients over all 32 sequences for "
        f"the old log-probs) / ours: {seconds.ratio(TRL32, OURS).cell(2, 'x')}.\n\n"
        "4 prompts x 8 completions of up to 32 tokens, SmolLM2-135M-Instruct + LoRA r16 (q, k, v, o), fp32 on the "
        f"CPU, 4 optimizer steps of 8 completions. {how} Each side runs in a fresh process per round (imports and "
        f"model loading untimed, one warm-up iteration, then one timed); {wall:.0f} s in all; load average "
        f"{loads[0]} at the start, {loads[1]} at the end. CPU s: the process's CPU seconds in the iteration "
        "(wall seconds well above them mean other work had the cores). 's per completion token' divides each "
        "side's seconds by its completion tokens (the samples differ in length) before pairing.\n\n"
        + markdown_table(["side", "iteration s", "CPU s", "completion tokens", "completion tokens/s",
                          "this side / ours, s", "this side / ours, s per completion token"], rows)
        + "\n\nWhere an iteration's seconds go (ours: the trainer's own metrics; TRL: the time inside `generate`, "
        "`_calculate_rewards`, the per-token log-probs called without gradients (the old log-probs), "
        "`compute_loss` (forward and loss), `accelerator.backward`, and gradient clipping + `optimizer.step`; "
        "'other': what the phases leave of the iteration, such as tokenizing, the rollout engine's bookkeeping, "
        f"merging the adapter for decoding, and TRL's batching inside a step). {how}\n\n"
        + markdown_table(["side", "iteration s", *PHASES.values()], phase_rows)
        + "\n\nOurs against floors for the same work, measured in ours' process right after its timed iteration "
        "on that iteration's own 32 sequences, same model and LoRA, 1 torch thread, one run each a round. The "
        "decode floor is a plain `model(...)` loop with the adapter merged (as ours' sampler decodes) and every "
        "row decoding to the end; 'padded' is right-padded to the longest sequence with `labels` on the completion "
        "tokens (logits over every position), a user's way; 'packed' is ours' kernel in one call instead of four. "
        f"{how}\n\n"
        + markdown_table(["ours' phase", "ours s", "floor", "floor s", "ours / floor"], floor_rows))


@pytest.mark.slow
def test_one_grpo_iteration_ours_vs_trl(benchmark: Any, tmp_path: Path) -> None:
    def run(name: str) -> Any:
        return lambda: _side(SIDES[name], tmp_path / f"{name.split(' (')[0].replace(' ', '_').replace(',', '')}.json")

    started, first = time.perf_counter(), load_average()
    reports = collected(benchmark, {name: run(name) for name in SIDES}, rounds=ROUNDS)
    body = tables(reports, time.perf_counter() - started, (first, load_average()))
    record("grpo iteration vs TRL", body, "pytest bench/test_grpo_bench.py --benchmark-only -p no:xdist")
