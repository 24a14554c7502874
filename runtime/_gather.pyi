"""Types of the C extension tracec.runtime._gather (runtime/_gather.c); tracec.runtime.columns is its one user."""

from typing import Any, TypeAlias

import numpy as np

_Coded: TypeAlias = tuple[bytearray, bytearray, bytearray | None]

def gather(
    groups: list[Any], fields: list[tuple[str, int, dict[Any, int] | None, int]], bases: list[int]
) -> tuple[list[_Coded | None], list[list[str]]] | None: ...
def sorted_sets(codes: np.ndarray, lengths: np.ndarray, ids: np.ndarray) -> tuple[bytearray, bytearray]: ...
def take_sets(values: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> tuple[bytearray, bytearray]: ...
