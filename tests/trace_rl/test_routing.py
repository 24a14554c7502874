"""Routing with the tiny model and two adapters: the scores are the logits at the position after the prompt, only
the label tokens compete, labels are checked against the tokenizer, and the chosen adapter is the one decoding."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from numerics import float64_model, forward_roundings, forward_size, tolerance
from random_adapters import random_adapter
from tracec.trace_rl.envs.agent import run_episode
from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy
from tracec.trace_rl.targeting.adapters import AdapterError
from tracec.trace_rl.targeting.eval_table import BASE
from tracec.trace_rl.targeting.peft_adapters import PeftAdapters
from tracec.trace_rl.targeting.routing import (
    AdapterAgent,
    RoutedAgent,
    RouteError,
    Router,
    label_token_ids,
    route_options,
)

REPO = Path(__file__).resolve().parents[2]
TASK = "Hi, I'm Ana Lima. Please book room R12 for me for 3 nights, meal plan breakfast."
PROMPT = [{"role": "system", "content": "You help."}, {"role": "user", "content": TASK}]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> PeftAdapters:
    root = tmp_path_factory.mktemp("adapters")
    folders = {"alpha": random_adapter(root / "alpha", 1), "beta": random_adapter(root / "beta", 2)}
    model = PeftAdapters.load("tiny", folders, max_new_tokens=24)
    float64_model(model.policy.model)  # two forwards of one prompt agree to fp64 rounding: the checks can be tight
    return model


def _options(labels: list[str]) -> list:  # type: ignore[type-arg]
    return route_options([("alpha", "books rooms with exact arguments", ("user: book R1\nassistant: <action>"
                           "book(room=\"R1\")</action>")), ("beta", "checks an order before changing it", "")],
                         labels)


def _last_logits(model: PeftAdapters, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode(), model.policy.base_model():
        return model.policy.model(input_ids=torch.tensor([ids])).logits[0, -1]


def _score_tolerance(model: PeftAdapters, ids: list[int], logits: torch.Tensor) -> float:
    """How far a routing score may be from a logit of the fp64 model (the rule, tests/numerics.py): the forward's
    roundings in fp64, at the size of its values, and the rounding of the score to fp32
    (`PeftAdapters.next_token_scores`), at the logits' size."""
    with model.policy.base_model():
        size = forward_size(model.policy.model, torch.tensor([ids]))
    return tolerance(forward_roundings(model.policy.model.config, len(ids)), size, torch.float64) + tolerance(
        1, max(1.0, float(logits.abs().max())), torch.float32)


def test_scores_are_the_base_logits_after_the_prompt_and_only_labels_compete(model: PeftAdapters) -> None:
    probe = Router(model, _options(["A", "B", "C"]))
    ids = model.prompt_ids(probe.messages(TASK))
    logits = _last_logits(model, ids)
    # Labels chosen so that the model's favourite next token overall is not one of them: it may not win.
    ranked = [model.tokenizer.decode([int(i)]) for i in torch.argsort(logits, descending=True)]
    favourite = ranked[0]
    labels = [c for c in ranked[1:] if len(c) == 1 and c.isalpha() and c != favourite][:3][::-1]  # worst first
    router = Router(model, _options(labels))
    decision = router.route(TASK)
    ids = model.prompt_ids(router.messages(TASK))
    assert decision.prompt_tokens == len(ids)
    logits = _last_logits(model, ids)
    label_ids = label_token_ids(model.tokenizer, labels)
    assert favourite not in labels and int(torch.argmax(logits)) not in label_ids
    expected = {name: float(logits[i]) for name, i in zip(["alpha", "beta", BASE], label_ids)}
    close = _score_tolerance(model, ids, logits)
    assert decision.logits == pytest.approx(expected, abs=close)
    # one position earlier is another distribution: the scores are read after the prompt, not inside it
    with torch.inference_mode(), model.policy.base_model():
        earlier = model.policy.model(input_ids=torch.tensor([ids])).logits[0, -2]
    assert [float(earlier[i]) for i in label_ids] != pytest.approx(list(expected.values()), abs=close)
    best = max(expected, key=lambda name: expected[name])
    assert decision.choice == best and decision.label == labels[["alpha", "beta", BASE].index(best)]
    assert sum(decision.weights.values()) == pytest.approx(1.0, abs=tolerance(len(label_ids) + 2, 1.0, float))
    probabilities = torch.softmax(logits[label_ids], dim=0)
    # a weight exp(z - logsumexp) <= 1 carries its score's error and the log-sum-exp's
    assert list(decision.weights.values()) == pytest.approx(probabilities.tolist(), abs=2 * close)


def test_routing_reads_the_base_model_even_while_an_adapter_is_active(model: PeftAdapters) -> None:
    router = Router(model, _options(["A", "B", "C"]))
    plain = router.route(TASK)
    with model.active("beta"):
        inside = router.route(TASK)
        assert model.active_name == "beta"  # routing switched back to the adapter it found
    ids = model.prompt_ids(router.messages(TASK))
    assert inside.logits == pytest.approx(plain.logits, abs=_score_tolerance(model, ids, _last_logits(model, ids)))


def test_the_chosen_adapter_is_the_one_that_decodes(model: PeftAdapters) -> None:
    outputs = {name: AdapterAgent(model, name).act(PROMPT) for name in ("alpha", "beta", BASE)}
    assert len(set(outputs.values())) == 3  # the adapters and the base say different things on this prompt
    for labels, forced in ((["A", "B", "C"], None), *(([l for l in "ABC"], name) for name in ("alpha", "beta"))):
        router = Router(model, _options(labels))
        agent = RoutedAgent(model, router)
        if forced is not None:  # make `forced` the winner by biasing the scores its label gets
            real = model.next_token_scores
            bias = {"alpha": 0, "beta": 1}[forced]
            model.next_token_scores = lambda p, t, real=real, bias=bias: [  # type: ignore[method-assign]
                s + (100.0 if i == bias else 0.0) for i, s in enumerate(real(p, t))]
        try:
            text = agent.act(PROMPT)
        finally:
            model.__dict__.pop("next_token_scores", None)
        assert agent.decision is not None
        chosen = agent.decision.choice
        assert forced is None or chosen == forced
        assert text == outputs[chosen]
        assert all(text != outputs[other] for other in outputs if other != chosen)


def test_the_route_holds_for_the_whole_episode_and_is_renewed_per_episode(model: PeftAdapters) -> None:
    program = load_environment(str(REPO / "examples/envs/tool_calling_precision.rubric"))
    env = CapabilityEnvironment(program, max_steps=3)
    router = Router(model, _options(["A", "B", "C"]))
    agent = RoutedAgent(model, router)
    calls: list[str] = []
    real = router.route
    router.route = lambda task: (calls.append(task), real(task))[1]  # type: ignore[method-assign]
    for seed in (0, 1):
        run_episode(env, agent, seed, 3)
    assert len(calls) == 2 and calls[0] != calls[1]  # one route per episode, on each episode's own task
    assert calls[1] == env.reset(1).text


def test_labels_that_are_not_one_token_are_named(model: PeftAdapters) -> None:
    with pytest.raises(RouteError, match=r"'base' is 4 tokens") as error:
        Router(model, _options(["A", "B", "base"]))
    assert "'A'" not in str(error.value)
    with pytest.raises(RouteError, match="reads back as"):  # outside the tiny tokenizer's characters: <|unk|>
        label_token_ids(model.tokenizer, ["\u00e9"])
    with pytest.raises(RouteError, match="3 labels for 2 capabilities|give 3"):
        _options(["A", "B"])
    with pytest.raises(RouteError, match="no adapter is loaded for gamma"):
        Router(model, route_options([("gamma", "x", "")]))
    with pytest.raises(AdapterError, match="no adapter 'gamma'"), model.active("gamma"):
        pass


def test_smollm2_letters_are_single_tokens() -> None:
    from tracec.trace_rl.policy.catalog import resolve_model
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"), local_files_only=True)
    assert len(set(label_token_ids(tokenizer, list("ABCDEFGH")))) == 8
    with pytest.raises(RouteError, match="'precondition' is"):
        label_token_ids(tokenizer, ["precondition"])


def test_vllm_lora_requests_name_each_adapter_with_its_own_id_and_rank(tmp_path: Path) -> None:
    """What `VLLMAdapters` hands vLLM, read from real adapter folders: ids from 1 (vLLM reserves 0), the rank of each
    adapter's config (the engine is sized by the largest), absolute paths; `base` and non-LoRA folders refused."""
    from tracec.trace_rl.llm.vllm_backend import engine_rank
    from tracec.trace_rl.targeting.vllm_adapters import lora_specs

    small = random_adapter(tmp_path / "small", 1)
    large = Policy.load("tiny", LoraSection(rank=8, alpha=16), seed=3).save_adapter(tmp_path / "large")
    specs = lora_specs({"alpha": small, "beta": large})
    assert [(s.name, s.int_id, s.rank) for s in specs] == [("alpha", 1, 4), ("beta", 2, 8)]
    assert [Path(s.path) for s in specs] == [small.resolve(), large.resolve()] and Path(specs[0].path).is_absolute()
    with pytest.raises(AdapterError, match="`base` means no adapter"):
        lora_specs({BASE: small})
    with pytest.raises(AdapterError, match="not an adapter folder"):
        lora_specs({"gamma": tmp_path})
    assert [engine_rank(r) for r in (1, 4, 8, 9, 16, 200)] == [8, 8, 8, 16, 16, 256]
    with pytest.raises(ValueError, match="above the largest"):
        engine_rank(1024)


def test_the_vllm_engine_says_what_it_cannot_serve_before_it_starts(tmp_path: Path) -> None:
    """The engine's inputs are checked before vLLM is imported or started: the tiny model (no folder), an adapter above
    the largest rank vLLM serves (its config file named), an unknown engine."""
    from tracec.trace_rl.targeting.peft_adapters import load_adapter_model

    with pytest.raises(AdapterError, match="tiny model exists only in code"):
        load_adapter_model("tiny", {}, engine="vllm")
    wide = Policy.load("tiny", LoraSection(rank=520, alpha=16), seed=3).save_adapter(tmp_path / "wide")
    with pytest.raises(AdapterError, match=rf"{wide}/adapter_config.json: r = 520 is above the largest LoRA rank vLLM "
                                           r"serves \(512\); decode it with the transformers engine"):
        load_adapter_model("smollm2-135m-instruct", {"wide": wide}, engine="vllm")
    with pytest.raises(AdapterError, match="unknown engine 'tpu'"):
        load_adapter_model("tiny", {}, engine="tpu")