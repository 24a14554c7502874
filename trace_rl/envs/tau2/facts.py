"""tau2 episodes as trajectory JSONL with the canonical per-step facts (PIPELINE.md's trajectory file).

One step is one agent turn. Action facts of step t:
- `tool` (entity): the tool called; missing for a message, and for a call that did not parse.
- `kind` (enum query, mutate, message, invalid): invalid is a malformed call or an unknown tool; `calculate`
  and `transfer_to_human_agents` count as queries (they do not touch the database).
- `accepted` (bool): the call ran without an error; a message is always accepted.
- `args` (set(entity)): every argument value as a string, nested lists and objects flattened to their leaves
  (numbers as JSON writes them, booleans `true`/`false`, nulls dropped).
- `target` (entity): the primary id argument (reservation_id, order_id, user_id, product_id, item_id,
  flight_number, first present); missing if none.
- `confirmed` (bool): the user's most recent message before this turn says yes or confirm.
- `text` (text): the agent's raw turn.

State facts (`states[0]` before the first turn, `states[t+1]` after turn t):
- `revealed` (set(entity)): ids seen in accepted tool results so far.
- `checked` (bool): the turn just taken was an accepted query.
- `last_error` (text): the error of the turn just taken, when it was a refused or invalid call; missing
  otherwise.
- `user_msg` (text): the user's most recent message.
- `db_changed` (bool): the turn just taken changed the database.
- `n_errors` (int): refused and invalid calls so far.

Missing facts are left out of the JSON object.
"""

from __future__ import annotations

from typing import Any

from tracec.runtime.chat import says_yes
from tracec.runtime.toolcall import argument_leaves
from tracec.trace_rl.envs.tau2.episode import Episode, Step

TARGET_KEYS = ("reservation_id", "order_id", "user_id", "product_id", "item_id", "flight_number")


def episode_record(episode: Episode, *, episode_id: str) -> dict[str, Any]:
    """The episode as one trajectory line: instruction, states, actions, the score."""
    revealed: set[str] = set()
    n_errors = 0
    states: list[dict[str, Any]] = [
        {"revealed": [], "checked": False, "user_msg": episode.opening, "db_changed": False, "n_errors": 0}
    ]
    actions = []
    user_msg = episode.opening
    for step in episode.steps:
        actions.append(action_facts(step))
        outcome = step.outcome
        state: dict[str, Any] = {}
        if outcome is None:
            user_msg = step.user_reply or ""
        else:
            revealed |= outcome.revealed
            n_errors += not outcome.accepted
            if outcome.error is not None:
                state["last_error"] = outcome.error
        state.update(
            revealed=sorted(revealed),
            checked=outcome is not None and outcome.accepted and outcome.kind == "query",
            user_msg=user_msg,
            db_changed=outcome is not None and outcome.changed,
            n_errors=n_errors,
        )
        states.append(state)
    return {
        "episode": episode_id,
        "task": episode.task.key,
        "instruction": episode.task.instruction,
        "states": states,
        "actions": actions,
        "env_reward": episode.score.reward,
        "success": episode.score.reward == 1.0,
        "end": episode.end,
    }


def action_facts(step: Step) -> dict[str, Any]:
    outcome = step.outcome
    facts: dict[str, Any] = {}
    if outcome is not None and outcome.tool is not None:
        facts["tool"] = outcome.tool
    facts["kind"] = "message" if outcome is None else outcome.kind
    facts["accepted"] = True if outcome is None else outcome.accepted
    arguments = {} if outcome is None else outcome.arguments
    facts["args"] = sorted(set(argument_leaves(arguments)))
    target = next((arguments[key] for key in TARGET_KEYS if isinstance(arguments.get(key), (str, int))), None)
    if target is not None and not isinstance(target, bool):
        facts["target"] = str(target)
    facts["confirmed"] = says_yes(step.user_before)
    facts["text"] = step.text
    return facts
