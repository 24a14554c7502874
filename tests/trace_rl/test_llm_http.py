"""The OpenAI-compatible HTTP backend against a real HTTP server on loopback: canned replies, n samples, a 429 then
success, 5xx retries, a timeout, a body cut short, a malformed body, an unreachable server, a refused key."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from scripted_llm import ChatServer, Raw, Reply, Stall, Status, Truncated
from tracec.cli import main
from tracec.trace_rl.llm.calls import LLMError
from tracec.trace_rl.llm.chat import Sampling
from tracec.trace_rl.llm.http import HTTPConfig, OpenAIChatBackend

MESSAGES = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Two plus two?"}]


def backend(server: ChatServer, sleeps: list[float] | None = None, said: list[str] | None = None,
            **config: object) -> OpenAIChatBackend:
    settings = {"base_url": server.base_url, "model": "served-model", "retries": 3, "backoff_s": 0.01, **config}
    recorded = sleeps if sleeps is not None else []
    notes = said if said is not None else []
    return OpenAIChatBackend(HTTPConfig(**settings), sleep=recorded.append, notify=notes.append)  # type: ignore[arg-type]


def test_a_canned_reply_comes_back_and_the_request_has_the_chat_completions_shape() -> None:
    with ChatServer([Reply("four")]).running() as server:
        sampling = Sampling(max_tokens=16, temperature=0.0, stop=("\n",), seed=7)
        assert backend(server, api_key="sk-test").sample(MESSAGES, sampling) == ["four"]
    body = server.requests[0]
    assert body["_path"] == "/v1/chat/completions" and body["_auth"] == "Bearer sk-test"
    assert body["model"] == "served-model" and body["messages"] == MESSAGES
    assert (body["max_tokens"], body["temperature"], body["stop"], body["seed"]) == (16, 0.0, ["\n"], 7)
    assert "n" not in body and "top_p" not in body  # unset fields stay the server's


def test_n_samples_in_one_request_and_the_missing_ones_asked_again() -> None:
    with ChatServer([Reply(["a", "b", "c"])]).running() as server:
        assert backend(server).sample(MESSAGES, Sampling(n=3)) == ["a", "b", "c"]
    assert server.requests[0]["n"] == 3
    # A server that ignores `n` (llama.cpp) answers one choice a request: the rest are asked for, seeds moving on.
    with ChatServer([Reply("a"), Reply("b"), Reply("c")]).running() as server:
        assert backend(server).sample(MESSAGES, Sampling(n=3, seed=10)) == ["a", "b", "c"]
    assert [r.get("n") for r in server.requests] == [3, 2, None]
    assert [r["seed"] for r in server.requests] == [10, 11, 12]


def test_stop_sequences_cut_the_reply_even_when_the_server_does_not() -> None:
    with ChatServer([Reply('{"a": 1}\nEND and more')]).running() as server:
        assert backend(server).sample(MESSAGES, Sampling(stop=("END",))) == ['{"a": 1}\n']


def test_429_then_success_waits_as_the_server_asks_and_says_so() -> None:
    sleeps: list[float] = []
    said: list[str] = []
    script = [Status(429, {"Retry-After": "0.05"}), Status(503), Reply("four")]
    with ChatServer(script).running() as server:
        assert backend(server, sleeps, said).sample(MESSAGES, Sampling()) == ["four"]
    assert len(server.requests) == 3
    assert sleeps == [0.05, 0.02]  # Retry-After beats the backoff of 0.01; then the backoff doubles
    assert len(said) == 2 and all(s.startswith(server.base_url) for s in said)  # each retry is said, with why
    assert "HTTP 429" in said[0] and said[0].endswith("retrying in 0.05 s (try 2 of 4)")
    assert "HTTP 503" in said[1] and said[1].endswith("retrying in 0.02 s (try 3 of 4)")


def test_retries_are_bounded_and_the_error_says_what_the_server_said() -> None:
    with (ChatServer([Status(500, body='{"error": {"message": "overloaded"}}')] * 4).running() as server,
          pytest.raises(LLMError, match=r"HTTP 500: overloaded \(gave up after 4 tries\)")):
        backend(server).sample(MESSAGES, Sampling())
    assert len(server.requests) == 4


def test_a_client_error_is_not_retried() -> None:
    with (ChatServer([Status(401, body='{"error": {"message": "invalid api key"}}')]).running() as server,
          pytest.raises(LLMError, match="answered HTTP 401: invalid api key")):
        backend(server).sample(MESSAGES, Sampling())
    assert len(server.requests) == 1


def test_a_timeout_is_retried_then_reported() -> None:
    with ChatServer([Stall(1.0), Reply("on time")]).running() as server:
        assert backend(server, timeout_s=0.2).sample(MESSAGES, Sampling()) == ["on time"]
    with (ChatServer([Stall(1.0), Stall(1.0)]).running() as server,
          pytest.raises(LLMError, match=r"no reply within 0.2 s \(gave up after 2 tries\)")):
        backend(server, timeout_s=0.2, retries=1).sample(MESSAGES, Sampling())


def test_a_body_cut_short_is_retried_then_reported_with_the_url() -> None:
    said: list[str] = []
    with ChatServer([Truncated(), Reply("four")]).running() as server:
        assert backend(server, said=said).sample(MESSAGES, Sampling()) == ["four"]
    assert len(said) == 1 and "the reply broke off" in said[0] and "retrying" in said[0]
    with (ChatServer([Truncated(), Truncated()]).running() as server,
          pytest.raises(LLMError, match=r"/v1/chat/completions: the reply broke off after \d+ of \d+ bytes "
                                        r"\(gave up after 2 tries\)") as raised):
        backend(server, retries=1).sample(MESSAGES, Sampling())
    assert str(raised.value).startswith(server.base_url) and len(server.requests) == 2


def test_a_command_whose_server_keeps_breaking_off_exits_1_naming_the_url(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    episode = {"episode": "a", "task": "t", "instruction": "leave", "states": [{"room": "hall"}, {"room": "yard"}],
               "actions": [{"verb": "go"}], "env_reward": 1.0, "success": True}
    trajectories = tmp_path / "t.jsonl"
    trajectories.write_text(json.dumps(episode) + "\n")
    with ChatServer([Truncated()] * 2).running() as server:
        code = main(["analyze", "discover", str(trajectories), "-o", str(tmp_path / "d.json"), "--runs", "1",
                     "--llm", "http", "--model", "m", "--base-url", server.base_url, "--retries", "0", "--tries", "1"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"{server.base_url}/chat/completions: the reply broke off" in err and "(gave up after 1 try)" in err


@pytest.mark.parametrize(("body", "says"), [
    (b"<html>bad gateway</html>", "not JSON"),
    (b'{"object": "error"}', "no `choices`"),
    (b'{"choices": [{"message": {"role": "assistant"}}]}', "choice 0 has no message content"),
])
def test_a_malformed_body_fails_clearly_with_an_excerpt(body: bytes, says: str) -> None:
    with ChatServer([Raw(body)]).running() as server, pytest.raises(LLMError, match=says) as raised:
        backend(server).sample(MESSAGES, Sampling())
    assert body.decode()[:10] in str(raised.value)


def test_an_unreachable_server_is_named() -> None:
    with socket.socket() as probe:  # a port nobody listens on: bound, never listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        config = HTTPConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", retries=1, backoff_s=0.0)
        with pytest.raises(LLMError, match=r"cannot connect .*is the server running at http://127.0.0.1:\d+/v1\?"):
            OpenAIChatBackend(config, sleep=lambda s: None).sample(MESSAGES, Sampling())


def test_config_errors_name_the_fix() -> None:
    with pytest.raises(ValueError, match="must start with http"):
        HTTPConfig(base_url="127.0.0.1:8000", model="m")
    with pytest.raises(ValueError, match="needs a model name"):
        HTTPConfig(base_url="http://127.0.0.1:8000/v1", model="")
