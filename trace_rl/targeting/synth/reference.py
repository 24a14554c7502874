"""What a synthesis prompt teaches the model: sections of the language guide, and worked examples.

The guide is the project's `docs/language.md`; the examples are the shipped `examples/envs/*.rubric` and
`examples/*.rubric`. Both live in the repository beside the package (tracec installs editable, as `make` does);
`--library DIR` points elsewhere for the environments, and a missing file is an error that says so.
A prompt carries only the sections its task needs (an environment writer reads types, environments and errors,
not the reward math), which keeps it within a small model's context.
"""

from __future__ import annotations

import re
from pathlib import Path

from tracec.trace_rl.llm.replies import fenced_blocks

REPOSITORY = Path(__file__).resolve().parents[3]
GUIDE = REPOSITORY / "docs" / "language.md"
LIBRARY = REPOSITORY / "examples" / "envs"
EXAMPLES = REPOSITORY / "examples"


class MissingReference(Exception):
    """A reference file or folder that is not there; the message says which flag points elsewhere."""


def guide_sections(numbers: tuple[int, ...], path: Path | None = None) -> str:
    """The guide's `## N. ...` sections with these numbers, in order; the whole guide if it has no such headings."""
    source = path or GUIDE
    try:
        text = source.read_text(encoding="utf-8")
    except OSError:
        raise MissingReference(f"{source}: the language guide is not there (synthesis reads docs/language.md of "
                               "the tracec checkout it is installed from)") from None
    parts = re.split(r"(?m)^(?=## \d+\.)", text)
    chosen = [p for p in parts if (m := re.match(r"## (\d+)\.", p)) and int(m.group(1)) in numbers]
    return "".join(chosen).strip() if chosen else text.strip()


def example_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        raise MissingReference(f"{path}: the example is not there; pass --library DIR") from None


def rubric_source(reply: str) -> str:
    """The `.rubric` program in a reply: its first fence tagged rubric, else its first fence, else all of it."""
    blocks = fenced_blocks(reply)
    tagged = [body for tag, body in blocks if tag == "rubric"]
    return (tagged or [body for _, body in blocks] or [reply])[0].strip() + "\n"
