"""The LLM flags of `tracec analyze` and `tracec synth`: the backend settings they name, their defaults the
settings' own (the pipeline's `[llm]` opens the same backends), and a count out of range refused while parsing."""

from __future__ import annotations

import argparse

import pytest
from tracec.cli.llm_flags import add_llm_arguments, backend_settings
from tracec.trace_rl.llm.options import BackendSettings


def parsed(*argv: str, tries: int = 3) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_llm_arguments(parser, tries=tries)
    return parser.parse_args(list(argv))


def test_the_flags_name_the_backend_settings() -> None:
    assert backend_settings(parsed()) == BackendSettings()
    given = parsed("--llm", "http", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--timeout", "5",
                   "--retries", "0", "--device", "cuda:1", "--seed", "7")
    assert backend_settings(given) == BackendSettings(backend="http", base_url="http://127.0.0.1:9/v1", model="m",
                                                      timeout=5.0, retries=0, device="cuda:1", seed=7)


def test_tries_max_tokens_and_temperature_are_left_to_the_command() -> None:
    assert (parsed().tries, parsed(tries=4).tries, parsed().max_tokens, parsed().temperature) == (3, 4, None, None)
    with pytest.raises(SystemExit):  # the flag's type refuses it while the arguments parse
        parsed("--tries", "0")
