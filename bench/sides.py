"""One measuring discipline for every benchmark: interleaved rounds, paired ratios, medians with their spread.

These machines are shared and their speed drifts over minutes. Every round runs each side in turn, so drift slows
the sides of one round alike; a comparison is the ratio of two sides *within* a round, and the headline is the
median of those per-round ratios with their range (never a side's best round: the best of N favours the side with
the larger spread). A side's own figure is the median of its rounds. A fast side may run several times a round; its
round's figure is then the median of those runs, which only takes the timer's noise out of one round.

Each figure says where it was measured: `in-process` (the work alone, imports and start-up excluded) or `command`
(a fresh process per run, what a user pays). `describe()` writes that sentence for a table.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

ROUNDS = 5  # the fewest rounds any headline rests on


@dataclass(frozen=True)
class Spread:
    """A median and the range it came from."""

    median: float
    low: float
    high: float

    @staticmethod
    def of(values: Sequence[float]) -> Spread:
        return Spread(statistics.median(values), min(values), max(values))

    def scaled(self, factor: float) -> Spread:
        """The same spread in other units (seconds to milliseconds: 1e3)."""
        return Spread(self.median * factor, self.low * factor, self.high * factor)

    def cell(self, digits: int | None = None, suffix: str = "") -> str:
        """`1.73x (1.21-2.08)`: the median, then the range in brackets; `digits` decimals, by default as many as
        leave the median about three significant digits."""
        if digits is None:
            digits = max(0, 2 - math.floor(math.log10(abs(self.median)))) if self.median else 2
        return f"{self.median:.{digits}f}{suffix} ({self.low:.{digits}f}-{self.high:.{digits}f})"


@dataclass(frozen=True)
class Rounds:
    """Seconds of each side in each round, the rounds aligned: `seconds[side][r]` is side's figure in round r."""

    seconds: Mapping[str, Sequence[float]]

    def __len__(self) -> int:
        return min(len(values) for values in self.seconds.values())

    def time(self, side: str) -> Spread:
        return Spread.of(self.seconds[side])

    def ratios(self, numerator: str, denominator: str) -> list[float]:
        """numerator / denominator in each round (> 1: the denominator side was faster in that round)."""
        pairs = zip(self.seconds[numerator], self.seconds[denominator], strict=True)
        return [top / bottom for top, bottom in pairs]

    def ratio(self, numerator: str, denominator: str) -> Spread:
        """The per-round ratios' median and range."""
        return Spread.of(self.ratios(numerator, denominator))


def interleaved(benchmark: object | None, sides: Mapping[str, tuple[Callable[[], object], int]],
                rounds: int = ROUNDS, warm: bool = True) -> Rounds:
    """Time `sides` ({name: (run, runs per round)}) over `rounds` interleaved rounds, each run once first to warm
    (unless `warm` is False: a side that starts a process has nothing to warm). pytest-benchmark, when given, drives
    the rounds (its own figure is the whole round)."""
    if warm:
        for run, _ in sides.values():
            run()
    seconds: dict[str, list[float]] = {name: [] for name in sides}

    def one_round() -> None:
        for name, (run, runs) in sides.items():
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            seconds[name].append(statistics.median(times))

    _drive(benchmark, one_round, rounds)
    return Rounds(seconds)


def collected(benchmark: object | None, sides: Mapping[str, Callable[[], Mapping[str, float]]],
              rounds: int = ROUNDS) -> dict[str, list[Mapping[str, float]]]:
    """Interleaved rounds of sides that measure themselves (a fresh process reporting its own phases): each side's
    reports, round by round. `Rounds({side: [report[key] ...]})` then pairs any one figure."""
    reports: dict[str, list[Mapping[str, float]]] = {name: [] for name in sides}

    def one_round() -> None:
        for name, run in sides.items():
            reports[name].append(run())

    _drive(benchmark, one_round, rounds)
    return reports


def _drive(benchmark: object | None, one_round: Callable[[], None], rounds: int) -> None:
    """Run `one_round` `rounds` times: through pytest-benchmark when given (its own figure is the whole round)."""
    if benchmark is None:
        for _ in range(rounds):
            one_round()
    else:
        benchmark.pedantic(one_round, rounds=rounds, iterations=1)  # type: ignore[attr-defined]


def derived(reports: Mapping[str, Sequence[Mapping[str, float]]],
            value: Callable[[Mapping[str, float]], float]) -> Rounds:
    """A figure computed from each round's report of self-measured sides, as aligned rounds."""
    return Rounds({name: [value(report) for report in rows] for name, rows in reports.items()})


def field(reports: Mapping[str, Sequence[Mapping[str, float]]], key: str) -> Rounds:
    """One figure of self-measured reports as aligned rounds."""
    return derived(reports, lambda report: report[key])


def describe(rounds: int, where: str, threads: str) -> str:
    """The sentence every table carries: how many rounds, which statistic, where measured, threads per side."""
    if where not in ("in-process", "command"):
        raise ValueError(f"where is 'in-process' or 'command', not {where!r}")
    plural = "s" if rounds != 1 else ""
    return (f"{rounds} interleaved round{plural}; each figure is the median over rounds (range in brackets), each "
            f"ratio the median of the per-round paired ratios; {where}; threads: {threads}.")


def from_env(name: str, default: Sequence[int]) -> tuple[int, ...]:
    """Integers from the environment variable `name` (comma-separated; `1e6` reads as 10^6), the smaller sizes of a
    quick trial; `default` where it is unset or blank. The figures in RESULTS.md come from the defaults."""
    setting = os.environ.get(name, "").strip()
    return tuple(int(float(part)) for part in setting.split(",") if part.strip()) if setting else tuple(default)


def threads_text(count: int) -> str:
    """`1 thread`, `2 threads`."""
    return f"{count} thread" + ("" if count == 1 else "s")


def load_average() -> str:
    """The 1-minute load average now, for the note under a table (other work on the machine slows every side)."""
    return f"{os.getloadavg()[0]:.1f}"
