"""The pipeline's baselines through the real `run_pipeline` on the tiny model: multi-capability GRPO on the mixture
of the built environments, the linear and TIES merges of the trained adapters and SFT on the gold episodes are
built after `train`, evaluated beside the adapters (never routed to, outside the oracle) and reported; a change to
`[baselines]` rebuilds them and reevaluates, nothing else; bad settings are said before any step runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from numerics import tolerance
from pipeline_fixtures import ENVS, analyst, write_config
from safetensors.torch import load_file
from tracec.trace_rl.grpo.config import load_config
from tracec.trace_rl.targeting.pipeline.config import load_pipeline_config
from tracec.trace_rl.targeting.pipeline.run import run_pipeline
from tracec.trace_rl.targeting.pipeline.steps import PipelineFailed

from tracec.config_io import ConfigError

BASELINES = ["multi_grpo", "merge_linear", "merge_ties", "sft_gold"]
SETTINGS = [f"baselines.conditions={json.dumps(BASELINES)}", "baselines.sft_epochs=1", "baselines.sft_tasks=1",
            "train.rollout.max_context_tokens=4096", "evaluate.conditions=[\"base\", \"adapters\", \"baselines\"]"]


def _delta(folder: Path, *, absolute: bool = False) -> dict[str, torch.Tensor]:
    """Each module's s B A (with `absolute`, s |B| |A|: what each entry's sum accumulates)."""
    config = json.loads((folder / "adapter_config.json").read_text())
    tensors = {k: v.double().abs() if absolute else v.double()
               for k, v in load_file(str(folder / "adapter_model.safetensors")).items()}
    scale = config["lora_alpha"] / config["r"]
    return {k: scale * tensors[k.replace("lora_A", "lora_B")] @ tensors[k] for k in tensors if "lora_A" in k}


def test_the_baselines_are_built_evaluated_beside_the_adapters_and_reported(tmp_path: Path) -> None:
    config = load_pipeline_config(write_config(tmp_path), SETTINGS)
    root = Path(config.run.out)
    run_pipeline(config, llm=analyst())
    built = json.loads((root / "baselines" / "adapters.json").read_text())
    trained = json.loads((root / "train" / "adapters.json").read_text())
    assert list(built) == BASELINES and sorted(trained) == sorted(ENVS.values())
    for entry in built.values():
        assert (root / "baselines" / entry["adapter"] / "adapter_config.json").is_file()
    # multi_grpo: the mixture of both environments, uniform, for the rollouts of both adapters together
    grpo = built["multi_grpo"]
    assert grpo["iterations"] == 2 * trained[next(iter(trained))]["iterations"] and grpo["weights"] == [1.0, 1.0]
    saved = load_config(root / "baselines" / "multi_grpo" / "checkpoints" / "iter_000002" / "config.toml")
    assert saved.env.kind == "mixture"
    assert sorted(Path(p).stem for p in saved.env.mixture.paths) == sorted(ENVS.values())
    # merge_linear: exactly the trained adapters' mean delta
    deltas = [_delta(root / "train" / entry["adapter"]) for entry in trained.values()]
    merged = root / "baselines" / built["merge_linear"]["adapter"]
    # the merge computes in fp64 and writes B in fp32: one rounding in each product term (tests/numerics.py)
    close = tolerance(1, max(float(size.max()) for size in _delta(merged, absolute=True).values()), torch.float32)
    for module, delta in _delta(merged).items():
        torch.testing.assert_close(delta, torch.stack([d[module] for d in deltas]).mean(dim=0), atol=close, rtol=0)
    assert built["merge_ties"]["rank"] == 8 and 0 <= built["merge_ties"]["residual"] < 1  # two rank-4 adapters
    assert built["sft_gold"]["episodes"] == len(ENVS)
    # evaluated beside the adapters; routing never offered them; the oracle pools base and the adapters only
    decisions = [json.loads(line) for line in (root / "route" / "decisions.jsonl").read_text().splitlines()]
    assert all(set(d["logits"]) == {*ENVS.values(), "base"} for d in decisions)
    table = json.loads((root / "evaluate" / "table.json").read_text())
    assert table["conditions"] == ["base", *trained, *BASELINES, "oracle"]
    results = [json.loads(line) for line in (root / "evaluate" / "results.jsonl").read_text().splitlines()]
    tasks = {(r["domain"], r["seed"]) for r in results}
    union = sum(any(r["success"] for r in results if (r["domain"], r["seed"]) == task and r["condition"] not in
                    BASELINES) for task in tasks)
    assert table["table"]["oracle"]["overall"]["passed"] == union
    report = (root / "report.md").read_text()
    assert "## Baselines" in report and all(f"| {name} |" in report for name in BASELINES)
    assert "TIES merge of the adapters" in report

    # A change to [baselines] rebuilds the baselines and reevaluates; routing and training stay as they are.
    changed = load_pipeline_config(write_config(tmp_path), [
        *SETTINGS, "baselines.conditions=[\"merge_ties\", \"multi_grpo\"]", "baselines.ties_density=0.5",
        "baselines.weights=\"coverage\"", "baselines.iterations=1"])
    result = run_pipeline(changed, llm=analyst())
    assert [name for name, o in result.outcomes.items() if not o.skipped] == ["baselines", "evaluate"]
    rebuilt = json.loads((root / "baselines" / "adapters.json").read_text())
    assert list(rebuilt) == ["merge_ties", "multi_grpo"] and rebuilt["multi_grpo"]["iterations"] == 1
    coverage = {s["skill"]: s["mean_cov"] for s in json.loads((root / "select" / "selected_capabilities.json")
                                                               .read_text())}
    assert rebuilt["multi_grpo"]["weights"] == [coverage[name] for name in rebuilt["multi_grpo"]["environments"]]
    assert json.loads((root / "evaluate" / "table.json").read_text())["conditions"] == [
        "base", *trained, "merge_ties", "multi_grpo", "oracle"]  # `baselines`: each one built


def test_baseline_settings_are_checked_before_any_step(tmp_path: Path) -> None:
    path = write_config(tmp_path)
    with pytest.raises(ConfigError, match=r"baselines.conditions = \"merge_tie\": did you mean \"merge_ties\""):
        load_pipeline_config(path, ["baselines.conditions=[\"merge_tie\"]"])
    with pytest.raises(ConfigError, match="merge_ties is a baseline this run does not build"):
        load_pipeline_config(path, ["evaluate.conditions=[\"base\", \"merge_ties\"]"])
    with pytest.raises(ConfigError, match="did you mean \"multi_grpo\""):
        load_pipeline_config(path, ["evaluate.conditions=[\"multi_grp\"]"])
    with pytest.raises(ConfigError, match="`train.env.mixture` is set by the pipeline"):
        load_pipeline_config(path, ["train.env.mixture.paths=[\"a.rubric\"]"])
    for setting, message in (("baselines.sft_epochs=0", "baselines.sft_epochs = 0: an integer >= 1"),
                             ("baselines.ties_density=1.5", "TIES density = 1.5"),
                             ("baselines.sft_max_new_tokens=1024", "sft_max_new_tokens = 1024: the longest gold turn")):
        config = load_pipeline_config(path, [setting])
        with pytest.raises(PipelineFailed, match=message):
            run_pipeline(config, llm=analyst())
        assert not (Path(config.run.out) / "steps").exists()  # said before the first step
