"""The local backends behind `SamplingBackend`: the transformers model's per-call sampling (stop strings, n samples,
seeds, max tokens) on the tiny model; choosing a backend from settings and environment; vLLM's install hint; and the
real SmolLM2-135M-Instruct answering a labeling prompt with parseable JSON or a clear failure (slow)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from tracec.trace_rl.llm.backends import local_backend, open_backend
from tracec.trace_rl.llm.calls import CallLog, LLMError
from tracec.trace_rl.llm.chat import Sampling
from tracec.trace_rl.llm.http import OpenAIChatBackend
from tracec.trace_rl.llm.local import SamplingConfig, TransformersBackend
from tracec.trace_rl.llm.options import BackendChoiceError, BackendSettings
from tracec.trace_rl.policy.catalog import ModelError
from tracec.trace_rl.policy.tiny import build_tiny_model

MESSAGES = [{"role": "user", "content": "Say something."}]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def backend() -> TransformersBackend:
    model, tokenizer = build_tiny_model(seed=1, max_positions=256)
    return TransformersBackend(model, tokenizer, config=SamplingConfig(max_new_tokens=40, temperature=1.0, seed=3))


def test_a_stop_string_cuts_the_reply_before_it(backend: TransformersBackend) -> None:
    full = backend.sample(MESSAGES, Sampling(seed=5))[0]  # the same seed draws the same tokens up to the stop
    position = next(i for i in range(1, len(full)) if full[i] not in full[:i] and not full[i].isspace())
    stopped = backend.sample(MESSAGES, Sampling(seed=5, stop=(full[position : position + 2], "never-there")))[0]
    assert stopped == full[:position]


def test_max_tokens_per_call_bounds_the_reply(backend: TransformersBackend) -> None:
    greedy = backend.sample(MESSAGES, Sampling(temperature=0.0))[0]
    short = backend.sample(MESSAGES, Sampling(temperature=0.0, max_tokens=5))[0]
    assert short == greedy[: len(short)] and len(short) <= 5  # one character a token in the tiny vocabulary
    with pytest.raises(ValueError, match="max_tokens=256 leaves no room for a prompt in a model of 256 positions"):
        backend.sample(MESSAGES, Sampling(max_tokens=256))


def test_n_samples_replay_under_their_seed_and_differ_from_each_other(backend: TransformersBackend) -> None:
    first = backend.sample(MESSAGES, Sampling(n=3, seed=7))
    assert len(first) == 3 and len(set(first)) > 1
    assert backend.sample(MESSAGES, Sampling(n=3, seed=7)) == first
    assert backend.sample(MESSAGES, Sampling(n=3, seed=8)) != first
    greedy = backend.sample(MESSAGES, Sampling(n=2, temperature=0.0))
    assert greedy == [backend.sample(MESSAGES, Sampling(temperature=0.0))[0]] * 2  # greedy: one reply, n times


def test_seeded_calls_leave_the_call_sequence_alone() -> None:
    def fresh() -> TransformersBackend:
        model, tokenizer = build_tiny_model(seed=1, max_positions=256)
        return TransformersBackend(model, tokenizer, config=SamplingConfig(max_new_tokens=20, seed=3))

    plain, mixed = fresh(), fresh()
    expected = [plain.generate(MESSAGES), plain.generate(MESSAGES)]
    mixed.sample(MESSAGES, Sampling(seed=11))
    assert [mixed.generate(MESSAGES), mixed.generate(MESSAGES)] == expected


def test_a_base_url_in_the_environment_means_http_with_its_model_and_key() -> None:
    environ = {"TRACEC_LLM_BASE_URL": "http://127.0.0.1:9/v1", "TRACEC_LLM_MODEL": "m", "TRACEC_LLM_API_KEY": "k"}
    chosen = open_backend(BackendSettings(timeout=5.0), environ)
    assert isinstance(chosen, OpenAIChatBackend)
    assert (chosen.config.model, chosen.config.api_key, chosen.config.timeout_s) == ("m", "k", 5.0)
    with pytest.raises(BackendChoiceError, match="--llm http needs --model"):
        open_backend(BackendSettings(backend="http", base_url="http://127.0.0.1:9/v1"), {})
    with pytest.raises(BackendChoiceError, match="must start with http"):
        open_backend(BackendSettings(base_url="localhost:8000", model="m"), {})


def test_local_models_by_name() -> None:
    tiny = open_backend(BackendSettings(model="tiny"), {})
    assert isinstance(tiny, TransformersBackend) and tiny.name == "tiny"
    with pytest.raises(ModelError, match="no model 'nope'"):
        open_backend(BackendSettings(model="nope"), {"TRACEC_MODELS_DIR": "/nonexistent"})


def test_vllm_without_vllm_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # as if it were not installed (the trainer asks the same helper)
    with pytest.raises(LLMError,
                       match=r"vLLM is not installed; on a machine with a CUDA GPU: pip install 'tracec\[gpu\]'"):
        open_backend(BackendSettings(backend="vllm", model="tiny"), {})


@pytest.mark.slow
def test_smollm2_answers_a_labeling_prompt_with_json_or_fails_clearly(tmp_path: Path) -> None:
    from tracec.trace_rl.llm.repair import RepairFailed, ask_json
    from tracec.trace_rl.targeting.analysis.cases import Case
    from tracec.trace_rl.targeting.analysis.dictionary import Capability
    from tracec.trace_rl.targeting.analysis.label import LABELS, labeling_prompt, labeling_schema

    torch.set_num_threads(2)
    backend = local_backend("smollm2-135m-instruct")  # installed by `make`; never downloaded
    case = Case(id="t1", success=False, reward=0.0, transcript=(
        "task: cancel my order O7 if it has not shipped\nagent: <action>cancel_order(order=\"O7\")</action>\n"
        "  -> {\"db_changed\": true}\noutcome: failure (reward 0)"))
    capabilities = [Capability(name="precondition_verification", description="looks a record up before changing it")]
    log = CallLog(tmp_path / "calls.jsonl", command="test")
    try:
        accepted = ask_json(backend, labeling_prompt(case, capabilities, 400), labeling_schema(capabilities), log=log,
                            purpose="label t1", tries=2, sampling=Sampling(temperature=0.0, max_tokens=40))
    except RepairFailed as failed:
        assert str(failed).startswith("label t1: no acceptable reply in 2 tries; the last one: ")
        assert len(failed.problems) == 2 and all(failed.problems)
    else:
        assert accepted.value["labels"]["precondition_verification"] in LABELS
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    replies = [c["replies"][0] for c in calls if c["event"] == "call"]
    assert replies and all(isinstance(r, str) and r for r in replies)
