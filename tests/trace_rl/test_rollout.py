"""The transformers rollout backend over the tiny model: rendering, truncation, seeded sampling, save/load, and
the agents and users that talk through it (a TextWorld game, a capability environment's simulated user)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.runtime.facts.trajectories.records import write_records
from tracec.runtime.scoring import RubricScorer
from tracec.trace_rl.envs.agent import ChatAgent, run_episode
from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.envs.textworld.env import TextWorldEnvironment
from tracec.trace_rl.envs.toolcall import format_tool_call
from tracec.trace_rl.envs.users import LLMUser
from tracec.trace_rl.llm.conversation import render_fallback
from tracec.trace_rl.llm.local import SamplingConfig, TransformersBackend
from tracec.trace_rl.policy.tiny import build_tiny_model, build_tokenizer
from tracec.trace_rl.policy.tiny_vocab import CHARACTERS

REPO = Path(__file__).resolve().parents[2]
MESSAGES = [
    {"role": "system", "content": "You play a text game."},
    {"role": "user", "content": "You are in a kitchen. There is a red apple."},
    {"role": "assistant", "content": "<action>take red apple</action>"},
    {"role": "user", "content": "Taken."},
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_backend(seed: int = 0, *, max_positions: int = 256, **sampling: float) -> TransformersBackend:
    model, tokenizer = build_tiny_model(seed=0, max_positions=max_positions)
    config = SamplingConfig(**{"max_new_tokens": 32, "seed": seed, **sampling})  # type: ignore[arg-type]
    return TransformersBackend(model, tokenizer, config=config)


def greedy_reply(backend: TransformersBackend, prompt: list[int]) -> str:
    """Greedy decoding by hand, re-running the whole sequence each step: the oracle for `generate`."""
    eos, new = backend.tokenizer.eos_token_id, []
    with torch.no_grad():
        for _ in range(backend.config.max_new_tokens):
            token = int(backend.model(torch.tensor([prompt + new])).logits[0, -1].argmax())
            if token == eos:
                break
            new.append(token)
    return str(backend.tokenizer.decode(new, skip_special_tokens=True))


# ---------------------------------------------------------------- config and construction


@pytest.mark.parametrize(
    ("field", "value", "fix"),
    [
        ("max_new_tokens", 0, "integer >= 1"),
        ("max_new_tokens", 2.5, "integer >= 1"),
        ("temperature", -0.5, "use 0 for greedy decoding"),
        ("temperature", float("nan"), "use 0 for greedy decoding"),
        ("top_p", 0.0, "use 1.0 to turn nucleus sampling off"),
        ("top_p", 1.5, "use 1.0 to turn nucleus sampling off"),
        ("seed", -1, "integer >= 0"),
        ("seed", True, "integer >= 0"),
    ],
)
def test_sampling_config_names_the_value_and_the_fix(field: str, value: object, fix: str) -> None:
    with pytest.raises(ValueError, match=f"{field}={value!r}") as raised:
        SamplingConfig(**{field: value})  # type: ignore[arg-type]
    assert fix in str(raised.value)


def test_max_new_tokens_must_leave_room_for_a_prompt() -> None:
    model, tokenizer = build_tiny_model(max_positions=64)
    with pytest.raises(ValueError, match="max_new_tokens=64 leaves no room .* 64 positions; lower max_new_tokens"):
        TransformersBackend(model, tokenizer, config=SamplingConfig(max_new_tokens=64))
    assert TransformersBackend(model, tokenizer, config=SamplingConfig(max_new_tokens=60)).max_prompt_tokens == 4


def test_tiny_model_weights_follow_the_seed() -> None:
    def weights(seed: int) -> torch.Tensor:
        return build_tiny_model(seed)[0].model.embed_tokens.weight

    assert torch.equal(weights(3), weights(3))
    assert not torch.equal(weights(3), weights(4))
    with pytest.raises(ValueError, match="hidden=60 must split into heads=4"):
        build_tiny_model(hidden=60)


# ---------------------------------------------------------------- rendering and truncation


def test_fallback_template_renders_every_message_then_opens_the_reply() -> None:
    backend = tiny_backend()
    assert not backend.uses_chat_template
    assert backend.render(MESSAGES) == (
        "<|system|>\nYou play a text game.\n"
        "<|user|>\nYou are in a kitchen. There is a red apple.\n"
        "<|assistant|>\n<action>take red apple</action>\n"
        "<|user|>\nTaken.\n"
        "<|assistant|>\n"
    )
    ids = backend.prompt_ids(MESSAGES)
    role_ids = backend.tokenizer.convert_tokens_to_ids(["<|system|>", "<|user|>", "<|assistant|>"])
    assert [i for i in ids if i in role_ids] == [role_ids[k] for k in (0, 1, 2, 1, 2)]  # one token per marker


def test_chat_template_wins_over_the_fallback() -> None:
    model, tokenizer = build_tiny_model()
    tokenizer.chat_template = (
        "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}"
    )
    backend = TransformersBackend(model, tokenizer)
    assert backend.uses_chat_template
    assert backend.render(MESSAGES[:2]) == (
        "[system] You play a text game.\n[user] You are in a kitchen. There is a red apple.\n[assistant] "
    )


def test_a_malformed_message_is_named_by_its_index() -> None:
    with pytest.raises(ValueError, match=r"message 1: expected \{'role': str, 'content': str\}"):
        tiny_backend().render([MESSAGES[0], {"role": "user"}])


_TEXT = st.text(alphabet=CHARACTERS, max_size=40)
_MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": _TEXT})


@settings(max_examples=50, deadline=None)
@given(messages=st.lists(_MESSAGE, max_size=4))
def test_prompt_ids_decode_to_the_rendered_prompt(messages: list[dict[str, str]]) -> None:
    tokenizer = build_tokenizer(max_positions=1024)
    ids = tokenizer(render_fallback(messages), add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == render_fallback(messages)
    # One token per role marker, then one per character: "<|role|>", "\n", content, "\n"; then "<|assistant|>\n".
    assert len(ids) == sum(3 + len(m["content"]) for m in messages) + 2


def test_characters_outside_the_tiny_vocabulary_read_as_unknown() -> None:
    tokenizer = build_tokenizer()
    ids = tokenizer("w\u00f6rld \\D\x00", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == "w<|unk|>rld <|unk|>D<|unk|>"
    assert tokenizer.decode(ids, skip_special_tokens=True) == "wrld D"


def test_long_prompts_keep_their_tail() -> None:
    backend = tiny_backend(max_positions=128, temperature=0.0)
    long = [{"role": "system", "content": "rules " * 200}, {"role": "user", "content": "the question at the end"}]
    full = backend.tokenizer(backend.render(long), add_special_tokens=False)["input_ids"]
    ids = backend.prompt_ids(long)
    assert len(full) > 128 and len(ids) == backend.max_prompt_tokens == 96
    assert ids == full[-96:]
    assert backend.tokenizer.decode(ids).endswith("<|user|>\nthe question at the end\n<|assistant|>\n")
    assert backend.generate(long) == greedy_reply(backend, ids)


# ---------------------------------------------------------------- sampling


def test_greedy_generate_returns_only_the_new_text() -> None:
    backend = tiny_backend(temperature=0.0)
    reply = backend.generate(MESSAGES)
    assert reply == greedy_reply(backend, backend.prompt_ids(MESSAGES))
    assert reply and backend.generate(MESSAGES) == reply  # greedy ignores the call count


def test_sampling_replays_under_a_seed_and_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    first, again, other = tiny_backend(seed=1), tiny_backend(seed=1), tiny_backend(seed=2)
    replies = [first.generate(MESSAGES), first.generate(MESSAGES)]
    assert torch.equal(torch.rand(3), expected_next)
    assert all(isinstance(r, str) and r for r in replies)
    assert [again.generate(MESSAGES), again.generate(MESSAGES)] == replies
    assert replies[0] != replies[1]  # asking twice draws two samples
    assert other.generate(MESSAGES) != replies[0]


def test_top_p_narrows_sampling_towards_greedy() -> None:
    # The tiny model's next-token distribution is nearly flat; a top_p small enough keeps only the top token.
    greedy = tiny_backend(temperature=0.0).generate(MESSAGES)
    assert tiny_backend(seed=5, top_p=1e-6).generate(MESSAGES) == greedy
    assert tiny_backend(seed=5).generate(MESSAGES) != greedy


def test_save_and_load_round_trip_replays_the_same_replies(tmp_path: Path) -> None:
    backend = tiny_backend(seed=7)
    folder = backend.save_pretrained(tmp_path / "tiny")
    loaded = TransformersBackend.from_pretrained(folder, config=backend.config)
    assert loaded.render(MESSAGES) == backend.render(MESSAGES)
    assert loaded.prompt_ids(MESSAGES) == backend.prompt_ids(MESSAGES)
    assert [loaded.generate(MESSAGES) for _ in range(2)] == [backend.generate(MESSAGES) for _ in range(2)]


def test_from_pretrained_wants_a_local_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}: no config.json here; pass a local checkpoint"):
        TransformersBackend.from_pretrained(tmp_path)


# ---------------------------------------------------------------- agents and users through the backend


class Recorder:
    """Passes calls through to a backend and keeps each prompt and reply."""

    def __init__(self, backend: TransformersBackend) -> None:
        self.backend = backend
        self.calls: list[tuple[list[dict[str, str]], str]] = []

    def generate(self, messages: list[dict[str, str]]) -> str:
        reply = self.backend.generate(messages)
        self.calls.append((messages, reply))
        return reply


@pytest.mark.slow
def test_llm_agent_plays_textworld_and_random_text_scores_as_invalid(textworld_game: Path, tmp_path: Path) -> None:
    recorder = Recorder(tiny_backend(seed=3, max_positions=1024))
    with TextWorldEnvironment(textworld_game) as env:
        trajectory = run_episode(env, ChatAgent(recorder, history_turns=2), 0, 6, episode="tiny")
    actions = trajectory["actions"]
    assert len(actions) == len(recorder.calls) == 6 and trajectory["success"] is False
    assert [a["text"] for a in actions] == [reply for _, reply in recorder.calls]
    assert all(set(a["text"]) <= set(CHARACTERS) for a in actions)
    for messages, _ in recorder.calls:
        assert recorder.backend.render(messages).startswith("<|system|>\nYou are playing a text adventure game.")
        assert trajectory["instruction"] in messages[1]["content"]  # the first observation states the objective

    scorer = RubricScorer.from_file(REPO / "examples" / "textworld.rubric", backend="interp", cache=None)
    write_records([trajectory], tmp_path / "tiny.jsonl")
    result = scorer.score(tmp_path / "tiny.jsonl")
    column = {name: j for j, name in enumerate(result.operator_names)}
    assert result.fired[:, column["unparsed"]].tolist() == [int(not a["parsed"]) for a in actions]
    assert result.fired[:, column["inadmissible"]].tolist() == [int(not a["admissible"]) for a in actions]
    assert sum(not a["parsed"] for a in actions) >= 4  # random characters rarely make a game command
    assert result.rewards.r_F.min() < 0


def test_llm_user_answers_a_capability_environment_episode() -> None:
    program = load_environment(str(REPO / "tests" / "data" / "cancel_trip.rubric"))
    user = LLMUser(tiny_backend(seed=11))
    env = CapabilityEnvironment(program, user=user, max_steps=5)
    task = env.reset(4).text
    assert env.scenario is not None
    turns = ["Which trip do you mean?"]
    turns += [format_tool_call(c.name, c.arguments) for c in env.scenario.gold_calls]
    turns.append(f"Your trip is cancelled; the refund is {env.scenario.report[0]}.")
    results = [env.step(turn) for turn in turns]
    replies = [(r.observation.text, r.done) for r in results]

    assert replies[-1][1] is True and env.done  # the step limit ends it: random text never writes ###STOP###
    assert env.scores().reward == 1.0 == results[-1].reward  # a rambling user does not stop the gold agent
    assert [r.observation.role for r in results] == ["user", "tool", "tool", "tool", "user"]
    said = [m["content"] for m in user.messages if m["role"] == "assistant"]
    assert said[0] == task and len(said) == 3
    assert [r for r, _ in (replies[0], replies[-1])] == [s.strip() or "Thank you, bye." for s in said[1:]]
    # The user's turns are the model's: a fresh backend with the same seed, shown the same history, says the same.
    fresh = tiny_backend(seed=11)
    assert [fresh.generate(user.messages[:3]), fresh.generate(user.messages[:5])] == said[1:]
    record = env.trajectory("tiny-user")
    kinds = [a["kind"] for a in record["actions"]]
    assert kinds[0] == kinds[-1] == "message" and "message" not in kinds[1:-1]
    assert record["states"][1]["user_msg"] == replies[0][0]
