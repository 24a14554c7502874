"""`run_pipeline` end to end on CPU: the tiny model, a scripted analyst, two capability environments as the target,
real files between the steps. Killed after the training step, a rerun redoes none of the earlier steps; a change
to `[evaluate]` reruns only the steps that read it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pipeline_fixtures import ENVS, analyst, write_config
from tracec.trace_rl.targeting.pipeline.config import load_pipeline_config
from tracec.trace_rl.targeting.pipeline.layout import STEP_NAMES
from tracec.trace_rl.targeting.pipeline.run import run_pipeline
from tracec.trace_rl.targeting.pipeline.steps import StepOutcome, folder_digest

REPO = Path(__file__).resolve().parents[2]


class Killed(Exception):
    pass


def _kill_after(step: str):  # type: ignore[no-untyped-def]
    def hook(outcome: StepOutcome) -> None:
        if outcome.name == step:
            raise Killed(step)

    return hook


def _records(root: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in (root / "steps").glob("*.json")}


@pytest.mark.slow
def test_the_pipeline_runs_end_to_end_and_resumes_after_a_kill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) \
        -> None:
    config = load_pipeline_config(write_config(tmp_path))
    root = Path(config.run.out)
    lines: list[str] = []
    with pytest.raises(Killed):
        run_pipeline(config, llm=analyst(), report=lines.append, after_step=_kill_after("train"))
    first = _records(root)
    assert sorted(first) == sorted(STEP_NAMES[:6])  # baselines, route and evaluate never began
    assert not (root / "route").exists() and not (root / "evaluate").exists()
    # Real files between the steps: what each step wrote is what the next one read.
    trajectories = (root / "collect" / "trajectories" / "base.jsonl").read_text().splitlines()
    assert len(trajectories) == 2 * len(ENVS)
    selected = json.loads((root / "select" / "selected_capabilities.json").read_text())
    assert sorted(s["skill"] for s in selected) == sorted(ENVS.values())
    manifest = json.loads((root / "environments" / "environments.json").read_text())
    assert {e["name"]: e["origin"] for e in manifest["environments"]} == {
        c: f"library:{c}.rubric" for c in ENVS.values()}
    assert all(e["calibration"]["metrics"]["num_rollouts"] == 2 for e in manifest["environments"])
    adapters = json.loads((root / "train" / "adapters.json").read_text())
    for name, entry in adapters.items():
        assert (root / "train" / entry["adapter"] / "adapter_config.json").is_file() and entry["iterations"] == 1
        assert (root / "train" / name / "curve.png").is_file()
    for name in first:  # each record's digest is its folder's (the selection only, for select)
        only = ("selected_capabilities.json",) if name == "select" else ()
        assert first[name]["digest"] == folder_digest(root / name, only)
    before = {name: (root / name).stat().st_mtime_ns for name in first}

    trainings: list[Any] = []
    monkeypatch.setattr("tracec.trace_rl.targeting.pipeline.adapter_steps.train", lambda *a, **k: trainings.append(a))
    llm = analyst()
    lines.clear()
    result = run_pipeline(config, llm=llm, report=lines.append)
    assert [name for name, o in result.outcomes.items() if o.skipped] == list(STEP_NAMES[:6])
    assert not trainings and not llm.calls  # nothing of discovery, labeling or training is redone
    again = _records(root)
    assert all(again[name] == first[name] for name in first)
    assert {name: (root / name).stat().st_mtime_ns for name in first} == before
    assert sum("up to date, skipped" in line for line in lines) == 6 and sum("done in" in line for line in lines) == 3
    assert json.loads((root / "baselines" / "adapters.json").read_text()) == {}  # none asked for

    decisions = [json.loads(line) for line in (root / "route" / "decisions.jsonl").read_text().splitlines()]
    assert len(decisions) == len(ENVS)
    assert all(set(d["logits"]) == {*ENVS.values(), "base"} for d in decisions)
    table = json.loads((root / "evaluate" / "table.json").read_text())
    assert table["conditions"] == ["base", *sorted(ENVS.values()), "routed", "oracle"]
    assert table["table"]["routed"]["overall"]["tasks"] == len(ENVS)
    routed = [json.loads(line) for line in (root / "evaluate" / "results.jsonl").read_text().splitlines()
              if json.loads(line)["condition"] == "routed"]
    chosen = {(d["domain"], d["seed"]): d["choice"] for d in decisions}
    assert {(r["domain"], r["seed"]): r["route"]["choice"] for r in routed} == chosen  # routed as the route step said
    report = (root / "report.md").read_text()
    for name in ENVS.values():
        assert f"| {name} |" in report
    assert "| routed |" in report and (root / "report.png").stat().st_size > 0

    # A change flows downstream as far as it changes what a step wrote: a new delta that keeps the same selection
    # reruns select only (no relabeling, no retraining); a change to [evaluate] reruns route and evaluate.
    changed = load_pipeline_config(write_config(tmp_path), ["analysis.delta=0.3"])
    result = run_pipeline(changed, llm=llm)
    assert [name for name, o in result.outcomes.items() if not o.skipped] == ["select"] and not llm.calls
    assert "Delta >= 0.3" in (root / "select" / "table.txt").read_text()
    changed = load_pipeline_config(write_config(tmp_path), ["analysis.delta=0.3",
                                                            "evaluate.conditions=[\"base\", \"routed\"]"])
    result = run_pipeline(changed, llm=llm)
    assert [name for name, o in result.outcomes.items() if not o.skipped] == ["route", "evaluate"]
    assert json.loads((root / "evaluate" / "table.json").read_text())["conditions"] == ["base", "routed"]


def test_a_step_is_skipped_only_when_its_inputs_and_outputs_are_there(tmp_path: Path) -> None:
    from tracec.trace_rl.targeting.pipeline.steps import StepStore

    runs: list[str] = []

    def produce(text: str):  # type: ignore[no-untyped-def]
        def write(folder: Path) -> str:
            runs.append(text)
            (folder / "out.txt").write_text(text)
            return text

        return write

    store = StepStore(tmp_path)
    one = store.run("a", {"x": 1}, produce("one"))
    assert not one.skipped and (tmp_path / "a" / "out.txt").read_text() == "one"
    assert store.run("a", {"x": 1}, produce("two")).skipped and runs == ["one"]
    changed = store.run("a", {"x": 2}, produce("two"))  # other inputs: run again, published whole
    assert not changed.skipped and (tmp_path / "a" / "out.txt").read_text() == "two"
    assert changed.digest != one.digest
    (tmp_path / "a" / "out.txt").unlink()
    (tmp_path / "a").rmdir()  # outputs gone: run again
    assert not store.run("a", {"x": 2}, produce("three")).skipped and runs == ["one", "two", "three"]
    # An output cut or deleted inside a folder that is still there (a trajectory file truncated, an adapter
    # removed) was once skipped as up to date: the outputs are read again before a skip.
    (tmp_path / "a" / "out.txt").write_text("thr")
    assert not store.run("a", {"x": 2}, produce("four")).skipped and (tmp_path / "a" / "out.txt").read_text() == "four"
    (tmp_path / "a" / "out.txt").unlink()
    assert not store.run("a", {"x": 2}, produce("five")).skipped and runs[-1] == "five"
    assert store.run("a", {"x": 2}, produce("six")).skipped and runs[-1] == "five"

    def dies(folder: Path) -> str:
        (folder / "half.txt").write_text("half")
        raise Killed("mid-step")

    with pytest.raises(Killed):
        store.run("b", {"y": 1}, dies)
    assert not (tmp_path / "b").exists() and store.record("b") is None  # nothing published
    seen: list[bool] = []

    def resumes(folder: Path) -> str:
        seen.append((folder / "half.txt").is_file())  # the staging folder survived the kill
        return "resumed"

    store.run("b", {"y": 1}, resumes)
    assert seen == [True] and (tmp_path / "b" / "half.txt").is_file()


def test_deterministic_labels_come_from_the_capability_blocks_and_select_on_them(tmp_path: Path) -> None:
    """Discover, label and select with `labeler = "rubric"` on recorded gold (passing) and do-nothing (failing)
    episodes: the dictionary is the file's blocks, one run of labels, and only the capability whose absence
    separates the failures is kept."""
    from tracec.runtime.facts.trajectories.records import write_records
    from tracec.trace_rl.envs.agent import run_episode
    from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
    from tracec.trace_rl.envs.capability.validate import GoldAgent, NullAgent
    from tracec.trace_rl.targeting.pipeline import analysis_steps
    from tracec.trace_rl.targeting.pipeline.context import Context

    rubric = REPO / "examples" / "pipeline" / "toolenv_capabilities.rubric"
    config = load_pipeline_config(write_config(tmp_path), ["analysis.labeler=\"rubric\"",
                                                           f"analysis.rubric=\"{rubric}\""])
    records = []
    for name in ENVS.values():
        env = CapabilityEnvironment(load_environment(str(REPO / "examples" / "envs" / f"{name}.rubric")))
        for seed in range(3):
            for agent, kind in ((GoldAgent(env), "gold"), (NullAgent(), "null")):
                records.append(run_episode(env, agent, seed, env.max_steps, episode=f"{name}:{kind}{seed}"))
    collected, discovered, labeled, chosen = (tmp_path / n for n in ("collect", "discover", "label", "select"))
    (collected / "trajectories").mkdir(parents=True)
    write_records(records, collected / "trajectories" / "base.jsonl")
    context = Context(config=config, report=lambda _: None, detail=lambda _: None)
    for folder in (discovered, labeled, chosen):
        folder.mkdir()
    analysis_steps.discover(context, discovered, collected)
    names = [c["name"] for c in json.loads((discovered / "candidate_capabilities.json").read_text())["candidates"]]
    assert names == ["tool_calling_precision", "precondition_verification", "multi_step_completion"]
    analysis_steps.label(context, labeled, collected, discovered)
    (run,) = sorted(labeled.glob("run_*.json"))
    labels = json.loads(run.read_text())
    assert labels["totals"] == {"total_failed": 6, "total_passed": 6}
    tool_use = labels["labels"]["tool_calling_precision"]
    assert len(tool_use["lacking_failed"]) == 6 and len(tool_use["present_passed"]) == 6
    analysis_steps.select(context, chosen, discovered, labeled)
    kept = json.loads((chosen / "selected_capabilities.json").read_text())
    assert [s["skill"] for s in kept] == ["tool_calling_precision"]  # every do-nothing episode lacks it, no gold one
    assert kept[0]["mean_cov"] == 1.0 and kept[0]["n_runs_total"] == 1


def test_target_domains_cut_tau2_to_its_tasks_and_make_fresh_environments() -> None:
    from tracec.trace_rl.targeting.pipeline.config import TargetSection, Tau2TargetSection
    from tracec.trace_rl.targeting.pipeline.targets import target_domains

    from tracec.config_io import ConfigError

    target = TargetSection(kind="tau2", tau2=Tau2TargetSection(user="scripted"))
    airline, retail = target_domains(target, first_seed=48, tasks=5)
    assert (airline.name, airline.seeds) == ("airline", (48, 49))  # airline has 50 tasks
    assert (retail.name, retail.seeds) == ("retail", (48, 49, 50, 51, 52))
    first, second = airline.make_env(), airline.make_env()
    assert first is not second and first.reset(49).text == second.reset(49).text
    with pytest.raises(ConfigError, match="airline has 50 tasks"):
        target_domains(target, first_seed=50, tasks=1)
    with pytest.raises(ConfigError, match="needs the base model"):
        target_domains(TargetSection(kind="tau2"), first_seed=0, tasks=1)
    envs = TargetSection(environments=tuple(str(REPO / "examples" / "envs" / f"{n}.rubric") for n in ENVS.values()))
    assert [(d.name, d.seeds) for d in target_domains(envs, first_seed=3, tasks=2)] == [
        (name, (3, 4)) for name in ENVS]


def test_the_vllm_engine_is_checked_before_the_first_step(tmp_path: Path) -> None:
    """evaluate.engine = "vllm" loads on any machine (a GPU config is read anywhere); a run says at its start, before
    any step writes, that this venv has no vLLM (the main venv: the CPU build lives in .venv-vllm, where tests/
    vllm_engine runs the engine) or that the model is the tiny one, which only the transformers engine has."""
    from importlib.util import find_spec

    from tracec.trace_rl.targeting.adapters import AdapterError
    from tracec.trace_rl.targeting.pipeline.run import run_pipeline

    from tracec.config_io import ConfigError

    assert find_spec("vllm") is None  # the main venv
    config = load_pipeline_config(write_config(tmp_path), ["evaluate.engine=\"vllm\""])
    assert config.evaluate.engine == "vllm"
    with pytest.raises(AdapterError, match="tiny model exists only in code"):
        run_pipeline(config, out=tmp_path / "tiny")
    smollm2 = load_pipeline_config(write_config(tmp_path), ["evaluate.engine=\"vllm\"",
                                                            "model.name=\"smollm2-135m-instruct\""])
    with pytest.raises(AdapterError, match="vLLM is not installed.*make vllm-venv"):
        run_pipeline(smollm2, out=tmp_path / "smollm2")
    assert not (tmp_path / "tiny").exists() and not (tmp_path / "smollm2").exists()
    with pytest.raises(ConfigError, match=r"train\.lora\.rank.*at most 512"):
        load_pipeline_config(write_config(tmp_path), ["evaluate.engine=\"vllm\"", "train.lora.rank=1024"])
    memory = load_pipeline_config(write_config(tmp_path), ["evaluate.vllm_gpu_memory=0.5"]).evaluate.vllm_gpu_memory
    assert memory == 0.5
    with pytest.raises(ConfigError, match="vllm_gpu_memory"):
        load_pipeline_config(write_config(tmp_path), ["evaluate.vllm_gpu_memory=1.5"])
    with pytest.raises(ConfigError, match="engine"):
        load_pipeline_config(write_config(tmp_path), ["evaluate.engine=\"tgi\""])


def test_the_analyst_is_the_llm_section_opened_once(tmp_path: Path) -> None:
    from tracec.trace_rl.llm.local import TransformersBackend
    from tracec.trace_rl.targeting.pipeline.context import Context
    from tracec.trace_rl.targeting.pipeline.steps import PipelineFailed

    context = Context(config=load_pipeline_config(write_config(tmp_path)), report=print, detail=print)
    opened = context.analyst()
    assert isinstance(opened, TransformersBackend) and opened.name == "tiny"
    assert context.analyst() is opened  # opened on first use, once
    rubric = REPO / "examples" / "pipeline" / "toolenv_capabilities.rubric"
    none = load_pipeline_config(write_config(tmp_path), ["llm.backend=\"none\"", "analysis.labeler=\"rubric\"",
                                                         f"analysis.rubric=\"{rubric}\""])
    with pytest.raises(PipelineFailed, match=r"set \[llm\] backend"):
        Context(config=none, report=print, detail=print).analyst()


def test_an_http_analyst_that_cannot_be_opened_is_refused_when_the_config_loads(tmp_path: Path) -> None:
    """`[llm] base_url` without a scheme was a traceback (exit 3) once step 3 opened the analyst."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "tracec.cli", "pipeline", str(write_config(tmp_path)),
                           "--set", "llm.backend=\"http\"", "--set", "llm.model=\"m\"",
                           "--set", "llm.base_url=\"127.0.0.1:8000/v1\""],
                          check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "llm.base_url" in done.stderr and "must start with http:// or https://" in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_typo_in_the_conditions_is_refused_before_any_step_runs(tmp_path: Path) -> None:
    """`evaluate.conditions` is read at step 8; a near miss of a keyword is said at once, by the command line."""
    import subprocess
    import sys

    config = write_config(tmp_path)
    done = subprocess.run([sys.executable, "-m", "tracec.cli", "pipeline", str(config), "--set",
                           "evaluate.conditions=[\"base\", \"rooted\"]"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert 'did you mean "routed" for "rooted"' in done.stderr and not (tmp_path / "run").exists()
    names = load_pipeline_config(config, ["evaluate.conditions=[\"base\", \"precondition_verification\"]"])
    assert names.evaluate.conditions == ("base", "precondition_verification")  # an adapter's name stays allowed


@pytest.mark.slow
def test_a_pipeline_killed_in_training_resumes_there(tmp_path: Path) -> None:
    """`tracec pipeline` in a subprocess, SIGKILLed once training has its first checkpoint; run again, it skips
    the five steps before, and training continues from that checkpoint instead of starting over."""
    import os
    import signal
    import subprocess
    import sys
    import time

    rubric = REPO / "examples" / "pipeline" / "toolenv_capabilities.rubric"
    argv = [sys.executable, "-m", "tracec.cli", "pipeline", str(write_config(tmp_path, iterations=3)),
            "--set", "llm.backend=\"none\"", "--set", "analysis.labeler=\"rubric\"",
            "--set", f"analysis.rubric=\"{rubric}\"", "--set", "environments.calibrate=false"]
    root = tmp_path / "run"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    process = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pattern = ".partial/train-*/tool_calling_precision/checkpoints/iter_000001"
    deadline = time.monotonic() + 900  # a bound on waiting, not an assertion on speed
    while not list(root.glob(pattern)) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)  # iterations of the tiny model are short: kill within the second one
    assert process.poll() is None, process.communicate()[1].decode()[-2000:]
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    (staging,) = root.glob(".partial/train-*/tool_calling_precision")
    first_iteration = (staging / "metrics.jsonl").read_text().splitlines()[0]
    done = _records(root)
    assert sorted(done) == sorted(STEP_NAMES[:5])

    rerun = subprocess.run([*argv, "--verbose"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           check=False)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    lines = [line for line in rerun.stderr.splitlines() if line.startswith("[")]
    assert [line.split(":")[0] for line in lines if "up to date, skipped" in line] == [
        f"[{n}/{len(STEP_NAMES)}] {name}" for n, name in enumerate(STEP_NAMES[:5], 1)]
    assert f"[6/{len(STEP_NAMES)}] train: running (resuming its partial outputs)" in lines
    assert all(_records(root)[name] == done[name] for name in done)
    metrics = (root / "train" / "tool_calling_precision" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 3 and metrics[0] == first_iteration  # iteration 1 kept...
    trained = [line.split(":", 1)[1].split()[1] for line in rerun.stderr.splitlines()
               if line.startswith("train tool_calling_precision: iter")]
    assert trained == ["2/3", "3/3"]  # ...and not played again
    assert "| routed |" in rerun.stdout and rerun.stdout.rstrip().endswith("report.md")


def test_a_missing_target_environment_is_said_at_its_line_when_the_config_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tracec.cli import main

    config = write_config(tmp_path)
    text = config.read_text()
    config.write_text(text.replace("multi_step_completion.rubric", "multi_step_completoin.rubric"))
    line = next(n for n, row in enumerate(config.read_text().splitlines(), 1) if row.startswith("environments ="))
    assert main(["pipeline", str(config)]) == 1  # before collecting, analysing or loading a model
    err = capsys.readouterr().err
    assert f"{config}:{line}:1: error: target.environments names " in err and "multi_step_completoin" in err
    assert not (tmp_path / "run").exists()


def test_the_labels_rubric_and_the_conditions_it_allows_are_checked_when_the_config_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A `~name` of no user was a traceback (exit 3), where the trainer's config says exit 1: now the same located
    error as the trainer's; a missing labels file was found after collection, and a condition naming no capability
    after training."""
    from tracec.cli import main

    rubric = REPO / "examples" / "pipeline" / "toolenv_capabilities.rubric"
    config = write_config(tmp_path)
    text = config.read_text().replace('labeler = "llm"', 'labeler = "rubric"')
    config.write_text(text.replace("[analysis]\n", '[analysis]\nrubric = "~nosuchuser_x/caps.rubric"\n'))
    line = config.read_text().splitlines().index('rubric = "~nosuchuser_x/caps.rubric"') + 1
    assert main(["pipeline", str(config)]) == 1
    assert capsys.readouterr().err == (f'{config}:{line}:1: error: analysis.rubric = "~nosuchuser_x/caps.rubric": '
                                       "`~nosuchuser_x` names no user of this machine; write the path from `/`, or "
                                       "as a relative path\n")
    wrong = [('rubric = "caps.rubric"', "", f"analysis.rubric names {tmp_path / 'caps.rubric'}, which is not a file"),
             (f'rubric = "{rubric}"\ncapabilities = ["nope"]', "",
              f"analysis.capabilities: {rubric} has no capability nope (it has: tool_calling_precision, "),
             (f'rubric = "{rubric}"\ncapabilities = ["precondition_verification"]',
              'conditions = ["base", "tool_calling_precision"]',
              'evaluate.conditions names "tool_calling_precision", which is no condition and no capability of ')]
    for analysis, evaluate, message in wrong:
        config.write_text(text.replace("[analysis]\n", f"[analysis]\n{analysis}\n")
                          .replace("[evaluate]\n", f"[evaluate]\n{evaluate}\n"))
        assert main(["pipeline", str(config)]) == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err and message in err, err
        assert err.startswith(f"{config}:") and not (tmp_path / "run").exists()
    # the library: its message names the config key, not synth's flags
    config.write_text(text.replace("[analysis]\n", f'[analysis]\nrubric = "{rubric}"\n')
                      .replace("[environments]\n", '[environments]\nlibrary = "/nope"\n'))
    assert main(["pipeline", str(config)]) == 1
    err = capsys.readouterr().err
    assert "environments.library: /nope: the environment library is not there; set environments.library to a " \
           "folder" in err and "--library" not in err and not (tmp_path / "run").exists()


def test_a_condition_naming_no_selected_capability_stops_the_run_before_training(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With LLM labels the adapters are known once select has run: an unknown condition stops the run there."""
    from tracec.trace_rl.targeting.pipeline import analysis_steps, env_steps
    from tracec.trace_rl.targeting.pipeline.layout import SELECTED
    from tracec.trace_rl.targeting.pipeline.steps import PipelineFailed

    config = load_pipeline_config(write_config(tmp_path), ["evaluate.conditions=[\"base\", \"careful_changes\"]"])
    for step in ("collect", "discover", "label"):
        monkeypatch.setattr(analysis_steps, step, lambda *args: "stand-in")

    def select(context: Any, folder: Path, *args: Any) -> str:
        (folder / SELECTED).write_text(json.dumps([{"skill": "precondition_verification"}]))
        return "stand-in"

    later: list[str] = []
    monkeypatch.setattr(analysis_steps, "select", select)
    monkeypatch.setattr(env_steps, "environments", lambda *args: later.append("environments") or "")
    with pytest.raises(PipelineFailed, match=r"evaluate.conditions names 'careful_changes', which is no condition "
                                             r"and no capability this run trains \(select left: "
                                             r"precondition_verification\)"):
        run_pipeline(config, llm=analyst())
    assert later == []
