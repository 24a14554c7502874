"""The progress ticker of long TRACE commands: it speaks every few seconds, and always for the last item."""

from __future__ import annotations

from tracec.trace_rl.trace.usage import Ticker


def test_the_ticker_speaks_once_per_interval_and_at_the_end() -> None:
    now = [0.0]
    said: list[str] = []
    ticker = Ticker(said.append, "label run 1", 5, every_s=10.0, clock=lambda: now[0])
    for done, at in enumerate((1.0, 4.0, 11.0, 12.0), 1):
        now[0] = at
        ticker.tick(done)
    assert said == ["label run 1: 3/5"]  # 11 s after the start; 1 s after that is too soon
    ticker.tick(5)
    assert said[-1] == "label run 1: 5/5"  # the last item is always said
