"""`~` and `~user` in a path a user wrote, expanded by one rule. pathlib answers a `~user` that names no user of the
machine with a bare RuntimeError; here it is a `NoSuchUserError`, an OSError that names where the path came from, so
every reader of a path (a config, a flag, `$TRACEC_CACHE_DIR`) says the mistake instead of a traceback, and never
takes `~typo/...` as a relative folder of that name."""

from __future__ import annotations

import errno
import os
from pathlib import Path


class NoSuchUserError(OSError):
    """A path whose leading `~user` names no user of this machine."""


def expand_user(value: str | os.PathLike[str], *, given_as: str | None = None) -> Path:
    """`value` with `~` and `~user` expanded; `given_as` names where it came from (default: the path itself)."""
    try:
        return Path(value).expanduser()
    except RuntimeError:
        user = Path(value).parts[0]
        raise NoSuchUserError(errno.ENOENT, f"`{user}` names no user of this machine; write the path from `/`, or as "
                              "a relative path", given_as or str(value)) from None
