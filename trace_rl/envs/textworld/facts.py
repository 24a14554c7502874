"""Canonical facts for TextWorld games: one state dict per game state, one action dict per command.

The fields are those of the `textworld` schema in `examples/textworld.rubric`. TextWorld reports its world as a
list of logic propositions (`at(P, kitchen: r)`, `in(apple: f, I)`, `open(fridge: c)`, ...); the player's location,
inventory and what is in view are derived from them here, since TextWorld does not report them as such.
Entity names are the names shown to the player, lower case ("red apple"); the player `P`, the inventory `I` and
the cooking games' `RECIPE` are never entities. Sets are written as sorted lists so that a state is JSON as is.

Commands are parsed with the grammar of TextWorld's command templates (`take {o} from {c}`, `unlock {d} with {k}`,
`cook {f} with {oven}`, ...) plus a few Inform abbreviations (`l`, `i`, `x`, `get`, bare directions). `obj` is the
first argument (the direction for `go`), `recep` the second one (the container of `take ... from`, the target of
`put`/`insert`, the key of `unlock ... with`, the tool of `cook`/`slice ... with`). Left out: light, darkness and
scope rules of Inform (a closed transparent container hides its contents here), and commands outside those
templates, which parse as verb `other`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

VERBS = (
    "go", "take", "drop", "put", "insert", "open", "close", "unlock", "lock", "eat", "examine", "look",
    "inventory", "cook", "slice", "chop", "dice", "prepare", "other",
)  # fmt: skip

_DIRECTIONS = "north|south|east|west"
_ARTICLE = re.compile(r"^(?:the|a|an|some) ")
_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
# The interpreter's prompt and status line ("\n>   -= Kitchen =-0/3") that end every raw feedback.
_PROMPT_TAIL = re.compile(r"\n>[ \t]*(?:-= [^\n]*? =-\s*-?\d+/\d+)?\s*$")

# (verb, pattern over the normalized command); the first full match wins, so a two-argument form precedes
# its one-argument form. Lazy `.+?` splits at the first preposition: TextWorld names do not contain them.
_TEMPLATES = tuple(
    (verb, re.compile(pattern))
    for verb, pattern in (
        ("go", rf"(?:go |walk )?(?P<obj>{_DIRECTIONS})"),
        ("look", r"look|l"),
        ("inventory", r"inventory|inv|i"),
        ("take", r"(?:take|get|pick up) (?P<obj>.+?) from (?P<recep>.+)"),
        ("take", r"(?:take|get|pick up) (?P<obj>.+)"),
        ("insert", r"(?:insert|put) (?P<obj>.+?) (?:into|in) (?P<recep>.+)"),
        ("put", r"put (?P<obj>.+?) on (?P<recep>.+)"),
        ("drop", r"drop (?P<obj>.+)"),
        ("open", r"open (?P<obj>.+)"),
        ("close", r"close (?P<obj>.+)"),
        ("unlock", r"unlock (?P<obj>.+?) with (?P<recep>.+)"),
        ("lock", r"lock (?P<obj>.+?) with (?P<recep>.+)"),
        ("eat", r"eat (?P<obj>.+)"),
        ("examine", r"(?:examine|x) (?P<obj>.+)"),
        ("cook", r"cook (?P<obj>.+?) with (?P<recep>.+)"),
        ("slice", r"slice (?P<obj>.+?) with (?P<recep>.+)"),
        ("chop", r"chop (?P<obj>.+?) with (?P<recep>.+)"),
        ("dice", r"dice (?P<obj>.+?) with (?P<recep>.+)"),
        ("prepare", r"prepare (?P<obj>.+)"),
    )
)
# A known verb whose arguments are missing or malformed ("take", "unlock door") is not `parsed`.
_VERB_WORDS = {
    "go": "go", "walk": "go", "take": "take", "get": "take", "pick": "take", "drop": "drop", "put": "put",
    "insert": "insert", "open": "open", "close": "close", "unlock": "unlock", "lock": "lock", "eat": "eat",
    "examine": "examine", "x": "examine", "cook": "cook", "slice": "slice", "chop": "chop", "dice": "dice",
    "prepare": "prepare",
}  # fmt: skip

# Proposition arguments of these types are not things a player can name.
_NOT_ENTITIES = frozenset({"P", "I", "RECIPE"})


@dataclass(frozen=True, kw_only=True)
class ParsedCommand:
    verb: str
    obj: str | None = None
    recep: str | None = None
    parsed: bool = False


def normalize_command(command: str) -> str:
    """Lower case, single spaces, no trailing period: the form admissible commands are compared in."""
    return " ".join(command.lower().split()).rstrip(".!").rstrip()


def clean_feedback(feedback: str | None) -> str:
    """The game's answer without the trailing prompt and status line."""
    return _PROMPT_TAIL.sub("", feedback or "").strip()


MAX_COMMAND_BYTES = 190  # the interpreter truncates a command past 198 bytes
_UNSAFE = re.compile(r"[\\\x00-\x1f\x7f]")


def extract_command(text: str) -> str:
    """The command in an agent's reply: the inside of the first `<action>...</action>`, else the first line.

    Backslashes and control characters become spaces and the length is bounded: the game's interpreter reads `\\` as the
    start of a debugging command (`x\\D` kills the process) and a NUL byte hangs it.
    """
    tagged = _ACTION_TAG.search(text)
    if tagged is not None:
        command = tagged.group(1)
    else:
        command = next((line for line in text.splitlines() if line.strip()), "")
    safe = _UNSAFE.sub(" ", command).strip().encode("utf-8")[:MAX_COMMAND_BYTES]
    return safe.decode("utf-8", "ignore").strip()


def parse_command(command: str) -> ParsedCommand:
    """Split a command into verb, object and receptacle; `verb` is `other` when no template matches."""
    norm = normalize_command(command)
    for verb, pattern in _TEMPLATES:
        found = pattern.fullmatch(norm)
        if found is not None:
            groups = found.groupdict()
            return ParsedCommand(
                verb=verb, obj=_entity(groups.get("obj")), recep=_entity(groups.get("recep")), parsed=True
            )
    first = norm.split(" ", 1)[0]
    return ParsedCommand(verb=_VERB_WORDS.get(first, "other"))


def _entity(words: str | None) -> str | None:
    return None if words is None else _ARTICLE.sub("", words)


def with_history(state: dict[str, Any], previous: Mapping[str, Any] | None) -> dict[str, Any]:
    """`state` with what the episode has shown up to and including it: the rooms `visited`, every entity `seen`,
    `held` or `ever_opened`. A rubric pays a discovery once with these; on the instant facts alone, shuttling between
    rooms or opening and closing a box would be paid again every time."""
    history = {"visited": [state["location"]] if "location" in state else [], "seen": state["visible"],
               "held": state["holding"], "ever_opened": state["opened"]}
    for name, now in history.items():
        state[name] = sorted(set(now) | set(previous[name] if previous is not None else ()))
    return state


def state_facts(game_state: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical state of one TextWorld `GameState` (requested with `facts`, `score`, `won`, `lost`)."""
    location: str | None = None
    holding: list[str] = []
    opened: list[str] = []
    closed: list[str] = []
    in_room: dict[str, list[str]] = {}  # room -> things at it and its doors
    inside: dict[str, list[str]] = {}  # container or supporter -> things in or on it
    for fact in game_state["facts"]:
        name, args = fact.name, fact.arguments
        if name == "at":
            if args[0].type == "P":
                location = args[1].name.lower()
            else:
                in_room.setdefault(args[1].name.lower(), []).append(args[0].name.lower())
        elif name == "in" or name == "on":
            if args[1].type == "I":
                holding.append(args[0].name.lower())
            elif args[1].type not in _NOT_ENTITIES:
                inside.setdefault(args[1].name.lower(), []).append(args[0].name.lower())
        elif name == "open":
            opened.append(args[0].name.lower())
        elif name == "closed" or name == "locked":
            closed.append(args[0].name.lower())
        elif name == "link":  # link(room, door, other room): the door is seen from both rooms
            in_room.setdefault(args[0].name.lower(), []).append(args[1].name.lower())
    state: dict[str, Any] = {
        "holding": sorted(holding),
        "visible": sorted(_visible(in_room.get(location, ()) if location else (), inside, set(closed))),
        "opened": sorted(opened),
        "closed": sorted(set(closed)),
        "score": int(game_state["score"] or 0),
        "feedback": clean_feedback(game_state["feedback"]),
        "won": bool(game_state["won"]),
        "lost": bool(game_state["lost"]),
    }
    if location is not None:
        state["location"] = location
    return state


def _visible(roots: Iterable[str], inside: Mapping[str, list[str]], closed: set[str]) -> set[str]:
    """Things in the room, and what lies on or in them, down through anything not closed."""
    seen = set(roots)
    frontier = list(seen)
    while frontier:
        holder = frontier.pop()
        if holder in closed:
            continue
        for thing in inside.get(holder, ()):
            if thing not in seen:
                seen.add(thing)
                frontier.append(thing)
    return seen


def action_facts(
    *, text: str, command: str, admissible_before: Iterable[str], score_before: int, score_after: int
) -> dict[str, Any]:
    """The canonical action: the agent's reply `text`, the `command` played from it, the state it was played
    in (its admissible commands and score) and the score after it."""
    parsed = parse_command(command)
    action: dict[str, Any] = {
        "verb": parsed.verb,
        "parsed": parsed.parsed,
        "admissible": normalize_command(command) in {normalize_command(c) for c in admissible_before},
        "score_delta": int(score_after) - int(score_before),
        "text": text,
    }
    if parsed.obj is not None:
        action["obj"] = parsed.obj
    if parsed.recep is not None:
        action["recep"] = parsed.recep
    return action
