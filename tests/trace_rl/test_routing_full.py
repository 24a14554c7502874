"""TRACE's routing in its full form with the tiny model and two adapters: the nucleus mixture is exactly
W + sum alpha_c scaling_c B_c A_c (one layer's effective weight, and the whole model's logits against one merged by
hand), the nucleus set against a transcription of its definition, the retrieval pre-filter against a numpy top-k
over the base model's embeddings, located index errors, and vLLM's refusal of a mixture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from numerics import float64_model, forward_roundings, forward_size, tolerance
from random_adapters import random_adapter
from tracec.cli import main
from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.policy.lora import LoraSection
from tracec.trace_rl.policy.model import Policy, import_peft
from tracec.trace_rl.policy.tiny import build_tiny_model
from tracec.trace_rl.targeting.adapters import AdapterError
from tracec.trace_rl.targeting.eval_table import BASE
from tracec.trace_rl.targeting.evaluate import Condition, EvalDomain, evaluate, policy_conditions
from tracec.trace_rl.targeting.peft_adapters import MIXTURE, PeftAdapters
from tracec.trace_rl.targeting.retrieval import IndexItem, read_index, write_index
from tracec.trace_rl.targeting.routing import (
    MixtureAgent,
    RouteError,
    Router,
    RoutingSettings,
    nucleus,
    route_options,
)
from tracec.trace_rl.targeting.vllm_adapters import VLLMAdapters

REPO = Path(__file__).resolve().parents[2]
ENV = REPO / "examples" / "envs" / "precondition_verification.rubric"
TASK = "Hi, I'm Ana Lima. Please book room R12 for me for 3 nights, meal plan breakfast."
PROMPT = [{"role": "system", "content": "You help."}, {"role": "user", "content": TASK}]
TEXTS = ["Please cancel order O12, it has not shipped.", "Book room R3 for two nights.", "What is my balance?",
         "Cancel my flight HAT170 and refund it.", "Settle the bill of table 4.", "Book a table for six at eight."]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")  # ranks differ: `cat` stacks them, `linear` could not
    return {"alpha": random_adapter(root / "alpha", 1, rank=4, alpha=9.0),
            "beta": random_adapter(root / "beta", 2, rank=8, alpha=18.0)}


@pytest.fixture(scope="module")
def model(folders: dict[str, Path]) -> PeftAdapters:
    model = PeftAdapters.load("tiny", folders, max_new_tokens=16)
    float64_model(model.policy.model)  # two computations of one value agree to fp64 rounding: tight checks
    return model


def _options() -> list[Any]:
    return route_options([("alpha", "books rooms with exact arguments", "user: book R1"),
                          ("beta", "checks an order before changing it", "")])


def _lora_layers(model: PeftAdapters) -> dict[str, Any]:
    layer = import_peft().tuners.lora.LoraLayer
    return {name: m for name, m in model.policy.model.named_modules() if isinstance(m, layer) and "alpha" in m.lora_A}


def _delta(module: Any, weights: dict[str, float]) -> torch.Tensor:
    """sum_c alpha_c * scaling_c * B_c A_c, straight from the adapters' tensors."""
    return sum(weights[c] * module.scaling[c] * (module.lora_B[c].weight @ module.lora_A[c].weight)
               for c in weights if c != BASE)  # type: ignore[return-value]


def _delta_size(module: Any, weights: dict[str, float]) -> torch.Tensor:
    """What each entry of `_delta` accumulates, in absolute values."""
    return sum(abs(weights[c]) * module.scaling[c] * (module.lora_B[c].weight.abs() @ module.lora_A[c].weight.abs())
               for c in weights if c != BASE).detach()  # type: ignore[union-attr]


WEIGHTS = {"alpha": 0.55, "beta": 0.3, BASE: 0.15}


def _mixture_tolerance(config: Any, record: dict[str, Any]) -> float:
    """How far a routing decision's mixture may be from another's on the same prompt when they ran the model in
    fp32 (the `tracec` commands do): the rule (tests/numerics.py) for a logit of an fp32 forward over the prompt, at
    the logits' size, doubled by the softmax (the logit's error and the log-sum-exp's) and again by the
    renormalisation over the nucleus, in weights <= 1."""
    size = max(1.0, *map(abs, record["logits"].values()))
    return 4 * tolerance(forward_roundings(config, record["prompt_tokens"]), size, torch.float32)


def test_the_mixture_of_one_layer_is_the_base_weight_plus_the_weighted_deltas(model: PeftAdapters) -> None:
    name, module = next(iter(_lora_layers(model).items()))
    base = module.get_base_layer()
    eye = torch.eye(base.in_features, dtype=base.weight.dtype)
    expected = base.weight.detach() + _delta(module, WEIGHTS)
    with torch.inference_mode(), model.mixed(WEIGHTS):
        assert model.active_name == MIXTURE
        assert module.lora_A[MIXTURE].weight.shape[0] == 4 + 8  # `cat`: the ranks stacked
        effective = module(eye).T  # x W'^T for x = I, minus the bias the layer has none of
    assert base.bias is None and name.endswith(("q_proj", "k_proj", "v_proj", "o_proj"))
    # the rule (tests/numerics.py): sums over the stacked ranks (12), a few products, at the terms' own size
    size = base.weight.detach().abs() + _delta_size(module, WEIGHTS)
    assert ((effective - expected).abs() <= tolerance(12 + 8, 1.0, torch.float64) * size).all()
    assert not torch.allclose(effective, base.weight, atol=1e-3)  # the deltas are not negligible
    assert model.active_name is None
    model.release_mixture()
    assert MIXTURE not in model.policy.model.peft_config


def test_the_mixture_s_logits_are_those_of_a_model_merged_by_hand(folders: dict[str, Path]) -> None:
    # in float64, so that the two summation orders (adapters beside W, or inside it) agree to rounding
    model = PeftAdapters.load("tiny", folders)
    float64_model(model.policy.model)
    ids = torch.tensor([model.prompt_ids(PROMPT)])
    merged = Policy.load("tiny", LoraSection(rank=4, alpha=8))  # the same base weights (the tiny model's seed 0)
    float64_model(merged.model)
    fresh = dict(merged.model.named_modules())
    with torch.no_grad():
        for name, module in _lora_layers(model).items():
            fresh[name].get_base_layer().weight += _delta(module, WEIGHTS)
    with torch.inference_mode(), merged.base_model():
        by_hand = merged.model(input_ids=ids).logits
        size = forward_size(merged.model, ids)  # the adapters grow the residual stream to ~170, the logits ~0.6
    with torch.inference_mode(), model.mixed(WEIGHTS):
        mixed = model.policy.model(input_ids=ids).logits
        again = model.policy.model(input_ids=ids).logits  # the same mixture asked again: kept, not rebuilt
    with torch.inference_mode(), model.active(None):
        plain = model.policy.model(input_ids=ids).logits
    assert model.policy.model.peft_config[MIXTURE].r == 12 and mixed.dtype == torch.float64
    # the rule (tests/numerics.py) for a forward over the prompt (the mixture moves the logits by 1e-2)
    close = tolerance(forward_roundings(model.policy.model.config, ids.shape[1]), size, torch.float64)
    torch.testing.assert_close(mixed, by_hand, atol=close, rtol=0)
    torch.testing.assert_close(again, mixed, atol=0, rtol=0)
    assert (mixed - plain).abs().max() > 1e-2
    model.release_mixture()


def test_a_one_adapter_nucleus_is_that_adapter_and_base_alone_the_base_model(model: PeftAdapters) -> None:
    ids = torch.tensor([model.prompt_ids(PROMPT)])
    for weights, name in (({"alpha": 1.0}, "alpha"), ({BASE: 1.0}, None), ({"beta": 1.0, BASE: 0.0}, "beta")):
        with torch.inference_mode(), model.mixed(weights):
            assert model.active_name == name and MIXTURE not in model.policy.model.peft_config
            mixed = model.policy.model(input_ids=ids).logits
        with torch.inference_mode(), model.active(name):
            alone = model.policy.model(input_ids=ids).logits
        torch.testing.assert_close(mixed, alone, atol=0, rtol=0)
    with pytest.raises(AdapterError, match="sum to 1"), model.mixed({"alpha": 0.5}):
        pass
    with pytest.raises(AdapterError, match="no adapter 'gamma'"), model.mixed({"gamma": 1.0}):
        pass


def _nucleus_by_definition(weights: list[float], names: list[str], p: float) -> dict[str, float]:
    """TRACE's adapter selection (its paper's "Adapter selection"): `base` alone when its label is the likeliest;
    else alpha_c proportional to the weights over the adapters, the smallest prefix of them sorted by alpha (ties:
    option order) whose sum reaches p, renormalised."""
    order = sorted(range(len(weights)), key=lambda i: (-weights[i], i))
    if names[order[0]] == BASE:
        return {BASE: 1.0}
    adapters = [i for i in order if names[i] != BASE]
    alpha = {i: weights[i] / sum(weights[j] for j in adapters) for i in adapters}
    for size in range(1, len(adapters) + 1):
        prefix = adapters[:size]
        if sum(alpha[i] for i in prefix) >= p or size == len(adapters):
            total = sum(alpha[i] for i in prefix)
            return {names[i]: alpha[i] / total for i in prefix}
    raise AssertionError("unreachable")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=6).filter(lambda w: sum(w) > 0),
       st.floats(0.01, 1.0), st.booleans())
def test_the_nucleus_is_the_smallest_top_set_reaching_p(raw: list[int], p: float, with_base: bool) -> None:
    names = [f"c{i}" for i in range(len(raw))]
    if with_base:
        names[-1] = BASE
    weights = [w / sum(raw) for w in raw]  # integers: ties happen
    got = nucleus(dict(zip(names, weights)), p)
    close = tolerance(len(raw) + 2, 1.0, float)  # sums of <= 6 weights <= 1 in two orders, a division
    assert got == pytest.approx(_nucleus_by_definition(weights, names, p), abs=close)
    assert list(got) == list(_nucleus_by_definition(weights, names, p))  # highest first
    assert sum(got.values()) == pytest.approx(1.0, abs=close)  # the adapters' alphas sum to 1, as in TRACE
    assert got == {BASE: 1.0} or BASE not in got  # base is the whole mixture or no part of it


def test_base_keeps_no_share_beside_the_adapters() -> None:
    weights = {"alpha": 0.5, "beta": 0.2, BASE: 0.3}
    assert nucleus(weights, 0.9) == pytest.approx({"alpha": 0.5 / 0.7, "beta": 0.2 / 0.7})  # 0.71 < 0.9: both
    assert nucleus(weights, 0.7) == {"alpha": 1.0}  # alpha alone is 0.5 / 0.7 of the adapters' weight
    assert nucleus({"alpha": 0.3, "beta": 0.2, BASE: 0.5}, 0.9) == {BASE: 1.0}  # the base label is likeliest
    with pytest.raises(RouteError, match="one at least is positive"):
        nucleus({"alpha": 0.0, BASE: 0.0}, 0.9)


def test_nucleus_refuses_a_p_outside_0_1() -> None:
    with pytest.raises(RouteError, match="top_p = 0"):
        nucleus({"a": 1.0}, 0.0)


def _numpy_top_k(model: PeftAdapters, task: str, texts: list[str], k: int) -> list[tuple[int, float]]:
    keys = np.array(model.embed(texts), dtype=np.float64)
    query = np.array(model.embed([task])[0], dtype=np.float64)
    similarity = keys @ query / (np.linalg.norm(keys, axis=1) * np.linalg.norm(query))
    order = sorted(range(len(texts)), key=lambda i: (-similarity[i], i))[:k]
    return [(i, float(similarity[i])) for i in order]


def _embedding(model: PeftAdapters, text: str) -> tuple[np.ndarray, float]:
    """The base model's mean-pooled last hidden state of `text`, L2-normalised, in fp64; and how far `embed`'s
    may be from it (the rule, tests/numerics.py): `embed` rounds the hidden states to fp32 and pools (a sum over
    the tokens) and normalises (a sum over the width) in fp32, relative to the largest |h| over the pooled norm."""
    ids = torch.tensor([model.tokenizer(text, add_special_tokens=False)["input_ids"]])
    with torch.inference_mode(), model.policy.base_model():
        hidden = model.policy.model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0].numpy()
    pooled = hidden.mean(axis=0)
    norm = float(np.linalg.norm(pooled))
    size = max(1.0, float(np.abs(hidden).max()) / norm)
    with model.policy.base_model():
        forward = forward_size(model.policy.model, ids) / norm
    return pooled / norm, tolerance(hidden.shape[0] + hidden.shape[1] + 4, size, np.float32) + tolerance(
        forward_roundings(model.policy.model.config, hidden.shape[0]), forward, np.float64)


def test_the_embedding_is_the_base_model_s_mean_pooled_last_hidden_state(model: PeftAdapters) -> None:
    (vector,) = model.embed([TEXTS[0]])
    expected, close = _embedding(model, TEXTS[0])
    np.testing.assert_allclose(vector, expected, atol=close, rtol=0)
    with model.active("alpha"):  # adapters are off while embedding
        np.testing.assert_allclose(model.embed([TEXTS[0]])[0], vector, atol=close, rtol=0)


def test_retrieval_picks_the_top_k_by_cosine_and_the_prompt_lists_their_capabilities(model: PeftAdapters) -> None:
    k = 2
    nearest = _numpy_top_k(model, TASK, TEXTS, k)
    near = {i for i, _ in nearest}
    # the nearest items are labelled beta only, the others alpha: the candidates are beta and base
    index = [IndexItem(id=f"t{i}", text=t, capabilities=("beta",) if i in near else ("alpha",))
             for i, t in enumerate(TEXTS)]
    router = Router(model, _options(), RoutingSettings(retrieval_k=k), index=index)
    decision = router.route(TASK)
    assert [r.id for r in decision.retrieved] == [f"t{i}" for i, _ in nearest]
    # two embeddings of each text, each within its bound of exact: a cosine of unit vectors moves by at most the
    # norms of their errors; then the cosines' own fp64 sums over the width (tests/numerics.py)
    width = model.policy.model.config.hidden_size
    bound = max(_embedding(model, text)[1] for text in [TASK, *TEXTS])
    close = 2 * 2 * width ** 0.5 * bound + tolerance(2 * width + 4, 1.0, np.float64)
    assert [r.similarity for r in decision.retrieved] == pytest.approx([s for _, s in nearest], abs=close)
    assert decision.candidates == ("beta", BASE) and set(decision.logits) == set(decision.weights) == {"beta", BASE}
    user = router.messages(TASK)[1]["content"]
    assert "B: beta - " in user and "C: base - " in user and "A: alpha" not in user and "(B, C)" in user
    record = decision.record()
    assert record["candidates"] == ["beta", BASE] and record["retrieved"][0]["id"] == f"t{nearest[0][0]}"
    assert "note" not in record
    assert sum(decision.weights.values()) == pytest.approx(1.0, abs=tolerance(len(decision.weights) + 2, 1.0, float))
    # both capabilities retrieved: the options' order, not the retrieval's
    mixed = [IndexItem(id=str(i), text=t, capabilities=("beta", "alpha") if i in near else ()) for i, t in
             enumerate(TEXTS)]
    assert Router(model, _options(), RoutingSettings(retrieval_k=k), index=mixed).route(TASK).candidates == \
        ("alpha", "beta", BASE)


def test_a_retrieval_without_capabilities_keeps_every_option_and_says_so(model: PeftAdapters) -> None:
    index = [IndexItem(id=str(i), text=t, capabilities=()) for i, t in enumerate(TEXTS)]
    decision = Router(model, _options(), RoutingSettings(retrieval_k=3), index=index).route(TASK)
    assert decision.candidates == ("alpha", "beta", BASE) and len(decision.retrieved) == 3
    assert "every option" in decision.record()["note"]
    with pytest.raises(RouteError, match="no option has: gamma"):
        Router(model, _options(), RoutingSettings(retrieval_k=1), index=[IndexItem(id="0", text="x",
                                                                                  capabilities=("gamma",))])
    with pytest.raises(RouteError, match="both an index and retrieval_k"):
        Router(model, _options(), RoutingSettings(retrieval_k=2))


def test_a_bad_index_line_is_located(tmp_path: Path) -> None:
    path = tmp_path / "index.jsonl"
    write_index(path, [IndexItem(id="a:1", text="hello", capabilities=("alpha",))])
    assert read_index(path) == [IndexItem(id="a:1", text="hello", capabilities=("alpha",))]
    good = '{"text": "hi", "capabilities": []}\n'
    for line, problem in (('{"text": "hi", "capabilities": "alpha"}', "`capabilities` must be a list"),
                          ("{not json", "not JSON"), ('{"text": "", "capabilities": []}', "`text` must be"),
                          ('{"text": "hi", "capabilities": [], "skill": "x"}', "unknown key 'skill'"),
                          ("[1, 2]", "a JSON object")):
        path.write_text(good + "\n" + line + "\n", encoding="utf-8")
        with pytest.raises(RouteError, match=rf"^{path}:3(:\d+)?: error: .*{problem}"):
            read_index(path)
    path.write_text("\n", encoding="utf-8")
    with pytest.raises(RouteError, match="holds no trajectories"):
        read_index(path)


def test_the_mixture_agent_routes_once_and_decodes_with_the_nucleus(model: PeftAdapters) -> None:
    router = Router(model, _options(), RoutingSettings(top_p=0.999))
    agent = MixtureAgent(model, router)
    text = agent.act(PROMPT)
    assert agent.decision is not None and agent.decision.mixture == nucleus(agent.decision.weights, 0.999)
    with model.mixed(agent.decision.mixture):
        assert text == model.generate(PROMPT)
    agent.close()
    assert MIXTURE not in model.policy.model.peft_config


def test_the_mixture_condition_is_evaluated_and_frees_its_adapter(model: PeftAdapters, tmp_path: Path) -> None:
    env = REPO / "examples/envs/tool_calling_precision.rubric"
    domain = EvalDomain(name="tcp", make_env=lambda: CapabilityEnvironment(load_environment(str(env)), max_steps=2),
                        seeds=(0,))
    conditions = policy_conditions(model, ["routed", "mixture"], Router(model, _options()))
    assert [c.name for c in conditions] == ["routed", "mixture"] and all(isinstance(c, Condition) for c in conditions)
    table = evaluate([domain], conditions, tmp_path, max_turns=2, fingerprint={})
    assert set(table.conditions) == {"routed", "mixture"}  # no oracle: neither is a single adapter
    assert MIXTURE not in model.policy.model.peft_config
    with pytest.raises(ValueError, match="needs routing options"):
        policy_conditions(model, ["mixture"], None)


def test_vllm_serves_one_lora_and_refuses_a_mixture_with_the_engine_to_use() -> None:
    engine = object.__new__(VLLMAdapters)  # no vLLM here: the state `VLLMAdapters.__init__` would set
    engine._requests = {"alpha": object(), "beta": object()}
    engine._active = None
    with engine.mixed({"alpha": 1.0, BASE: 0.0}):
        assert engine.active_name == "alpha"
    for weights in ({"alpha": 0.6, "beta": 0.4}, {"alpha": 0.7, BASE: 0.3}):
        with pytest.raises(AdapterError, match=r"one LoRA a request .*\(--engine transformers"), \
                engine.mixed(weights):
            pass
    with pytest.raises(AdapterError, match="retrieval embeds with the transformers engine"):
        engine.embed(["hi"])


def _cli_files(folders: dict[str, Path], tmp_path: Path) -> tuple[list[str], Path]:
    options = tmp_path / "options.json"
    options.write_text(json.dumps([o.__dict__ for o in _options()]))
    index = tmp_path / "index.jsonl"
    write_index(index, [IndexItem(id=f"t{i}", text=t, capabilities=(("alpha",), ("beta",))[i % 2])
                        for i, t in enumerate(TEXTS)])
    flags = ["--model", "tiny", *[f for n, p in folders.items() for f in ("--adapter", f"{n}={p}")],
             "--options", str(options)]
    return flags, index


def test_route_and_evaluate_take_top_p_retrieve_k_and_index(model: PeftAdapters, folders: dict[str, Path],
                                                           tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags, index = _cli_files(folders, tmp_path)
    assert main(["route", *flags, "--task", TASK, "--top-p", "0.8", "--retrieve-k", "2", "--index", str(index),
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    router = Router(model, _options(), RoutingSettings(retrieval_k=2), index=read_index(index))
    expected = router.route(TASK, top_p=0.8).record()
    assert printed["candidates"] == expected["candidates"]
    close = _mixture_tolerance(model.policy.model.config, expected)
    assert printed["mixture"] == pytest.approx(expected["mixture"], abs=close)
    assert [r["id"] for r in printed["retrieved"]] == [r["id"] for r in expected["retrieved"]]
    assert main(["route", *flags, "--task", TASK, "--top-p", "0.8"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("mixture: ")
    out = tmp_path / "eval"
    assert main(["evaluate", *flags, "--target", "capability", "--env", str(ENV), "--conditions", "routed,mixture",
                 "--tasks", "1", "--max-turns", "1", "--top-p", "0.8", "-o", str(out), "--quiet"]) == 0
    assert "| mixture | " in capsys.readouterr().out
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["condition"] for r in results] == ["routed", "mixture"] and "mixture" in results[1]["route"]
    assert "mixture" not in results[0]["route"]


def test_routing_flags_that_do_not_fit_are_usage_errors(folders: dict[str, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    flags, index = _cli_files(folders, tmp_path)
    for more, code, said in ((["--index", str(index)], 2, "--index: retrieval needs --retrieve-k"),
                             (["--retrieve-k", "2"], 2, "--retrieve-k: name the retrieval index"),
                             (["--top-p", "0"], 2, "argument --top-p: must be a number between 0 and 1, got 0"),
                             (["--top-p", "1.5"], 2, "argument --top-p: must be a number between 0 and 1")):
        assert main(["route", *flags, "--task", TASK, *more]) == code
        assert said in capsys.readouterr().err
    index.write_text('{"text": "hi", "capabilities": ["alpha"]}\n{"text": "hi"}\n')
    assert main(["route", *flags, "--task", TASK, "--retrieve-k", "1", "--index", str(index)]) == 1
    assert f"{index}:2: error: `capabilities` must be a list" in capsys.readouterr().err


def test_the_pipeline_index_is_the_collected_trajectories_with_their_lacking_capabilities(tmp_path: Path) -> None:
    from tracec.trace_rl.targeting.analysis.runs import write_run
    from tracec.trace_rl.targeting.pipeline.route_index import collected_index

    collected, labeled, selected = (tmp_path / n for n in ("collect", "label", "select"))
    (collected / "trajectories").mkdir(parents=True)
    records = [{"episode": "d:0", "instruction": "hidden", "states": [{"user_msg": "cancel O1"}]},
               {"episode": "d:1", "instruction": "book R2", "states": []},
               {"episode": "d:2", "states": [{"user_msg": "lacks nothing"}]},
               {"episode": "d:3", "states": [{"feedback": "You are in a kitchen."}]}]
    (collected / "trajectories" / "base.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    labeled.mkdir()
    # two runs: a trajectory's capabilities are the union of the runs' LACKING labels, failed or passed
    write_run(labeled / "run_01.json", attempt=1, total_failed=2, total_passed=2,
              labels={"pv": {"lacking_failed": ["d:0"]}, "msc": {"lacking_passed": ["d:1"]},
                      "dropped": {"lacking_failed": ["d:0", "d:3"]}})
    write_run(labeled / "run_02.json", attempt=2, total_failed=2, total_passed=2,
              labels={"pv": {"lacking_failed": ["d:3"]}, "msc": {"lacking_failed": ["d:0"], "present_passed": ["d:2"]}})
    selected.mkdir()
    (selected / "selected_capabilities.json").write_text(json.dumps([{"skill": "msc"}, {"skill": "pv"},
                                                                      {"skill": "dropped"}]))
    items = collected_index(collected, labeled, selected, ["pv", "msc"])  # `dropped` has no adapter
    assert items == [IndexItem(id="d:0", text="cancel O1", capabilities=("msc", "pv")),
                     IndexItem(id="d:1", text="book R2", capabilities=("msc",)),
                     IndexItem(id="d:3", text="You are in a kitchen.", capabilities=("pv",))]


@pytest.mark.slow
def test_the_pipeline_routes_with_retrieval_and_evaluates_the_mixture(tmp_path: Path) -> None:
    from pipeline_fixtures import ENVS, analyst, write_config
    from tracec.trace_rl.targeting.pipeline.config import load_pipeline_config
    from tracec.trace_rl.targeting.pipeline.run import run_pipeline

    config = load_pipeline_config(write_config(tmp_path), ["routing.retrieval_k=2", "routing.top_p=0.95",
                                                           'evaluate.conditions=["base", "routed", "mixture"]'])
    root = Path(config.run.out)
    run_pipeline(config, llm=analyst())
    index = read_index(root / "route" / "index.jsonl")
    episodes = [json.loads(line)["episode"] for line in
                (root / "collect" / "trajectories" / "base.jsonl").read_text().splitlines()]
    assert index and {i.id for i in index} <= set(episodes)
    assert all(set(i.capabilities) <= set(ENVS.values()) and i.capabilities for i in index)
    decisions = [json.loads(line) for line in (root / "route" / "decisions.jsonl").read_text().splitlines()]
    for decision in decisions:
        assert len(decision["retrieved"]) == 2 and decision["candidates"][-1] == BASE
        assert set(decision["logits"]) == set(decision["candidates"])
        assert sum(decision["mixture"].values()) == pytest.approx(1.0, abs=tolerance(8, 1.0, float))
    table = json.loads((root / "evaluate" / "table.json").read_text())
    assert table["conditions"] == ["base", "routed", "mixture"]  # no oracle: one single condition
    mixed = [json.loads(line) for line in (root / "evaluate" / "results.jsonl").read_text().splitlines()
             if json.loads(line)["condition"] == "mixture"]
    by_decision = {(d["domain"], d["seed"]): d for d in decisions}
    assert len(mixed) == len(by_decision)
    config = build_tiny_model()[0].config
    for result in mixed:  # the evaluation mixed as the route step said (each step routed again)
        decision = by_decision[(result["domain"], result["seed"])]
        close = _mixture_tolerance(config, decision)
        assert result["route"]["mixture"] == pytest.approx(decision["mixture"], abs=close)
