"""TRACE's retrieval pre-filter of routing: the capabilities of the indexed trajectories nearest to the task.

An index is a list of trajectories, each the text of its task's first message and the capabilities it is labelled
with (JSONL, one {"text": ..., "capabilities": [...]} a line, an optional "id"; `tracec pipeline` writes
`route/index.jsonl` from the collected trajectories, each with the selected capabilities labelled LACKING for it).
The task's first message and every indexed text are embedded by the base model itself (`AdapterModel.embed`: every
adapter off, the last hidden state mean-pooled over the text's tokens, L2-normalised), so no second model is loaded
and nothing is downloaded; the k items of largest cosine similarity (ties to the earlier item) are retrieved, and the
union of their capabilities, in the routing options' order, is the candidate set the router's prompt lists (with
`base`). Texts are cut to `routing.task_chars` before they are embedded, as the prompt cuts the task. A retrieval
that brings no capability leaves every option a candidate (`Router` says so in its record).

    retriever = Retriever(model, read_index("route/index.jsonl"), k=5)
    retriever.retrieve("Hi, I'm Ana. Please cancel ...")  # [Retrieved(id="airline:3", similarity=0.91, ...), ...]

What TRACE's released code does differently (ScalingIntelligence/TRACE, `test_rac_router_v2.py`,
`test_embedding_trajectory_router.py`): its corpus is gold trajectories of each capability's training environment,
one skill each, embedded whole by a separate embedding model (Qwen3-Embedding-8B, the query under an instruction
prompt); it keeps the top 5 above a similarity threshold (0.5, else the single best), orders the candidates by
similarity and shows each one's best-matching trajectory as its example. Left out here: the threshold, the
per-task example, and embedding a whole trajectory (the key is the first message on both sides).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracec.trace_rl.targeting.adapters import AdapterModel

from tracec.atomic import write_atomic


class RouteError(ValueError):
    """Routing that cannot work as configured (a label that is not one token, a prompt too long, a bad index line);
    defined here, below `routing`, which raises it too."""


@dataclass(frozen=True, kw_only=True)
class IndexItem:
    id: str  # the trajectory's episode id, or the item's line number in its file
    text: str  # its task's first message
    capabilities: tuple[str, ...]  # what it is labelled with (TRACE: the selected capabilities it lacked)


@dataclass(frozen=True, kw_only=True)
class Retrieved:
    id: str
    similarity: float  # cosine similarity of the embeddings
    capabilities: tuple[str, ...]

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "similarity": self.similarity, "capabilities": list(self.capabilities)}


def read_index(path: str | Path) -> list[IndexItem]:
    """The items of a JSONL index file; a `RouteError` names `file:line` and what is wrong."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise RouteError(f"{path}: error: not UTF-8 text") from None
    items: list[IndexItem] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            raise RouteError(f"{path}:{number}:{error.colno}: error: not JSON: {error.msg}") from None
        problem = _problem(data)
        if problem:
            raise RouteError(f"{path}:{number}: error: {problem}; an index line is "
                              '{"text": "the first message", "capabilities": ["name", ...]}')
        items.append(IndexItem(id=str(data.get("id", number)), text=data["text"],
                               capabilities=tuple(data["capabilities"])))
    if not items:
        raise RouteError(f"{path}: error: the index holds no trajectories")
    return items


def _problem(data: Any) -> str:
    if not isinstance(data, dict):
        return "a line is a JSON object"
    unknown = sorted(set(data) - {"id", "text", "capabilities"})
    if unknown:
        return f"unknown key {unknown[0]!r}"
    if not isinstance(data.get("text"), str) or not data["text"].strip():
        return "`text` must be a non-empty string"
    capabilities = data.get("capabilities")
    if not isinstance(capabilities, list) or not all(isinstance(c, str) and c for c in capabilities):
        return "`capabilities` must be a list of capability names"
    if "id" in data and not isinstance(data["id"], (str, int)):
        return "`id` must be a string or an integer"
    return ""


def write_index(path: Path, items: Sequence[IndexItem]) -> None:
    write_atomic(path, [json.dumps({"id": i.id, "text": i.text, "capabilities": list(i.capabilities)},
                                   ensure_ascii=False) + "\n" for i in items])


def top_k(query: Sequence[float], keys: Sequence[Sequence[float]], k: int) -> list[tuple[int, float]]:
    """(position, cosine similarity) of the `k` keys most similar to `query`, best first, ties to the earlier."""
    similarities = [cosine(query, key) for key in keys]
    order = sorted(range(len(keys)), key=lambda i: (-similarities[i], i))
    return [(i, similarities[i]) for i in order[:k]]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity; 0 where either vector is zero (an empty text)."""
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b)) / norms if norms > 0 else 0.0


class Retriever:
    """The `k` indexed trajectories nearest a task by the base model's embeddings; the index is embedded once."""

    def __init__(self, model: AdapterModel, items: Sequence[IndexItem], k: int, *, chars: int = 1500) -> None:
        if k < 1:
            raise RouteError(f"retrieval: k = {k} must be at least 1 (0 means no retrieval: build no Retriever)")
        self.model, self.items, self.k, self.chars = model, list(items), k, chars
        self.keys = model.embed([item.text[:chars] for item in self.items]) if self.items else []

    def retrieve(self, task: str) -> list[Retrieved]:
        (query,) = self.model.embed([task[: self.chars]])
        return [Retrieved(id=self.items[i].id, similarity=s, capabilities=self.items[i].capabilities)
                for i, s in top_k(query, self.keys, self.k)]
