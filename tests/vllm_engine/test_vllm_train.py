"""`tracec train` through vLLM's CPU engine end to end (`rollout.backend = "vllm"`), in a process of its own, as a
user runs it: one iteration of TRCA on a capability environment with SmolLM2 (see test_vllm_cpu.py for the venv)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[2]
CPU_MEMORY = 0.15  # rollout.vllm_gpu_memory: on the CPU, the share of RAM vLLM reserves, less what the process holds


def test_tracec_train_runs_an_iteration_through_vllm(tmp_path: Path) -> None:
    out = tmp_path / "run"
    settings = ["iterations=1", "rollout.backend=vllm", f"rollout.vllm_gpu_memory={CPU_MEMORY}",
                "rollout.vllm_eager=true", "rollout.group_size=2", "rollout.groups_per_batch=1",
                "rollout.max_new_tokens=24", "env.max_turns=2", "lora.rank=8", "lora.alpha=16"]
    command = [sys.executable, "-m", "tracec.cli", "train", str(REPO / "examples/train/tool_calling_trca.toml"),
               "--out", str(out), "--quiet", *(item for s in settings for item in ("--set", s))]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False,
                          env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["time_old_logprobs"] > 0  # the sampler said its log-probs are not the trainer's: recomputed
    assert record["optimizer_steps"] >= 1 and record["grad_norm"] > 0  # TRCA's dense credit: an update was taken
    adapter = load_file(str(out / "checkpoints" / "iter_000001" / "adapter" / "adapter_model.safetensors"))
    assert any(float(value.abs().max()) > 0 for name, value in adapter.items() if "lora_B" in name)  # it moved
