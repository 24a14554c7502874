"""`synth env` and `synth rubric` driven by a scripted LLM through the real code paths: the environment library,
a rubric with type errors that the model then corrects, one that fails validation, one that never becomes correct,
calibration with a scripted policy checked against a hand computation, and operator validation on episodes."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
from scripted_llm import ChatServer, ScriptedLLM
from tracec.cli import main
from tracec.trace_rl.envs.capability import load_environment
from tracec.trace_rl.envs.toolcall import format_tool_call
from tracec.trace_rl.llm.calls import CallLog
from tracec.trace_rl.llm.chat import Sampling
from tracec.trace_rl.targeting.synth.calibration import Bands, calibrate
from tracec.trace_rl.targeting.synth.env import CalibrationSettings, EnvFailed, EnvSettings, Target, synthesize
from tracec.trace_rl.targeting.synth.library import load_library
from tracec.trace_rl.targeting.synth.rollouts import Rollout, policy_rollouts

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "examples" / "envs"
SHIPPED = (LIBRARY / "precondition_verification.rubric").read_text()
# An environment "the LLM wrote": the shipped one under a capability the library does not know by name.
WRITTEN = SHIPPED.replace("cancel_unshipped", "careful_cancel").replace(
    "capability precondition_verification", "capability careful_order_cancellation")
TYPE_ERRORS = WRITTEN.replace("status == pending", "status == pendng").replace("get_order_details(x.id); ",
                                                                                "get_ordr_details(x.id); ")
NO_GOLD = WRITTEN.replace('solution get_order_details(x.id); get_order_details(y.id); cancel_pending_order(open.id, '
                          '"ordered by mistake")', "solution get_order_details(x.id)")
TARGET = Target(name="careful_order_cancellation", description="looks at each order before cancelling the right one",
                excerpts=('agent: <action>cancel_pending_order(order_id="O1")</action>\n  -> shipped order cancelled',))


def fenced(source: str, before: str = "Here is the environment.") -> str:
    return f"{before}\n```rubric\n{source}```\nIt trains the capability."


class GoldOrNothing:
    """A policy that, per rollout, either plays the gold solution or gives up at once (by its first turn's seed)."""

    def __init__(self, program_path: Path, seeds: range) -> None:
        program = load_environment(str(program_path))
        self.scenarios = {program.scenario(s).task: program.scenario(s) for s in seeds}
        self.plans: list[bool] = []
        self._turns: list[str] = []

    @property
    def name(self) -> str:
        return "gold-or-nothing"

    def generate(self, messages: list[dict[str, str]]) -> str:
        return self.sample(messages, Sampling())[0]

    def sample(self, messages: list[dict[str, str]], sampling: Sampling) -> list[str]:
        if len(messages) == 2:  # a new rollout: decide, once
            plays = (sampling.seed or 0) % 2 == 0
            self.plans.append(plays)
            gold = self.scenarios[messages[1]["content"]].gold_calls
            self._turns = [format_tool_call(c.name, c.arguments) for c in gold] + ["All done."] if plays else []
        return [self._turns.pop(0) if self._turns else "I am done."]


def test_calibration_metrics_are_those_of_the_rewards() -> None:
    rollouts = [Rollout(seed=s, sample=k, reward=r, success=r >= 1, steps=1, record={})
                for s, rewards in enumerate([[1.0, 0.0, 0.5, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
                for k, r in enumerate(rewards)]
    result = calibrate(rollouts)
    rewards = [r.reward for r in rollouts]
    m = result.metrics
    assert m["mean_reward"] == statistics.fmean(rewards) and m["std_reward"] == statistics.pstdev(rewards)
    assert (m["success_rate"], m["zero_rate"]) == (6 / 12, 5 / 12)
    assert (m["constant_group_rate"], m["all_success_group_rate"], m["all_zero_group_rate"]) == (2 / 3, 1 / 3, 1 / 3)
    assert m["pass_at_k"] == {1: 2 / 3, 4: 2 / 3}
    assert "67% of groups have one reward (at most 50%)" in result.failures
    assert [row.constant for row in result.seeds] == [False, True, True]
    assert "  1     0.000  0/4" in result.render()


def test_a_library_environment_is_calibrated_with_a_base_policy(tmp_path: Path) -> None:
    seeds = range(6)
    policy = GoldOrNothing(LIBRARY / "precondition_verification.rubric", seeds)
    settings = EnvSettings(calibration=CalibrationSettings(seeds=6, group_size=4, bands=Bands(
        mean_reward=(0.0, 1.0), success_rate=(0.0, 1.0), max_all_success_groups=1.0, max_all_zero_groups=1.0,
        max_constant_groups=1.0, min_informative_groups=0.0)))
    messages: list[str] = []
    result = synthesize(None, Target(name="precondition_verification", description="d"), settings,
                        library=load_library(LIBRARY), use_library=True, policy=policy, out_dir=tmp_path, log=None,
                        report=messages.append)
    assert result.origin.startswith("library:") and result.origin.endswith("precondition_verification.rubric")
    assert result.calibration is not None and len(policy.plans) == 24
    # Gold play scores 1, giving up scores 0: the metrics follow from the plans alone.
    expected = [1.0 if plays else 0.0 for plays in policy.plans]
    assert result.calibration.metrics["mean_reward"] == statistics.fmean(expected)
    groups = [expected[i : i + 4] for i in range(0, 24, 4)]
    assert result.calibration.metrics["constant_group_rate"] == sum(len(set(g)) == 1 for g in groups) / 6
    assert [row.rewards for row in result.calibration.seeds] == [tuple(g) for g in groups]
    assert 0 < sum(policy.plans) < 24  # the per-rollout seeds differ, so the plans do
    rollouts = (tmp_path / "attempts" / "attempt_1.rollouts.jsonl").read_text().splitlines()
    assert [json.loads(line)["env_reward"] for line in rollouts] == expected


def test_rollout_seeds_differ_per_sample_and_replay_per_seed() -> None:
    program = load_environment(str(LIBRARY / "precondition_verification.rubric"))
    first, again = (ScriptedLLM(lambda m: "I am done.") for _ in range(2))
    policy_rollouts(program, first, range(2), group_size=3, sampling=Sampling(temperature=1.0, seed=4))
    policy_rollouts(program, again, range(2), group_size=3, sampling=Sampling(temperature=1.0, seed=4))
    seeds = [s.seed for s in first.samplings]
    assert seeds == [s.seed for s in again.samplings] and len(set(seeds)) == 6


def test_the_llm_repairs_type_errors_then_a_failed_validation(tmp_path: Path) -> None:
    llm = ScriptedLLM([fenced(TYPE_ERRORS), fenced(NO_GOLD, "Fixed."), fenced(WRITTEN, "Fixed again.")])
    log = CallLog(tmp_path / "llm_calls.jsonl", command="test")
    result = synthesize(llm, TARGET, EnvSettings(tries=3, calibration=None), library=load_library(LIBRARY),
                        use_library=False, policy=None, out_dir=tmp_path, log=log, report=lambda _: None)
    assert result.origin == "llm" and result.attempts == 3 and result.source == WRITTEN
    prompt = llm.calls[0][1]["content"]
    assert "## 7. Environments" in prompt and "## 5. Rubrics" not in prompt  # only the sections it needs
    assert prompt.count("```rubric\n") == 2 and "capability careful_order_cancellation" in prompt
    assert 'cancel_pending_order(order_id="O1")' in prompt  # the failure excerpt
    # The checker's located errors went back, with the line and a caret; then the validation failure.
    feedback = llm.calls[1][-1]["content"]
    assert re.search(r"attempt_1.rubric:\d+:\d+: error: `pendng` is not a member .*did you mean `pending`", feedback)
    assert re.search(r"attempt_1.rubric:22:12: error: unknown tool `get_ordr_details`; did you mean "
                     r"`get_order_details`\?\n +solution get_ordr_details\(x.id\);.*\n +\^{16}\n", feedback)
    assert "validation over 50 seeds failed: seed 0: doing nothing scores 1" in llm.calls[2][-1]["content"]
    assert sorted(p.name for p in (tmp_path / "attempts").iterdir()) == [f"attempt_{i}.rubric" for i in (1, 2, 3)]
    verdicts = [json.loads(line)["verdict"] for line in (tmp_path / "llm_calls.jsonl").read_text().splitlines()
                if '"verdict"' in line]
    assert [v.split(":")[0] for v in verdicts] == ["rejected", "rejected", "accepted"]


def test_the_writer_is_asked_for_guidance_and_a_hint_that_gives_a_call_away_goes_back(tmp_path: Path) -> None:
    """TRACE's generation prompt asks for abstract expert guidance, never the calls; a hint that writes a gold call
    fails validation and the writer gets that back."""
    leaking = re.sub(r'  hint ".*"', '  hint "Call cancel_pending_order(order_id=..., reason=...)."', WRITTEN)
    assert leaking != WRITTEN
    llm = ScriptedLLM([fenced(leaking), fenced(WRITTEN, "Fixed.")])
    log = CallLog(tmp_path / "llm_calls.jsonl", command="test")
    result = synthesize(llm, TARGET, EnvSettings(tries=2, calibration=None), library=load_library(LIBRARY),
                        use_library=False, policy=None, out_dir=tmp_path, log=log, report=lambda _: None)
    assert result.source == WRITTEN and result.attempts == 2
    prompt = llm.calls[0][1]["content"]
    assert "one `hint \"...\"` line" in prompt and "NOT give the solution" in prompt and "60-80%" in prompt
    feedback = llm.calls[1][-1]["content"]
    assert "seed 0: the hint gives away the solution's call cancel_pending_order(order_id=" in feedback
    assert "the `hint` must guide without giving the solution's calls away" in feedback


def test_a_model_that_never_writes_a_valid_environment_fails_after_the_bound(tmp_path: Path) -> None:
    llm = ScriptedLLM(lambda messages: fenced(TYPE_ERRORS))
    log = CallLog(tmp_path / "llm_calls.jsonl", command="test")
    with pytest.raises(EnvFailed, match=r"no environment for careful_order_cancellation passed in 2 tries; the last "
                                        r"one failed its check: the checker rejects the environment:\n"
                                        r"attempt_2.rubric:\d+:\d+: error"):
        synthesize(llm, TARGET, EnvSettings(tries=2, calibration=None), library=load_library(LIBRARY),
                   use_library=False, policy=None, out_dir=tmp_path, log=log, report=lambda _: None)
    assert len(llm.calls) == 2


def test_the_library_is_matched_by_the_llm_s_judgement(tmp_path: Path) -> None:
    llm = ScriptedLLM(['I think so: {"match": "cancel_unshipped", "reason": "it checks orders before cancelling"}'])
    log = CallLog(tmp_path / "llm_calls.jsonl", command="test")
    result = synthesize(llm, TARGET, EnvSettings(calibration=None), library=load_library(LIBRARY), use_library=True,
                        policy=None, out_dir=tmp_path, log=log, report=lambda _: None)
    assert result.origin.endswith("precondition_verification.rubric") and result.source == SHIPPED
    assert "- cancel_unshipped: trains precondition_verification" in llm.calls[0][0]["content"]


def test_synth_env_command_through_http_with_selected_capabilities(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    selected = tmp_path / "selected.json"
    entry = {"skill": "careful_order_cancellation", "description": TARGET.description, "mean_delta": 0.5,
             "example_failed_cases": [], "status": "PENDING"}
    selected.write_text(json.dumps([{**entry, "skill": "weaker", "mean_delta": 0.1}, entry]))
    replies = [fenced(TYPE_ERRORS), fenced(WRITTEN)]
    out = tmp_path / "out"
    with ChatServer([], fallback=lambda body: replies.pop(0)).running() as server:
        code = main(["synth", "env", "--selected", str(selected), "-o", str(out), "--no-library", "--no-calibrate",
                     "--llm", "http", "--base-url", server.base_url, "--model", "writer", "--validate-seeds", "10"])
    assert code == 0, capsys.readouterr().err
    assert (out / "careful_order_cancellation.rubric").read_text() == WRITTEN
    assert json.loads((out / "result.json").read_text())["attempts"] == 2
    marked = {e["skill"]: e for e in json.loads(selected.read_text())}
    assert marked["careful_order_cancellation"]["status"] == "DONE" and marked["weaker"]["status"] == "PENDING"
    assert (out / "llm_calls.jsonl").is_file()
    # Every candidate fails: exit 1, the message names the check; the attempts stay on disk.
    with ChatServer([], fallback=lambda body: fenced(TYPE_ERRORS)).running() as server:
        code = main(["synth", "env", "--capability", "x_y", "--description", "a capability", "-o", str(tmp_path / "f"),
                     "--no-library", "--no-calibrate", "--tries", "2", "--llm", "http", "--base-url",
                     server.base_url, "--model", "writer"])
    assert code == 1
    assert "failed its check: the checker rejects the environment" in capsys.readouterr().err
    assert len(list((tmp_path / "f" / "attempts").glob("*.rubric"))) == 2


GOOD_RUBRIC = (Path(__file__).parent / "data" / "careful_changes.rubric").read_text()


def test_synth_rubric_repairs_until_every_operator_passes_validation(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    typo = GOOD_RUBRIC.replace("act.kind == message and next.done", "act.kind == mesage and next.done")
    dead = GOOD_RUBRIC.replace('next.n_errors >= 2', 'next.n_errors >= 99')  # never fires
    replies = [fenced(typo, "Rubric:"), fenced(dead), fenced(GOOD_RUBRIC)]
    out = tmp_path / "toolenv_ops.rubric"
    with ChatServer([], fallback=lambda body: replies.pop(0)).running() as server:
        code = main(["synth", "rubric", "--schema", "toolenv",
                     "--env", str(LIBRARY / "precondition_verification.rubric"),
                     "--seeds", "6", "-o", str(out), "--llm", "http", "--base-url", server.base_url,
                     "--model", "writer"])
        requests = server.requests
    assert code == 0, capsys.readouterr().err
    assert out.read_text() == GOOD_RUBRIC
    assert "did you mean `message`" in requests[1]["messages"][-1]["content"]
    assert "- repeats_errors (invalidity): never fires" in requests[2]["messages"][-1]["content"]
    report = json.loads((tmp_path / "toolenv_ops.report.json").read_text())
    assert len(report["operators"]) == 15 and report["attempts"] == 3 and report["not_checked"] == []
    first_blind = next(o for o in report["operators"] if o["name"] == "first_blind")
    assert first_blind["rate_random"] > first_blind["rate_succeeded"] == 0.0
    assert "first_blind" in capsys.readouterr().out  # the table
    prompt = requests[0]["messages"][1]["content"]
    assert "schema toolenv" in prompt and "exactly 5 evidence" in prompt and "### episode 1" in prompt


def test_synth_rubric_wants_five_of_each_and_a_context(tmp_path: Path) -> None:
    four = re.sub(r"  evidence   reads_again .*\n", "", GOOD_RUBRIC)
    with ChatServer([], fallback=lambda body: fenced(four)).running() as server:
        code = main(["synth", "rubric", "--schema", "toolenv", "--description", "tool use", "-o",
                     str(tmp_path / "r.rubric"), "--tries", "1", "--llm", "http", "--base-url", server.base_url,
                     "--model", "w"])
        feedback = server.requests
    assert code == 1 and len(feedback) == 1 and not (tmp_path / "r.rubric").exists()
    log = (tmp_path / "r.llm_calls.jsonl").read_text()
    assert "exactly 5 evidence, 5 execution and 5 invalidity operators and a `context` line; it has 4 evidence" in log


def test_calibration_gives_the_policy_the_tools_in_the_training_call_format() -> None:
    from tracec.trace_rl.llm.conversation import TOOLS_KEY

    program = load_environment(str(LIBRARY / "precondition_verification.rubric"))
    seen: dict[str, list[dict[str, str]]] = {}
    for call_format in ("native", "text"):
        def remember(messages: list[dict[str, str]], call_format: str = call_format) -> str:
            seen[call_format] = messages
            return "I am done."

        policy_rollouts(program, ScriptedLLM(remember), range(1), group_size=2, sampling=Sampling(seed=1),
                        call_format=call_format)
    tool = next(iter(program.tools))
    native, text = seen["native"][0], seen["text"][0]
    assert tool in json.dumps(json.loads(native[TOOLS_KEY])) and "<action>" not in native["content"]
    assert TOOLS_KEY not in text and tool in text["content"] and "<action>" in text["content"]
