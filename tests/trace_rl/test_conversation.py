"""A conversation becomes the same tokens on every path: the local backend, the episode's turns, the transformers
adapters and the vLLM adapters all follow `conversation.encode`, with a chat template or without one."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
from tokenizers.processors import TemplateProcessing
from tracec.trace_rl.envs.protocol import Observation
from tracec.trace_rl.experiments.small_policy import build_word_tokenizer
from tracec.trace_rl.llm import conversation
from tracec.trace_rl.llm.local import TransformersBackend
from tracec.trace_rl.policy.catalog import resolve_model
from tracec.trace_rl.policy.tiny import build_tiny_model, build_tokenizer
from tracec.trace_rl.policy.tiny_vocab import ROLE_TOKENS
from tracec.trace_rl.rollouts.turns import TurnTemplate
from tracec.trace_rl.targeting.peft_adapters import PeftAdapters
from tracec.trace_rl.targeting.vllm_adapters import VLLMAdapters
from transformers import AutoTokenizer

SYSTEM, TASK = "You book rooms.", "Book R7 for Ann Lee."
CONVERSATIONS = [
    ("", Observation(text=TASK, role="user")),
    (SYSTEM, Observation(text=TASK, role="user")),
    (SYSTEM, Observation(text='{"rows": [{"id": "G2"}]}', role="tool")),
]


def _with_start_token(tokenizer: Any) -> Any:
    """`tokenizer`, made to prepend a start token (as a BOS-adding tokenizer does) when special tokens are added."""
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single="<|pad|> $A", special_tokens=[("<|pad|>", tokenizer.pad_token_id)])
    return tokenizer


@pytest.fixture(scope="module", params=["tiny", "tiny-with-start-token", "smollm2"])
def tokenizer(request: pytest.FixtureRequest) -> Any:
    if request.param == "smollm2":
        return AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"), local_files_only=True)
    return _with_start_token(build_tokenizer()) if request.param == "tiny-with-start-token" else build_tokenizer()


class _Engine:
    """What `VLLMAdapters` asks of a vLLM engine: its tokenizer, and `generate`, which records the prompts and
    answers each with `reply` (token ids, as vLLM's outputs carry them)."""

    def __init__(self, tokenizer: Any, reply: list[int]) -> None:
        self._tokenizer, self.reply = tokenizer, reply
        self.prompts: list[Any] = []

    def get_tokenizer(self) -> Any:
        return self._tokenizer

    def generate(self, prompts: list[Any], params: Any, **options: Any) -> list[Any]:
        self.prompts.extend(prompts)
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=self.reply)]) for _ in prompts]


@pytest.fixture
def vllm_stub(monkeypatch: pytest.MonkeyPatch) -> None:
    """The few vLLM names `VLLMAdapters` imports, so its prompts can be checked without vLLM or a GPU."""
    modules = {name: types.ModuleType(name) for name in ("vllm", "vllm.inputs", "vllm.lora", "vllm.lora.request")}
    modules["vllm"].SamplingParams = lambda **settings: settings  # type: ignore[attr-defined]
    modules["vllm.inputs"].TokensPrompt = dict  # type: ignore[attr-defined]  # vLLM's is a TypedDict
    modules["vllm.lora.request"].LoRARequest = tuple  # type: ignore[attr-defined]
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)


@pytest.mark.usefixtures("vllm_stub")
def test_every_path_gives_the_same_ids_for_the_same_messages(tokenizer: Any) -> None:
    model, _ = build_tiny_model()  # prompts are only encoded here: the tiny model's weights serve any tokenizer
    backend = TransformersBackend(model, tokenizer)
    turns = TurnTemplate(tokenizer)
    peft = PeftAdapters(types.SimpleNamespace(model=model, tokenizer=tokenizer, source="probe"))
    words = tokenizer.encode(TASK, add_special_tokens=False)[:3]
    ended = [*words, tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else words
    engine = _Engine(tokenizer, ended)  # a reply that ends with the end-of-sequence token, as a finished one does
    vllm = VLLMAdapters(engine, [], max_new_tokens=4)
    for system, observation in CONVERSATIONS:
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": observation.role, "content": observation.text})
        ids = conversation.encode(tokenizer, messages)
        assert backend.prompt_ids(messages) == ids
        assert turns.prompt_ids(system, observation) == ids
        assert peft.prompt_ids(messages) == ids
        assert vllm.prompt_ids(messages) == ids
        # the reply decoded by the rule the transformers engine decodes by: its words, the special token dropped
        reply = vllm.generate(messages)
        assert reply == conversation.decode_reply(tokenizer, words) == tokenizer.decode(words, skip_special_tokens=True)
        assert engine.prompts[-1] == {"prompt_token_ids": ids}


def test_the_start_token_is_written_once_by_whoever_owns_it() -> None:
    messages = [{"role": "user", "content": "hi"}]
    fallback = _with_start_token(build_tokenizer())
    start = fallback.pad_token_id
    # Without a chat template the tokenizer adds its start token...
    assert conversation.encode(fallback, messages) == [start, *fallback(conversation.render_fallback(messages),
                                                                        add_special_tokens=False)["input_ids"]]
    # ...and a chat template that writes its own is not given a second one.
    templated = _with_start_token(build_tokenizer())
    templated.chat_template = ("<|pad|>{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
                               "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    assert conversation.encode(templated, messages) == conversation.encode(fallback, messages)
    assert conversation.encode(templated, messages).count(start) == 1


def test_the_fallback_role_markers_are_one_token_in_both_tokenizers_without_a_template() -> None:
    for tokenizer in (build_tokenizer(), build_word_tokenizer(["Take the key."])):
        assert not conversation.uses_chat_template(tokenizer)
        for token in ROLE_TOKENS.values():
            assert tokenizer(token, add_special_tokens=False)["input_ids"] == [tokenizer.convert_tokens_to_ids(token)]


def test_a_role_the_fallback_has_no_token_for_is_refused() -> None:
    with pytest.raises(ValueError, match=r"message 1: role 'narrator' has no token in the fallback template"):
        conversation.render(build_tokenizer(), [{"role": "user", "content": "hi"}, {"role": "narrator", "content": ""}])
