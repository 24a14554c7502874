"""The mutable state of one episode: a few small tables of rows, each indexed by its key column.

Rows are plain dicts (column -> str, int, float, bool or None) kept in generation order; tools only change values,
never add or remove rows or change a key, so the index stays valid. `digest` is the stable hash the `state` score
compares: sha256 of the key-sorted, compact JSON of every table.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# The digest's JSON, built once (json.dumps builds an encoder per call); rows are trees, so no cycle check.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, check_circular=False)


class Database:
    __slots__ = ("index", "keys", "rows")

    def __init__(self, rows: dict[str, list[dict[str, Any]]], keys: dict[str, str | None]):
        self.rows = rows  # table -> rows, in generation order
        self.keys = keys  # table -> its key column, or None
        self.index: dict[str, dict[str, dict[str, Any]]] = {
            table: ({row[key]: row for row in table_rows} if (key := keys[table]) else {})
            for table, table_rows in rows.items()
        }

    def copy(self) -> Database:
        return Database({table: [dict(row) for row in table_rows] for table, table_rows in self.rows.items()},
                        self.keys)

    def digest(self) -> str:
        return hashlib.sha256(_CANONICAL.encode(self.rows).encode()).hexdigest()
