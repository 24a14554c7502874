"""Progress lines at a bounded rate (tracec/throttle.py), as the pipeline and the label ticker give them."""

from __future__ import annotations

from tracec.trace_rl.targeting.usage import Ticker

from tracec.throttle import Throttle


def test_the_first_line_passes_at_once_then_one_per_interval() -> None:
    now = [100.0]
    said: list[str] = []
    say = Throttle(said.append, 10.0, clock=lambda: now[0])
    for at, line in ((100.0, "a"), (105.0, "b"), (110.0, "c"), (111.0, "d")):
        now[0] = at
        say(line)
    assert said == ["a", "c"]
    say("e", always=True)
    assert said[-1] == "e"


def test_the_ticker_speaks_at_the_start_once_per_interval_and_at_the_end() -> None:
    now = [0.0]
    said: list[str] = []
    ticker = Ticker(said.append, "label run 1", 5, every_s=10.0, clock=lambda: now[0])
    for done, at in enumerate((1.0, 4.0, 11.0, 12.0), 1):
        now[0] = at
        ticker.tick(done)
    assert said == ["label run 1: 1/5", "label run 1: 3/5"]  # 10 s after the first; 1 s after that is too soon
    ticker.tick(5)
    assert said[-1] == "label run 1: 5/5"  # the last item is always said
