"""What the TRACE commands (analysis, synthesis) share with the command line that runs them.

`UsageProblem` is inputs that parse but do not make sense together: the command line answers it as a usage error
(exit 2). `report` is a command's progress line, on stderr so that stdout keeps only what was asked for; a
`Ticker` reports a long loop's progress every few seconds, so a slow model is never silent for minutes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tracec.throttle import Throttle


class UsageProblem(Exception):
    """Inputs that parse but do not make sense (together)."""


def report(message: str) -> None:
    print(message, file=sys.stderr)


class Ticker:
    """`what: done/total` through `say`, at most once every `every_s` seconds, and always for the last item."""

    def __init__(self, say: Callable[[str], None], what: str, total: int, *, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what, self.total = what, total
        self.throttle = Throttle(say, every_s, clock)

    def tick(self, done: int) -> None:
        self.throttle(f"{self.what}: {done}/{self.total}", always=done >= self.total)
