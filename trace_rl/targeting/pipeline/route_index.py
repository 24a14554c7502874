"""The routing index of a pipeline run (`route/index.jsonl`): the collected trajectories with their capabilities.

With `routing.retrieval_k` > 0 the route step writes it and the router's retrieval pre-filter reads it
(`tracec.trace_rl.targeting.retrieval`). One item per collected trajectory (`collect/trajectories/base.jsonl`) that is
labelled LACKING for at least one routed capability: its id is the episode (`DOMAIN:SEED`), its text the task's
first message (the first state's `user_msg` where the environment records one, capability and tau2 targets; else
`feedback`, TextWorld's opening; else the instruction), its capabilities the selected capabilities that have an
adapter and that a labeling run (`label/run_NN.json`) put LACKING for it, failed or passed, in any run (the union,
as the selection's failed-case lists take it), in selection order. A trajectory lacking none is left out: it points
at no capability, and TRACE's corpus holds only capability-labelled trajectories.
Left out: TRACE's own corpus, the gold trajectories of each capability's training environment (see `retrieval`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracec.trace_rl.targeting.analysis.runs import read_run, run_files
from tracec.trace_rl.targeting.pipeline.layout import BASE_TRAJECTORIES, SELECTED, read_json
from tracec.trace_rl.targeting.retrieval import IndexItem

LACKING = ("lacking_failed", "lacking_passed")


def collected_index(collected: Path, labeled: Path, selected: Path, routed: Sequence[str]) -> list[IndexItem]:
    """The index items of a run: collect's trajectories, label's runs, select's capabilities, cut to `routed`."""
    names = [e["skill"] for e in read_json(selected / SELECTED) if e["skill"] in routed]
    lacking: dict[str, set[str]] = {}
    for run in (read_run(path) for path in run_files([labeled])):
        for name in names:
            for bucket in LACKING:
                for episode in run.labels.get(name, {}).get(bucket, ()):
                    lacking.setdefault(episode, set()).add(name)
    items = []
    for line in (collected / BASE_TRAJECTORIES).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        episode = str(record.get("episode", ""))
        capabilities = tuple(n for n in names if n in lacking.get(episode, ()))
        text = first_message_of_record(record)
        if capabilities and text.strip():
            items.append(IndexItem(id=episode, text=text, capabilities=capabilities))
    return items


def first_message_of_record(record: dict[str, Any]) -> str:
    """A trajectory record's first message: what its agent read first (`routing.first_message_of_chat` is the same
    message in a conversation, where the router takes it during an episode)."""
    states = record.get("states") or [{}]
    first = states[0] if isinstance(states[0], dict) else {}
    for key in ("user_msg", "feedback"):
        if isinstance(first.get(key), str) and first[key].strip():
            return str(first[key])
    return str(record.get("instruction", ""))
