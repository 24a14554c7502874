"""The LLM flags of `tracec analyze` and `tracec synth`: the backend settings they name, their defaults the
settings' own (the pipeline's `[llm]` opens the same backends), and a count out of range refused while parsing."""

from __future__ import annotations

import argparse

import pytest
from tracec.cli.llm_flags import add_llm_arguments, backend_settings
from tracec.trace_rl.llm.options import BackendChoiceError, BackendSettings
from tracec.trace_rl.llm.repair import TRIES


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_llm_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_flags_name_the_backend_settings() -> None:
    assert backend_settings(parsed()) == BackendSettings()
    given = parsed("--llm", "http", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--timeout", "5",
                   "--retries", "0", "--device", "cuda:1", "--seed", "7")
    assert backend_settings(given) == BackendSettings(backend="http", base_url="http://127.0.0.1:9/v1", model="m",
                                                      timeout=5.0, retries=0, device="cuda:1", seed=7)


def test_tries_max_tokens_and_temperature_are_left_to_the_command() -> None:
    assert (parsed().tries, parsed().max_tokens, parsed().temperature) == (TRIES, None, None)
    with pytest.raises(SystemExit):  # the flag's type refuses it while the arguments parse
        parsed("--tries", "0")


def test_one_tries_default_for_every_command_and_config() -> None:
    """`synth rubric` once tried 4 times where every other command and the pipeline's `[llm]` tried 3."""
    from tracec.cli import analyze, synth
    from tracec.trace_rl.targeting.analysis.discover import DiscoverSettings
    from tracec.trace_rl.targeting.analysis.label import LabelSettings
    from tracec.trace_rl.targeting.pipeline.config import LLMSection
    from tracec.trace_rl.targeting.synth.env import EnvSettings

    defaults = set()
    steps = {analyze: (["discover", "t.jsonl", "-o", "c.json"], ["label", "t.jsonl", "--rubric", "r", "-o", "o"]),
             synth: (["env", "-o", "o"], ["rubric", "--schema", "toolenv", "-o", "o.rubric"])}
    for module, argvs in steps.items():
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        defaults |= {parser.parse_args(argv).tries for argv in argvs}
    defaults |= {DiscoverSettings().tries, LabelSettings().tries, EnvSettings().tries, LLMSection().tries}
    assert defaults == {TRIES}


def test_flags_that_name_no_usable_backend_are_refused_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TRACEC_LLM_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(BackendChoiceError, match="--llm http needs --base-url"):
        backend_settings(parsed("--llm", "http", "--model", "m"))
