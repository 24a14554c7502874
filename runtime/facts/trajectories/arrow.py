"""Trajectory files as Arrow tables: Parquet and Arrow IPC read by suffix (only the columns a plan reads), JSONL
parsed by Arrow's JSON reader straight into typed columns, and episodes converted to and from tables.

The table's layout is `trajectories.table`'s (docs/trajectories.md); `TableRows` there reads the facts
out of it. Errors are located DataErrors: a file that cannot be read, a value that cannot be converted (its episode,
field and position). Left out: writing row groups as episodes stream in (a table is built whole).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq
from tracec.compiler.ir import FactPlan
from tracec.dsl.errors import NOWHERE, DataError, Diagnostic
from tracec.runtime.facts.row_source import plan_fields
from tracec.runtime.facts.trajectories.jsonl import Episode, shown
from tracec.runtime.facts.trajectories.table import SOURCES, TableRows

TABLE_SUFFIXES = (".parquet", ".arrow")


def read_table(path: str | os.PathLike[str], plan: FactPlan | None = None) -> pa.Table:
    """A Parquet file or an Arrow IPC file (or stream), by suffix; DataError if it cannot be read. With a plan, a
    Parquet file is read only as far as the plan needs (the episode columns and the facts it reads)."""
    name = os.fspath(path)
    try:
        if name.endswith(".parquet"):
            source = pq.ParquetFile(name)
            table = source.read(columns=None if plan is None else _needed_columns(source, plan))
        else:
            with pa.memory_map(name) as mapped:
                try:
                    table = pa.ipc.open_file(mapped).read_all()
                except pa.ArrowInvalid:
                    mapped.seek(0)
                    table = pa.ipc.open_stream(mapped).read_all()
        if plan is None:
            table.validate(full=True)  # strings are valid UTF-8, offsets in range (TableRows checks what it reads)
    except OSError as error:
        reason = str(error) if isinstance(error, pa.ArrowException) else error.strerror or str(error)
        raise DataError([Diagnostic(name, NOWHERE, f"cannot read trajectories: {reason}")]) from None
    except pa.ArrowException as error:
        raise DataError([Diagnostic(name, NOWHERE, f"cannot read trajectories: {error}")]) from None
    return table


def _needed_columns(source: Any, plan: FactPlan) -> list[str] | None:
    """The Parquet leaf columns a plan reads (episode columns whole, facts by name), or None (read everything) for
    a file whose lists are not laid out as `states.list.element.FIELD`."""
    wanted = plan_fields(plan)
    paths = [source.schema.column(i).path for i in range(len(source.schema))]
    picked = []
    for path in paths:
        parts = path.split(".")
        source_name = {"states": "state", "actions": "action"}.get(parts[0])
        if source_name is None:
            picked.append(path)
        elif len(parts) < 4 or parts[1:3] != ["list", "element"]:
            return None
        elif parts[3] in wanted[source_name]:
            picked.append(path)
    for column in SOURCES.values():  # a list with no field read still tells how many states (actions) there are
        if not any(path.split(".")[0] == column for path in picked):
            first = next((path for path in paths if path.split(".")[0] == column), None)
            if first is not None:
                picked.append(first)
    return picked


_ARROW_TYPES = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "enum": pa.string(),
                "entity": pa.string(), "text": pa.string(), "set": pa.list_(pa.string())}


def json_table(path: str, plan: FactPlan) -> pa.Table | None:
    """Trajectory JSONL parsed by Arrow's JSON reader straight into columns, only the fields the plan reads (typed
    by it), or None when this declines the file (malformed or ill-typed JSON, invalid UTF-8, a lone surrogate, a
    key given twice, a line that is not one object); the caller then reads it line by line for the located error.
    What this accepts, the line reader accepts with the same values, except for JSON that Python's parser cannot
    read at all (nesting over ~1,000 deep, an integer of over 4,300 digits) inside a field no rubric reads."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
        if raw.startswith(b"\xef\xbb\xbf"):  # a byte order mark, dropped as the line reader drops it
            raw = raw[3:]
        data = pa.py_buffer(raw)
        pa.Array.from_buffers(pa.large_binary(), 1, [None, pa.py_buffer(np.array([0, data.size], np.int64)),
                                                     data]).cast(pa.large_string())  # invalid UTF-8: declined
    except (OSError, pa.ArrowException):
        return None
    lines = _object_lines(np.frombuffer(data, np.uint8))
    if not lines:
        return None

    wanted = plan_fields(plan)
    facts = {source: pa.list_(pa.struct([(f, _ARROW_TYPES[t.kind]) for f, t in fields.items()]))
             for source, fields in wanted.items()}
    schema = pa.schema([("episode", pa.string()), ("task", pa.string()), ("instruction", pa.string()),
                        ("states", facts["state"]), ("actions", facts["action"]), ("env_reward", pa.float64()),
                        ("success", pa.bool_())])
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    block = 1 << 22
    while True:
        try:
            table = pj.read_json(pa.BufferReader(data), read_options=pj.ReadOptions(block_size=block),
                                 parse_options=options)
            return table if table.num_rows == lines else None  # `{} {}` on one line is two rows to Arrow
        except pa.ArrowInvalid as error:
            if "straddl" not in str(error) or block > data.size:  # a line longer than a block: read in one block
                return None
            block = data.size + 1
        except pa.ArrowException:
            return None


def _object_lines(codes: np.ndarray) -> int | None:
    """How many lines of a JSONL file hold something, when each of them starts with `{` and ends with `}` (JSON
    whitespace aside), else None; 0 for a file of blank lines. Arrow's reader must see no other line: a first value
    `null` crashes the process (pyarrow 26.0.1, SIGSEGV), and it reads JSON values, not lines (`{"a":` then `1}` is
    one row, `{}{}` two), where the line reader refuses all three. Lines so framed hold no value that spans two of
    them (the `{` opening the next one cannot follow the `}` closing the last), so one row per line is all that is
    left to check. One vectorized pass; only lines with whitespace around them go through Python."""
    if codes.size == 0:
        return 0
    stops = np.flatnonzero(codes == ord("\n"))
    starts = np.concatenate([[0], stops + 1])
    stops = np.concatenate([stops, [codes.size]])
    filled = stops > starts
    starts, stops = starts[filled], stops[filled]
    trimmed = stops - (codes[stops - 1] == ord("\r"))  # CRLF line ends
    framed = ((trimmed > starts) & (codes[starts] == ord("{"))
              & (codes[np.maximum(trimmed - 1, 0)] == ord("}")))
    count = int(np.count_nonzero(framed))
    for start, stop in zip(starts[~framed].tolist(), stops[~framed].tolist()):
        line = codes[start:stop].tobytes().strip(b" \t\r")
        if line and not (line.startswith(b"{") and line.endswith(b"}")):
            return None
        count += bool(line)
    return count


def episodes_table(episodes: Sequence[Episode], path: str) -> pa.Table:
    """The table of some episodes (facts typed as pyarrow infers them: one type per field across the file)."""
    columns: dict[str, pa.Array] = {
        "episode": pa.array([e.episode for e in episodes], pa.string()),
        "task": pa.array([e.task for e in episodes], pa.string()),
        "instruction": pa.array([e.instruction for e in episodes], pa.string()),
    }
    for name in SOURCES.values():
        columns[name] = _rows_column(episodes, name, path)
    columns["env_reward"] = pa.array([e.env_reward for e in episodes], pa.float64())
    columns["success"] = pa.array([e.success for e in episodes], pa.bool_())
    return pa.table(columns)


def _rows_column(episodes: Sequence[Episode], name: str, path: str) -> pa.Array:
    """The states (or actions) column: pyarrow's inference over all of them at once, else field by field."""
    try:
        column = pa.array([getattr(episode, name) for episode in episodes], pa.list_(pa.null()) if not episodes
                          else None)
    except (pa.ArrowException, UnicodeEncodeError, OverflowError):
        column = _rows_by_field(episodes, name)
    if pa.types.is_struct(column.type.value_type) and column.type.value_type.num_fields == 0:
        # Parquet cannot hold a struct without fields: every state (or action) is empty, so nulls tell as much.
        column = pa.ListArray.from_arrays(column.offsets, pa.nulls(len(column.values)))
    return column


def _rows_by_field(episodes: Sequence[Episode], name: str) -> pa.Array:
    """The column built one fact at a time: a fact holding ints and floats becomes float64 (as the fact builder
    reads a float field); one holding two other JSON types is a DataError at its first value of the second."""
    rows = [row for episode in episodes for row in getattr(episode, name)]
    offsets = np.zeros(len(episodes) + 1, dtype=np.int32)
    np.cumsum([len(getattr(episode, name)) for episode in episodes], out=offsets[1:])
    fields = list(dict.fromkeys(key for row in rows for key in row))
    arrays = [_fact_array([row.get(field) for row in rows], field, name, episodes, offsets) for field in fields]
    values = pa.StructArray.from_arrays(arrays, fields) if fields else pa.nulls(len(rows))
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def _fact_array(values: list[Any], field: str, name: str, episodes: Sequence[Episode], offsets: np.ndarray) -> pa.Array:
    try:
        return pa.array(values)
    except (pa.ArrowException, UnicodeEncodeError, OverflowError):
        pass
    if {type(v) for v in values} - {type(None)} == {int, float}:
        try:
            return pa.array([None if v is None else float(v) for v in values], pa.float64())
        except OverflowError:
            pass
    seen: pa.DataType | None = None
    for row, value in enumerate(values):
        reason = ""
        try:
            single = pa.array([value]).type
            if seen is not None and single != seen and not pa.types.is_null(single):
                reason = f"a Parquet column has one type, and this value is {single} where earlier ones are {seen}"
            seen = single if seen is None or pa.types.is_null(seen) else seen
        except (pa.ArrowException, UnicodeEncodeError, OverflowError) as error:
            reason = str(error)
        if reason:
            index = int(np.searchsorted(offsets, row, side="right")) - 1
            episode = episodes[index]
            return _raise(episode.where.diagnostic(
                f"episode {episode.episode}: cannot convert field `{field}` of "
                f"{name[:-1]} {row - int(offsets[index])}: "
                f"{reason} (got {shown(value)})"))
    return pa.array(values)  # unreachable in practice: every value converts alone and all agree


def _raise(diagnostic: Diagnostic) -> pa.Array:
    raise DataError([diagnostic])


def table_records(table: pa.Table, path: str) -> Iterator[dict[str, Any]]:
    """The JSONL records of a table of episodes, nulls left out, after checking its layout."""
    TableRows(table, path, FactPlan((), (), ()))
    for batch in table.to_batches(max_chunksize=1024):
        for record in batch.to_pylist():
            for name in SOURCES.values():
                record[name] = [{k: v for k, v in row.items() if v is not None} if row else {}
                                for row in record[name]]
            yield {key: value for key, value in record.items() if value is not None}
