"""Run files: one labeling run of every trajectory against every capability, in TRACE's own format.

    {"attempt": 1, "dictionary": {"file": "candidates.json", "fingerprint": "0f3c...", "capabilities": [names]},
     "totals": {"total_failed": F, "total_passed": P},
     "labels": {capability: {"lacking_failed": [ids], "present_failed": [...], "na_failed": [...],
                             "lacking_passed": [...], "present_passed": [...], "na_passed": [...]}}}

`dictionary` is ours (TRACE's aggregator ignores it): the dictionary the run was labelled against, as a fingerprint
(of the candidates' names and descriptions, `dictionary.py`, or of a rubric's text, `label.py`), all its capability
names (a run may label fewer) and the file it was read from (for messages; absent when not known). Runs are told
apart by it, never by which capabilities each happened to label: TRACE's runs may omit a capability, and its
aggregator averages a capability over the runs that have it (`select.py`). A run without it (TRACE's files, ours
before it was written) is taken to be of the dictionary of the runs beside it, as TRACE's aggregator takes every
run; only a capability outside a recorded dictionary gives it away (`check_one_dictionary`).

Reading depends on neither layout, key order nor id order, and reads TRACE's released files as they are; it checks
the shape (a clear `file: error:` for each problem, and `file:line:col` for broken JSON) and tolerates what the
released aggregator tolerates: a missing bucket is empty, a missing `totals` count is 0. It refuses what would make
the selection's numbers wrong without a word: no `labels` (nothing was labelled), a trajectory in two buckets of one
capability or on both sides (failed, passed) across capabilities, a capability whose lists hold more failed (or
passed) trajectories than `totals` counts (a coverage above 1), and a capability that the run's own `dictionary`
lacks. Keys beyond these (`unlabeled`, which our labeler adds) are kept out of the way. Written atomically, ids
sorted as text, indented.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracec.trace_rl.targeting.usage import UsageProblem

from tracec.atomic import atomic_open

RUN_FILES = "run_*.json"  # the run files of a folder
BUCKETS = ("lacking_failed", "present_failed", "na_failed", "lacking_passed", "present_passed", "na_passed")


class RunFileError(Exception):
    """A run file (or a RUNS argument) that cannot be read; the message starts with the file."""


@dataclass(frozen=True, kw_only=True)
class DictionaryStamp:
    """The dictionary a run was labelled against: equal fingerprints are one dictionary, wherever its file lies."""
    fingerprint: str
    capabilities: tuple[str, ...]  # all of the dictionary's names, in its order
    file: str | None = None  # where it was read from, to name it in messages

    def describe(self) -> str:
        if self.file:
            return f"dictionary {self.file} (fingerprint {self.fingerprint})"
        return f"the dictionary of fingerprint {self.fingerprint} (its file not recorded)"


@dataclass(frozen=True, kw_only=True)
class Run:
    path: str
    attempt: int | None
    total_failed: int
    total_passed: int
    labels: dict[str, dict[str, tuple[str, ...]]]  # capability -> bucket -> ids
    unlabeled: tuple[str, ...] = field(default=())
    dictionary: DictionaryStamp | None = None  # None: the run does not say (TRACE's own files)


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
    dictionary = _stamp(data["dictionary"], where) if "dictionary" in data else None
    outside = [name for name in parsed if dictionary is not None and name not in dictionary.capabilities]
    if dictionary is not None and outside:
        raise RunFileError(f"{where}: error: labels.{outside[0]} is not a capability of the dictionary this run "
                           f"records, {dictionary.describe()}")
    attempt = data.get("attempt")
    unlabeled = data.get("unlabeled", [])
    return Run(path=where, attempt=attempt if isinstance(attempt, int) else None, total_failed=counts["total_failed"],
               total_passed=counts["total_passed"], labels=parsed,
               unlabeled=tuple(str(u) for u in unlabeled) if isinstance(unlabeled, list) else (),
               dictionary=dictionary)


def write_run(path: str | os.PathLike[str], *, attempt: int, total_failed: int, total_passed: int,
              labels: Mapping[str, Mapping[str, Iterable[str]]], unlabeled: Iterable[str] = (),
              dictionary: DictionaryStamp | None = None) -> None:
    record: dict[str, Any] = {"attempt": attempt}
    if dictionary is not None:
        record["dictionary"] = {**({"file": dictionary.file} if dictionary.file else {}),
                                "fingerprint": dictionary.fingerprint, "capabilities": list(dictionary.capabilities)}
    record["totals"] = {"total_failed": total_failed, "total_passed": total_passed}
    record["labels"] = {name: {bucket: sorted(buckets.get(bucket, ())) for bucket in BUCKETS}
                        for name, buckets in labels.items()}
    missing = sorted(unlabeled)
    if missing:
        record["unlabeled"] = missing
    with atomic_open(path) as handle:
        json.dump(record, handle, indent=2)
        handle.write("\n")


def check_one_dictionary(runs: Sequence[Run]) -> None:
    """A UsageProblem naming both runs and both dictionaries when `runs` were labelled against different
    dictionaries. Runs that record none are taken to be of the recorded one, unless they label a capability it
    lacks; runs that all record none are TRACE's, and TRACE's aggregator takes them as one dictionary's."""
    stamped = [(run, run.dictionary) for run in runs if run.dictionary is not None]
    if not stamped:
        return
    first, dictionary = stamped[0]
    for run, other in stamped[1:]:
        if other.fingerprint != dictionary.fingerprint:
            raise UsageProblem(f"{run.path}: labelled against {other.describe()}, but {first.path} against "
                               f"{dictionary.describe()}; select compares runs of one dictionary: leave one out, or "
                               "relabel it against the other's dictionary")
    for run in runs:
        outside = sorted(set(run.labels) - set(dictionary.capabilities))
        if run.dictionary is None and outside:
            raise UsageProblem(f"{run.path}: records no dictionary and labels {', '.join(outside)}, which "
                               f"{dictionary.describe()} of {first.path} lacks; select compares runs of one "
                               "dictionary: leave one out, or relabel it against the other's dictionary")


def _stamp(value: Any, where: str) -> DictionaryStamp:
    stamp = _object(value, where, "`dictionary`")
    fingerprint, capabilities, file = stamp.get("fingerprint"), stamp.get("capabilities"), stamp.get("file")
    if not isinstance(fingerprint, str) or not fingerprint:
        raise RunFileError(f"{where}: error: dictionary.fingerprint must be a non-empty string")
    if not isinstance(capabilities, list) or not capabilities or not all(isinstance(c, str) for c in capabilities):
        raise RunFileError(f"{where}: error: dictionary.capabilities must be a non-empty list of capability names")
    if file is not None and not isinstance(file, str):
        raise RunFileError(f"{where}: error: dictionary.file must be a string (the dictionary's path)")
    return DictionaryStamp(fingerprint=fingerprint, capabilities=tuple(capabilities), file=file or None)


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
