"""The trajectories an analysis reads, as cases: an id, success or failure, and a transcript for a prompt.

Two inputs, told apart by their content, not their names:
- our trajectory JSONL (one episode a line, `runtime.trajectories.jsonl`): the id is `episode`, success is `success`
  (or `env_reward >= 1` when absent), the transcript the instruction then each agent turn and the state after it;
- a tau2-bench result file (a JSON object with `simulations`): the id is `domain:task_id` (TRACE's ids, e.g.
  `airline:10`; `/trial` is appended when a task ran more than once), success is `reward_info.reward >= 1`, the
  transcript each message with its role and tool calls.
A transcript longer than its budget keeps its head and tail (where the task and the outcome are) and says how much
it cut. Ids must be unique across all inputs: two cases with one id would be labeled as one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracec.runtime.facts.trajectories.jsonl import Episode, read_trajectories

SUCCESS = 1.0 - 1e-9
_FIELD = 400  # characters of one state or tool result shown


class CaseError(Exception):
    """An input that cannot be read as trajectories; the message starts with the file."""


@dataclass(frozen=True, kw_only=True)
class Case:
    id: str
    success: bool
    reward: float
    transcript: str
    episode: Episode | None = None  # ours only: what a `.rubric`'s capabilities label
    source: str = ""  # the file it was read from

    def excerpt(self, budget: int) -> str:
        """The transcript within `budget` characters: head and tail, with the cut said in the middle."""
        text = self.transcript
        if len(text) <= budget:
            return text
        keep = max(budget - 40, 2)
        head, tail = text[: keep * 2 // 3], text[len(text) - keep // 3 :]
        return f"{head}\n[... {len(text) - len(head) - len(tail)} characters cut ...]\n{tail}"


def read_cases(paths: Iterable[str | os.PathLike[str]]) -> list[Case]:
    cases: list[Case] = []
    seen: dict[str, str] = {}
    for path in paths:
        for case in _read(Path(path)):
            if case.id in seen:
                raise CaseError(f"{path}: error: trajectory id {case.id!r} also appears in {seen[case.id]}; "
                                "ids must be unique across the inputs")
            seen[case.id] = str(path)
            cases.append(case)
    if not cases:
        raise CaseError("no trajectories in the inputs")
    return cases


def split(cases: Sequence[Case]) -> tuple[list[Case], list[Case]]:
    """(failed, passed), each in input order."""
    return [c for c in cases if not c.success], [c for c in cases if c.success]


def _read(path: Path) -> list[Case]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise CaseError(f"{path}: error: {error.strerror}") from None
    except UnicodeDecodeError:
        raise CaseError(f"{path}: error: not UTF-8 text") from None
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None  # JSONL: a line is an object, the file as a whole is not one value
    if isinstance(whole, dict) and "episode" not in whole:  # (a one-episode JSONL file is one object too)
        if "simulations" not in whole:
            raise CaseError(f"{path}: error: one JSON object without `simulations`: neither trajectory JSONL (one "
                            "episode a line) nor a tau2-bench result file")
        return _tau2_cases(path, whole)
    return [_our_case(e, str(path)) for e in read_trajectories(path)]


def succeeded(episode: Episode) -> bool:
    """An episode's `success`, or, where it has none, whether its reward is 1."""
    return episode.success if episode.success is not None else episode.env_reward >= SUCCESS


def _our_case(episode: Episode, source: str) -> Case:
    success = succeeded(episode)
    lines = [f"task: {episode.instruction}"] if episode.instruction else []
    for action, state in zip(episode.actions, episode.states[1:]):
        text = action.get("text")
        lines.append(f"agent: {text if isinstance(text, str) else _clip(json.dumps(action, ensure_ascii=False))}")
        shown = {k: v for k, v in state.items() if k != "text"}
        lines.append(f"  -> {_clip(json.dumps(shown, ensure_ascii=False, sort_keys=True))}")
    lines.append(f"outcome: {'success' if success else 'failure'} (reward {episode.env_reward:g})")
    return Case(id=episode.episode, success=success, reward=episode.env_reward, transcript="\n".join(lines),
                episode=episode, source=source)


def _tau2_cases(path: Path, data: dict[str, Any]) -> list[Case]:
    simulations = data["simulations"]
    if not isinstance(simulations, list):
        raise CaseError(f"{path}: error: `simulations` must be a list")
    info = data.get("info")
    environment = info.get("environment_info") if isinstance(info, dict) else None
    domain = str((environment.get("domain_name") if isinstance(environment, dict) else None) or path.stem)
    runs: dict[str, int] = {}
    for sim in simulations:
        if isinstance(sim, dict):
            runs[str(sim.get("task_id"))] = runs.get(str(sim.get("task_id")), 0) + 1
    cases = []
    for index, sim in enumerate(simulations):
        if not isinstance(sim, dict) or "task_id" not in sim:
            raise CaseError(f"{path}: error: simulations[{index}] has no `task_id`")
        reward_info = sim.get("reward_info")
        reward = reward_info.get("reward") if isinstance(reward_info, dict) else None
        if not isinstance(reward, (int, float)) or isinstance(reward, bool):
            raise CaseError(f"{path}: error: simulations[{index}] has no numeric reward_info.reward")
        task = str(sim["task_id"])
        case_id = f"{domain}:{task}" + (f"/{sim.get('trial', index)}" if runs[task] > 1 else "")
        transcript = _tau2_transcript(sim.get("messages") or [])
        success = float(reward) >= SUCCESS
        outcome = f"outcome: {'success' if success else 'failure'} (reward {float(reward):g})"
        cases.append(Case(id=case_id, success=success, reward=float(reward), transcript=f"{transcript}\n{outcome}",
                          source=str(path)))
    return cases


def _tau2_transcript(messages: list[Any]) -> str:
    lines = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role, content = message.get("role", "?"), message.get("content")
        if content:
            lines.append(f"{role}: {_clip(str(content)) if role == 'tool' else content}")
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                arguments = json.dumps(call.get("arguments", {}), ensure_ascii=False, sort_keys=True)
                lines.append(f"{role} calls {call.get('name')}({_clip(arguments)})")
    return "\n".join(lines)


def _clip(text: str, most: int = _FIELD) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."
