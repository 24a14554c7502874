"""Test doubles for the LLM side: a scripted in-process backend, and a real OpenAI-shaped HTTP server on loopback.

`ScriptedLLM` answers from a list of canned replies (or a function of the messages) and records every call.
`ChatServer` is a `ThreadingHTTPServer` on 127.0.0.1 with an ephemeral port that answers POST /v1/chat/completions
from a script of `Reply`, `Status`, `Stall` and `Raw` steps, then falls back to a function of the request; it
records each request body. It lives only as long as the test's `with` block.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tracec.trace_rl.llm.chat import Sampling

Script = list[str] | Callable[[list[dict[str, str]]], str]


class ScriptedLLM:
    def __init__(self, script: Script, *, name: str = "scripted") -> None:
        self.script, self._name = script, name
        self.calls: list[list[dict[str, str]]] = []
        self.samplings: list[Sampling] = []

    @property
    def name(self) -> str:
        return self._name

    def generate(self, messages: list[dict[str, str]]) -> str:
        return self.sample(messages, Sampling())[0]

    def sample(self, messages: list[dict[str, str]], sampling: Sampling) -> list[str]:
        self.calls.append([dict(m) for m in messages])
        self.samplings.append(sampling)
        if callable(self.script):
            return [self.script(messages) for _ in range(sampling.n)]
        if not self.script:
            raise AssertionError("the scripted LLM ran out of replies")
        return [self.script.pop(0) for _ in range(sampling.n)]


@dataclass(frozen=True)
class Reply:
    text: str | list[str]  # one choice, or several


@dataclass(frozen=True)
class Status:
    code: int
    headers: dict[str, str] = field(default_factory=dict)
    body: str = '{"error": {"message": "slow down"}}'


@dataclass(frozen=True)
class Stall:
    seconds: float  # answer only after this long (past the client's timeout)
    text: str = "late"


@dataclass(frozen=True)
class Raw:
    body: bytes  # a 200 whose body is not a chat completion


@dataclass(frozen=True)
class Truncated:
    text: str = "four"  # a chat completion whose body breaks off halfway, its Content-Length promising all of it


Step = Reply | Status | Stall | Raw | Truncated


class ChatServer:
    def __init__(self, script: list[Step], fallback: Callable[[dict[str, Any]], str] | None = None) -> None:
        self.script, self.fallback = list(script), fallback
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _next(self, body: dict[str, Any]) -> Step:
        with self._lock:
            self.requests.append(body)
            if self.script:
                return self.script.pop(0)
        if self.fallback is None:
            return Status(500, body='{"error": {"message": "script exhausted"}}')
        return Reply(self.fallback(body))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                body["_path"], body["_auth"] = self.path, self.headers.get("Authorization")
                step = server._next(body)
                if isinstance(step, Stall):
                    time.sleep(step.seconds)
                    step = Reply(step.text)
                if isinstance(step, Status):
                    self._send(step.code, step.body.encode(), step.headers)
                elif isinstance(step, Raw):
                    self._send(200, step.body, {})
                elif isinstance(step, Truncated):
                    whole = _completion([step.text])
                    self._send(200, whole[: len(whole) // 2], {"Content-Length": str(len(whole))})
                    self.close_connection = True
                else:
                    self._send(200, _completion([step.text] if isinstance(step.text, str) else step.text), {})

            def _send(self, code: int, body: bytes, headers: dict[str, str]) -> None:
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    for key, value in {"Content-Length": str(len(body)), **headers}.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

        return Handler

    @contextmanager
    def running(self) -> Iterator[ChatServer]:
        thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join(timeout=5)


def _completion(texts: list[str]) -> bytes:
    choices = [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
               for i, t in enumerate(texts)]
    return json.dumps({"id": "chatcmpl-test", "object": "chat.completion", "choices": choices}).encode()
