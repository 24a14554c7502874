"""Whether a file is a game TextWorld can play, told from its header and the facts file beside it, without TextWorld.

    problem = game_file_problem(Path("games/house.z8"))   # None, or why not, for the config's error

What a config's `env.textworld.game` is checked by, both when a run's inputs are checked (`grpo.preflight`, in well
under a second: TextWorld itself takes seconds to import) and when its environments are made (`envs.registry`).
Left out: whether the game can be won (TextWorld's own answer, once it plays it).
"""

from __future__ import annotations

from pathlib import Path


def game_file_problem(game: Path) -> str | None:
    """Why `game` is no game TextWorld can play (None: it is one, as far as its header and files tell): a game is
    the Z-machine (`.z8`) or Glulx (`.ulx`) file `tw-make` writes, with the game's facts in a `.json` beside it."""
    try:
        with open(game, "rb") as handle:
            header = handle.read(64)
    except FileNotFoundError:
        return "no such game file (make one with `tw-make`, or leave it out to train on a family of games, one " \
            "per seed)"
    except IsADirectoryError:
        return "is a folder, not a game file"
    except OSError as error:
        return (error.strerror or str(error)).lower()
    z_machine = len(header) == 64 and 1 <= header[0] <= 8  # its first byte is the Z-machine version
    if not (z_machine or header.startswith(b"Glul")):
        return "not a TextWorld game: its first bytes are neither a Z-machine nor a Glulx header (a game is the " \
            "`.z8` or `.ulx` file `tw-make` writes)"
    facts = game.with_suffix(".json")
    if not facts.is_file():
        return f"a game without its {facts.name} beside it (`tw-make` writes the game's facts there, and TextWorld " \
            "reads them with the game)"
    return None
