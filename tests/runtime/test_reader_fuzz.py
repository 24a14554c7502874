"""Any JSONL through `tracec score`, read by Arrow's JSON reader (the fast path) and by the line reader with and
without the C gatherer, in a child process: the same scores or the same located error, and never a crash.

Issue 20 §1: a first line `null` killed the process with SIGSEGV inside pyarrow's reader, which is now handed only
lines framed as objects. The files drawn here hold any top-level value, nulls at every depth, huge and deeply nested
values, invalid UTF-8, byte order marks, lone surrogates, two values on a line and one value over two. The child
(`reader_paths.py`) serves one file after another; one that dies is reported with its signal and started again.
A longer, coverage-guided run is `fuzz_reader.py` (docs/trajectories.md, "Fuzzing the reader").
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from reader_paths import WAYS, Answer, disagreement

WORKER = Path(__file__).with_name("reader_paths.py")

ROOMS = ["hall", "yard", "door", ""]
FIELDS = ["room", "open", "note", "n", "heat", "verb", "ok", "other"]
KEYS = ["episode", "task", "instruction", "states", "actions", "env_reward", "success", *FIELDS]
# Values written as raw JSON text: what a dumps of Python values cannot write, or would not think of.
RAW = [b"null", b"NaN", b"-Infinity", b"1e400", b"-1e400", b"2e-400", b"-0", b"-0.0", b"1E2", b"9" * 400,
       b"9223372036854775807", b"9223372036854775808", b"-9223372036854775809", b"9007199254740993",
       b"1" * 4300, b"1" * 4301, b"-" + b"7" * 5000, b"0." + b"1" * 5000, b"1" * 5000 + b"e-5000",
       b"[" * 1001 + b"]" * 1001, b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 1500 + b"null" + b"}" * 1500,
       b"[null]", b"[[null]]", b'["door", null]', b'{"room": null}', b"[{}]",
       b'"\\ud800"', b'"\\udfff\\ud800"', b'"\\ud83d\\ude00"', b'"\xed\xa0\x80"', b'"\xff"', b'"\xc3"',
       b'"\xef\xbb\xbf"',
       b'"\\u0000"', b'"a\tb"', b'"\\x41"', b"01", b"+1", b".5", b"1.", b"tru", b"[1,]", b'{"a":1,}', b"'x'"]


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


_ATOMS = st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=4) | st.sampled_from(ROOMS + ["go", "open", "wait", "can't"])
VALUES = st.recursive(
    st.builds(_dumps, _ATOMS) | st.sampled_from(RAW),
    lambda inner: st.lists(inner, max_size=3).map(lambda items: b"[" + b",".join(items) + b"]")
    | st.lists(st.tuples(st.sampled_from(KEYS), inner), max_size=3).map(
        lambda pairs: b"{" + b",".join(_dumps(k) + b":" + v for k, v in pairs) + b"}"),
    max_leaves=6)


@st.composite
def episode_lines(draw: st.DrawFn, name: str) -> bytes:
    """A well-formed episode of the probe schema, with up to three of its places (a key, a state or action, a
    fact, a set element) given any value, or taken out."""
    n_steps = draw(st.integers(0, 3))
    states = [{"room": draw(st.sampled_from(ROOMS)), "open": draw(st.lists(st.sampled_from(ROOMS), max_size=2)),
               "note": draw(st.sampled_from(["ok", "You can't."])), "n": draw(st.integers(-2, 5)),
               "heat": draw(st.floats(-3, 3) | st.integers(-3, 3))} for _ in range(n_steps + 1)]
    actions = [{"verb": draw(st.sampled_from(["go", "open", "wait"])), "ok": draw(st.booleans())}
               for _ in range(n_steps)]
    record: dict[str, Any] = {"episode": name, "task": draw(st.sampled_from(["t0", "t1"])), "states": states,
                              "actions": actions, "env_reward": draw(st.sampled_from([0.0, 1.0, 0.5, -2]))}
    holders: list[tuple[Any, Any]] = [(record, key) for key in KEYS[:7]]
    holders += [(side, i) for side in (states, actions) for i in range(len(side))]
    holders += [(row, key) for row in states + actions for key in (*row, "other")]
    holders += [(row["open"], i) for row in states for i in range(len(row["open"]))]
    splices: list[bytes] = []  # a place inside one spliced over before is written nowhere
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        holder, key = draw(st.sampled_from(holders))
        if isinstance(holder, dict) and draw(st.booleans()):
            holder.pop(key, None)
            continue
        marker = f"\x00{len(splices)}\x00"
        value = draw(VALUES)
        splices.append(value)
        holder[key] = marker
    line = _dumps(record)
    for i, value in enumerate(splices):
        line = line.replace(_dumps(f"\x00{i}\x00"), value)
    return line


@st.composite
def jsonl_files(draw: st.DrawFn) -> bytes:
    lines: list[bytes] = []
    for i in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["episode", "episode", "episode", "value", "bytes", "blank", "two", "split"]))
        name = draw(st.sampled_from([f"e{i}", f"e{i}", "e0"]))
        if kind == "episode":
            lines.append(draw(episode_lines(name)))
        elif kind == "value":
            lines.append(draw(VALUES))
        elif kind == "bytes":
            lines.append(draw(st.binary(max_size=12)).replace(b"\n", b""))
        elif kind == "blank":
            lines.append(draw(st.sampled_from([b"", b"  ", b"\t", b"\r", b"\x0c"])))
        elif kind == "two":  # two values on one line: two rows to Arrow
            lines.append(draw(episode_lines(name)) + draw(st.sampled_from([b"", b" ", b"\r"]))
                         + draw(episode_lines(name + "b")))
        else:  # one value over two lines: one row to Arrow
            line = draw(episode_lines(name))
            at = draw(st.integers(0, len(line)))
            lines += [line[:at], line[at:]]
        if draw(st.booleans()):
            lines[-1] = draw(st.sampled_from([b" ", b"\t", b"\r"])) + lines[-1]
    separator = draw(st.sampled_from([b"\n", b"\r\n"]))
    text = separator.join(lines) + draw(st.sampled_from([separator, b""]))
    return draw(st.sampled_from([b"", b"\xef\xbb\xbf"])) + text


class Worker:
    """The child process that reads files each way; started again after it dies."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.process: subprocess.Popen[str] | None = None

    def ask(self, path: Path, way: str) -> Answer:
        if self.process is None:  # its stderr to a file: a pipe nobody reads could fill and stall it
            with open(self.folder / "worker.err", "w") as err:
                self.process = subprocess.Popen([sys.executable, str(WORKER), str(self.folder / "probe.rubric")],
                                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                                cwd=self.folder)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps([str(path), way]) + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            code, self.process = self.process.wait(), None
            err = (self.folder / "worker.err").read_text(errors="replace")
            raise AssertionError(f"the {way} reader died (exit {code}, a signal if negative):\n{err[-2000:]}")
        code, out, err = json.loads(reply)
        return code, out, err

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()  # type: ignore[union-attr]
            self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    serving = Worker(tmp_path_factory.mktemp("reader"))
    yield serving
    serving.close()


def _answers(worker: Worker, data: bytes) -> tuple[Path, dict[str, Answer]]:
    path = worker.folder / "t.jsonl"
    path.write_bytes(data)
    return path, {way: worker.ask(path, way) for way in WAYS}


GOOD = _dumps({"episode": "a", "states": [{"room": "hall"}, {"room": "yard"}], "actions": [{"verb": "go"}]})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(jsonl_files())
@example(b"null\n")  # the SIGSEGV of issue 20
@example(b"\xef\xbb\xbfnull\n")
@example(b"\n \tnull\r\n")
@example(GOOD + b"\nnull\n")
@example(GOOD + b" " + GOOD.replace(b'"a"', b'"b"') + b"\n")
@example(GOOD[:20] + b"\n" + GOOD[20:] + b"\n")
def test_every_reader_gives_the_same_answer_and_none_crashes(worker: Worker, data: bytes) -> None:
    path, answers = _answers(worker, data)
    problem = disagreement(answers, path)
    assert problem is None, problem


@pytest.mark.parametrize("first", [b"null", b"[null]", b"true", b"5", b'"x"', b"[]"])
def test_a_first_line_that_is_no_object_is_a_located_error(worker: Worker, first: bytes) -> None:
    path, answers = _answers(worker, first + b"\n" + GOOD + b"\n")
    assert answers["fast"] == answers["lines"]
    assert answers["fast"][0] == 1
    assert answers["fast"][2].startswith(f"{path}:1:1: error: expected a JSON object (one episode a line), got ")
