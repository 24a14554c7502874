"""The recorder of the `toolenv` facts (`grammars/toolenv.rubric`): one per episode, for every tool environment.

Capability environments and tau2-bench record their steps here, so a fact means the same thing in both. Per agent
turn, a tool call (its outcome, in the environment's terms) or a message (and the user's reply):
- action: `tool` (missing for a message or an unreadable call), `kind`, `accepted` (a message always is), `args`
  (sorted, distinct), `target` (missing if none), `confirmed` (the user's latest message before the turn says
  yes, read with `trace_rl.llm.chat.says_yes` once per message, when a turn follows it), `text` (the turn as recorded);
- state after it: `revealed` (keys seen in tool results so far, sorted), `checked` (an accepted query),
  `last_error` (missing unless the call failed), `user_msg` (the user's latest message), `db_changed`, `n_errors`
  (failed calls so far), `rows` (when the environment counts them), `done` (when `records_done`).
`states[0]` is the state before the first turn, its `user_msg` the user's opening.
Left out: anything environment-specific (how `args` and `target` are read from a call is the environment's own).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from tracec.trace_rl.envs.consent import says_yes


class ToolOutcome(Protocol):
    """What the recorder reads of one tool call's outcome (both environments' outcome types have these)."""

    @property
    def kind(self) -> str: ...  # query | mutate | invalid

    @property
    def tool(self) -> str | None: ...

    @property
    def accepted(self) -> bool: ...

    @property
    def error(self) -> str | None: ...

    @property
    def changed(self) -> bool: ...

    @property
    def revealed(self) -> Iterable[str]: ...


class ToolFacts:
    """The `states` and `actions` of one episode, appended to as its turns are taken."""

    def __init__(self, *, records_done: bool = True) -> None:
        self.records_done = records_done
        self.states: list[dict[str, Any]] = []
        self.actions: list[dict[str, Any]] = []

    def start(self, opening: str) -> None:
        self._revealed: set[str] = set()
        self._revealed_list: list[str] = []  # sorted; rebuilt only when a key is new
        self._errors = 0
        self._hear(opening)
        self._consent()  # the first turn always needs it: read it with the reset, not in the first step
        state: dict[str, Any] = {"revealed": self._revealed_list, "checked": False, "user_msg": opening,
                                 "db_changed": False, "n_errors": 0}
        if self.records_done:
            state["done"] = False
        self.states, self.actions = [state], []

    def tool_call(self, text: str, outcome: ToolOutcome, *, args: Iterable[str], target: str | None,
                  done: bool, rows: int | None = None) -> None:
        kind, accepted, error, revealed = outcome.kind, outcome.accepted, outcome.error, outcome.revealed
        if revealed and not self._revealed.issuperset(revealed):
            self._revealed.update(revealed)
            self._revealed_list = sorted(self._revealed)
        action: dict[str, Any] = {"kind": kind, "accepted": accepted, "args": sorted(set(args)),
                                  "confirmed": self._consent(), "text": text}
        if outcome.tool is not None:
            action["tool"] = outcome.tool
        if target is not None:
            action["target"] = target
        if error is not None:
            self._errors += 1
        # Built inline, not by `_state`: this is every tool step's cost.
        state: dict[str, Any] = {"revealed": self._revealed_list, "checked": kind == "query" and accepted,
                                 "user_msg": self._user_msg, "db_changed": outcome.changed, "n_errors": self._errors}
        if self.records_done:
            state["done"] = done
        if error is not None:
            state["last_error"] = error
        if rows is not None:
            state["rows"] = rows
        self.actions.append(action)
        self.states.append(state)

    def message(self, text: str, reply: str, *, done: bool) -> None:
        self.actions.append({"kind": "message", "accepted": True, "args": [], "confirmed": self._consent(),
                             "text": text})
        self._hear(reply)
        self.states.append(self._state(checked=False, changed=False, done=done))

    def _hear(self, user_msg: str) -> None:
        self._user_msg: str = user_msg
        self._confirmed: bool | None = None

    def _consent(self) -> bool:
        """Whether the user's latest message consents: read once, when the next turn needs it (not for the closing
        message, which no turn follows; the reading costs more than the rest of a step)."""
        if self._confirmed is None:
            self._confirmed = says_yes(self._user_msg)
        return self._confirmed

    def _state(self, *, checked: bool, changed: bool, done: bool) -> dict[str, Any]:
        state: dict[str, Any] = {"revealed": self._revealed_list, "checked": checked, "user_msg": self._user_msg,
                                 "db_changed": changed, "n_errors": self._errors}
        if self.records_done:
            state["done"] = done
        return state


class RecordsToolFacts:
    """A tool environment whose `states` and `actions` are those its `ToolFacts` recorder (`_facts`) holds."""

    _facts: ToolFacts

    @property
    def states(self) -> list[dict[str, Any]]:
        return self._facts.states

    @property
    def actions(self) -> list[dict[str, Any]]:
        return self._facts.actions
