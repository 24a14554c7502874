"""Whole-file writes: text goes to a temp file beside the target, then is renamed over it.

A reader (or a crash) never sees half a database dump or half a trajectory file. Left out: fsync of the
directory (a power cut may lose the rename, never leave a torn file).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def write_atomic(path: Path, chunks: Iterable[str]) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for chunk in chunks:
                handle.write(chunk)
        os.chmod(tmp, 0o644)  # mkstemp makes the file private; the result is an ordinary output file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
