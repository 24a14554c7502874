"""Checkpoints: everything a run needs to continue exactly, published as one folder with one rename.

    run/checkpoints/iter_000010/
        adapter/                 adapter_model.safetensors + adapter_config.json (peft; vLLM and peft load it)
        trainer_state.pt         optimizer and scheduler states, the RNG states, iteration, data position
        config.toml              the run's config (`tracec train run/checkpoints/iter_000010/config.toml` works)

The folder is written under a temporary name beside its final one and renamed into place (`os.replace` of a
directory is atomic on POSIX), so a run killed at any instant leaves only whole checkpoints: `latest_checkpoint`
is simply the highest `iter_*`. The RNG states (Python, NumPy, torch CPU and CUDA) matter for whatever draws from
the global generators (LoRA dropout); rollouts draw from per-episode generators derived from the run's seed.
Left out: sharded optimizer states (the adapter is small) and asynchronous writing.
"""

from __future__ import annotations

import os
import random
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from tracec.trace_rl.grpo.config import TrainConfig, save_config
from tracec.trace_rl.grpo.run_folder import checkpoint_dir, checkpoints, damaged_checkpoint
from tracec.trace_rl.policy.model import Policy


@dataclass(frozen=True, kw_only=True)
class TrainerState:
    iteration: int  # iterations completed
    data_position: int  # the task stream's position
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: dict[str, Any]


def save_checkpoint(run_dir: Path, *, policy: Policy, state: TrainerState, config: TrainConfig,
                    keep: int = 0) -> Path:
    """Write the checkpoint of `state.iteration` and publish it atomically; keep the newest `keep` (0: all)."""
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"iter_{state.iteration:06d}"
    staging = root / f".{final.name}.{uuid.uuid4().hex}.tmp"
    try:
        staging.mkdir()
        policy.save_adapter(staging / "adapter")
        torch.save({"iteration": state.iteration, "data_position": state.data_position,
                    "optimizer": state.optimizer, "scheduler": state.scheduler, "rng": state.rng},
                   staging / "trainer_state.pt")
        save_config(config, staging / "config.toml")
        _fsync_tree(staging)
        if final.exists():  # a rerun of the same iteration (after a resume that replayed it)
            shutil.rmtree(final)
        os.replace(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if keep:
        for old in checkpoints(run_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(folder: Path, policy: Policy) -> TrainerState:
    """Load the adapter into `policy` and return the trainer state of the checkpoint in `folder`."""
    try:
        policy.load_adapter_state(load_file(str(folder / "adapter" / "adapter_model.safetensors")))
        raw = torch.load(folder / "trainer_state.pt", map_location="cpu", weights_only=False)
        return TrainerState(iteration=int(raw["iteration"]), data_position=int(raw["data_position"]),
                            optimizer=raw["optimizer"], scheduler=raw["scheduler"], rng=raw["rng"])
    except Exception as error:  # noqa: BLE001 - a file cut short or overwritten fails in its reader's own way
        raise damaged_checkpoint(folder, f"{type(error).__name__}: {error}") from None


def capture_rng() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(),
                             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_tree(folder: Path) -> None:
    """Flush the files' contents before the rename publishes them (a power cut must not publish empty files)."""
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
