"""The call log: one JSONL record per LLM call a command makes, written beside the command's outputs.

A record holds what a person auditing a run needs: when, which command and step (`purpose`), which attempt of the
repair loop, the backend, the messages sent, the sampling settings, the reply, the latency in seconds, and the
verdict (`accepted`, or the problem the reply was sent back with, or the backend's error). Each record is one
`write` of one whole line, flushed and synced before the next call, so a killed command keeps every call it made
and a resumed one appends to the same file. A `start` record opens each invocation.
Left out: rotation and compression (a run makes hundreds of calls, not millions).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tracec.trace_rl.llm.chat import Sampling, SamplingBackend


class LLMError(Exception):
    """A backend could not produce a reply (unreachable, refused, timed out, malformed); the message says why."""


class CallLog:
    """Appends call records to `path` (its folder is created)."""

    def __init__(self, path: str | os.PathLike[str], *, command: str) -> None:
        self.path, self.command = Path(path), command
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.calls = 0
        self._append({"event": "start", "command": command, "pid": os.getpid()})

    def sample(self, backend: SamplingBackend, messages: list[dict[str, str]], sampling: Sampling, *,
               purpose: str, attempt: int = 1) -> tuple[list[str], int]:
        """The backend's replies and the number of this call's record; a backend error is logged, then raised."""
        started = time.perf_counter()
        try:
            replies = backend.sample(messages, sampling)
        except LLMError as error:
            self._call(backend, messages, sampling, purpose, attempt, None, time.perf_counter() - started,
                       f"backend error: {error}")
            raise
        self._call(backend, messages, sampling, purpose, attempt, replies, time.perf_counter() - started, None)
        return replies, self.calls

    def verdict(self, call: int, verdict: str) -> None:
        """What the caller made of call `call`'s reply: `accepted`, or the problem it was sent back with."""
        self._append({"event": "verdict", "call": call, "verdict": verdict})

    def _call(self, backend: SamplingBackend, messages: list[dict[str, str]], sampling: Sampling, purpose: str,
              attempt: int, replies: list[str] | None, latency: float, error: str | None) -> None:
        self.calls += 1
        self._append({
            "event": "call", "call": self.calls, "command": self.command, "purpose": purpose, "attempt": attempt,
            "backend": backend.name, "messages": messages,
            "sampling": {k: v for k, v in dataclasses.asdict(sampling).items() if v not in (None, ())},
            "replies": replies, "latency_s": round(latency, 4), "error": error,
        })

    def _append(self, record: dict[str, Any]) -> None:
        record = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), **record}
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())


def log_path_beside(output: str | os.PathLike[str]) -> Path:
    """Where a command's call log goes: `OUT.llm_calls.jsonl` beside an output file, inside an output folder."""
    path = Path(output)
    if path.suffix == "" or path.is_dir():
        return path / "llm_calls.jsonl"
    return path.with_name(path.stem + ".llm_calls.jsonl")
