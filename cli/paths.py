"""The paths a user gives the command line, checked before any work starts, with errors that name them.

An input must be a readable file; an output must be a file name whose folder exists or can be made (a path under a
regular file cannot, `f.rubric/x.jsonl`); a work folder must not be a file, and is made by the work itself, once
every argument is checked (a refused command leaves nothing behind); the kernel cache must be writable, and
when it is not the error says which setting moves it. Every error names the path the user typed, never a temporary
file beside it. Source files are read here too, so that a file that is not UTF-8 is reported at its first bad byte.
Left out: races (a folder removed between the check and the write still fails, with the same kind of message,
through the `OSError` mapping of `tracec.cli`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from tracec.cli.errors import UsageError, UserError
from tracec.compiler.cache import KernelCache
from tracec.dsl.source_file import decode_source

from tracec.cache_dir import cache_root

CACHE_SETTING = "TRACEC_CACHE_DIR"


def input_file(path: Path) -> Path:
    """`path` if it names a readable file; else a UserError saying what is wrong with it."""
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise _unusable(path, error) from None
    if path.is_dir():  # open() succeeds on a folder on some systems
        raise UserError("is a folder, not a file", path)
    return path


def read_source(path: Path) -> str:
    """The text of a source file; bytes that are not UTF-8 are a located error at the first one."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise _unusable(path, error) from None
    return decode_source(data, str(path))


def output_file(path: Path, suffixes: tuple[str, ...] = (), *, inputs: Iterable[Path] = ()) -> Path:
    """`path` if a file can be written there (`suffixes`: the endings allowed, else a UsageError) without
    replacing one of the command's `inputs` (the same file, through a link too), which it would destroy."""
    if path.is_dir():
        raise UserError("is a folder; name the file to write", path)
    for given in inputs:
        if _same_file(path, given):
            which = "" if os.path.normpath(given) == os.path.normpath(path) else f" {given}"
            raise UserError(f"is the input{which} itself; name another file to write", path)
    if suffixes and path.suffix not in suffixes:
        shown = " or ".join(suffixes)
        raise UsageError(f"{path}: the output's name must end in {shown}, which says its format")
    _check_folder_can_exist(path, path.parent)
    return path


def work_folder(path: Path) -> Path:
    """`path`, once it is a folder or one can be made there; not made here: the work makes it when it starts (as
    `write_atomic` makes a file's folder), so that a command refused by a later check leaves no empty folder."""
    if path.exists() and not path.is_dir():
        raise UserError("is a file, not a folder", path)
    _check_folder_can_exist(path, path)
    return path


def kernel_cache() -> KernelCache:
    """The kernel cache ($TRACEC_CACHE_DIR, else ~/.cache/tracec), made and proven writable."""
    folder = cache_root(os.environ)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as error:
        reason = UserError.from_os_error(error).message
        raise UserError(f"the kernel cache cannot be written here ({reason}); "
                        f"set ${CACHE_SETTING} to a writable folder", folder) from None
    return KernelCache(folder)


def _check_folder_can_exist(path: Path, folder: Path) -> None:
    """A UserError when the nearest existing ancestor of `folder` is a file or may not be written (so `path` can
    never be made). Root passes every permission check: its failures come from the write itself."""
    for ancestor in (folder, *folder.parents):
        if ancestor.exists():
            if not ancestor.is_dir():
                raise UserError(f"`{ancestor}` is a file, not a folder", path)
            if not os.access(ancestor, os.W_OK | os.X_OK):
                raise UserError(f"permission denied: `{ancestor}` may not be written", path)
            return


def _same_file(one: Path, other: Path) -> bool:
    """Whether both name one existing file (a link resolves to what it points at)."""
    try:
        return os.path.samefile(one, other)
    except OSError:  # either is missing or unreadable: nothing to overwrite, or the input's check says why
        return False


def _unusable(path: Path, error: OSError) -> UserError:
    if isinstance(error, NotADirectoryError):
        ancestor = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        if ancestor is not None:
            return UserError(f"`{ancestor}` is a file, not a folder", path)
    if isinstance(error, IsADirectoryError):
        return UserError("is a folder, not a file", path)
    return UserError.from_os_error(error, path)
