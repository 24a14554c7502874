"""Resumable steps: each step's outputs are one folder of the run, published whole, and skipped when up to date.

    store = StepStore(run_dir, report=print)
    outcome = store.run("select", inputs={"config": ..., "label": labels.digest}, produce=write_selection)

A step's key is the SHA-256 of its inputs: its config section, the digests of the steps it reads, and the content
of the files it reads from outside the run. `produce(folder)` writes into a staging folder `.partial/NAME-KEY/`,
which is kept across a kill, so a step that resumes on its own (the trainer's checkpoints, an evaluation's
result lines, labeling's progress file) continues there; when it returns, the folder's digest (every file's path
and content, or only the files the next steps read) is taken, the folder replaces `NAME/` (a rename), and
`steps/NAME.json` records key, digest, the digest of every output (`outputs`) and times, written atomically and
last. A step whose record has the same key and whose folder still holds what it published (read again and compared
with `outputs`: a file deleted, cut or edited since runs the step again) is skipped; any other is run again, and the
steps after it see its new digest, so a change flows downstream and no further.
Left out: garbage collection of stale staging folders from other keys (they are removed when their step runs).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracec.trace_rl.targeting.pipeline.layout import RECORDS, STAGING

from tracec.atomic import write_atomic
from tracec.json_key import json_key


class PipelineFailed(Exception):
    """A step that cannot produce what the next one needs; the message says which step, why and what to do."""


@dataclass(frozen=True, kw_only=True)
class StepOutcome:
    name: str
    folder: Path  # the step's published outputs
    digest: str  # of those outputs: what downstream steps hash
    skipped: bool
    seconds: float


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def folder_digest(folder: Path, only: tuple[str, ...] = ()) -> str:
    """Every file's relative path and content, in sorted order (logs of LLM calls and progress files left out);
    with `only`, just those files (what the next steps read)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        if relative.endswith(("llm_calls.jsonl", ".progress.jsonl")) or (only and relative not in only):
            continue
        digest.update(relative.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


class StepStore:
    """The steps of one run folder; `report` gets one progress line per step."""

    def __init__(self, root: Path, *, report: Callable[[str], None] = lambda _: None) -> None:
        self.root, self.report = root, report
        (root / RECORDS).mkdir(parents=True, exist_ok=True)
        self.ran: list[str] = []  # the steps this process ran (not skipped), in order

    def record(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(json.loads((self.root / RECORDS / f"{name}.json").read_text(encoding="utf-8")))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def run(self, name: str, inputs: dict[str, Any], produce: Callable[[Path], str], *, number: int = 0,
            total: int = 0, digest_of: tuple[str, ...] = ()) -> StepOutcome:
        """Run step `name` unless it is up to date; `produce(folder)` returns a one-line summary. `digest_of`
        names the files the next steps read, when not all of them (a table for people is not an input)."""
        key = json_key({"step": name, **inputs}, length=64)  # whole: run folders made before keep their keys
        final = self.root / name
        where = f"[{number}/{total}] " if total else ""
        previous = self.record(name)
        if previous is not None and previous.get("key") == key and _published(final, previous, digest_of):
            self.report(f"{where}{name}: up to date, skipped ({previous.get('summary', '')})")
            return StepOutcome(name=name, folder=final, digest=str(previous["digest"]), skipped=True, seconds=0.0)
        if previous is not None and previous.get("key") == key:
            self.report(f"{where}{name}: its outputs in {final} changed or went missing since it ran; running it again")
        staging = self.root / STAGING / f"{name}-{key[:16]}"
        for stale in (self.root / STAGING).glob(f"{name}-*"):
            if stale != staging:
                shutil.rmtree(stale, ignore_errors=True)
        resumed = staging.is_dir()
        staging.mkdir(parents=True, exist_ok=True)
        self.report(f"{where}{name}: running" + (" (resuming its partial outputs)" if resumed else ""))
        began, started = time.perf_counter(), time.time()
        summary = produce(staging)
        digest, outputs = folder_digest(staging, digest_of), folder_digest(staging)
        (self.root / RECORDS / f"{name}.json").unlink(missing_ok=True)  # outputs and record change together
        if final.exists():
            shutil.rmtree(final)
        staging.replace(final)
        seconds = round(time.perf_counter() - began, 3)
        write_atomic(self.root / RECORDS / f"{name}.json", [json.dumps(
            {"step": name, "key": key, "digest": digest, "outputs": outputs, "started": started,
             "finished": time.time(), "seconds": seconds, "summary": summary}, indent=2) + "\n"])
        self.ran.append(name)
        self.report(f"{where}{name}: done in {seconds:.1f} s ({summary})")
        return StepOutcome(name=name, folder=final, digest=digest, skipped=False, seconds=seconds)


def _published(folder: Path, record: dict[str, Any], digest_of: tuple[str, ...]) -> bool:
    """Whether `folder` still holds what the step recorded: every output (a record from before `outputs` was
    kept: the files the next steps read)."""
    if not folder.is_dir():
        return False
    if "outputs" in record:
        return folder_digest(folder) == record["outputs"]
    return folder_digest(folder, digest_of) == record.get("digest")
