"""Data parallelism on torch's own engine: `torchrun` starts the ranks, `torch.distributed` and DDP do the rest.

    torchrun --nproc_per_node 2 -m tracec.cli train CONFIG.toml

`init_distributed` reads the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) and joins the
process group: gloo on CPU, nccl on CUDA (each rank on its LOCAL_RANK device). Without them it is one process and
every collective is the identity, so the trainer has one code path. The trainer splits each batch's groups across
ranks (group i on rank i mod world), gathers the few numbers every rank needs to agree on (which groups are
constant, how many loss tokens each sequence has), and lets DDP average the gradients; only rank 0 writes files.
Left out: model or tensor parallelism, FSDP, elastic restarts.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as torch_dist
from torch.nn.parallel import DistributedDataParallel


@dataclass(frozen=True)
class Distributed:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1

    def gather(self, value: Any) -> list[Any]:
        """Every rank's `value` (picklable), in rank order."""
        if not self.active:
            return [value]
        out: list[Any] = [None] * self.world
        torch_dist.all_gather_object(out, value)
        return out

    def barrier(self) -> None:
        if self.active:
            torch_dist.barrier()

    def wrap(self, module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """DDP around `module` when there are several ranks (gradients averaged in the backward), else `module`."""
        if not self.active:
            return module
        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(module, device_ids=ids)

    def owns(self, index: int) -> bool:
        return index % self.world == self.rank


def init_distributed(device: str) -> tuple[Distributed, str]:
    """Join the torchrun process group if there is one; returns it and the device this rank uses."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Distributed(), device
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(local_rank)
        backend = "nccl"
    else:
        backend = "gloo"
    if not torch_dist.is_initialized():
        torch_dist.init_process_group(backend=backend, rank=rank, world_size=world,
                                      timeout=datetime.timedelta(minutes=30))
    return Distributed(rank=rank, world=world, local_rank=local_rank), device


def shutdown(dist: Distributed) -> None:
    if dist.active and torch_dist.is_initialized():
        # Every rank's work finished first: destroying a gloo group with work in flight can deadlock (its destructor
        # joins the gloo loop holding the GIL the loop waits for), seen as one rank that never exits.
        torch_dist.barrier()
        torch_dist.destroy_process_group()
