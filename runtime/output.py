"""Per-step evaluation records to disk: JSONL, or Parquet when the file name ends in `.parquet`.

Written atomically, so an error halfway leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tracec.atomic import atomic_open, atomic_path


def write_records(records: Iterable[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    if Path(path).suffix == ".parquet":
        _write_parquet(list(records), path)
        return
    with atomic_open(path) as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def _write_parquet(records: list[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(records)  # `ops` becomes a struct column with one bool-like field per operator
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
