"""Rollouts and training iterations on the CPU: vLLM's CPU engine (`VLLMSampler`) against the trainer's KV-cache
sampler, on the same multi-turn episodes' work, SmolLM2-135M-Instruct in fp32.

    make vllm-venv
    VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv-vllm/bin/python bench/vllm_rollouts.py [--rounds 5] [--record]

It runs in the vLLM venv (`.venv-vllm`: vLLM's pins differ from the project venv's), both sides in one process.
Each round runs both sides on the same tasks: G groups of K episodes of `examples/envs/tool_calling_precision.rubric`
(text call format), up to TURNS turns of up to NEW_TOKENS sampled tokens, temperature 1; the KV-cache sampler with the
adapter merged, as the trainer samples; vLLM with the adapter as a LoRARequest, as the trainer syncs it. The two
samplers draw different tokens, so the episodes differ in length: each side's figure is sampled tokens per second of
its round (prompt and observation prefill included, as a rollout pays them), and the headline is the median of the
per-round ratios. Engine loading is untimed (vLLM's ~11 s, once a run). vLLM may lower torch's thread count when it
loads ("for serving"), so the count is read after it has, and both sides run at the count the report prints.

Then the time of a training iteration, as a user pays it: `tracec train examples/train/tool_calling_trca.toml` (TRCA)
with each `rollout.backend`, a fresh process each (command), ITERATIONS iterations at the rollout part's sizes; each
run's figure is its last iteration's `time_total` from metrics.jsonl (the first pays the warm-up; vLLM's engine start
is before it), split into its phases (rollout, old log-probs, which vLLM's sampler makes the trainer recompute, and
the update with the adapter's sync). The backends alternate within each of ITERATION_ROUNDS rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.policy.catalog import SMOLLM2
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.rollouts.engine import GroupTask, RolloutEngine
from tracec.trace_rl.rollouts.kv_sampler import KVCacheSampler
from tracec.trace_rl.rollouts.sampler import TurnSampler
from tracec.trace_rl.rollouts.section import RolloutSection
from tracec.trace_rl.rollouts.turns import TurnTemplate
from tracec.trace_rl.rollouts.vllm_sampler import VLLMSampler

from bench.results import markdown_table, record
from bench.sides import ROUNDS, Rounds, Spread, describe

REPO = Path(__file__).resolve().parents[1]
ENVIRONMENT = REPO / "examples" / "envs" / "tool_calling_precision.rubric"
GROUPS, K, TURNS, NEW_TOKENS = 2, 4, 3, 32
KV, VLLM = "KV-cache sampler (transformers)", "vLLM CPU engine"
ITERATIONS, ITERATION_ROUNDS = 2, 3
PHASES = ("time_rollout", "time_score", "time_old_logprobs", "time_learn", "time_total")
COMMAND = "VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv-vllm/bin/python bench/vllm_rollouts.py --record"
TRAIN_CONFIG = "examples/train/tool_calling_trca.toml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--record", action="store_true", help="write bench/RESULTS.md's section")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    lora = LoraSection(rank=16, alpha=16)
    policy = Policy.load(SMOLLM2, lora, seed=0)
    template = TurnTemplate(policy.tokenizer)
    pad = policy.tokenizer.pad_token_id
    kv = KVCacheSampler(policy.model, temperature=1.0, end_of_turn_ids=template.end_of_turn_ids,
                        pad_id=int(pad if pad is not None else 0))
    with tempfile.TemporaryDirectory() as adapters:
        vllm = VLLMSampler.create(policy, template, Path(adapters), model=SMOLLM2, lora_rank=lora.rank,
                                  dtype="float32", seed=0, temperature=1.0, max_context_tokens=2048, gpu_memory=0.15,
                                  eager=True)
        threads = torch.get_num_threads()
        rates: dict[str, list[float]] = {KV: [], VLLM: []}
        tokens: dict[str, list[int]] = {KV: [], VLLM: []}
        for round_ in range(args.rounds + 1):  # the first round warms both sides and is not counted
            for side, sampler in ((KV, kv), (VLLM, vllm)):
                seconds, sampled = _rollouts(policy, template, sampler, merged=side == KV, seed=round_)
                if round_:
                    rates[side].append(sampled / seconds)
                    tokens[side].append(sampled)
    report = _report(Rounds({side: [1 / rate for rate in values] for side, values in rates.items()}), rates, tokens,
                     threads, args.rounds)
    report += "\n\n" + _iteration_report(_iterations(ITERATION_ROUNDS))
    print(report)
    if args.record:
        record("vllm cpu rollouts", report, COMMAND)


def _rollouts(policy: Policy, template: TurnTemplate, sampler: TurnSampler, *, merged: bool,
              seed: int) -> tuple[float, int]:
    """Seconds and sampled tokens of one batch of G x K episodes."""
    rollout = RolloutSection(max_new_tokens=NEW_TOKENS, max_context_tokens=2048)
    engine = RolloutEngine(sampler, template, lambda: CapabilityEnvironment(load_environment(str(ENVIRONMENT)),
                                                                            call_format="text"),
                           rollout, max_turns=TURNS)
    tasks = [GroupTask(group=g, seed=100 * seed + g) for g in range(GROUPS)]
    policy.model.eval()
    start = time.perf_counter()
    with torch.no_grad(), policy.merged() if merged else contextlib.nullcontext():
        episodes = engine.run(tasks, group_size=K, seed=seed, iteration=0)
    seconds = time.perf_counter() - start
    return seconds, sum(int(e.sampled.sum()) for e in episodes)


def _report(rounds: Rounds, rates: dict[str, list[float]], tokens: dict[str, list[int]], threads: int,
            count: int) -> str:
    speedup = rounds.ratio(KV, VLLM)  # seconds per token of KV over vLLM's: > 1 when vLLM is faster
    rows = [[side, f"{statistics.median(rates[side]):.1f} ({min(rates[side]):.1f}-{max(rates[side]):.1f})",
             f"{statistics.median(tokens[side]):.0f}"] for side in (KV, VLLM)]
    return "\n".join([
        (f"{GROUPS} groups x {K} episodes of tool_calling_precision (text calls), up to {TURNS} turns of up to "
         f"{NEW_TOKENS} tokens, temperature 1, SmolLM2-135M-Instruct fp32 + LoRA r16, one process. "
         + describe(count, "in-process", f"torch {threads}, read after vLLM loaded; both sides run at it")),
        "",
        markdown_table(["sampler", "sampled tokens / s", "sampled tokens a round (median)"], rows),
        "",
        (f"vLLM's CPU engine against the KV-cache sampler, tokens per second: **{speedup.cell(2, 'x')}** (> 1: vLLM "
         "faster)."),
    ])


def _iterations(rounds: int) -> dict[str, dict[str, list[float]]]:
    """Each backend's phase seconds ({backend: {phase: [a figure a round]}}) of a training iteration."""
    settings = [f"iterations={ITERATIONS}", "rollout.vllm_gpu_memory=0.15", "rollout.vllm_eager=true",
                f"rollout.group_size={K}", f"rollout.groups_per_batch={GROUPS}", f"rollout.max_new_tokens={NEW_TOKENS}",
                f"env.max_turns={TURNS}", "run.checkpoint_every=1000"]
    figures: dict[str, dict[str, list[float]]] = {side: {phase: [] for phase in PHASES} for side in (KV, VLLM)}
    for round_ in range(rounds):
        for side, backend in ((KV, "transformers"), (VLLM, "vllm")):
            with tempfile.TemporaryDirectory() as out:
                overrides = [*settings, f"rollout.backend={backend}", f"run.seed={round_}"]
                command = [sys.executable, "-m", "tracec.cli", "train", str(REPO / TRAIN_CONFIG), "--out", out,
                           "--quiet", *(item for o in overrides for item in ("--set", o))]
                subprocess.run(command, check=True, capture_output=True)
                last = json.loads((Path(out) / "metrics.jsonl").read_text().splitlines()[-1])
            for phase in PHASES:
                figures[side][phase].append(float(last.get(phase, 0.0)))
    return figures


def _iteration_report(figures: dict[str, dict[str, list[float]]]) -> str:
    rounds = Rounds({side: figures[side]["time_total"] for side in figures})
    rows = [[side, *(Spread.of(figures[side][phase]).cell(1, " s") for phase in PHASES)] for side in figures]
    return "\n".join([
        (f"A training iteration, `tracec train {TRAIN_CONFIG}` (TRCA) at the sizes above, {ITERATIONS} iterations a "
         f"run, the last one's figures: {describe(len(rounds), 'command', 'torch 2 (the trainer sets none)')}"),
        "",
        markdown_table(["rollout backend", "rollout", "scoring", "old log-probs", "update (and sync)", "iteration"],
                       rows),
        "",
        ("vLLM's CPU engine against the KV-cache sampler, seconds an iteration: "
         f"**{rounds.ratio(VLLM, KV).cell(2, 'x')}** (> 1: vLLM slower). `rollout.backend = \"auto\"` picks the "
         "KV-cache sampler on a CPU by these two measurements."),
    ])


if __name__ == "__main__":
    main()
