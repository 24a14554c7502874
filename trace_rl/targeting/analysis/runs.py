"""Run files: one labeling run of every trajectory against every capability, in TRACE's own format.

    {"attempt": 1, "totals": {"total_failed": F, "total_passed": P},
     "labels": {capability: {"lacking_failed": [ids], "present_failed": [...], "na_failed": [...],
                             "lacking_passed": [...], "present_passed": [...], "na_passed": [...]}}}

Reading depends on neither layout, key order nor id order, and reads TRACE's released files as they are; it checks
the shape (a clear `file: error:` for each problem, and `file:line:col` for broken JSON) and tolerates what the
released aggregator tolerates: a missing bucket is empty, a missing `totals` count is 0. It refuses what would make
the selection's numbers wrong without a word: no `labels` (nothing was labelled), a trajectory in two buckets of one
capability or on both sides (failed, passed) across capabilities, and a capability whose lists hold more failed (or
passed) trajectories than `totals` counts (a coverage above 1). Keys beyond these (`unlabeled`, which our labeler
adds) are kept out of the way. Written atomically, ids sorted as text, indented.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracec.atomic import atomic_open

RUN_FILES = "run_*.json"  # the run files of a folder
BUCKETS = ("lacking_failed", "present_failed", "na_failed", "lacking_passed", "present_passed", "na_passed")


class RunFileError(Exception):
    """A run file (or a RUNS argument) that cannot be read; the message starts with the file."""


@dataclass(frozen=True, kw_only=True)
class Run:
    path: str
    attempt: int | None
    total_failed: int
    total_passed: int
    labels: dict[str, dict[str, tuple[str, ...]]]  # capability -> bucket -> ids
    unlabeled: tuple[str, ...] = field(default=())


def run_files(arguments: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The run files named: files as given, folders as their `run_*.json` files in name order."""
    found: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            inside = sorted(path.glob(RUN_FILES))
            if not inside:
                raise RunFileError(f"{path}: error: a folder of runs needs run_*.json files; this one has none")
            found.extend(inside)
        elif path.is_file():
            found.append(path)
        else:
            raise RunFileError(f"{path}: error: no such file or folder")
    return found


def read_run(path: str | os.PathLike[str]) -> Run:
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise RunFileError(f"{where}: error: {error.strerror}") from None
    except UnicodeDecodeError:
        raise RunFileError(f"{where}: error: not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise RunFileError(f"{where}:{error.lineno}:{error.colno}: error: not JSON: {error.msg}") from None
    if not isinstance(data, dict):
        raise RunFileError(f"{where}: error: a run file is a JSON object with `totals` and `labels`")
    totals = _object(data.get("totals", {}), where, "`totals`")
    counts = {key: totals.get(key, 0) for key in ("total_failed", "total_passed")}
    for key, value in counts.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise RunFileError(f"{where}: error: totals.{key} must be a count (an integer >= 0), got {value!r}")
    if not data.get("labels"):
        raise RunFileError(f"{where}: error: `labels` is missing or empty: a run file labels trajectories against "
                           "capabilities (`tracec analyze label` writes them)")
    labels = _object(data["labels"], where, "`labels`")
    parsed = {name: _buckets(buckets, where, name) for name, buckets in labels.items()}
    _check_consistent(parsed, counts, where)
    attempt = data.get("attempt")
    unlabeled = data.get("unlabeled", [])
    return Run(path=where, attempt=attempt if isinstance(attempt, int) else None, total_failed=counts["total_failed"],
               total_passed=counts["total_passed"], labels=parsed,
               unlabeled=tuple(str(u) for u in unlabeled) if isinstance(unlabeled, list) else ())


def write_run(path: str | os.PathLike[str], *, attempt: int, total_failed: int, total_passed: int,
              labels: Mapping[str, Mapping[str, Iterable[str]]], unlabeled: Iterable[str] = ()) -> None:
    record: dict[str, Any] = {
        "attempt": attempt, "totals": {"total_failed": total_failed, "total_passed": total_passed},
        "labels": {name: {bucket: sorted(buckets.get(bucket, ())) for bucket in BUCKETS}
                   for name, buckets in labels.items()},
    }
    missing = sorted(unlabeled)
    if missing:
        record["unlabeled"] = missing
    with atomic_open(path) as handle:
        json.dump(record, handle, indent=2)
        handle.write("\n")


def _object(value: Any, where: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RunFileError(f"{where}: error: {what} must be a JSON object, got {type(value).__name__}")
    return value


def _buckets(value: Any, where: str, name: str) -> dict[str, tuple[str, ...]]:
    buckets = _object(value, where, f"labels.{name}")
    parsed: dict[str, tuple[str, ...]] = {}
    for bucket in BUCKETS:
        ids = buckets.get(bucket, [])
        if not isinstance(ids, list) or not all(isinstance(i, (str, int)) and not isinstance(i, bool) for i in ids):
            raise RunFileError(f"{where}: error: labels.{name}.{bucket} must be a list of trajectory ids")
        parsed[bucket] = tuple(str(i) for i in ids)
    return parsed


def _check_consistent(labels: dict[str, dict[str, tuple[str, ...]]], totals: dict[str, int], where: str) -> None:
    """A RunFileError naming the capability, the trajectory or the count where the labels contradict each other
    or `totals`: each trajectory is in one bucket per capability, on one side, and no side outgrows its total."""
    sides: dict[str, str] = {}  # trajectory -> the first "name.bucket" it was seen in
    for name, buckets in labels.items():
        seen: dict[str, str] = {}
        for bucket, ids in buckets.items():
            for trajectory in ids:
                if trajectory in seen:
                    raise RunFileError(f"{where}: error: labels.{name}: trajectory {trajectory!r} is in both "
                                       f"{seen[trajectory]} and {bucket}; each has one label per capability")
                seen[trajectory] = bucket
                first = sides.setdefault(trajectory, f"{name}.{bucket}")
                if first.rpartition("_")[2] != bucket.rpartition("_")[2]:
                    raise RunFileError(f"{where}: error: trajectory {trajectory!r} is in labels.{first} and in "
                                       f"labels.{name}.{bucket}: it failed or it passed, not both")
        for side in ("failed", "passed"):
            listed = [f"{bucket} {len(ids)}" for bucket, ids in buckets.items() if bucket.endswith(side)]
            count = sum(len(ids) for bucket, ids in buckets.items() if bucket.endswith(side))
            if count > totals[f"total_{side}"]:
                raise RunFileError(f"{where}: error: labels.{name} lists {count} {side} trajectories "
                                   f"({', '.join(listed)}) but totals.total_{side} is {totals[f'total_{side}']}")
