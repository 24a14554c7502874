"""Trajectory files by suffix: `.jsonl` (one episode a line), `.parquet` and `.arrow` (Arrow IPC) tables of the
same schema; read into a FactBatch (`read_facts`) or converted into one another (`convert_trajectories`).

A file whose states and actions hold no value for any field the rubric reads is an error naming both sides' fields:
it is almost always the wrong file or the wrong rubric, and it would otherwise score zeros everywhere without a
word. (Episodes in memory are not held to this: a batch of rollouts whose every fact is missing is a real batch.)
Conversions write atomically and check what they read as `tracec score` would (shapes, ids, numbers); a Parquet
column has one type, so a field whose values have different JSON types in different episodes cannot be converted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from tracec.compiler.ir import FactPlan
from tracec.dsl.errors import NOWHERE, DataError, Diagnostic
from tracec.runtime.facts.fact_batch import FactBatch, assemble, build_fact_batch
from tracec.runtime.facts.row_source import SIDES
from tracec.runtime.facts.trajectories.arrow import (
    TABLE_SUFFIXES,
    episodes_table,
    json_table,
    read_table,
    table_records,
)
from tracec.runtime.facts.trajectories.jsonl import Episode, gc_paused, read_trajectories
from tracec.runtime.facts.trajectories.records import write_records
from tracec.runtime.facts.trajectories.table import TableRows

from tracec.atomic import atomic_path

TRAJECTORY_SUFFIXES = (".jsonl", *TABLE_SUFFIXES)


class FormatError(ValueError):
    """A path whose suffix names no trajectory format."""


def trajectory_format(path: str | os.PathLike[str]) -> str:
    suffix = Path(path).suffix
    if suffix not in TRAJECTORY_SUFFIXES:
        raise FormatError(f"{os.fspath(path)}: a trajectory file ends in {', '.join(TRAJECTORY_SUFFIXES)}")
    return suffix


def read_facts(path: str | os.PathLike[str], plan: FactPlan) -> FactBatch:
    """The FactBatch of a trajectory file (JSONL unless the suffix says Parquet or Arrow); DataError on any
    problem, including a file that shares no field with the plan."""
    name = os.fspath(path)
    if Path(name).suffix in TABLE_SUFFIXES:
        table = read_table(name, plan)
        batch = assemble(TableRows(table, name, plan), plan)
        if not _any_known(batch, plan):
            _no_shared_field(name, plan, _table_fields(read_table(name).schema))
        return batch
    table = json_table(name, plan)
    if table is not None:
        try:
            batch = assemble(TableRows(table, name, plan, validated=True), plan)
            if _any_known(batch, plan):
                return batch
        except DataError:
            pass  # the line reader below finds the problem again, with its line
    # The collector stays paused until the parsed episodes are gone: re-enabled earlier, its first collection would
    # walk every one of them.
    with gc_paused():
        episodes = read_trajectories(name)
        batch = build_fact_batch(episodes, plan)
        require_known_facts(name, batch, plan, episodes)
        del episodes
    return batch


def require_known_facts(path: str, batch: FactBatch, plan: FactPlan, episodes: Sequence[Episode]) -> None:
    """A DataError naming both sides' fields when no state or action of `episodes` (read from `path`, built into
    `batch`) has a value for any fact `plan` reads: the wrong file for this rubric (`tracec score`'s rule, and the
    rubric labeler's)."""
    if not _any_known(batch, plan):
        _no_shared_field(path, plan, _episode_fields(episodes))


def _any_known(batch: FactBatch, plan: FactPlan) -> bool:
    """Whether some fact the plan reads from states or actions has a value somewhere (trivially, without steps)."""
    columns = [field.column for field in plan.fields if field.type.kind != "text"]
    columns += [lift.column for lift in plan.lifts if lift.text != "instruction"]
    if batch.n_transitions == 0 or not columns:
        return True
    return any(batch.columns[c].known.any() for c in columns if c in batch.columns)


def _no_shared_field(path: str, plan: FactPlan, found: dict[str, set[str]]) -> None:
    wanted: dict[str, set[str]] = {"state": set(), "action": set()}
    for field in plan.fields:
        wanted[SIDES[field.side]].add(field.field)
    for lift in plan.lifts:
        if lift.text != "instruction":
            side, field_name = lift.text.split(".", 1)
            wanted[SIDES[side]].add(field_name)

    def listed(fields: set[str]) -> str:
        return ", ".join(sorted(fields)) or "none"

    message = (f"no state or action has a value for any field the rubric reads (states: {listed(wanted['state'])}; "
               f"actions: {listed(wanted['action'])}); this file's states have: {listed(found['state'])}; "
               f"its actions: {listed(found['action'])}")
    raise DataError([Diagnostic(path, NOWHERE, message)])


def _episode_fields(episodes: Sequence[Episode]) -> dict[str, set[str]]:
    states = {key for e in episodes for state in e.states for key in state}
    actions = {key for e in episodes for action in e.actions for key in action}
    return {"state": states, "action": actions}


def _table_fields(schema: object) -> dict[str, set[str]]:
    assert isinstance(schema, pa.Schema)
    found = {}
    for source, column in (("state", "states"), ("action", "actions")):
        value_type = schema.field(column).type.value_type
        found[source] = {f.name for f in value_type} if pa.types.is_struct(value_type) else set()
    return found


def convert_trajectories(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> int:
    """Write the episodes of `source` to `target`, formats by suffix; returns how many. DataError on bad input,
    FormatError on a suffix that names no format."""
    reading, writing = trajectory_format(source), trajectory_format(target)
    with gc_paused():
        return _convert(os.fspath(source), target, reading, writing)


def _convert(name: str, target: str | os.PathLike[str], reading: str, writing: str) -> int:
    if reading == ".jsonl":
        episodes = read_trajectories(name)
        table = episodes_table(episodes, name)
    else:
        table = read_table(name)
        if writing == ".jsonl":
            records: Iterable[dict] = table_records(table, name)
            write_records(records, target)
            return table.num_rows
        TableRows(table, name, FactPlan((), (), ()))  # the same checks as reading it for eval
    if writing == ".jsonl":
        write_records((_episode_record(e) for e in episodes), target)
        return len(episodes)
    with atomic_path(target) as tmp:
        if writing == ".parquet":
            pq.write_table(table, tmp)
        else:
            with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
    return table.num_rows


def _episode_record(episode: Episode) -> dict:
    record = {"episode": episode.episode, "task": episode.task, "instruction": episode.instruction,
              "states": episode.states, "actions": episode.actions, "env_reward": episode.env_reward,
              "success": episode.success}
    return {key: value for key, value in record.items() if value is not None}
