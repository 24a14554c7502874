"""tau2 tasks: the user scenario, the gold actions and the strings the agent must communicate; the splits.

Reads a domain's `tasks.json` and `split_tasks.json`. A task's `instruction` is its user scenario as one text,
the same text the user simulator plays and the trajectory's `instruction`, so rubric bindings read what the
user was told. Left out: `nl_assertions` (they need an LLM judge; the scores here are DB + COMMUNICATE, the
basis the shipped tasks use) and `initial_state` (null in every shipped airline and retail task; a task that
sets it is refused at load, not silently run from the wrong state).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCENARIO_FIELDS = (
    ("domain", "Domain"),
    ("reason_for_call", "Reason for call"),
    ("known_info", "Known info"),
    ("unknown_info", "Unknown info"),
    ("task_instructions", "Task instructions"),
)


@dataclass(frozen=True, kw_only=True)
class GoldAction:
    action_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Task:
    domain: str
    id: str
    instruction: str
    persona: str | None
    actions: tuple[GoldAction, ...]
    communicate_info: tuple[str, ...]

    @property
    def key(self) -> str:
        """`domain/id`: the trajectory's `task`, which groups rollouts of one task."""
        return f"{self.domain}/{self.id}"


class TaskError(ValueError):
    """A tasks file that cannot be read, with its path and the task at fault."""


def load_tasks(domain: str, data_dir: Path) -> dict[str, Task]:
    """All tasks of a domain by id, in file order."""
    path = Path(data_dir) / domain / "tasks.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise TaskError(f"{path}: cannot read tasks: {err}") from None
    if not isinstance(raw, list):
        raise TaskError(f"{path}: expected a list of tasks")
    tasks: dict[str, Task] = {}
    for index, entry in enumerate(raw):
        try:
            task = _task(domain, entry)
        except (KeyError, TypeError, ValueError) as err:
            raise TaskError(f"{path}: task #{index}: {err}") from None
        tasks[task.id] = task
    return tasks


def load_split(domain: str, data_dir: Path, split: str) -> tuple[str, ...]:
    """The task ids of one split (`train`, `test`, `base`) from `split_tasks.json`."""
    path = Path(data_dir) / domain / "split_tasks.json"
    try:
        splits = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise TaskError(f"{path}: cannot read splits: {err}") from None
    if split not in splits:
        raise TaskError(f"{path}: no split `{split}`; the splits are {', '.join(sorted(splits))}")
    return tuple(str(task_id) for task_id in splits[split])


def _task(domain: str, entry: dict[str, Any]) -> Task:
    if entry.get("initial_state") is not None:
        raise ValueError("tasks with an initial_state are not supported")
    scenario = entry["user_scenario"]
    criteria = entry.get("evaluation_criteria") or {}
    actions = tuple(
        GoldAction(
            action_id=str(action.get("action_id", "")),
            name=action["name"],
            arguments=dict(action.get("arguments") or {}),
        )
        for action in criteria.get("actions") or ()
    )
    for action in criteria.get("actions") or ():
        if action.get("requestor", "assistant") != "assistant":
            raise ValueError(f"gold action {action.get('action_id')}: only assistant actions are supported")
    return Task(
        domain=domain,
        id=str(entry["id"]),
        instruction=scenario_text(scenario.get("instructions")),
        persona=scenario.get("persona"),
        actions=actions,
        communicate_info=tuple(str(info) for info in criteria.get("communicate_info") or ()),
    )


def scenario_text(instructions: Any) -> str:
    """The user's instructions as labelled paragraphs (a plain string passes through)."""
    if isinstance(instructions, str):
        return instructions
    if not isinstance(instructions, dict):
        raise TypeError("user_scenario.instructions must be text or an object")
    parts = [
        f"{label}: {str(instructions[key]).strip()}"
        for key, label in _SCENARIO_FIELDS
        if instructions.get(key)
    ]
    return "\n\n".join(parts)
