"""`tracec pipeline` without --verbose: each step's progress, thinned, so that a long step is never silent."""

from __future__ import annotations


def test_the_pipeline_without_verbose_passes_on_one_progress_line_every_interval() -> None:
    from tracec.cli.pipeline import _every

    now = [100.0]
    said: list[str] = []
    say = _every(10.0, said.append, clock=lambda: now[0])
    for at, line in ((100.0, "a"), (105.0, "b"), (110.0, "c"), (111.0, "d")):
        now[0] = at
        say(line)
    assert said == ["a", "c"]  # the first at once, then one per 10 s
