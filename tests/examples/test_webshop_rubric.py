"""examples/webshop.rubric on a WebShop-style store: the gold purchase is never punished, random browsing is.

The store is small and exact: a search lists the products whose title holds every word of the query, three to a
page; a listed product opens its item page (price, options); options are clicked on the item page; `buy` there
completes the purchase. Anything else the page does not offer is an invalid action that changes nothing (as in
WebShop). The facts are those of the `webshop` schema.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from rubric_checks import assert_invalidity_profile
from tracec.runtime.facts.trajectories.records import write_records
from tracec.runtime.scoring import RubricScorer
from tracec.trace_rl.experiments.demo_settings import shipped_examples

KINDS = ("hair extension", "wig", "shampoo", "hair dryer")
ADJECTIVES = ("long", "clip-in", "curly", "straight", "silky")
COLORS = ("natural black", "dark brown", "blonde", "auburn")
SIZES = ("18 inch", "22 inch", "26 inch")
PAGE = 3


@dataclass(frozen=True)
class Product:
    id: str
    title: str
    price: float
    colors: tuple[str, ...]
    sizes: tuple[str, ...]


def _catalog(rng: random.Random) -> list[Product]:
    products = []
    for n in range(24):
        kind = KINDS[n % len(KINDS)]
        title = " ".join(sorted(rng.sample(ADJECTIVES, 2))) + f" {kind}"
        products.append(Product(f"B0{n:03d}", title, round(rng.uniform(10, 90), 2), tuple(rng.sample(COLORS, 3)),
                                tuple(rng.sample(SIZES, 2))))
    return products


@dataclass
class Store:
    catalog: list[Product]
    page: str = "home"
    hits: list[Product] = field(default_factory=list)
    offset: int = 0
    viewed: Product | None = None
    chosen: set[str] = field(default_factory=set)
    purchased: bool = False

    def listed(self) -> list[str]:
        return [p.id for p in self.hits[self.offset : self.offset + PAGE]] if self.page == "results" else []

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"page": self.page, "listed": self.listed(), "chosen": sorted(self.chosen),
                                 "purchased": self.purchased, "page_text": self.page}
        if self.page in ("item", "done") and self.viewed is not None:
            state["viewed"], state["price"] = self.viewed.id, self.viewed.price
        return state

    def step(self, verb: str, target: str | None = None, query: str | None = None) -> bool:
        """Carry out the action; whether it was valid on this page."""
        if verb == "search" and self.page != "done" and query is not None:
            words = query.lower().split()
            self.hits = [p for p in self.catalog if words and all(w in p.title for w in words)]
            self.page, self.offset = "results", 0
            return True
        if verb == "click" and self.page == "results" and target in self.listed():
            self.viewed = next(p for p in self.catalog if p.id == target)
            self.page, self.chosen = "item", set()
            return True
        if verb == "click" and self.page == "item" and self.viewed and target in self.viewed.colors + self.viewed.sizes:
            self.chosen.add(target)
            return True
        if verb == "buy" and self.page == "item":
            self.page, self.purchased = "done", True
            return True
        if verb == "next_page" and self.page == "results" and self.offset + PAGE < len(self.hits):
            self.offset += PAGE
            return True
        if verb == "prev_page" and self.page == "results" and self.offset > 0:
            self.offset -= PAGE
            return True
        if verb == "back" and self.page in ("results", "item"):
            self.page = "home" if self.page == "results" else "results"
            return True
        return False


def _task(rng: random.Random, catalog: list[Product]) -> tuple[str, Product, str, str, str]:
    """An instruction WebShop would write, and the product, color and size that fulfil it."""
    wanted = rng.choice([p for p in catalog if p.title.endswith("hair extension")])
    color, size = wanted.colors[0], wanted.sizes[0]
    limit = f"{wanted.price + rng.choice((0.5, 5.0, 20.0)):.2f}"
    instruction = (f"i need a {wanted.title}, with color: {color}, and size: {size}, "
                   f"and price lower than {limit} dollars")
    return instruction, wanted, color, size, wanted.title


def _episode(name: str, seed: int, policy: str) -> dict[str, Any]:
    rng = random.Random(seed)
    store = Store(_catalog(random.Random(seed // 100)))
    instruction, wanted, color, size, query = _task(random.Random(seed // 100), store.catalog)
    store.hits = [p for p in store.catalog if all(w in p.title for w in query.split())]
    offset = [p.id for p in store.hits].index(wanted.id) // PAGE * PAGE
    store.hits = []
    gold = [("search", None, query), *[("next_page", None, None)] * (offset // PAGE), ("click", wanted.id, None),
            ("click", color, None), ("click", size, None), ("buy", None, None)]
    words = (*ADJECTIVES, *KINDS, "", "   ", "pink tuxedo")
    states, actions = [store.state()], []
    for t in range(len(gold) if policy == "gold" else 20):
        if policy == "gold":
            verb, target, text = gold[t]
        else:
            verb = rng.choice(("search", "click", "click", "click", "buy", "back", "next_page", "prev_page"))
            options = store.listed() + list(store.viewed.colors + store.viewed.sizes if store.viewed else ())
            target = rng.choice(options or ["B0999"]) if verb == "click" else None
            text = rng.choice(words) if verb == "search" else None
        valid = store.step(verb, target, text)
        action: dict[str, Any] = {"verb": verb, "valid": valid}
        if target is not None:
            action["target"] = target
        if text is not None:
            action["query"] = text
        actions.append(action)
        states.append(store.state())
        if store.purchased:
            break
    won = store.purchased and store.viewed == wanted and {color, size} <= store.chosen
    return {"episode": name, "task": f"shop{seed // 100}", "instruction": instruction, "states": states,
            "actions": actions, "env_reward": float(won), "success": won}


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory):
    gold = [_episode(f"gold{task}", task * 100, "gold") for task in range(10)]
    others = [_episode(f"random{task}-{k}", task * 100 + k, "random") for task in range(10) for k in range(1, 7)]
    path = tmp_path_factory.mktemp("webshop") / "episodes.jsonl"
    write_records(gold + others, path)
    scorer = RubricScorer.from_file(shipped_examples() / "webshop.rubric", backend="interp")
    return scorer, scorer.score(path), gold, others


def test_gold_is_never_punished_and_random_play_is(played):
    scorer, result, gold, others = played
    assert all(episode["success"] for episode in gold) and not all(episode["success"] for episode in others)
    fired = assert_invalidity_profile(scorer, result, [e["episode"] for e in gold], [e["episode"] for e in others])
    assert all(fired[name].keys() >= {"gold0", "gold1"} for name in ("buys_in_budget", "buys_options", "picks_color"))
