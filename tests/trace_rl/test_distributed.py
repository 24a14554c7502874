"""The process group's teardown (`process_group`): whatever holds the group is gone before the barrier and the
destroy, on the way out of a block that returns or raises. The two-rank runs are in test_learner.py and
test_train.py; here a one-rank gloo group stands in for torchrun's, and DDP and the teardown take the same paths."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as torch_dist
from torch.nn.parallel import DistributedDataParallel
from tracec.trace_rl.grpo.distributed import Distributed, process_group


@pytest.fixture
def events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What the teardown called, in order, each with whether a DDP wrapper was still alive at the time."""
    monkeypatch.setenv("WORLD_SIZE", "2")  # torchrun's variables: `process_group` wraps in DDP and tears down
    monkeypatch.setenv("RANK", "0")
    torch_dist.init_process_group("gloo", store=torch_dist.FileStore(str(tmp_path / "store"), 1), rank=0,
                                  world_size=1)
    seen: list[str] = []
    for name in ("barrier", "destroy_process_group"):
        monkeypatch.setattr(torch_dist, name, _recorded(name, getattr(torch_dist, name), seen))
    gc.disable()  # cycles go only when the teardown collects them
    try:
        yield seen
    finally:
        gc.enable()
        if torch_dist.is_initialized():
            torch_dist.destroy_process_group()


def _recorded(name: str, call: Callable[[], None], seen: list[str]) -> Callable[[], None]:
    def recorded() -> None:
        alive = any(type(o) is DistributedDataParallel for o in gc.get_objects())
        seen.append(f"{name}, wrapper {'alive' if alive else 'gone'}")
        call()
    return recorded


def _trained_wrapper(dist: Distributed) -> torch.nn.Module:
    """A DDP wrapper whose reducer has all-reduced a gradient, as the Learner's has by the end of a run."""
    wrapper = dist.wrap(torch.nn.Linear(4, 2), torch.device("cpu"))
    wrapper(torch.ones(3, 4)).sum().backward()
    return wrapper


def test_a_wrapper_in_a_reference_cycle_is_gone_before_the_barrier_and_the_destroy(events: list[str]) -> None:
    with process_group("cpu") as (dist, device):
        assert dist.active and device == "cpu"
        holder: dict[str, Any] = {"wrapper": _trained_wrapper(dist)}
        holder["self"] = holder
        del holder
    assert events == ["barrier, wrapper gone", "destroy_process_group, wrapper gone"]
    assert not torch_dist.is_initialized()


def test_a_failing_block_lets_go_of_its_frames_wrappers_and_skips_the_barrier(events: list[str]) -> None:
    def update(dist: Distributed) -> None:
        wrapper = _trained_wrapper(dist)  # noqa: F841  (a local of the failing frame, as a Learner's update holds)
        raise FloatingPointError("loss is nan")

    def iterate(dist: Distributed) -> None:  # the trainer's way: the first error replaced, `from None`
        try:
            update(dist)
        except FloatingPointError:
            raise ValueError("the run diverged") from None

    with pytest.raises(ValueError, match="the run diverged"), process_group("cpu") as (dist, _):
        iterate(dist)
    assert events == ["destroy_process_group, wrapper gone"]  # another rank may wait in a collective: no barrier
    assert not torch_dist.is_initialized()


def test_a_wrapper_kept_past_the_block_is_an_error_and_the_group_stays(events: list[str]) -> None:
    outlives = "a DistributedDataParallel wrapper outlives its process group"
    with pytest.raises(RuntimeError, match=outlives), process_group("cpu") as (dist, _):
        kept = _trained_wrapper(dist)
    assert events == [] and torch_dist.is_initialized()  # destroying it now would leave the group to the wrapper
    del kept


def test_one_process_has_no_group_to_join_or_leave(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with process_group("cpu") as (dist, device):
        module = torch.nn.Linear(2, 2)
        assert not dist.active and device == "cpu" and dist.wrap(module, torch.device("cpu")) is module
    assert not torch_dist.is_initialized()
