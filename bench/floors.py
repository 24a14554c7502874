"""Memory floors: the least any implementation must do to memory, timed like the sides it bounds.

A kernel that computes per-step outputs from input columns must read every input byte at least once and write every
output byte at least once; `read_write_floor` does exactly that and nothing more (no copy of the inputs, no
arithmetic beyond what reading takes), so no implementation can beat it on the same machine: the time of a side over
this floor's is how far the side is from what memory allows. The reading is a bitwise-OR reduction over the inputs
viewed as 64-bit words (numpy's loop is vectorised and does one OR per 8 bytes: memory-bound, `read_rate` measures
it); the outputs go into `np.empty` memory each call, as the kernels write theirs into a new block each call, so both
pay fresh memory's page faults alike. With `threads` > 1 the steps are cut as the Numba kernels cut them
(`compiler/threads.even_cuts`) and read and written in parts on the kernels' thread pool (numpy's loops release the
GIL).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from tracec.compiler.threads import even_cuts, run_parts

Output = tuple[tuple[int, ...], type]  # the shape after the leading steps axis, and the dtype


def read_bytes(array: np.ndarray) -> int:
    """Every byte of a contiguous `array` read once (the OR of its 64-bit words, then of its trailing bytes)."""
    flat = array.reshape(-1).view(np.uint8)
    whole = flat.size // 8 * 8
    words = int(np.bitwise_or.reduce(flat[:whole].view(np.uint64))) if whole else 0
    return words | int(np.bitwise_or.reduce(flat[whole:])) if flat.size > whole else words


def read_write_floor(inputs: Sequence[np.ndarray], n: int, outputs: Sequence[Output], threads: int) -> None:
    """Read each of `inputs` once (each cut along its first axis in proportion to the steps) and write `outputs`,
    arrays of `n` steps along their first axis, into fresh memory."""
    written: list[np.ndarray] = [np.empty((n, *shape), dtype) for shape, dtype in outputs]

    def part(lo: int, hi: int) -> None:
        for source in inputs:
            size = source.shape[0]
            read_bytes(source[size * lo // n:size * hi // n])
        for target in written:
            target[lo:hi] = 1

    run_parts(part, even_cuts(n, threads), threads)


def matmul_rate(shape: tuple[int, int, int] = (2048, 576, 1536), repeats: int = 5) -> float:
    """GFLOP/s of one fp32 (m x k) @ (k x n) product on one torch thread, the median of `repeats`: the rate a
    FLOP floor divides by. The default is SmolLM2-135M's MLP projection over a mini-batch of 2048 tokens, the
    shape that dominates its forward and backward."""
    import torch  # here, not at the top: the memory floors run without torch

    m, k, n = shape
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        generator = torch.Generator().manual_seed(0)
        a, b = torch.randn(m, k, generator=generator), torch.randn(k, n, generator=generator)
        torch.mm(a, b)
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            seconds.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return 2 * m * k * n / sorted(seconds)[repeats // 2] / 1e9


def read_rate(megabytes: int = 256, repeats: int = 5) -> float:
    """GB/s of `read_bytes` over a buffer larger than any cache, the median of `repeats`: the machine's read bandwidth
    as the floors see it, for the record beside them."""
    buffer = np.ones(megabytes * 2**20 // 8, np.uint64)
    read_bytes(buffer)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        read_bytes(buffer)
        seconds.append(time.perf_counter() - start)
    return buffer.nbytes / sorted(seconds)[repeats // 2] / 1e9
