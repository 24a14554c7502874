"""Atomic file writes: write to a temporary file beside the target, then rename over it.

A crash or an error mid-write leaves the old file (or none), never half a file. An error of the file system names
the file the caller asked for, never the temporary one beside it. It lives in the bottom package
(`tracec/`, which imports nothing else of the project) because every layer writes files: the compiler's cache and
artifacts, the runtime's records, the pipeline's dumps.
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yields a temporary path to write; it replaces `path` only if the block finishes without an exception."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a part of the path is a file, so the folder can never exist
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(target)) from None
    except OSError as error:
        raise _naming(error, target) from None
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
    try:
        os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))  # created like open() does: umask applies
    except OSError as error:
        raise _naming(error, target) from None
    try:
        yield Path(tmp)
        try:
            os.replace(tmp, target)
        except OSError as error:
            raise _naming(error, target) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO]:
    """`open(path, mode)` that only replaces the target once the block has finished."""
    with atomic_path(path) as tmp, open(tmp, mode, encoding=None if "b" in mode else "utf-8") as handle:
        yield handle


def write_atomic(path: str | os.PathLike[str], chunks: Iterable[str]) -> None:
    """Write the text `chunks` to `path`, all or nothing."""
    with atomic_open(path) as handle:
        for chunk in chunks:
            handle.write(chunk)


def _naming(error: OSError, target: Path) -> OSError:
    """`error` again, about `target` rather than the temporary file."""
    return type(error)(error.errno, error.strerror, str(target))
