"""Seeded table generation: `reset(seed)` must be a pure function of the seed, in every process.

Each purpose draws from its own `random.Random`, seeded by sha256 of `"{seed}/{purpose}"` (never `hash()`, which
Python salts per process), so adding a table or a pick does not reshuffle the others. Tables are generated in
declaration order, which is what lets `ref t` draw from the keys of an earlier table.
Left out: realistic data; the pools below are small and fixed because the tasks only need distinct, readable values.
"""

from __future__ import annotations

import datetime
import hashlib
import random
from collections.abc import Callable, Mapping
from typing import Any

from tracec.dsl.env_model import CheckedEnvironment, TableInfo
from tracec.dsl.errors import EnvError
from tracec.trace_rl.envs.capability.database import Database

FIRST_NAMES = (
    "Ada", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kira", "Liam", "Maya",
    "Nils", "Olga", "Pablo", "Quinn", "Rosa", "Sami", "Tara", "Umar", "Vera", "Wen", "Ximena", "Yusuf", "Zoe",
    "Amir", "Bea", "Carl", "Dina", "Emil", "Fatima", "Gus", "Hana", "Ivan", "Jade", "Kofi", "Lena", "Marco", "Noor",
)
LAST_NAMES = (
    "Abe", "Brandt", "Costa", "Diallo", "Evans", "Fischer", "Garcia", "Haddad", "Ito", "Jensen", "Kowalski",
    "Larsen", "Moreau", "Nakamura", "Okafor", "Petrov", "Quispe", "Rossi", "Silva", "Tanaka", "Usman", "Varga",
    "Weber", "Xu", "Yilmaz", "Zhang", "Alvarez", "Becker", "Chen", "Dubois", "Eriksen", "Ferreira", "Gomez",
    "Horvat", "Ivanova", "Kim", "Lopez", "Meyer", "Novak", "Olsen",
)
CITIES = (
    "Amsterdam", "Athens", "Bangkok", "Berlin", "Bogota", "Boston", "Cairo", "Chicago", "Denver", "Dublin",
    "Hanoi", "Helsinki", "Istanbul", "Jakarta", "Kyoto", "Lagos", "Lima", "Lisbon", "London", "Madrid", "Manila",
    "Miami", "Milan", "Montreal", "Mumbai", "Nairobi", "Oslo", "Paris", "Prague", "Quito", "Rome", "Santiago",
    "Seoul", "Seattle", "Sydney", "Taipei", "Tokyo", "Toronto", "Vienna", "Warsaw",
)
FIRST_DAY = datetime.date(2024, 1, 1)
N_DAYS = 731  # 2024-01-01 .. 2025-12-31
KEY_LOW, KEY_HIGH = 1000, 10000  # keys are a prefix and four digits


def rng_for(seed: int, purpose: str) -> random.Random:
    digest = hashlib.sha256(f"{seed}/{purpose}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def key_prefixes(tables: tuple[TableInfo, ...]) -> dict[str, str]:
    """`users` -> `U`; a later table with the same initial gets a longer prefix (`trips` `T`, `tickets` `TI`)."""
    prefixes: dict[str, str] = {}
    taken: set[str] = set()
    for table in tables:
        letters = "".join(c for c in table.name if c.isalnum()).upper() or "K"
        prefix = next((letters[:n] for n in range(1, len(letters) + 1) if letters[:n] not in taken), None)
        if prefix is None:
            prefix = next(f"{letters}{n}" for n in range(2, 100) if f"{letters}{n}" not in taken)
        taken.add(prefix)
        prefixes[table.name] = prefix
    return prefixes


MAX_ROW_DRAWS = 100  # draws of one row that its table's `where` refuses, before the environment is reported broken
_UNIQUE = ("key", "name")  # columns drawn without repeats across a table: a row's redraw keeps them


class TableMaker:
    """Generates an environment's tables for a seed and a draw number (a redraw uses the next draw number).

    `conditions`: for a table with a `where`, that condition compiled over a row; a generated row it does not hold
    for is drawn again (its columns other than keys and names, which are unique across the table), from a random
    stream of its own, so that the other rows stay as they were."""

    def __init__(self, env: CheckedEnvironment, conditions: Mapping[str, Callable[[dict[str, Any]], Any]]):
        self.env, self.conditions = env, conditions
        self.prefixes = key_prefixes(env.tables)
        self.days = [(FIRST_DAY + datetime.timedelta(days=n)).isoformat() for n in range(N_DAYS)]
        self.keys = {t.name: t.key for t in env.tables}

    def make(self, seed: int, draw: int) -> Database:
        rows: dict[str, list[dict[str, Any]]] = {}
        for table in self.env.tables:
            rng = rng_for(seed, f"{draw}/table/{table.name}")
            count = rng.randint(*table.rows)
            columns = [self.column(table, column.generator.kind, column.generator.args, count, rng, rows)
                       for column in table.columns]
            names = [c.name for c in table.columns]
            rows[table.name] = [dict(zip(names, values)) for values in zip(*columns)] if count else []
            condition = self.conditions.get(table.name)
            if condition is not None:
                for index, row in enumerate(rows[table.name]):
                    self.satisfy(table, condition, row, seed, f"{draw}/table/{table.name}/row/{index}", rows)
        return Database(rows, self.keys)

    def satisfy(self, table: TableInfo, condition: Callable[[dict[str, Any]], Any], row: dict[str, Any],
                seed: int, purpose: str, rows: dict[str, list[dict[str, Any]]]) -> None:
        """Redraw `row` (in place) until `condition` is definitely true of it."""
        redrawn = [column for column in table.columns if column.generator.kind not in _UNIQUE]
        for attempt in range(MAX_ROW_DRAWS):
            if condition(row) is True:
                return
            rng = rng_for(seed, f"{purpose}/{attempt}")
            for column in redrawn:
                row[column.name] = self.column(table, column.generator.kind, column.generator.args, 1, rng, rows)[0]
        if condition(row) is not True:
            assert table.where is not None
            raise EnvError([self.env.source.diagnostic(
                table.where.loc, f"no row of `{table.name}` satisfies its `where` in {MAX_ROW_DRAWS} draws on seed "
                                 f"{seed}; loosen the condition or widen the columns it reads")])

    def column(self, table: TableInfo, kind: str, args: tuple[Any, ...], count: int, rng: random.Random,
               rows: dict[str, list[dict[str, Any]]]) -> list[Any]:
        if kind == "key":
            prefix = self.prefixes[table.name]
            return [f"{prefix}{n}" for n in rng.sample(range(KEY_LOW, KEY_HIGH), count)]
        if kind == "name":  # unique within a table, so that a name finds one person
            last = len(LAST_NAMES)
            picks = rng.sample(range(len(FIRST_NAMES) * last), count)
            return [f"{FIRST_NAMES[n // last]} {LAST_NAMES[n % last]}" for n in picks]
        if kind == "city":
            return [rng.choice(CITIES) for _ in range(count)]
        if kind == "date":
            return [self.days[rng.randrange(N_DAYS)] for _ in range(count)]
        if kind == "int":
            return [rng.randint(args[0], args[1]) for _ in range(count)]
        if kind == "float":
            return [round(rng.uniform(args[0], args[1]), 2) for _ in range(count)]
        if kind == "enum":
            return [rng.choice(args) for _ in range(count)]
        if kind == "bool":
            return [rng.random() < 0.5 for _ in range(count)]
        assert kind == "ref", f"unchecked generator {kind}"
        target = args[0]
        key = self.keys[target]
        assert key is not None, f"the checker lets `ref {target}` name only a table with a key"
        keys = [row[key] for row in rows[target]]
        return [rng.choice(keys) if keys else None for _ in range(count)]
