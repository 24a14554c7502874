"""Progress files: what a long LLM command has finished, so that a killed run resumes where it stopped.

A JSONL file beside the outputs: a header line with a fingerprint of everything the results depend on (inputs,
capabilities, model, settings), then one line per finished unit (`{"key": ..., "value": ...}`), each appended,
flushed and synced as it finishes. Reopening with the same fingerprint replays the finished units; a different
fingerprint (other inputs or settings) starts afresh, since old answers would no longer be answers to the
question asked. A torn last line (the kill came mid-write) is ignored. The file is removed once the command's
outputs are written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tracec.json_key import json_key


def fingerprint(*parts: Any) -> str:
    """The header's key of everything a command's results depend on."""
    return json_key(parts)


class Progress:
    def __init__(self, path: str | os.PathLike[str], fingerprint: str) -> None:
        self.path, self.fingerprint = Path(path), fingerprint
        self.done: dict[str, Any] = self._replay()
        if not self.done:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._write({"fingerprint": fingerprint}, mode="w")

    def record(self, key: str, value: Any) -> None:
        self.done[key] = value
        self._write({"key": key, "value": value}, mode="a")

    def finish(self) -> None:
        self.path.unlink(missing_ok=True)

    def _replay(self) -> dict[str, Any]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return {}
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a torn last line
        if not records or records[0].get("fingerprint") != self.fingerprint:
            return {}
        return {r["key"]: r["value"] for r in records[1:] if isinstance(r, dict) and "key" in r}

    def _write(self, record: dict[str, Any], *, mode: str) -> None:
        with open(self.path, mode, encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
