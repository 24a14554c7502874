"""A tau2 domain database: copy-on-write over one loaded `db.json`, with the benchmark's stable hash.

Why copy-on-write: the airline database is 7 MB, and every episode starts from a fresh copy of it. A
`Snapshot` holds the loaded tables once and is never changed; a `Db` shares its rows and deep-copies a row
only when a tool edits it, so a fresh copy costs a dict copy per table. Edits run inside `Db.transaction()`,
which restores every row it touched when the tool refuses, so a refused call changes nothing whatever order
its checks run in.

The stable hash is the benchmark's: sha256 of `json.dumps(db, sort_keys=True)` over the database in the shape
its own model serialises (every optional field present, null when unset). It is composed from per-row JSON,
cached on the snapshot for rows nobody edited, so hashing an episode's database costs one pass of sha256.

Left out: schema validation of `db.json` beyond filling the optional fields (the file is the benchmark's own).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Optional fields of the benchmark's models, per domain and table: absent in db.json, null in its dumps.
OPTIONAL_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "airline": {"reservations": ("status",)},
    "retail": {
        "orders": (
            "cancel_reason",
            "exchange_items",
            "exchange_new_items",
            "exchange_payment_method_id",
            "exchange_price_difference",
            "return_items",
            "return_payment_method_id",
        ),
    },
}
TABLES: dict[str, tuple[str, ...]] = {
    "airline": ("flights", "users", "reservations"),
    "retail": ("products", "users", "orders"),
}


class Snapshot:
    """One domain's initial database, loaded once and shared by every `Db` made from it; never mutated."""

    def __init__(self, domain: str, tables: dict[str, dict[str, Any]]) -> None:
        self.domain = domain
        self.tables = tables
        self._json: dict[str, _TableJson] = {}

    def table_json(self, table: str) -> _TableJson:
        cached = self._json.get(table)
        if cached is None:
            cached = self._json[table] = _TableJson(self.tables[table])
        return cached

    def fresh(self) -> Db:
        return Db(self)


class _TableJson:
    """One snapshot table as sorted-key JSON: per row, per `"key": row` entry in key order, and joined."""

    def __init__(self, rows: dict[str, Any]) -> None:
        self.keys = sorted(rows)
        self.index = {key: position for position, key in enumerate(self.keys)}
        self.row = {key: json.dumps(rows[key], sort_keys=True) for key in self.keys}
        self.entries = [f"{json.dumps(key)}: {self.row[key]}" for key in self.keys]
        self.body = ", ".join(self.entries)


class DatabaseError(ValueError):
    """A `db.json` that is not the domain's database; the message names the file and what is wrong."""


def load_snapshot(domain: str, path: Path) -> Snapshot:
    """Read a domain's `db.json` and fill in the optional fields the benchmark's models carry as null."""
    if domain not in TABLES:
        raise ValueError(f"unknown tau2 domain `{domain}`; expected one of: {', '.join(sorted(TABLES))}")
    try:
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
    except ValueError as error:  # not UTF-8, or not JSON
        raise DatabaseError(f"{path}: cannot read the {domain} database: {error}") from None
    if not isinstance(raw, dict):
        raise DatabaseError(f"{path}: not a {domain} database, expected an object of tables")
    missing = [name for name in TABLES[domain]
               if not isinstance(raw.get(name), dict) or not all(isinstance(row, dict) for row in raw[name].values())]
    if missing:
        raise DatabaseError(f"{path}: not a {domain} database, missing table(s) {', '.join(missing)} (each an "
                            "object of rows)")
    tables = {name: raw[name] for name in TABLES[domain]}
    for table, fields in OPTIONAL_FIELDS[domain].items():
        for row in tables[table].values():
            for name in fields:
                row.setdefault(name, None)
    if domain == "airline":  # the airline model's address2 is optional too
        for user in tables["users"].values():
            if isinstance(user.get("address"), dict):
                user["address"].setdefault("address2", None)
    return Snapshot(domain, tables)


class Db:
    """A snapshot's working copy: read with `row`/`rows` (never mutate them), write with `edit`/`insert`."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.domain = snapshot.domain
        self._tables = {name: dict(rows) for name, rows in snapshot.tables.items()}
        self._owned: dict[str, set[str]] = {
            name: set() for name in snapshot.tables
        }  # rows private to this copy
        self._journal: dict[tuple[str, str], _Before] | None = None

    def row(self, table: str, key: str) -> Any | None:
        return self._tables[table].get(key)

    def rows(self, table: str) -> Iterator[tuple[str, Any]]:
        return iter(self._tables[table].items())

    def edit(self, table: str, key: str) -> Any:
        """The row, made private to this copy so it may be changed in place; only inside a transaction."""
        self._record(table, key)
        if key not in self._owned[table]:
            self._tables[table][key] = copy.deepcopy(self._tables[table][key])
            self._owned[table].add(key)
        return self._tables[table][key]

    def insert(self, table: str, key: str, row: Any) -> None:
        self._record(table, key)
        self._tables[table][key] = row
        self._owned[table].add(key)

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Run edits; on an exception restore every touched row and re-raise. `.changed` is set on success."""
        if self._journal is not None:
            raise RuntimeError("nested Db.transaction")
        journal: dict[tuple[str, str], _Before] = {}
        self._journal = journal
        done = Transaction()
        try:
            yield done
        except BaseException:
            self._restore(journal)
            raise
        finally:
            self._journal = None
        done.changed = any(self._json_of(t, k) != before.text for (t, k), before in journal.items())

    def stable_hash(self) -> str:
        digest = hashlib.sha256()
        for piece in self._json_pieces():
            digest.update(piece.encode())
        return digest.hexdigest()

    def same_as(self, other: Db) -> bool:
        """Equal sorted-key JSON, so equal stable hashes; copies of one snapshot compare changed rows only."""
        if other.snapshot is not self.snapshot:
            return self.stable_hash() == other.stable_hash()
        for table, rows in self._tables.items():
            touched = self._owned[table] | other._owned[table]
            if len(rows) != len(other._tables[table]):
                return False
            if any(self._json_of(table, key) != other._json_of(table, key) for key in touched):
                return False
        return True

    def to_json_text(self) -> str:
        """Exactly `json.dumps(self.to_dict(), sort_keys=True)`, built from the snapshot's cached JSON."""
        return "".join(self._json_pieces())

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {name: dict(rows) for name, rows in self._tables.items()}

    def _json_pieces(self) -> Iterator[str]:
        yield "{"
        for position, table in enumerate(sorted(self._tables)):
            yield f"{', ' if position else ''}{json.dumps(table)}: {{"
            yield self._table_body(table)
            yield "}"
        yield "}"

    def _table_body(self, table: str) -> str:
        base = self.snapshot.table_json(table)
        owned = self._owned[table]
        if not owned:
            return base.body
        entries = list(base.entries)
        added = []
        for key in owned:
            entry = f"{json.dumps(key)}: {json.dumps(self._tables[table][key], sort_keys=True)}"
            position = base.index.get(key)
            if position is None:
                added.append((key, entry))
            else:
                entries[position] = entry
        if added:
            entries = [entry for _, entry in sorted([*zip(base.keys, entries), *added])]
        return ", ".join(entries)

    def _json_of(self, table: str, key: str) -> str | None:
        rows = self._tables[table]
        if key not in rows:
            return None
        if key in self._owned[table]:
            return json.dumps(rows[key], sort_keys=True)
        return self.snapshot.table_json(table).row[key]

    def _record(self, table: str, key: str) -> None:
        if self._journal is None:
            raise RuntimeError("Db rows may only change inside Db.transaction()")
        if (table, key) not in self._journal:
            owned = key in self._owned[table]
            shared = None if owned else self._tables[table].get(key)
            self._journal[(table, key)] = _Before(text=self._json_of(table, key), owned=owned, shared=shared)

    def _restore(self, journal: dict[tuple[str, str], _Before]) -> None:
        for (table, key), before in journal.items():
            if before.text is None:
                self._tables[table].pop(key, None)
                self._owned[table].discard(key)
            elif before.owned:
                self._tables[table][key] = json.loads(before.text)
            else:  # the snapshot's row was copied before any change, so it is still intact
                self._tables[table][key] = before.shared
                self._owned[table].discard(key)


@dataclass
class Transaction:
    changed: bool = False


@dataclass(frozen=True, kw_only=True)
class _Before:
    text: str | None  # the row's JSON before the transaction; None when the row did not exist
    owned: bool
    shared: Any  # the snapshot's row object when the row was not yet private to this copy
