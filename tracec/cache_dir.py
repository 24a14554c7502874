"""Where tracec keeps what it can rebuild (the parser's tables, compiled kernels, made games): `$TRACEC_CACHE_DIR`,
else `~/.cache/tracec`. A reader of the environment, for the callers that build a cache (the command line, the parser's
first use); everything below them takes the folder as an argument."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tracec.user_path import expand_user


def home_cache() -> Path:
    """`~/.cache/tracec`: the root of every folder tracec keeps when no variable names another."""
    return Path.home() / ".cache" / "tracec"


def cache_root(environ: Mapping[str, str]) -> Path:
    configured = environ.get("TRACEC_CACHE_DIR")
    return expand_user(configured, given_as=f"$TRACEC_CACHE_DIR={configured}") if configured else home_cache()
