"""Training-free routing (TRACE): the base model itself picks, per task, the capability adapter to run it with.

One prompt holds the task's first message, and for each capability its description and one successful example
episode (from its environment's gold solution, or a trained rollout), each under a single-token label, plus one
label for `base` (no adapter). The base model's next-token scores at the position after the prompt, read over
exactly those label tokens, choose: the largest wins, and their softmax is reported as the routing weights
(TRACE's alpha_c). The chosen adapter is then the active one for the whole episode (`RoutedAgent`).

    router = Router(model, route_options(capabilities))       # labels checked against model.tokenizer here
    decision = router.route("Hi, I'm Ana. Please cancel ...")
    decision.choice, decision.logits                             # "precondition_verification", {"A": 3.1, ...}

Labels default to `A`, `B`, ... in capability order, with `base` last; each must be one token of the model's
tokenizer that decodes back to itself (an error names any that is not), and all must be distinct tokens.
The scores are logits (`PeftAdapters`); a backend that gives log-probs instead routes alike (same differences).
Left out: TRACE's retrieval pre-filter (top-k similar trajectories by embedding; the candidate list here is every
capability) and its nucleus mixture of adapters (one adapter runs an episode).
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracec.trace_rl.envs.agent import Message, turns_taken
from tracec.trace_rl.trace.adapters import AdapterModel
from tracec.trace_rl.trace.eval_table import BASE

BASE_DESCRIPTION = "none of the above: the general model, for a task that needs no particular capability"


class RouteError(ValueError):
    """Routing that cannot work as configured (a label that is not one token, a prompt too long)."""


@dataclass(frozen=True, kw_only=True)
class RouteOption:
    name: str  # the adapter's name, or `base`
    label: str  # one token of the tokenizer
    description: str
    example: str = ""  # a transcript of a successful episode; empty for `base`


@dataclass(frozen=True, kw_only=True)
class RoutingSettings:
    labels: tuple[str, ...] = ()  # one per capability, then one for base; () = A, B, C, ...
    task_chars: int = 1500  # of the task's first message
    example_chars: int = 600  # of each example episode

    def __post_init__(self) -> None:
        if self.task_chars < 50 or self.example_chars < 0:
            raise ValueError(f"routing: task_chars={self.task_chars} must be >= 50 and example_chars="
                             f"{self.example_chars} >= 0")


@dataclass(frozen=True, kw_only=True)
class RouteDecision:
    choice: str  # the option's name: an adapter, or `base`
    label: str
    logits: dict[str, float]  # option name -> its label token's score
    weights: dict[str, float] = field(default_factory=dict)  # softmax of the scores over the labels only
    prompt_tokens: int = 0

    def record(self) -> dict[str, Any]:
        return {"choice": self.choice, "label": self.label, "logits": self.logits, "weights": self.weights,
                "prompt_tokens": self.prompt_tokens}


def route_options(capabilities: Sequence[tuple[str, str, str]], labels: Sequence[str] = ()) -> list[RouteOption]:
    """Options for (name, description, example) capabilities, then `base`; labels as given or A, B, C, ..."""
    count = len(capabilities) + 1
    if labels and len(labels) != count:
        raise RouteError(f"routing.labels has {len(labels)} labels for {len(capabilities)} capabilities plus base; "
                         f"give {count}, the last for base")
    if not labels and count > len(string.ascii_uppercase):
        raise RouteError(f"{len(capabilities)} capabilities need more than 26 default labels; set routing.labels")
    chosen = list(labels) or list(string.ascii_uppercase[:count])
    options = [RouteOption(name=name, label=label, description=description, example=example)
               for (name, description, example), label in zip(capabilities, chosen)]
    return [*options, RouteOption(name=BASE, label=chosen[-1], description=BASE_DESCRIPTION)]


def read_options(path: str | Path) -> list[RouteOption]:
    """Routing options from JSON (`tracec pipeline`'s `route/options.json`): a list of {name, label, description,
    example}, the `base` option last; a `RouteError` names the file and what is wrong."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise RouteError(f"{path}:{error.lineno}:{error.colno}: error: not JSON: {error.msg}") from None
    fields = {"name", "label", "description", "example"}
    if not isinstance(data, list) or not data or not all(isinstance(o, dict) and {"name", "label"} <= set(o)
                                                           and set(o) <= fields for o in data):
        raise RouteError(f"{path}: error: routing options are a JSON list of objects with `name`, `label`, "
                         "`description` and `example` (as `tracec pipeline` writes route/options.json)")
    options = [RouteOption(name=str(o["name"]), label=str(o["label"]), description=str(o.get("description", "")),
                           example=str(o.get("example", ""))) for o in data]
    if options[-1].name != BASE:
        raise RouteError(f"{path}: error: the last routing option is `base` (no adapter)")
    return options


def routing_messages(task: str, options: Sequence[RouteOption], settings: RoutingSettings) -> list[dict[str, str]]:
    """The one routing prompt: the task, then each option's label, description and example; the answer is a label."""
    blocks = []
    for option in options:
        block = f"{option.label}: {option.name} - {option.description}"
        example = option.example[: settings.example_chars].strip()
        if example:
            block += "\n   An episode this specialist solved:\n   " + example.replace("\n", "\n   ")
        blocks.append(block)
    labels = ", ".join(option.label for option in options)
    user = (
        "Several specialists can run the task below. Choose the one whose capability the task needs most.\n\n"
        f"Task (the first message):\n{task[: settings.task_chars].strip()}\n\n"
        "Specialists:\n" + "\n\n".join(blocks)
        + f"\n\nAnswer with the label of the best specialist ({labels}) and nothing else."
    )
    return [{"role": "system", "content": "You route tasks to specialists. You answer with one label."},
            {"role": "user", "content": user}]


def label_token_ids(tokenizer: Any, labels: Sequence[str]) -> list[int]:
    """Each label's one token id; a `RouteError` naming every label that is not exactly one token of `tokenizer`."""
    ids, problems = [], []
    for label in labels:
        pieces = list(tokenizer(label, add_special_tokens=False, verbose=False)["input_ids"])
        decoded = tokenizer.decode(pieces, skip_special_tokens=False) if pieces else ""
        if len(pieces) != 1 or decoded != label:
            shown = [tokenizer.decode([p]) for p in pieces]
            problems.append(f"{label!r} is {len(pieces)} tokens {shown}" if len(pieces) != 1
                            else f"{label!r} reads back as {decoded!r}")
        else:
            ids.append(pieces[0])
    if problems:
        raise RouteError("routing labels must each be one token of the model's tokenizer: " + "; ".join(problems)
                         + " (capital letters A, B, C, ... are one token in most tokenizers)")
    repeated = sorted({label for label, i in zip(labels, ids) if ids.count(i) > 1})
    if repeated:
        raise RouteError(f"routing labels {', '.join(map(repr, repeated))} are the same token; use distinct labels")
    return ids


class Router:
    """Routes a task's first message to one option by the base model's label scores."""

    def __init__(self, model: AdapterModel, options: Sequence[RouteOption],
                 settings: RoutingSettings = RoutingSettings()) -> None:
        if not options or options[-1].name != BASE:
            raise RouteError("the routing options end with the `base` option (route_options adds it)")
        unknown = [o.name for o in options[:-1] if o.name not in model.adapter_names]
        if unknown:
            raise RouteError(f"no adapter is loaded for {', '.join(unknown)}; loaded: "
                             f"{', '.join(model.adapter_names) or 'none'}")
        self.model, self.options, self.settings = model, list(options), settings
        self.token_ids = label_token_ids(model.tokenizer, [o.label for o in options])

    def messages(self, task: str) -> list[dict[str, str]]:
        return routing_messages(task, self.options, self.settings)

    def route(self, task: str) -> RouteDecision:
        prompt = self.model.prompt_ids(self.messages(task))
        scores = self.model.next_token_scores(prompt, self.token_ids)
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))  # ties go to the earlier option
        top = max(scores)
        exps = [math.exp(s - top) for s in scores]
        total = sum(exps)
        return RouteDecision(choice=self.options[best].name, label=self.options[best].label,
                             logits={o.name: s for o, s in zip(self.options, scores)},
                             weights={o.name: e / total for o, e in zip(self.options, exps)},
                             prompt_tokens=len(prompt))


def first_message(messages: Sequence[Message]) -> str:
    """The task's first message: the first observation after the system prompt."""
    return next((m["content"] for m in messages if m["role"] != "system"), "")


class AdapterAgent:
    """An agent decoding greedily with one fixed adapter (or the base model, for None / `base`)."""

    def __init__(self, model: AdapterModel, adapter: str | None) -> None:
        self.model, self.adapter = model, adapter

    def act(self, messages: Sequence[Message]) -> str:
        with self.model.active(self.adapter):
            return self.model.generate([dict(m) for m in messages])


class RoutedAgent:
    """An agent that routes at its first turn of each episode and keeps that adapter active until the episode ends;
    `decision` is the last episode's route."""

    def __init__(self, model: AdapterModel, router: Router) -> None:
        self.model, self.router = model, router
        self.decision: RouteDecision | None = None

    def act(self, messages: Sequence[Message]) -> str:
        if turns_taken(messages) == 0 or self.decision is None:
            self.decision = self.router.route(first_message(messages))
        with self.model.active(self.decision.choice):
            return self.model.generate([dict(m) for m in messages])
