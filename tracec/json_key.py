"""The key of a JSON-able value: what a resumable step, a progress file, an evaluation folder and the TextWorld game
cache are keyed by, so that equal inputs find each other's results across processes and runs.

One function for all of them, since a second spelling (keys unsorted, another encoding of non-JSON values) would key
the same inputs two ways. Kernels are keyed apart, over strings (`tracec.compiler.cache.content_key`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def json_key(value: Any, length: int = 16) -> str:
    """The first `length` hex digits (of 64) of the SHA-256 of `value` as JSON: object keys sorted, and a value JSON
    has no form for (a Path) as its str()."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:length]
