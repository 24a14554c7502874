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

TRACE's full form, beside that argmax route:
- the retrieval pre-filter (`RoutingSettings.retrieval_k` > 0 with an index, `tracec.trace_rl.targeting.retrieval`):
  the capabilities of the k indexed trajectories nearest the task are the candidates, and the prompt lists only
  them and `base`, each under its own label; the softmax runs over those labels. No capability retrieved: every
  option stays a candidate, and the decision's `note` says so. The decision records the retrieved items (ids,
  similarities) and the candidates.
- the nucleus mixture (`nucleus`, `MixtureAgent`), TRACE's adapter selection: when `base` has the largest label
  weight the mixture is `base` alone ("if the base-model label receives the highest probability, all adapter weights
  are zero"); otherwise the adapters' weights, renormalised over the adapters (`base` is no adapter: it has no
  delta to weigh), give the smallest set, highest first, whose cumulative weight reaches `top_p`, renormalised, so
  the adapters' alphas sum to 1 (the paper's "zeroing the rest and re-normalizing"; TRACE's code renormalises its
  top-k adapters likewise, `base` left out); the episode runs with W' = W + sum_c alpha_c * scaling_c * B_c A_c
  (`AdapterModel.mixed`).
Left out: TRACE's retrieval threshold and its per-task examples (each candidate shown with the trajectory that
retrieved it); here each option keeps its one gold example (`retrieval` says what TRACE's code does).
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracec.trace_rl.envs.agent import Message, turns_taken
from tracec.trace_rl.targeting.adapters import AdapterModel
from tracec.trace_rl.targeting.eval_table import BASE
from tracec.trace_rl.targeting.retrieval import IndexItem, Retrieved, Retriever, RouteError  # RouteError: defined there

BASE_DESCRIPTION = "none of the above: the general model, for a task that needs no particular capability"


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
    top_p: float = 0.9  # the mixture's nucleus: the fewest adapters whose renormalised weights reach it
    retrieval_k: int = 0  # trajectories retrieved to pick the candidates; 0 = every option is a candidate

    def __post_init__(self) -> None:
        if self.task_chars < 50 or self.example_chars < 0:
            raise ValueError(f"routing: task_chars={self.task_chars} must be >= 50 and example_chars="
                             f"{self.example_chars} >= 0")
        if not 0 < self.top_p <= 1 or self.retrieval_k < 0:
            raise ValueError(f"routing: top_p={self.top_p} must be in (0, 1] and retrieval_k={self.retrieval_k} >= 0")


@dataclass(frozen=True, kw_only=True)
class RouteDecision:
    choice: str  # the option's name: an adapter, or `base`
    label: str
    logits: dict[str, float]  # option name -> its label token's score
    weights: dict[str, float] = field(default_factory=dict)  # softmax of the scores over the labels only
    prompt_tokens: int = 0
    retrieved: tuple[Retrieved, ...] = ()  # with retrieval: the nearest indexed trajectories, best first
    candidates: tuple[str, ...] = ()  # with retrieval: the options the prompt listed, `base` last
    note: str = ""  # with retrieval: why every option is a candidate, when none was retrieved
    mixture: dict[str, float] | None = None  # the mixture's alphas (the nucleus of `weights`), when one was asked

    def record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"choice": self.choice, "label": self.label, "logits": self.logits,
                                  "weights": self.weights, "prompt_tokens": self.prompt_tokens}
        if self.candidates:
            record.update(retrieved=[r.record() for r in self.retrieved], candidates=list(self.candidates))
            if self.note:
                record["note"] = self.note
        if self.mixture is not None:
            record["mixture"] = self.mixture
        return record


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
    """Routes a task's first message to one option by the base model's label scores; with `settings.retrieval_k`
    and an `index`, among the candidates its nearest indexed trajectories bring."""

    def __init__(self, model: AdapterModel, options: Sequence[RouteOption],
                 settings: RoutingSettings = RoutingSettings(), index: Sequence[IndexItem] = ()) -> None:
        if not options or options[-1].name != BASE:
            raise RouteError("the routing options end with the `base` option (route_options adds it)")
        unknown = [o.name for o in options[:-1] if o.name not in model.adapter_names]
        if unknown:
            raise RouteError(f"no adapter is loaded for {', '.join(unknown)}; loaded: "
                             f"{', '.join(model.adapter_names) or 'none'}")
        if bool(index) != (settings.retrieval_k > 0):
            raise RouteError(f"retrieval needs both an index and retrieval_k >= 1 (got {len(index)} index items and "
                             f"retrieval_k = {settings.retrieval_k})")
        names = [o.name for o in options]
        strays = sorted({c for item in index for c in item.capabilities} - set(names))
        if strays:
            raise RouteError(f"the routing index names capabilities no option has: {', '.join(strays)} (options: "
                             f"{', '.join(names)})")
        self.model, self.options, self.settings = model, list(options), settings
        self.token_ids = label_token_ids(model.tokenizer, [o.label for o in options])
        self.retriever = Retriever(model, index, settings.retrieval_k, chars=settings.task_chars) if index else None

    def candidates(self, task: str) -> tuple[list[int], tuple[Retrieved, ...], str]:
        """The positions of the options the prompt lists (`base` last), what was retrieved, and a note when the
        retrieval brought no capability; without retrieval: every option, nothing, no note."""
        everything = list(range(len(self.options)))
        if self.retriever is None:
            return everything, (), ""
        retrieved = tuple(self.retriever.retrieve(task))
        wanted = {c for r in retrieved for c in r.capabilities} - {BASE}
        if not wanted:
            return everything, retrieved, "no retrieved trajectory is labelled with a capability: every option"
        return [i for i, o in enumerate(self.options[:-1]) if o.name in wanted] + [everything[-1]], retrieved, ""

    def messages(self, task: str) -> list[dict[str, str]]:
        shown = self.candidates(task)[0]
        return routing_messages(task, [self.options[i] for i in shown], self.settings)

    def route(self, task: str, *, top_p: float | None = None) -> RouteDecision:
        """The route of `task`; with `top_p`, the decision's `mixture` is the nucleus of its weights."""
        shown, retrieved, note = self.candidates(task)
        options = [self.options[i] for i in shown]
        prompt = self.model.prompt_ids(routing_messages(task, options, self.settings))
        scores = self.model.next_token_scores(prompt, [self.token_ids[i] for i in shown])
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))  # ties go to the earlier option
        top = max(scores)
        exps = [math.exp(s - top) for s in scores]
        total = sum(exps)
        weights = {o.name: e / total for o, e in zip(options, exps)}
        return RouteDecision(choice=options[best].name, label=options[best].label,
                             logits={o.name: s for o, s in zip(options, scores)}, weights=weights,
                             prompt_tokens=len(prompt), retrieved=retrieved,
                             candidates=tuple(o.name for o in options) if self.retriever is not None else (),
                             note=note, mixture=None if top_p is None else nucleus(weights, top_p))


def nucleus(weights: Mapping[str, float], p: float) -> dict[str, float]:
    """The mixture's alphas: `base` alone when `base` has the largest weight; else, over the adapters alone (their
    weights renormalised among them), the smallest set, largest weight first (ties: the earlier option), whose
    cumulative weight reaches `p`, renormalised to sum to 1."""
    if not 0 < p <= 1 or not weights or not max(weights.values()) > 0:
        raise RouteError(f"top_p = {p} must be in (0, 1], over weights of which one at least is positive")
    ranked = sorted(weights.items(), key=lambda item: -item[1])  # a stable sort keeps the options' order on ties
    if ranked[0][0] == BASE:
        return {BASE: 1.0}
    adapters = [(name, weight) for name, weight in ranked if name != BASE]
    mass = sum(weight for _, weight in adapters)  # > 0: the largest weight, positive, is an adapter's
    kept: list[tuple[str, float]] = []
    total = 0.0
    for name, weight in adapters:
        kept.append((name, weight / mass))
        total += weight / mass
        if total >= p:
            break
    return {name: alpha / total for name, alpha in kept}


def first_message_of_chat(messages: Sequence[Message]) -> str:
    """The task's first message in a conversation: the first observation after the system prompt."""
    return next((m["content"] for m in messages if m["role"] != "system"), "")


class AdapterAgent:
    """An agent decoding greedily with one fixed adapter (or the base model, for None / `base`)."""

    def __init__(self, model: AdapterModel, adapter: str | None) -> None:
        self.model, self.adapter = model, adapter

    def act(self, messages: Sequence[Message]) -> str:
        with self.model.active(self.adapter):
            return self.model.generate([dict(m) for m in messages])


class MixtureAgent:
    """An agent that routes at its first turn of each episode, like `RoutedAgent`, and decodes the episode with the
    nucleus mixture of its route's weights (`top_p`: the router's settings' by default); `close` frees the mixture."""

    def __init__(self, model: AdapterModel, router: Router, top_p: float | None = None) -> None:
        self.model, self.router = model, router
        self.top_p = router.settings.top_p if top_p is None else top_p
        self.decision: RouteDecision | None = None

    def act(self, messages: Sequence[Message]) -> str:
        if turns_taken(messages) == 0 or self.decision is None:
            self.decision = self.router.route(first_message_of_chat(messages), top_p=self.top_p)
        assert self.decision.mixture is not None
        with self.model.mixed(self.decision.mixture):
            return self.model.generate([dict(m) for m in messages])

    def close(self) -> None:
        self.model.release_mixture()


class RoutedAgent:
    """An agent that routes at its first turn of each episode and keeps that adapter active until the episode ends;
    `decision` is the last episode's route."""

    def __init__(self, model: AdapterModel, router: Router) -> None:
        self.model, self.router = model, router
        self.decision: RouteDecision | None = None

    def act(self, messages: Sequence[Message]) -> str:
        if turns_taken(messages) == 0 or self.decision is None:
            self.decision = self.router.route(first_message_of_chat(messages))
        with self.model.active(self.decision.choice):
            return self.model.generate([dict(m) for m in messages])
