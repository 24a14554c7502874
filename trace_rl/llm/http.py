"""Any OpenAI-compatible chat-completions endpoint as a `SamplingBackend`: `vllm serve`, llama.cpp's server, a
hosted API.

`POST {base_url}/chat/completions` with the model, the messages and only the sampling fields the call sets (`n`,
`max_tokens`, `temperature`, `top_p`, `stop`, `seed`), over the standard library's `urllib` (no client package).
Transient failures retry with exponential backoff (`backoff * 2^k` seconds, capped, or the server's
`Retry-After` when it sends one): HTTP 429 and 5xx, timeouts, refused or reset connections, a reply cut short
or otherwise broken at the HTTP level (a server that closes mid-body). Other 4xx answers
(a bad key, an unknown model) fail at once with the server's own message. A body that is not a chat completion
fails with an excerpt of it. A server that returns fewer choices than `n` (llama.cpp ignores `n`) is asked again
for the rest. Every failure is an `LLMError` that names the URL and what to check.
Tools carried on the system message (`conversation.with_tools`) are sent folded into it as the Hermes block, so the
reply is text that the agent's environment parses. Left out: streaming, tool-call fields (`tools=` and
`tool_calls`: a server with a tool parser would answer outside the text), and concurrency (calls go one at a time).
"""

from __future__ import annotations

import http.client
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracec.trace_rl.llm import conversation
from tracec.trace_rl.llm.calls import LLMError
from tracec.trace_rl.llm.chat import Sampling, cut_at_stop

_EXCERPT = 200


@dataclass(frozen=True, kw_only=True)
class HTTPConfig:
    base_url: str  # up to and including the API version: http://127.0.0.1:8000/v1
    model: str
    api_key: str | None = None
    timeout_s: float = 120.0
    retries: int = 4  # further tries after the first, on transient failures
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base URL {self.base_url!r} must start with http:// or https:// "
                             "(for example http://127.0.0.1:8000/v1)")
        if not self.model:
            raise ValueError("an HTTP backend needs a model name (--model, or TRACEC_LLM_MODEL)")
        if not self.timeout_s > 0 or self.retries < 0 or self.backoff_s < 0:
            raise ValueError(f"timeout {self.timeout_s} s must be > 0, retries {self.retries} and backoff "
                             f"{self.backoff_s} s must be >= 0")


class OpenAIChatBackend:
    def __init__(self, config: HTTPConfig, *, default: Sampling | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 notify: Callable[[str], None] = lambda message: print(message, file=sys.stderr)) -> None:
        self.config, self.default, self._sleep, self._notify = config, default or Sampling(), sleep, notify
        self.url = config.base_url.rstrip("/") + "/chat/completions"

    @property
    def name(self) -> str:
        """The served model's name: what a resumed run compares, whichever server or port now serves it."""
        return self.config.model

    def generate(self, messages: list[dict[str, str]]) -> str:
        return self.sample(messages, self.default)[0]

    def sample(self, messages: list[dict[str, str]], sampling: Sampling) -> list[str]:
        replies: list[str] = []
        while len(replies) < sampling.n:
            body = self._body(messages, sampling, sampling.n - len(replies), len(replies))
            choices = self._choices(self._post(body))
            replies.extend(cut_at_stop(text, sampling.stop) for text in choices[: sampling.n - len(replies)])
        return replies

    def _body(self, messages: list[dict[str, str]], sampling: Sampling, n: int, already: int) -> dict[str, Any]:
        # tools carried on the system message go as text: a server's tool parser would answer in `tool_calls` fields
        body: dict[str, Any] = {"model": self.config.model, "messages": conversation.fold_tools(messages)}
        if n > 1:
            body["n"] = n
        fields = {"max_tokens": sampling.max_tokens, "temperature": sampling.temperature, "top_p": sampling.top_p,
                  "seed": None if sampling.seed is None else sampling.seed + already}
        body.update({k: v for k, v in fields.items() if v is not None})
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        return body

    def _post(self, body: dict[str, Any]) -> bytes:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        last = ""
        for attempt in range(self.config.retries + 1):
            request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            wait = self._backoff(attempt)
            try:
                with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                    return bytes(response.read())
            except urllib.error.HTTPError as error:
                text = _excerpt(error.read())
                if error.code != 429 and error.code < 500:
                    raise LLMError(f"{self.url} answered HTTP {error.code}: {_server_message(text)}") from None
                last = f"HTTP {error.code}: {_server_message(text)}"
                wait = max(wait, _retry_after(error.headers.get("Retry-After"), self.config.max_backoff_s))
            except TimeoutError:
                last = f"no reply within {self.config.timeout_s:g} s"
            except urllib.error.URLError as error:
                reason = error.reason
                if isinstance(reason, TimeoutError):
                    last = f"no reply within {self.config.timeout_s:g} s"
                else:
                    last = f"cannot connect ({reason}); is the server running at {self.config.base_url}?"
            except (ConnectionError, OSError) as error:  # a reset or a closed connection mid-reply
                last = f"the connection failed ({error})"
            except http.client.IncompleteRead as error:  # the server closed before the body it announced
                got = len(error.partial)
                whole = f" of {got + error.expected}" if error.expected is not None else ""
                last = f"the reply broke off after {got}{whole} bytes"
            except http.client.HTTPException as error:  # a malformed status line or headers: a server in trouble
                last = f"the reply was not valid HTTP ({type(error).__name__}: {error})"
            if attempt < self.config.retries:  # said, so that a slow or failing server is never silent
                tries = self.config.retries + 1
                self._notify(f"{self.url}: {last}; retrying in {wait:g} s (try {attempt + 2} of {tries})")
                self._sleep(wait)
        tries = self.config.retries + 1
        raise LLMError(f"{self.url}: {last} (gave up after {tries} tr{'y' if tries == 1 else 'ies'})")

    def _backoff(self, attempt: int) -> float:
        return min(self.config.max_backoff_s, self.config.backoff_s * 2 ** attempt)

    def _choices(self, raw: bytes) -> list[str]:
        try:
            payload = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise LLMError(f"{self.url} sent a body that is not JSON: {_excerpt(raw)!r}") from None
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices:
            raise LLMError(f"{self.url} sent no `choices` (not a chat completion?): {_excerpt(raw)!r}")
        texts = []
        for i, choice in enumerate(choices):
            message = choice.get("message") if isinstance(choice, dict) else None
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, str):
                raise LLMError(f"{self.url}: choice {i} has no message content: {_excerpt(raw)!r}")
            texts.append(content)
        return texts


def _retry_after(value: str | None, cap: float) -> float:
    try:
        return min(cap, max(0.0, float(value))) if value is not None else 0.0
    except ValueError:  # an HTTP date: not worth parsing, the backoff applies
        return 0.0


def _server_message(text: str) -> str:
    try:
        payload = json.loads(text)
    except json.JSONDecodeError:
        return text or "(empty body)"
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return text


def _excerpt(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").strip()
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 3] + "..."
