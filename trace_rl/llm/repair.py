"""The bounded ask-check-repair loop: ask the model, check its reply, send the problem back, try again.

Every LLM step of tracec goes through `ask`: the JSON answers of discovery and labeling (checked by `find_json`
against a schema) and the `.rubric` programs of synthesis (checked by the compiler, whose located errors go
back). Each attempt is one logged call and one logged verdict. A retry shows the model its previous reply and what
was wrong with it; only the latest failed attempt is kept in the conversation, so a small model's context does not
fill up with its own mistakes. With a seed, attempt k samples under seed + k - 1, so a retry is never a replay.
After `tries` attempts, `RepairFailed` says what was asked, how often, and what was wrong the last time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tracec.trace_rl.llm.calls import CallLog
from tracec.trace_rl.llm.chat import Sampling, SamplingBackend
from tracec.trace_rl.llm.replies import ReplyProblem, find_json

T = TypeVar("T")
TRIES = 3  # attempts per step, the default of every command and config that asks (`--tries`, `llm.tries`)


class RepairFailed(Exception):
    """No acceptable reply within the bound; `problems` holds each attempt's problem, in order."""

    def __init__(self, purpose: str, problems: list[str], log: CallLog) -> None:
        self.purpose, self.problems = purpose, problems
        super().__init__(f"{purpose}: no acceptable reply in {len(problems)} tries; the last one: {problems[-1]} "
                         f"(every attempt is in {log.path})")


@dataclass(frozen=True)
class Accepted(Generic[T]):
    value: T
    reply: str
    attempts: int


def ask(backend: SamplingBackend, messages: list[dict[str, str]], check: Callable[[str], T], *, log: CallLog,
        purpose: str, tries: int, sampling: Sampling | None = None, instruction: str = "Reply again in full.",
        ) -> Accepted[T]:
    """The first reply `check` accepts (it raises `ReplyProblem` to reject one), within `tries` attempts."""
    if tries < 1:
        raise ValueError(f"tries={tries} must be at least 1")
    sampling = sampling or Sampling()
    problems: list[str] = []
    conversation = list(messages)
    for attempt in range(1, tries + 1):
        seed = None if sampling.seed is None else sampling.seed + attempt - 1
        replies, call = log.sample(backend, conversation, dataclasses.replace(sampling, seed=seed, n=1),
                                   purpose=purpose, attempt=attempt)
        reply = replies[0]
        try:
            value = check(reply)
        except ReplyProblem as problem:
            problems.append(str(problem))
            log.verdict(call, f"rejected: {problem}")
            conversation = [*messages, {"role": "assistant", "content": reply},
                            {"role": "user", "content": f"That reply cannot be used: {problem}\n{instruction}"}]
            continue
        log.verdict(call, "accepted")
        return Accepted(value, reply, attempt)
    raise RepairFailed(purpose, problems, log)


def ask_json(backend: SamplingBackend, messages: list[dict[str, str]], schema: dict[str, Any], *, log: CallLog,
             purpose: str, tries: int, sampling: Sampling | None = None,
             check: Callable[[Any], Any] | None = None) -> Accepted[Any]:
    """A JSON value matching `schema` (then passing `check`, which may raise `ReplyProblem` or return a value)."""

    def parse(reply: str) -> Any:
        value = find_json(reply, schema)
        return value if check is None else check(value)

    return ask(backend, messages, parse, log=log, purpose=purpose, tries=tries, sampling=sampling,
               instruction="Reply again with only the corrected JSON.")
