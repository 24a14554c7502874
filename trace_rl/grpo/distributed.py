"""Data parallelism on torch's own engine: `torchrun` starts the ranks, `torch.distributed` and DDP do the rest.

    torchrun --nproc_per_node 2 -m tracec.cli train CONFIG.toml

`init_distributed` reads the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) and joins the
process group: gloo on CPU, nccl on CUDA (each rank on its LOCAL_RANK device). Without them it is one process and
every collective is the identity, so the trainer has one code path. The trainer splits each batch's groups across
ranks (group i on rank i mod world), gathers the few numbers every rank needs to agree on (which groups are
constant, how many loss tokens each sequence has), and lets DDP average the gradients; only rank 0 writes files.

`process_group` owns the group's lifetime, and so the order it ends in: first whatever holds the group (the DDP
wrappers `Distributed.wrap` made, which the block must have let go of; reference cycles are collected), then a
barrier (every rank's collectives done), then `destroy_process_group`, which drops the group's last reference. A
group whose last holder is a DDP wrapper ends with it, later, in a destructor that joins the backend's threads while
holding the GIL; a gloo thread that still has to drop a finished collective's tensors needs the GIL, and the rank
never exits. torch releases the GIL around that destructor only when `destroy_process_group` runs it.
Left out: model or tensor parallelism, FSDP, elastic restarts.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
import traceback
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as torch_dist
from torch.nn.parallel import DistributedDataParallel


@dataclass(frozen=True)
class Distributed:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    # The DDP wrappers `wrap` made: each holds the process group, so none may outlive it (`process_group`).
    wrappers: list[weakref.ref[DistributedDataParallel]] = field(default_factory=list, init=False, repr=False,
                                                                 compare=False)

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
        wrapper = DistributedDataParallel(module, device_ids=ids)
        self.wrappers.append(weakref.ref(wrapper))
        return wrapper

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


@contextlib.contextmanager
def process_group(device: str) -> Iterator[tuple[Distributed, str]]:
    """`init_distributed` for the block, which must let go of every DDP wrapper it made before it ends; on the way
    out the group ends in the order the module docstring gives. A block that raises skips the barrier (the other
    ranks may be waiting in another collective) and drops the locals of the frames it unwound, which hold them."""
    dist, device = init_distributed(device)
    try:
        yield dist, device
    except BaseException as error:
        _clear_frames(error)
        _leave(dist, failed=True)
        raise
    _leave(dist, failed=False)


def _leave(dist: Distributed, *, failed: bool) -> None:
    if not dist.active or not torch_dist.is_initialized():
        return
    gc.collect()  # a wrapper held only by a reference cycle goes now, not at interpreter exit
    if any(wrapper() is not None for wrapper in dist.wrappers):
        if failed:  # the error says what went wrong; the group is left to the process's exit
            return
        raise RuntimeError("a DistributedDataParallel wrapper outlives its process group: drop what holds it (a "
                           "Learner) inside the `process_group` block, or the rank can hang at exit")
    if not failed:
        torch_dist.barrier()
    torch_dist.destroy_process_group()


def _clear_frames(error: BaseException) -> None:
    """Drop the locals of the frames `error` and the errors it chains unwound (their tracebacks still print)."""
    pending: list[BaseException | None] = [error]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        pending += [current.__cause__, current.__context__]
