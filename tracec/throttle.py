"""Progress lines at a bounded rate: a long step is never silent for minutes, nor a flood of lines."""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class Throttle:
    """Passes lines on to `say`: the first at once, then at most one every `every_s` seconds; a line given with
    `always=True` (a loop's last item) is passed on whatever the time."""

    def __init__(self, say: Callable[[str], None], every_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.say, self.every_s, self.clock = say, every_s, clock
        self.last = -math.inf

    def __call__(self, line: str, *, always: bool = False) -> None:
        now = self.clock()
        if always or now - self.last >= self.every_s:
            self.say(line)
            self.last = now
