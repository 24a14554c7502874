"""Writes benchmark figures into one section of bench/RESULTS.md, leaving the other sections as they are.

Each suite owns a section (between HTML comment markers) so suites can be rerun one at a time.
"""

from __future__ import annotations

import fcntl
import functools
import os
import platform
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADER = "# Benchmark results\n\nRatios matter more than absolute times: these machines are noisy.\n"


def record(section: str, body: str, command: str, *, results: Path = RESULTS) -> None:
    """Replace (or append) `section` of `results` with `body` and the `command` that reproduces it; written
    atomically."""
    begin, end = f"<!-- begin {section} -->", f"<!-- end {section} -->"
    machine = (f"{cpu_model()}, {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
               f"{rates()}")
    block = f"{begin}\n## {section}\n\nReproduce: `{command}` ({machine})\n\n{body.strip()}\n{end}"
    folder = os.open(results.parent, os.O_RDONLY)
    try:  # runs recording side by side (bench/gpu_carried.sh) each keep the other's section: one at a time
        fcntl.flock(folder, fcntl.LOCK_EX)
        text = results.read_text() if results.exists() else HEADER
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
        text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
        fd, tmp = tempfile.mkstemp(dir=results.parent, prefix=f".{results.name}.")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, results)
    finally:
        os.close(folder)  # releases the lock


@functools.cache  # once a process: the machine does not change between its sections
def rates() -> str:
    """The machine's measured read bandwidth and matmul rate, beside the figures they bound (floors need both)."""
    from bench.floors import matmul_rate, read_rate  # here: a section recorded on a machine measures that machine

    return f"reads {read_rate():.1f} GB/s, multiplies {matmul_rate():.0f} GFLOP/s fp32, 1 thread each"


def cpu_model() -> str:
    """The processor's model name as the kernel reports it (Linux), else what `platform` knows: a section's figures
    are this machine's, and the next machine's may differ."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
