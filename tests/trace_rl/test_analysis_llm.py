"""Discovery and labeling driven by a scripted LLM through the real code paths: the command line, the HTTP
backend against a loopback server, the repair loop (malformed JSON, prose around JSON, hallucinated ids), the
call log, resuming after a failure, and the deterministic labels of a `.rubric`'s capability blocks."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from scripted_llm import ChatServer, ScriptedLLM, Status
from tracec.cli import main
from tracec.trace_rl.envs.capability import load_environment
from tracec.trace_rl.llm.calls import CallLog
from tracec.trace_rl.targeting.analysis.cases import read_cases
from tracec.trace_rl.targeting.analysis.dictionary import Capability, stamp
from tracec.trace_rl.targeting.analysis.label import LabelingFailed, LabelSettings, label_with_llm
from tracec.trace_rl.targeting.analysis.progress import Progress
from tracec.trace_rl.targeting.analysis.runs import read_run
from tracec.trace_rl.targeting.synth.rollouts import scripted_episodes

REPO = Path(__file__).resolve().parents[2]
CAPABILITIES = [
    Capability(name="precondition_verification", description="looks a record up before it changes it"),
    Capability(name="task_completion", description="finishes every step the user asked for"),
]


@pytest.fixture(scope="module")
def trajectories(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Gold (passed), do-nothing and random (failed) episodes of a shipped environment, as trajectory JSONL."""
    program = load_environment(str(REPO / "examples" / "envs" / "precondition_verification.rubric"))
    episodes = scripted_episodes(program, range(3))
    path = tmp_path_factory.mktemp("traj") / "episodes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for kind in ("gold", "null", "random") for r in episodes[kind]))
    return path


@pytest.fixture
def tau2_results(tmp_path: Path) -> Path:
    """A tau2-bench result file in the benchmark's shape: two trials of task 3 and one of task 5."""
    def sim(task: str, trial: int, reward: float) -> dict[str, Any]:
        return {"task_id": task, "trial": trial, "reward_info": {"reward": reward}, "messages": [
            {"role": "user", "content": "Please cancel reservation ABC123."},
            {"role": "assistant", "content": None, "tool_calls": [{"name": "cancel_reservation",
                                                                   "arguments": {"reservation_id": "ABC123"}}]},
            {"role": "tool", "content": '{"status": "cancelled"}'},
            {"role": "assistant", "content": "Done."}]}
    path = tmp_path / "airline_results.json"
    path.write_text(json.dumps({"info": {"environment_info": {"domain_name": "airline"}},
                                "simulations": [sim("3", 0, 0.0), sim("3", 1, 1.0), sim("5", 0, 0.0)]}))
    return path


def shown_ids(messages: list[dict[str, str]]) -> list[str]:
    return re.findall(r"### trajectory (\S+) \(", messages[1]["content"])  # the request, also on a retry


def candidates(names: list[str], examples: list[str]) -> str:
    return json.dumps({"candidates": [
        {"name": n, "description": f"The agent {n.replace('_', ' ')}s before acting on a record.",
         "example_trajectories": [{"task_id": e, "reward": 0.0, "note": "n"} for e in examples]} for n in names]})


def test_cases_read_our_jsonl_and_tau2_results(trajectories: Path, tau2_results: Path) -> None:
    cases = {c.id: c for c in read_cases([trajectories, tau2_results])}
    assert cases["gold-0"].success and not cases["null-0"].success
    assert cases["gold-0"].transcript.startswith("task: Hi, I'm")
    assert "get_order_details" in cases["gold-0"].transcript.split("agent:", 1)[1]
    assert {i for i in cases if i.startswith("airline")} == {"airline:3/0", "airline:3/1", "airline:5"}
    assert cases["airline:3/1"].success and not cases["airline:5"].success
    assert 'assistant calls cancel_reservation({"reservation_id": "ABC123"})' in cases["airline:5"].transcript
    long = cases["gold-0"].excerpt(200)
    assert len(long) < 260 and "characters cut" in long and long.endswith(cases["gold-0"].transcript[-40:])


def test_discover_through_the_cli_and_an_http_server_repairs_and_merges(trajectories: Path, tmp_path: Path) -> None:
    def reply(body: dict[str, Any]) -> str:
        messages = body["messages"]
        run, attempt = divmod(body["seed"] - 1_000_000, 1000)  # --seed 1: run r, attempt k at 10^6 + 1000 r + k - 1
        ids = shown_ids(messages)
        if (run, attempt) == (1, 0):  # run 1: malformed JSON first, then valid JSON wrapped in prose
            return '{"candidates": [{"name": "precondition_verification", "description": "x",'
        if run == 1:
            return "Here is my analysis.\n" + candidates(["precondition_verification"], ids[:1]) + "\nHope it helps."
        if attempt == 0:  # run 2 (first try): an example id the prompt never showed
            return candidates(["precondition_verification", "task_completion"], ["made-up-7"])
        return "```json\n" + candidates(["precondition_verification", "task_completion"], ids[:2]) + "\n```"

    out = tmp_path / "candidates.json"
    with ChatServer([], fallback=reply).running() as server:
        code = main(["analyze", "discover", str(trajectories), "-o", str(out), "--runs", "2", "--llm", "http",
                     "--base-url", server.base_url, "--model", "scripted", "--seed", "1", "--cases-per-run", "4"])
    assert code == 0
    dictionary = json.loads(out.read_text())
    assert [(c["name"], c["proposed_in"]) for c in dictionary["candidates"]] == [
        ("precondition_verification", 2), ("task_completion", 1)]
    assert dictionary["runs"] == 2 and dictionary["model"] == "scripted"
    assert [r["seed"] for r in server.requests] == [1_001_000, 1_001_001, 1_002_000, 1_002_001]  # 2 tries a run
    shown_in_run = shown_ids(server.requests[0]["messages"])
    assert len(shown_in_run) == 4 and {"gold", "null"} <= {i.split("-")[0] for i in shown_in_run}  # both sides
    log = [json.loads(line) for line in (tmp_path / "candidates.llm_calls.jsonl").read_text().splitlines()]
    verdicts = [r["verdict"] for r in log if r["event"] == "verdict"]
    assert verdicts[0].startswith("rejected: the JSON does not parse")
    assert "made-up-7" in verdicts[2] and verdicts.count("accepted") == 2
    assert all(r["latency_s"] >= 0 for r in log if r["event"] == "call")
    assert not (tmp_path / "candidates.progress.jsonl").exists()


def labeler(broken_first: set[str]) -> ScriptedLLM:
    """Failed episodes lack preconditions, passed ones show them; the first reply for some ids is broken."""
    seen: set[str] = set()

    def reply(messages: list[dict[str, str]]) -> str:
        (case_id,) = shown_ids(messages)
        if case_id in broken_first and case_id not in seen:
            seen.add(case_id)
            return 'Labels: {"labels": {"precondition_verification": "MISSING"}}'
        failed = "(FAILED" in messages[1]["content"]
        labels = {"precondition_verification": "LACKING" if failed else "PRESENT",
                  "task_completion": "PRESENT" if failed else "NA"}
        return f"Sure.\n```json\n{json.dumps({'labels': labels})}\n```"

    return ScriptedLLM(reply)


def test_llm_labels_make_run_files_that_select_reads(trajectories: Path, tmp_path: Path) -> None:
    cases = read_cases([trajectories])
    llm = labeler({"null-1"})
    log = CallLog(tmp_path / "llm_calls.jsonl", command="test")
    progress = Progress(tmp_path / "p.jsonl", "fp")
    said: list[str] = []
    paths = label_with_llm(llm, cases, CAPABILITIES, LabelSettings(runs=2), out_dir=tmp_path, log=log,
                           progress=progress, report=said.append)
    assert [p.name for p in paths] == ["run_01.json", "run_02.json"]
    assert f"label run 1: {len(cases)}/{len(cases)}" in said  # a run's progress is said, at least at its end
    run = read_run(paths[0])
    assert (run.total_failed, run.total_passed) == (6, 3)
    assert run.dictionary == stamp(CAPABILITIES)  # the file is not known here: only its fingerprint and names
    assert set(run.labels["precondition_verification"]["lacking_failed"]) == {c.id for c in cases if not c.success}
    assert set(run.labels["precondition_verification"]["present_passed"]) == {"gold-0", "gold-1", "gold-2"}
    assert set(run.labels["task_completion"]["na_passed"]) == {"gold-0", "gold-1", "gold-2"}
    assert len(llm.calls) == 2 * 9 + 1  # one repair, for null-1 in run 1
    assert [s.seed for s in llm.samplings[:2]] == [1000, 1000] and llm.samplings[-1].seed == 2000  # run r: 1000 r
    assert main(["analyze", "select", str(tmp_path), "--k", "2", "-o", str(tmp_path / "sel.json")]) == 0
    (kept,) = json.loads((tmp_path / "sel.json").read_text())
    assert (kept["skill"], kept["mean_cov"], kept["mean_delta"], kept["n_runs_passed"]) == \
        ("precondition_verification", 1.0, 1.0, 2)


def test_a_labeler_that_never_answers_fails_the_run_and_a_rerun_resumes(trajectories: Path, tmp_path: Path) -> None:
    dictionary = tmp_path / "candidates.json"
    dictionary.write_text(json.dumps({"candidates": [{"name": c.name, "description": c.description}
                                                     for c in CAPABILITIES]}))
    out = tmp_path / "runs"
    good = labeler(set())

    def flaky(body: dict[str, Any]) -> str:
        (case_id,) = shown_ids(body["messages"])
        return "I refuse to answer in JSON." if case_id == "random-2" else good.sample(body["messages"], _one())[0]

    argv = ["analyze", "label", str(trajectories), "--capabilities", str(dictionary), "-o", str(out), "--llm", "http",
            "--model", "scripted", "--tries", "2"]
    with ChatServer([], fallback=flaky).running() as server:
        assert main([*argv, "--base-url", server.base_url]) == 1
    assert not (out / "run_01.json").exists()
    assert sum(1 for r in server.requests if "random-2" in r["messages"][1]["content"]) == 2  # the bound
    with ChatServer([], fallback=lambda body: good.sample(body["messages"], _one())[0]).running() as server:
        assert main([*argv, "--base-url", server.base_url]) == 0
    assert len(server.requests) == 1  # only random-2 was asked again; the other eight labels were kept
    assert read_run(out / "run_01.json").total_failed == 6
    assert read_run(out / "run_01.json").dictionary == stamp(CAPABILITIES, dictionary)
    assert not (out / "labels.progress.jsonl").exists()
    with ChatServer([Status(500)] * 10).running() as server:  # the run file exists: nothing to do, no request
        assert main([*argv, "--base-url", server.base_url]) == 0
    assert server.requests == []
    # The same dictionary elsewhere, reordered, with other fields: the run stands (by fingerprint, not by file).
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps({"candidates": [{"name": c.name, "description": c.description, "proposed_in": 3}
                                                for c in reversed(CAPABILITIES)], "runs": 3}, indent=4))
    with ChatServer([Status(500)] * 10).running() as server:
        assert main([*argv[:4], str(moved), *argv[5:], "--base-url", server.base_url]) == 0
    assert server.requests == []


def test_skip_failed_leaves_the_trajectory_out_and_says_so(trajectories: Path, tmp_path: Path) -> None:
    cases = read_cases([trajectories])
    never = ScriptedLLM(lambda m: "no" if "null-0" in m[1]["content"] else labeler(set()).generate(m))
    log = CallLog(tmp_path / "llm_calls.jsonl", command="test")
    with pytest.raises(LabelingFailed, match=r"run 1: 1 of 9 trajectories got no valid labels in 3 tries \(null-0: "
                                             r"the reply holds no JSON object\)"):
        label_with_llm(never, cases, CAPABILITIES, LabelSettings(), out_dir=tmp_path, log=log,
                       progress=Progress(tmp_path / "p.jsonl", "a"), report=lambda _: None)
    label_with_llm(never, cases, CAPABILITIES, LabelSettings(skip_failed=True), out_dir=tmp_path, log=log,
                   progress=Progress(tmp_path / "p.jsonl", "a"), report=lambda _: None)
    run = read_run(tmp_path / "run_01.json")
    assert run.unlabeled == ("null-0",) and (run.total_failed, run.total_passed) == (5, 3)


def test_rubric_capabilities_label_through_the_kernels(trajectories: Path, tmp_path: Path) -> None:
    rubric = REPO / "examples" / "toolenv.rubric"
    assert main(["analyze", "label", str(trajectories), "--rubric", str(rubric), "--kernel", "interp",
                 "-o", str(tmp_path)]) == 0
    run = read_run(tmp_path / "run_01.json")
    assert run.dictionary is not None and (run.dictionary.file, run.dictionary.capabilities) == \
        (str(rubric), ("precondition_verification",))
    labels = run.labels["precondition_verification"]
    # Gold agents read both orders before cancelling; do-nothing agents never mutate; random ones may mutate blind.
    assert {"gold-0", "gold-1", "gold-2"} <= set(labels["present_passed"])
    assert {"null-0", "null-1", "null-2"} <= set(labels["na_failed"])
    assert main(["analyze", "label", str(trajectories), "--rubric", str(rubric), "--capability", "nope",
                 "-o", str(tmp_path)]) == 1


def test_label_usage_errors(trajectories: Path, tmp_path: Path, tau2_results: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "label", str(trajectories), "-o", str(tmp_path)]) == 2  # neither source
    assert main(["analyze", "label", str(tau2_results), "--rubric", str(REPO / "examples" / "toolenv.rubric"),
                 "-o", str(tmp_path)]) == 1
    assert "rubric labels read the facts of trajectory JSONL" in capsys.readouterr().err
    assert main(["analyze", "label", str(trajectories), "--capabilities", str(tmp_path / "none.json"),
                 "-o", str(tmp_path), "--llm", "http", "--model", "m", "--base-url", "http://127.0.0.1:9"]) == 1


def test_rubric_labels_refuse_a_file_the_rubric_cannot_read_as_eval_does(
        trajectories: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Trajectories of another schema, or without facts, once gave exit 0 and every label NA; `tracec score`
    refuses the same file, and the labeler now says the same thing of it, writing no run."""
    rubric = REPO / "examples" / "toolenv.rubric"
    other = tmp_path / "household.jsonl"
    other.write_text(json.dumps({"episode": "e1", "states": [{"location": "hall"}, {"location": "kitchen"}],
                                 "actions": [{"verb": "go"}], "success": False}) + "\n")
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"episode": "e2", "states": [{}, {}], "actions": [{}], "success": True}) + "\n")
    out = tmp_path / "runs"
    for wrong in (other, bare):
        assert main(["score", str(rubric), "--rubric", "toolenv_default", "--trajectories", str(wrong),
                     "--backend", "interp"]) == 1
        refused = capsys.readouterr().err
        assert refused.startswith(f"{wrong}: error: no state or action has a value for any field the rubric reads")
        # beside a good file too: each file is checked on its own
        assert main(["analyze", "label", str(trajectories), str(wrong), "--rubric", str(rubric), "--kernel",
                     "interp", "-o", str(out)]) == 1
        said = capsys.readouterr().err
        assert said.startswith(f"{wrong}: error: no state or action has a value for any field the rubric reads")
        assert "this file's states have: " + ("location" if wrong == other else "none") in said
    assert list(out.glob("run_*.json")) == []


def _one() -> Any:
    from tracec.trace_rl.llm.chat import Sampling

    return Sampling()


def test_inputs_that_are_neither_format_are_refused(trajectories: Path, tmp_path: Path) -> None:
    from tracec.trace_rl.targeting.analysis.cases import CaseError

    one = tmp_path / "one.jsonl"
    one.write_text(trajectories.read_text().splitlines()[0] + "\n")  # one episode: a JSONL file that is one object
    assert [c.id for c in read_cases([one])] == ["gold-0"]
    other = tmp_path / "run.json"
    other.write_text('{"attempt": 1, "labels": {}}')
    with pytest.raises(CaseError, match="neither trajectory JSONL .* nor a tau2-bench result file"):
        read_cases([other])
    with pytest.raises(CaseError, match="also appears in"):
        read_cases([one, one])


def test_runs_of_another_dictionary_are_refused_and_an_empty_run_is_never_written(
        trajectories: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = read_cases([trajectories])
    log = CallLog(tmp_path / "llm_calls.jsonl", command="test")
    silent = ScriptedLLM(lambda m: "no")  # never a valid label: nothing to write, even when skipping failures
    with pytest.raises(LabelingFailed, match="none of the 9 trajectories got valid labels"):
        label_with_llm(silent, cases, CAPABILITIES, LabelSettings(skip_failed=True), out_dir=tmp_path, log=log,
                       progress=Progress(tmp_path / "p.jsonl", "b"), report=lambda _: None)
    assert not (tmp_path / "run_01.json").exists()
    label_with_llm(labeler(set()), cases, CAPABILITIES, LabelSettings(), out_dir=tmp_path, log=log,
                   progress=Progress(tmp_path / "q.jsonl", "c"), report=lambda _: None)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"candidates": [{"name": "something_else", "description": "another dictionary"}]}))
    argv = ["analyze", "label", str(trajectories), "--capabilities", str(other), "-o", str(tmp_path), "--llm", "http",
            "--model", "scripted", "--base-url", "http://127.0.0.1:9"]
    assert main(argv) == 2  # refused before any call (nothing listens on the discard port)
    assert (f"run_01.json: labelled against the dictionary of fingerprint {stamp(CAPABILITIES).fingerprint} (its file "
            f"not recorded), not dictionary {other} (fingerprint ") in capsys.readouterr().err
    written = (tmp_path / "run_01.json").read_text()
    old = json.loads(written)
    del old["dictionary"]  # a run from before runs recorded their dictionary: told by the capabilities it labels
    (tmp_path / "run_01.json").write_text(json.dumps(old))
    assert main(argv) == 2
    assert (f"run_01.json: labelled against the capabilities precondition_verification, task_completion, not those "
            f"of dictionary {other} (fingerprint ") in capsys.readouterr().err
    (tmp_path / "run_01.json").write_text(written)
    # A run's labels are its dictionary's: one renamed by hand no longer matches the dictionary it records.
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "run_01.json").write_text((tmp_path / "run_01.json").read_text())
    run = json.loads((tmp_path / "run_01.json").read_text())
    run["labels"] = {"something_else": next(iter(run["labels"].values()))}
    (mixed / "run_02.json").write_text(json.dumps(run))
    assert main(["analyze", "select", str(mixed), "-o", str(tmp_path / "sel.json")]) == 1
    assert (f"{mixed / 'run_02.json'}: error: labels.something_else is not a capability of the dictionary this run "
            "records") in capsys.readouterr().err
