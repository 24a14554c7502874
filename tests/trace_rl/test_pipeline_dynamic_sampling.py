"""Dynamic sampling where TRACE uses it: the pipeline's adapter trainings (and its multi-capability GRPO) refill the
groups filtered for a constant reward from up to 2 more batches (TRACE's `--dynamic-sampling-max-batches 3`, the
first batch included), unless the config says otherwise; the trainer's own default stays 0."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pipeline_fixtures import write_config
from tracec.trace_rl.grpo.config import TrainConfig, load_config
from tracec.trace_rl.targeting.pipeline import adapter_steps
from tracec.trace_rl.targeting.pipeline.config import (
    TRACE_RESAMPLE_BATCHES,
    PipelineConfig,
    load_pipeline_config,
)
from tracec.trace_rl.targeting.pipeline.context import Context

REPO = Path(__file__).resolve().parents[2]


def test_the_pipeline_resamples_as_trace_and_the_trainer_keeps_its_default(tmp_path: Path) -> None:
    assert TRACE_RESAMPLE_BATCHES == 2  # three batches at most, as TRACE's default counts them
    assert TrainConfig().advantage.max_resample_batches == 0  # `tracec train` and the demo spend what they are given
    assert load_config(None, []).advantage.max_resample_batches == 0
    assert PipelineConfig.__dataclass_fields__["train"].default_factory().advantage.max_resample_batches == 2
    path = write_config(tmp_path)  # a [train] section that says nothing of resampling
    assert load_pipeline_config(path).train.advantage.max_resample_batches == 2
    assert load_pipeline_config(path, ["train.advantage.max_resample_batches=0"]).train.advantage \
        .max_resample_batches == 0  # --set wins
    text = path.read_text().replace("[train.optim]", "[train.advantage]\nmax_resample_batches = 1\n\n[train.optim]")
    path.write_text(text)
    assert load_pipeline_config(path).train.advantage.max_resample_batches == 1  # so does the file


@pytest.mark.parametrize("name", ["cpu_smollm2", "tau2_http", "gpu_paper"])
def test_every_shipped_pipeline_trains_its_adapters_with_dynamic_sampling(name: str) -> None:
    config = load_pipeline_config(REPO / "examples" / "pipeline" / f"{name}.toml")
    assert config.train.advantage.max_resample_batches == TRACE_RESAMPLE_BATCHES
    assert config.train.advantage.filter_constant_groups  # resampling refills filtered groups only


def test_the_train_step_hands_the_setting_to_each_adapter_s_training(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_pipeline_config(write_config(tmp_path))
    built = tmp_path / "environments"
    built.mkdir()
    (built / "environments.json").write_text(json.dumps({"environments": [
        {"name": "a", "path": "a.rubric"}, {"name": "b", "path": "b.rubric"}]}))
    seen: list[TrainConfig] = []

    class Trained:
        def __init__(self, out: Path) -> None:
            self.adapter, self.metrics = out / "adapter", []

    def fake_train(train_config: TrainConfig, *, out: Path, **_: Any) -> Trained:
        seen.append(train_config)
        return Trained(out)

    monkeypatch.setattr(adapter_steps, "train", fake_train)
    context = Context(config=config, report=lambda _: None, detail=lambda _: None)
    adapter_steps.train_adapters(context, tmp_path / "train", built)
    assert [c.advantage.max_resample_batches for c in seen] == [2, 2]
    assert [c.advantage for c in seen] == [config.train.advantage] * 2
