"""The on-disk kernel cache: generated sources and compiled libraries under one directory, named by content hash.

A file's name is the sha256 of everything that decides its contents (generated source, tracec version, compiler
versions, backend version), so a changed program or toolchain lands in a new file and a stale one is never picked
up. Files are written to a temporary name and moved into place (`os.replace`), so a reader sees a whole file or
none, even with several processes compiling at once.

The cache is an object passed in; nothing here keeps global state. Left out: eviction (files are small; delete the
directory to reset it).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from tracec.atomic import write_atomic


def content_key(*parts: str) -> str:
    """sha256 over the parts (length-prefixed, so that moving text from one part to the next changes the key)."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True)
class KernelCache:
    path: Path

    def directory(self, backend: str) -> Path:
        folder = Path(self.path) / backend
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def write_text(self, backend: str, name: str, text: str) -> Path:
        """The path of `backend/name` holding exactly `text`: kept when it already does, else (re)written atomically
        (so a file that was edited by hand is put back before anything compiles it)."""
        target = self.directory(backend) / name
        if target.exists() and target.read_text(encoding="utf-8") == text:
            return target
        write_atomic(target, [text])
        return target

    def install(self, backend: str, name: str, built: Path) -> Path:
        """Move a file built elsewhere in the cache directory into place as `backend/name`, atomically."""
        target = self.directory(backend) / name
        os.replace(built, target)
        return target
