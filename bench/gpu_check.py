"""The GPU paths of the trainer, checked and measured; each section's figures to bench/RESULTS.md ("gpu check, NAME").

    bench/gpu_check.sh                       # a fresh CUDA machine with a package index: installs, then runs this
    bench/gpu_carried.sh 1; ... 2            # this workplace's device image, in two carried loads (bench/gpu_pack.py)
    python bench/gpu_check.py                # a machine that has the `train`, `bench` and `gpu` extras
    python bench/gpu_check.py --dry-run      # the same plumbing on the CPU (tiny model, no vLLM): a smoke test

Sections, each timed, each reported even when another fails (exit 1 if any failed); a section this machine cannot
run (no vLLM installed) is reported as not run, and the sections that compare with vLLM run their other side alone:
1. kernel: the Triton log-prob kernel against the torch reference on CUDA, values and hidden-state gradients, at
   SmolLM2's shape (8192 tokens, H 576, V 49152) and a Qwen-sized vocabulary (4096 tokens, H 512, V 152064):
   largest differences, fwd+bwd time and peak memory of each.
2. vllm: rollouts of a capability environment through vLLM (token prompts, processed log-probs). Token-in/token-out:
   the trainer's recomputed log-prob of every sampled token against vLLM's. Adapter sync: the adapter is
   perturbed and synced; the new samples must agree with the new adapter (small gap) better than with the old one.
3. train: one training iteration of SmolLM2 on the GPU with each rollout backend installed (transformers' KV-cache
   sampler, vLLM), the time split of each.
4. routing: two perturbed SmolLM2 adapters served by peft (`PeftAdapters`) and, where installed, by vLLM with a
   `LoRARequest` per request (`VLLMAdapters`) on the same GPU: the routing scores over the label tokens (log-probs
   against logits: equal up to one constant), and greedy replies under each adapter (each must differ from the
   base's).
Left out: multi-GPU (DDP over nccl is the same code as gloo, tested on the CPU).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # last: a tracec laid out elsewhere (bench/gpu_carried.sh) wins

from bench.results import markdown_table, record

ENV = REPO / "examples" / "envs" / "tool_calling_precision.rubric"
RUBRIC = REPO / "examples" / "toolenv.rubric"


def kernel_section(device: str, dry_run: bool) -> dict[str, Any]:
    from tracec.trace_rl.policy.logprobs import token_logprobs

    cases = [(64, 32, 500)] if dry_run else [(8192, 576, 49152), (4096, 512, 152064)]
    rows = []
    for tokens, hidden_size, vocab in cases:
        generator = torch.Generator(device=device).manual_seed(0)
        hidden = torch.randn(tokens, hidden_size, device=device, generator=generator) * 0.5
        weight = torch.randn(vocab, hidden_size, device=device, generator=generator) * 0.05
        targets = torch.randint(0, vocab, (tokens,), device=device, generator=generator)
        results = {}
        for backend in ("torch", "triton"):
            h = hidden.clone().requires_grad_(True)
            _synchronize(device)
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            best = math.inf
            for _ in range(1 if dry_run else 5):
                h.grad = None
                start = time.perf_counter()
                logprobs = token_logprobs(h, weight, targets, temperature=0.9, backend=backend)
                assert isinstance(logprobs, torch.Tensor)
                logprobs.sum().backward()
                _synchronize(device)
                best = min(best, time.perf_counter() - start)
            peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan")
            assert isinstance(logprobs, torch.Tensor) and h.grad is not None
            results[backend] = (logprobs.detach(), h.grad.detach().clone(), best, peak)
        (lp_t, g_t, time_t, peak_t), (lp_x, g_x, time_x, peak_x) = results["torch"], results["triton"]
        value_gap, grad_gap = float((lp_t - lp_x).abs().max()), float((g_t - g_x).abs().max())
        rows.append([f"{tokens} x {hidden_size}, V {vocab}", f"{value_gap:.1e}", f"{grad_gap:.1e}",
                     f"{1e3 * time_t:.1f}", f"{1e3 * time_x:.1f}", f"{peak_t:.0f}", f"{peak_x:.0f}"])
        if value_gap > 1e-4 or grad_gap > 1e-4:
            raise AssertionError(f"triton differs from torch at {tokens}x{hidden_size}xV{vocab}: values by "
                                 f"{value_gap:.2e}, gradients by {grad_gap:.2e} (limit 1e-4)")
    table = markdown_table(["case", "max logp gap", "max grad-h gap", "torch ms", "triton ms", "torch peak MiB",
                            "triton peak MiB"], rows)
    return {"table": table}


def vllm_section(device: str, dry_run: bool) -> dict[str, Any]:
    from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
    from tracec.trace_rl.grpo.config import load_config
    from tracec.trace_rl.grpo.learner import PackedLogprobs
    from tracec.trace_rl.grpo.rollout_backend import make_sampler
    from tracec.trace_rl.policy.model import Policy
    from tracec.trace_rl.policy.packing import pack_sequences
    from tracec.trace_rl.rollouts.engine import GroupTask, RolloutEngine
    from tracec.trace_rl.rollouts.turns import TurnTemplate

    if dry_run or not _has_vllm():
        raise NotRun("vLLM needs a GPU" if dry_run else VLLM_ABSENT)
    config = load_config(None, ["model.device=cuda", "rollout.backend=vllm", "rollout.vllm_eager=true",
                                "rollout.max_new_tokens=48", "rollout.loss_tokens=turn", "env.max_turns=3"])
    policy = Policy.load(config.model.name, config.lora, device=device, seed=0)
    template = TurnTemplate(policy.tokenizer)
    program = load_environment(str(ENV))
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    started = time.perf_counter()
    sampler = make_sampler(config, policy, template, folder)
    startup = time.perf_counter() - started
    engine = RolloutEngine(sampler, template, lambda: CapabilityEnvironment(program), config.rollout,
                           max_turns=config.env.max_turns)
    tasks = [GroupTask(group=g, seed=100 + g) for g in range(4)]

    def gaps(episodes: list[Any]) -> tuple[float, float]:
        batch = pack_sequences([e.token_ids.tolist() for e in episodes], [e.sampled.tolist() for e in episodes],
                               max_tokens_per_row=4096)
        with torch.no_grad():
            trainer, _ = PackedLogprobs(policy.model, config.rollout.temperature)(batch, False)
        diffs = torch.cat([t.cpu() - torch.from_numpy(e.sampler_logprobs[e.sampled])
                           for t, e in zip(trainer, episodes)])
        return float(diffs.abs().mean()), float(diffs.abs().max())

    clock = time.perf_counter()
    episodes = engine.run(tasks, group_size=8, seed=0, iteration=0)
    elapsed = time.perf_counter() - clock
    before_mean, before_max = gaps(episodes)
    # Perturb the adapter (as an update would), sync, sample again: vLLM must now sample the new policy.
    old_state = policy.adapter_state()
    with torch.no_grad():
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.02)
    sampler.sync(policy)
    synced = engine.run(tasks, group_size=8, seed=0, iteration=1)
    new_mean, new_max = gaps(synced)
    new_state = policy.adapter_state()
    policy.load_adapter_state(old_state)
    stale_mean, _ = gaps(synced)  # the same samples scored by the adapter vLLM no longer has
    policy.load_adapter_state(new_state)
    tokens = sum(int(e.sampled.sum()) for e in episodes)
    rows = [["vLLM start (eager)", f"{startup:.1f} s"], ["episodes/s", f"{len(episodes) / elapsed:.2f}"],
            ["sampled tokens/s", f"{tokens / elapsed:.0f}"],
            ["token-in/token-out: mean / max |trainer - vLLM| log-prob", f"{before_mean:.2e} / {before_max:.2e}"],
            ["after sync: mean / max gap to the new adapter", f"{new_mean:.2e} / {new_max:.2e}"],
            ["after sync: mean gap to the old adapter", f"{stale_mean:.2e}"]]
    if not new_mean < stale_mean:
        raise AssertionError(f"after sync vLLM samples agree with the old adapter ({stale_mean:.3e}) no worse than "
                             f"with the new ({new_mean:.3e}): the adapter did not reach vLLM")
    if before_mean > 0.05:
        raise AssertionError(f"vLLM's log-probs differ from the trainer's by {before_mean:.3f} on average")
    return {"table": markdown_table(["vLLM rollouts (4 groups x 8, 3 turns, SmolLM2)", "value"], rows)}


def train_section(device: str, dry_run: bool) -> dict[str, Any]:
    from tracec.trace_rl.grpo.config import load_config
    from tracec.trace_rl.grpo.train import train

    backends = ["transformers"] + (["vllm"] if not dry_run and _has_vllm() else [])
    model = ["model.name=tiny", "model.threads=1"] if dry_run else []
    rows = []
    for backend in backends:
        overrides = [*model, f"model.device={device}", f"rollout.backend={backend}", "rollout.vllm_eager=true",
                     "iterations=1", "rollout.group_size=8", "rollout.groups_per_batch=4",
                     "rollout.max_new_tokens=48", "env.max_turns=3", "advantage.kind=trca",
                     f"advantage.rubric={RUBRIC}", f"env.capability.path={ENV}"]
        config = load_config(None, overrides)
        with tempfile.TemporaryDirectory() as out:
            (metrics,) = train(config, out=out).metrics
        rows.append([backend, f"{metrics['time_total']:.1f}", f"{metrics['time_rollout']:.1f}",
                     f"{metrics['time_score']:.2f}", f"{metrics['time_learn']:.1f}", f"{metrics['tokens_per_s']:.0f}",
                     metrics["optimizer_steps"]])
    table = markdown_table(["rollout backend", "iteration s", "rollout s", "score s", "learn s", "sampled tokens/s",
                            "optimizer steps"], rows)
    absent = "" if "vllm" in backends or dry_run else f"\n\nThe vLLM backend was not run: {VLLM_ABSENT}."
    return {"table": "One TRCA iteration on tool_calling_precision (4 groups x 8 episodes, 3 turns, 48 new tokens a "
                     "turn, SmolLM2 fp32):\n\n" + table + absent}


def routing_section(device: str, dry_run: bool) -> dict[str, Any]:
    from tracec.trace_rl.policy.lora import LoraSection
    from tracec.trace_rl.policy.model import TRAINED, Policy
    from tracec.trace_rl.targeting.peft_adapters import PeftAdapters
    from tracec.trace_rl.targeting.routing import Router, route_options

    if dry_run:
        raise NotRun("routing loads SmolLM2 on the GPU")
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-routing-"))
    adapters = {}
    for seed, adapter in ((1, "alpha"), (2, "beta")):
        policy = Policy.load("smollm2-135m-instruct", LoraSection(rank=8, alpha=16), device=device, seed=seed)
        with torch.no_grad():
            for key, parameter in policy.model.named_parameters():
                if "lora_B" in key and f".{TRAINED}." in key:
                    parameter.normal_(0, 0.05)
        adapters[adapter] = policy.save_adapter(folder / adapter)
        del policy
    options = route_options([("alpha", "books rooms with exact arguments", ""),
                             ("beta", "checks an order before changing it", "")], ["A", "B", "C"])
    task = "Hi, I'm Ana Lima. Please book room R12 for me for 3 nights, meal plan breakfast."
    messages = [{"role": "user", "content": task}]
    rows: list[list[object]] = []
    served: dict[str, Any] = {}
    if _has_vllm():
        from tracec.trace_rl.targeting.vllm_adapters import VLLMAdapters

        started = time.perf_counter()
        served["vllm"] = VLLMAdapters.load("smollm2-135m-instruct", adapters, max_new_tokens=32,
                                           gpu_memory_utilization=0.3, enforce_eager=True)
        rows.append(["vLLM start with 2 LoRA adapters (eager)", f"{time.perf_counter() - started:.1f} s"])
    started = time.perf_counter()
    served["peft"] = PeftAdapters.load("smollm2-135m-instruct", adapters, device=device, max_new_tokens=32)
    rows.append(["peft load with 2 LoRA adapters", f"{time.perf_counter() - started:.1f} s"])
    scores, replies = {}, {}
    for label, model in served.items():
        started = time.perf_counter()
        decision = Router(model, options).route(task)
        values = list(decision.logits.values())
        scores[label] = (decision.choice, [v - values[-1] for v in values])  # relative to `base`: the constant cancels
        rows.append([f"route with {label}: choice, seconds", f"{decision.choice}, {time.perf_counter() - started:.2f}"])
        for name in (None, "alpha", "beta"):
            with model.active(name):
                replies[(label, name)] = model.generate(messages)
        for name in ("alpha", "beta"):
            if replies[(label, name)] == replies[(label, None)]:
                raise AssertionError(f"{label}'s reply under adapter {name} equals the base's: the adapter did nothing")
        rows.append([f"greedy replies under alpha and beta differ from the base's ({label})", True])
    if "vllm" in served:
        gap = max(abs(a - b) for a, b in zip(scores["vllm"][1], scores["peft"][1]))
        rows.append(["route: max |difference| of label scores relative to base, vLLM against peft", f"{gap:.2e}"])
        for name in (None, "alpha", "beta"):
            rows.append([f"greedy reply under {name or 'base'}: vLLM equals peft",
                         replies[("vllm", name)] == replies[("peft", name)]])
        if gap > 0.05 or scores["vllm"][0] != scores["peft"][0]:
            raise AssertionError(f"vLLM routes otherwise than peft (label score gap {gap:.3f})")
    absent = "" if "vllm" in served else f"\n\nvLLM's LoRARequests were not compared: {VLLM_ABSENT}."
    return {"table": markdown_table(["routing (SmolLM2, 2 adapters)", "value"], rows) + absent}


class NotRun(Exception):
    """A section this machine cannot run: reported as not run, not as failed."""


VLLM_ABSENT = "vLLM is not installed here (the device image has none, and its wheels outweigh what a call carries)"


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


SECTIONS: dict[str, Callable[[str, bool], dict[str, Any]]] = {
    "kernel": kernel_section, "vllm": vllm_section, "train": train_section, "routing": routing_section}


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU plumbing check: tiny model, no vLLM, no record")
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append", help="run only these sections")
    args = parser.parse_args()
    device = "cpu" if args.dry_run else "cuda"
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device; run it on a GPU machine (or --dry-run here)", file=sys.stderr)
        return 1
    if args.dry_run:
        import os

        os.environ.setdefault("TRITON_INTERPRET", "1")
    machine = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (dry run)"
    versions: dict[str, str] = {"torch": torch.__version__}
    for package in ("vllm", "triton", "transformers", "peft"):
        try:
            versions[package] = __import__(package).__version__
        except ImportError:
            versions[package] = "absent"
    failures = 0
    for name in args.only or list(SECTIONS):
        started = time.perf_counter()
        try:
            result = SECTIONS[name](device, args.dry_run)
            status = f"ok ({time.perf_counter() - started:.0f} s)"
        except NotRun as reason:
            result, status = {"table": f"Not run: {reason}."}, "not run"
        except Exception as error:  # noqa: BLE001 - report every section, then fail the run
            failures += 1
            traceback.print_exc()
            result, status = {"table": f"`{type(error).__name__}: {error}`"}, "FAILED"
        print(f"gpu_check {name}: {status}", file=sys.stderr)
        body = f"{machine}; {json.dumps(versions)}; {status}\n\n{result['table']}"
        print(body)
        if not args.dry_run:  # a section each: the device's loads run them in different calls
            record(f"gpu check, {name}", body, f"python bench/gpu_check.py --only {name}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
