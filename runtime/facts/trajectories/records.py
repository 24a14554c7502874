"""Records (trajectories, say) to disk: JSONL, or Parquet when the file name ends in `.parquet`; written atomically,
so an error halfway leaves the old file (or none), never half a file. Output is always valid: a record JSON cannot
hold (a NaN, an infinity) is refused by its index. Left out: the schema of a record (the caller's; `jsonl` reads
trajectories back), and evaluations (`tracec.runtime.output` writes those straight from their arrays).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from tracec.dsl.errors import NOWHERE, DataError, Diagnostic

from tracec.atomic import atomic_open, atomic_path


def write_records(records: Iterable[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    """Records (plain JSON values) one a line, or as a Parquet table (columns inferred by pyarrow)."""
    if Path(path).suffix == ".parquet":
        table = pa.Table.from_pylist(list(records))
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp)
        return
    with atomic_open(path) as handle:
        for index, record in enumerate(records):
            try:
                handle.write(json.dumps(record, allow_nan=False) + "\n")
            except ValueError as error:  # NaN or infinity: not JSON
                raise DataError([Diagnostic(os.fspath(path), NOWHERE,
                                            f"cannot write record {index} as JSON: {error}")]) from None
