"""examples/search_qa.rubric on a small search engine: the gold search-read-answer is never punished, random
search is.

The corpus is small and exact: a search lists (up to three) documents that hold every word of the query; a listed
document can be opened and read; one answer ends the episode. The facts are those of the `search_qa` schema.
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

# (topic, question, answer): the documents about a topic name it, in lower case, and hold the answer.
FACTS = [
    ("desert planet arrakis", "Question: who wrote the novel about the desert planet Arrakis?",
     "Frank Herbert, in 1965"),
    ("first moon landing", "Question: in which year was the first moon landing?", "1969"),
    ("printing press", "Question: who is credited with the invention of the printing press?", "Johannes Gutenberg"),
    ("theory of relativity", "Question: in 1905, who published the theory of relativity?", "Albert Einstein, in 1905"),
]
FILLER = ["a cooking blog about bread", "notes on the history of rome", "a review of a hiking boot", "football results"]


@dataclass
class Engine:
    docs: dict[str, str]
    results: list[str] = field(default_factory=list)
    opened: list[str] = field(default_factory=list)
    text: str = ""
    searches: int = 0
    answered: bool = False

    def state(self) -> dict[str, Any]:
        return {"results": sorted(self.results), "opened": sorted(self.opened), "doc_text": self.text,
                "n_searches": self.searches, "answered": self.answered}

    def step(self, verb: str, argument: str) -> None:
        if verb == "search":
            words = argument.lower().split()
            self.results = [d for d, text in self.docs.items() if words and all(w in text for w in words)][:3]
            self.searches += 1
        elif verb == "open" and argument in self.docs:
            self.text = self.docs[argument]
            self.opened = sorted({*self.opened, argument})
        elif verb == "answer":
            self.answered = True


def _corpus() -> dict[str, str]:
    docs = {}
    for n, (topic, _, answer) in enumerate(FACTS):
        docs[f"d{n}a"] = f"an encyclopedia entry on the {topic}. the answer: {answer.lower()}."
        docs[f"d{n}b"] = f"a school essay that mentions the {topic} in passing."
    docs.update({f"f{n}": text for n, text in enumerate(FILLER)})
    return docs


def _episode(name: str, seed: int, policy: str) -> dict[str, Any]:
    rng = random.Random(seed)
    topic, question, answer = FACTS[seed % len(FACTS)]
    engine = Engine(_corpus())
    index = seed % len(FACTS)
    gold = [("search", topic), ("open", f"d{index}a"), ("answer", answer)]
    words = [*topic.split(), "bread", "rome", "zebra", "the", ""]
    states, actions = [engine.state()], []
    for t in range(len(gold) if policy == "gold" else 20):
        if policy == "random" and rng.random() < 0.08:
            actions.append({"verb": "other", "parsed": False})
            states.append(engine.state())
            continue
        if policy == "gold":
            verb, argument = gold[t]
        else:
            verb = rng.choice(("search", "search", "open", "open", "answer"))
            if verb == "search":
                argument = " ".join(rng.sample(words, rng.randint(1, 2)))
            elif verb == "open":
                argument = rng.choice([*engine.results, *engine.docs])
            else:
                argument = rng.choice((answer, "I do not know", " ".join(["very"] * 14) + " long"))
        engine.step(verb, argument)
        field_name = {"search": "query", "open": "doc", "answer": "answer"}[verb]
        actions.append({"verb": verb, field_name: argument, "parsed": True})
        states.append(engine.state())
        if engine.answered:
            break
    won = bool(actions) and actions[-1].get("answer") == answer and bool(engine.opened)
    return {"episode": name, "task": f"q{seed % len(FACTS)}", "instruction": question, "states": states,
            "actions": actions, "env_reward": float(won), "success": won}


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory):
    gold = [_episode(f"gold{seed}", seed, "gold") for seed in range(len(FACTS))]
    others = [_episode(f"random{seed}", seed, "random") for seed in range(40)]
    path = tmp_path_factory.mktemp("search_qa") / "episodes.jsonl"
    write_records(gold + others, path)
    scorer = RubricScorer.from_file(shipped_examples() / "search_qa.rubric", backend="interp")
    return scorer, scorer.score(path), gold, others


def test_gold_is_never_punished_and_random_play_is(played):
    scorer, result, gold, others = played
    assert all(episode["success"] for episode in gold) and not all(episode["success"] for episode in others)
    fired = assert_invalidity_profile(scorer, result, [e["episode"] for e in gold], [e["episode"] for e in others])
    everywhere = {e["episode"] for e in gold}
    assert all(fired[name].keys() >= everywhere for name in ("searches_topic", "reads_topic", "grounded", "concise"))
    assert fired["dated"].keys() & everywhere == {"gold3"}  # only the question that names a year asks for one
