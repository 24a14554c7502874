"""`tracec route`, `tracec evaluate` and `tracec pipeline` from the command line: what they print, resuming, and the
user's mistakes (a missing or misspelt config key, a bad path, a folder that is not an adapter) as exit 1 with one
located line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from numerics import forward_roundings, forward_size, tolerance
from pipeline_fixtures import write_config
from random_adapters import random_adapter
from test_routing import TASK
from tracec.cli import main
from tracec.trace_rl.targeting.eval_table import BASE
from tracec.trace_rl.targeting.peft_adapters import PeftAdapters
from tracec.trace_rl.targeting.routing import Router, route_options

REPO = Path(__file__).resolve().parents[2]
ENV = REPO / "examples" / "envs" / "precondition_verification.rubric"


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], Path]:
    root = tmp_path_factory.mktemp("cli-adapters")
    folders = {"alpha": random_adapter(root / "alpha", 1), "beta": random_adapter(root / "beta", 2)}
    options = route_options([("alpha", "books rooms", "user: book R1"), ("beta", "checks orders", "")])
    path = root / "options.json"
    path.write_text(json.dumps([o.__dict__ for o in options]))
    return folders, path


def _model_flags(folders: dict[str, Path], options: Path) -> list[str]:
    return ["--model", "tiny", *[f for n, p in folders.items() for f in ("--adapter", f"{n}={p}")],
            "--options", str(options)]


def _score_tolerance(model: PeftAdapters, router: Router, task: str) -> float:
    """How far two routings' label scores for `task` may differ, each from an fp32 forward over the prompt (the
    command's own model and this one): the rule's bound (tests/numerics.py) at the size of the forward's values."""
    ids = model.prompt_ids(router.messages(task))
    with model.policy.base_model():
        size = forward_size(model.policy.model, torch.tensor([ids]))
    return tolerance(forward_roundings(model.policy.model.config, len(ids)), size, torch.float32)


def test_route_prints_the_choice_and_the_label_logits(adapters, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    folders, options = adapters
    assert main(["route", *_model_flags(folders, options), "--task", TASK, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    model = PeftAdapters.load("tiny", folders)
    from tracec.trace_rl.targeting.routing import read_options

    router = Router(model, read_options(options))
    expected = router.route(TASK)
    assert printed["choice"] == expected.choice and set(printed["logits"]) == {"alpha", "beta", BASE}
    assert printed["logits"] == pytest.approx(expected.logits, abs=_score_tolerance(model, router, TASK))
    assert main(["route", *_model_flags(folders, options), "--task", TASK]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"route: {expected.choice} (label {expected.label}")
    marked = [line for line in lines[1:] if line.startswith("*")]
    assert len(lines) == 4 and len(marked) == 1 and expected.choice in marked[0]
    # the task of a target's seed: the environment's first message
    assert main(["route", *_model_flags(folders, options), "--target", "capability", "--env", str(ENV),
                 "--seed", "3", "--json"]) == 0
    from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment

    first = CapabilityEnvironment(load_environment(str(ENV))).reset(3).text
    assert json.loads(capsys.readouterr().out)["logits"] == pytest.approx(router.route(first).logits,
                                                                         abs=_score_tolerance(model, router, first))


def test_evaluate_writes_the_table_and_a_rerun_plays_nothing(adapters, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    folders, options = adapters
    argv = ["evaluate", *_model_flags(folders, options), "--max-new-tokens", "8", "--target", "capability",
            "--env", str(ENV), "--conditions", "base,beta,routed", "--tasks", "2", "--max-turns", "1",
            "-o", str(tmp_path / "eval")]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "| base | " in captured.out and "| beta | " in captured.out and "| routed | " in captured.out
    results = [json.loads(line) for line in (tmp_path / "eval" / "results.jsonl").read_text().splitlines()]
    assert sorted((r["condition"], r["seed"]) for r in results) == sorted(  # the pipeline's held-out seeds
        (c, s) for c in ("base", "beta", "routed") for s in (1000, 1001))
    assert all(r["route"]["choice"] in ("alpha", "beta", BASE) for r in results if r["condition"] == "routed")
    assert captured.err.count("evaluate ") == 6
    assert main(argv) == 0
    assert "evaluate routed" not in capsys.readouterr().err  # every task was done: none replayed
    assert len((tmp_path / "eval" / "results.jsonl").read_text().splitlines()) == 6
    saved = json.loads((tmp_path / "eval" / "table.json").read_text())
    assert saved["conditions"] == ["base", "beta", "routed", "oracle"]


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_user_errors_exit_1_with_a_located_line(adapters, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                capsys: pytest.CaptureFixture[str]) -> None:
    folders, options = adapters
    config = write_config(tmp_path)
    text = config.read_text()
    misspelt = tmp_path / "misspelt.toml"
    misspelt.write_text(text.replace("environments =", "enviroments ="))
    line = next(n for n, t in enumerate(misspelt.read_text().splitlines(), 1) if t.startswith("enviroments"))
    assert main(["pipeline", str(misspelt)]) == 1
    assert _one_line_error(capsys) == (f"{misspelt}:{line}:1: error: unknown key `target.enviroments`; did you "
                                       "mean `target.environments`?")
    missing = tmp_path / "missing.toml"
    missing.write_text("\n".join(t for t in text.splitlines() if not t.startswith("environments =")))
    assert main(["pipeline", str(missing)]) == 1
    assert _one_line_error(capsys).startswith(f"{missing}: error: target.environments = []: a capability target "
                                              "names its `.rubric` files")
    bad_value = tmp_path / "bad_value.toml"
    bad_value.write_text(text.replace("group_size = 2\ngroups_per_batch", "group_size = 1\ngroups_per_batch"))
    line = next(n for n, t in enumerate(bad_value.read_text().splitlines(), 1) if t == "group_size = 1")
    assert main(["pipeline", str(bad_value)]) == 1
    assert _one_line_error(capsys).startswith(f"{bad_value}:{line}:1: error: train.rollout.group_size = 1:")
    owned = tmp_path / "owned.toml"
    owned.write_text(text + '\n[train.model]\nname = "other"\n')
    assert main(["pipeline", str(owned)]) == 1
    assert "`train.model` is set by the pipeline" in _one_line_error(capsys)
    assert main(["pipeline", str(tmp_path / "none.toml")]) == 1
    assert _one_line_error(capsys) == f"{tmp_path / 'none.toml'}: error: no such file or directory"
    assert main(["pipeline", str(config), "--set", "evaluate.tasks=0"]) == 1
    assert _one_line_error(capsys).startswith("--set evaluate.tasks=0: error: evaluate.tasks = 0:")

    not_adapter = tmp_path / "empty"
    not_adapter.mkdir()
    assert main(["evaluate", "--model", "tiny", "--adapter", f"x={not_adapter}", "--target", "capability",
                 "--env", str(ENV), "-o", str(tmp_path / "e")]) == 1
    assert _one_line_error(capsys).startswith(f"{not_adapter}: not an adapter folder")
    assert main(["evaluate", "--model", "tiny", "--target", "capability", "--env", str(tmp_path / "no.rubric"),
                 "-o", str(tmp_path / "e")]) == 1
    assert _one_line_error(capsys) == f"{tmp_path / 'no.rubric'}: error: no such file or directory"
    assert main(["route", *_model_flags(folders, tmp_path / "no.json"), "--task", TASK]) == 1
    assert _one_line_error(capsys) == f"{tmp_path / 'no.json'}: error: no such file or directory"
    assert main(["route", "--model", "tiny", "--task", TASK]) == 2  # no routing options: a usage error
    assert main(["evaluate", *_model_flags(folders, options), "--target", "capability", "--env", str(ENV),
                 "--conditions", "base,gamma", "-o", str(tmp_path / "e")]) == 2
    assert "unknown condition 'gamma'" in capsys.readouterr().err
    assert main(["route", *_model_flags(folders, options), "--engine", "vllm", "--task", TASK]) == 1
    assert "the vllm engine needs a model folder; the tiny model exists only in code" in _one_line_error(capsys)


@pytest.mark.parametrize("name", ["cpu_smollm2", "tau2_http", "gpu_paper"])
def test_the_shipped_pipeline_configs_load_and_name_files_that_exist(name: str) -> None:
    from tracec.trace_rl.targeting.pipeline.config import load_pipeline_config

    config = load_pipeline_config(REPO / "examples" / "pipeline" / f"{name}.toml")
    for path in (*config.target.environments, config.analysis.rubric, config.train.advantage.rubric):
        assert not path or Path(path).is_file(), path
    assert config.train.model == config.model  # the adapters are trained on the pipeline's base model
    if name == "cpu_smollm2":
        assert config.model.device == "cpu" and config.analysis.labeler == "rubric" and config.llm.backend == "none"
    if name != "tau2_http":  # every condition: base, adapters, routed, mixture, baselines
        assert len(config.baselines.conditions) == 4
        assert set(config.evaluate.conditions) == {"base", "adapters", "routed", "mixture", "baselines"}
    if name == "gpu_paper":
        assert (config.train.rollout.group_size, config.train.rollout.groups_per_batch) == (16, 4)
        assert (config.train.optim.lr, config.train.run.iterations, config.evaluate.engine) == (1e-5, 40, "vllm")
    if name != "cpu_smollm2":
        assert config.target.kind == "tau2" and config.llm.backend == "http"


# The settings TRACE's paper states (its text, experimental setup and results), with its values: the only keys
# gpu_paper.toml may mark "paper" (issue #34: it called a 7B model, alpha 32 and TIES "the paper's").
PAPER_SETTINGS = {
    "model.name": "Qwen3-30B-A3B-Instruct-2507", "target.kind": "tau2", "target.tau2.domains": ["airline", "retail"],
    "target.tau2.user": "base", "collect.tasks": 200, "analysis.label_runs": 10, "analysis.k": 8,
    "analysis.max_selected": 4, "train.lora.rank": 16, "train.rollout.group_size": 16, "train.advantage.kind": "grpo",
    "train.optim.lr": 1e-5, "train.run.iterations": 40, "baselines.weights": "uniform", "evaluate.tasks": 200,
}


def test_gpu_paper_marks_only_the_paper_s_own_settings_as_the_paper_s() -> None:
    import tomllib

    text = (REPO / "examples" / "pipeline" / "gpu_paper.toml").read_text()
    data = tomllib.loads(text)
    section, marked = "", {}
    for line in text.splitlines():  # a key is marked by a "# paper" comment on its line
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line and not line.startswith("#"):
            key, _, rest = line.partition("=")
            if "# paper" in rest:
                marked[f"{section}.{key.strip()}"] = rest
    assert set(marked) == set(PAPER_SETTINGS)
    for dotted, value in PAPER_SETTINGS.items():
        node = data
        for part in dotted.split("."):
            node = node[part]
        assert node == value or (isinstance(node, str) and node.endswith(str(value))), dotted
    settings = data["train"]
    assert settings["lora"]["alpha"] == 16 and settings["lora"]["targets"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert settings["advantage"]["max_resample_batches"] == 2 and settings["rollout"]["hint_ratio"] == [0.25, 0.5]
    assert "7B-class" not in text and "alpha = 32" not in text  # the settings the issue found mislabelled


def test_a_run_folders_adapters_include_its_baselines(tmp_path: Path) -> None:
    import argparse

    from tracec.cli.evaluate import model_adapters

    run = tmp_path / "run"
    for step, names in (("train", ("alpha",)), ("baselines", ("merge_linear", "sft_gold"))):
        (run / step).mkdir(parents=True)
        (run / step / "adapters.json").write_text(json.dumps({n: {"adapter": f"{n}/adapter"} for n in names}))
    args = argparse.Namespace(run=run, adapter=["extra=/elsewhere"])
    assert model_adapters(args) == {"alpha": run / "train" / "alpha" / "adapter",
                                    "merge_linear": run / "baselines" / "merge_linear" / "adapter",
                                    "sft_gold": run / "baselines" / "sft_gold" / "adapter",
                                    "extra": Path("/elsewhere")}
    (run / "baselines" / "adapters.json").unlink()  # a run that built no baselines: its trained adapters only
    assert model_adapters(argparse.Namespace(run=run, adapter=[])) == {"alpha": run / "train" / "alpha" / "adapter"}
