"""bench/learning.py's plan of runs: every method of the pre-registered comparison, blind-rubric variants included,
each at its credit's chosen rate; `--lr-by-method` refuses what the trainer does not have; the recorded command
makes the same runs again; a run kept in a curve archive is reused where its workdir has gone; a method run at fewer
seeds is compared with sparse GRPO and full TRCA on the seeds both ran."""

from __future__ import annotations

import gzip
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tracec.trace_rl.experiments.demo_settings import shipped_examples

from bench import learning
from bench.learning import _arguments, _run_all, _runs, _spec_key, reproduce_command
from bench.preregistered import training_cpu_s


def _plan(monkeypatch: pytest.MonkeyPatch, *argv: str) -> dict[str, tuple[str, object]]:
    monkeypatch.setattr(sys, "argv", ["learning.py", *argv])
    setup = SimpleNamespace(small_policy=Path("policy"), rubric=shipped_examples() / "textworld.rubric")
    return _runs(_arguments(), setup)


def test_the_blind_variants_read_the_blind_rubric_and_every_run_takes_its_credits_rate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _plan(monkeypatch, "--seeds", "2", "--first-seed", "1000", "--ablation-seeds", "1", "--oracle-seeds", "0",
                 "--lr", "2e-3", "--lr-by-method", "trca=5e-3,shaped=1e-3")
    specs = {name: spec for name, (_, spec) in runs.items()}
    assert {name.rsplit("-s", 1)[0] for name in specs} == {"grpo", "trca", "gigpo", "shaped", "trca-blind",
                                                           "shaped-blind", "trca-lam0", "trca-lam1",
                                                           "trca-nocontext", "trca-meanonly"}
    assert specs["trca-blind-s1001"].rubric == shipped_examples() / "textworld_blind.rubric"
    assert specs["shaped-blind-s1000"].rubric.name == "textworld_blind.rubric"
    assert specs["trca-s1000"].rubric.name == specs["shaped-s1000"].rubric.name == "textworld.rubric"
    rates = {name.rsplit("-s", 1)[0]: spec.lr for name, spec in specs.items()}
    assert rates == {"grpo": 2e-3, "gigpo": 2e-3, "trca": 5e-3, "trca-blind": 5e-3, "trca-lam0": 5e-3,
                     "trca-lam1": 5e-3, "trca-nocontext": 5e-3, "trca-meanonly": 5e-3, "shaped": 1e-3,
                     "shaped-blind": 1e-3}
    # seeds interleaved across methods, the comparison's before the ablations
    names = list(specs)
    assert names.index("shaped-blind-s1000") < names.index("grpo-s1001") < names.index("trca-lam0-s1000")


@pytest.mark.parametrize(("value", "message"), [("reinforce=1e-3", "'reinforce' is not a trainer credit"),
                                                ("trca=fast", "trca's rate 'fast' is not a number")])
def test_a_wrong_rate_is_refused_with_its_reason(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                 value: str, message: str) -> None:
    monkeypatch.setattr(sys, "argv", ["learning.py", "--lr-by-method", value])
    with pytest.raises(SystemExit) as exit_info:
        _arguments()
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("rates", [[], ["--lr-by-method", "grpo=0.002,trca=1.2345678e-3"]])
def test_the_recorded_command_reads_back_as_the_same_settings(monkeypatch: pytest.MonkeyPatch,
                                                              rates: list[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["learning.py", "--seeds", "3", "--ablation-seeds", "0", "--only", "grpo,trca",
                                      "--quest-lengths", "2,3,4", "--section", "learning, a 'quoted' name", *rates])
    args = _arguments()
    command = shlex.split(reproduce_command(args))
    assert command[:2] == ["python", "bench/learning.py"]
    monkeypatch.setattr(sys, "argv", ["learning.py", *command[2:]])
    again = vars(_arguments())
    assert again.pop("record") is True
    assert again == {key: value for key, value in vars(args).items() if key != "record"}


def test_a_run_kept_in_an_archive_is_reused_by_a_fresh_workdir_whole_or_as_a_longer_runs_first_half(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tracec.trace_rl.envs.textworld.family import TaskFamily

    monkeypatch.setattr(learning, "CURVE_ARCHIVE", tmp_path / "archive")
    (tmp_path / "archive").mkdir()
    monkeypatch.setattr(sys, "argv", ["learning.py", "--seeds", "2", "--first-seed", "1000", "--ablation-seeds", "0",
                                      "--oracle-seeds", "0", "--only", "grpo", "--iterations", "2", "--eval-every",
                                      "1", "--workdir", str(tmp_path / "fresh"), "--section", "learning, kept",
                                      "--archive"])
    args = _arguments()
    setup = SimpleNamespace(small_policy=Path("policy"), rubric=shipped_examples() / "textworld.rubric",
                            family=TaskFamily())
    runs = {name: run for name, run in _runs(args, setup).items() if name.startswith("grpo-")}
    keys = {name: _spec_key(spec, setup.family) for name, (_, spec) in runs.items()}

    def curve(name: str, iterations: int) -> dict[str, object]:
        return {"name": name, "label": "sparse GRPO", "spec": keys[name] | {"iterations": iterations},
                "points": [{"rollouts": 64 * i, "success": i / 10} for i in range(iterations + 1)],
                "train": [{"constant_fraction": i / 8} for i in range(iterations)], "constant_fraction": 0.0,
                "seconds": 9.0, "cpu_s": float(iterations),
                "cpu_s_by_iteration": {str(i): float(i) for i in range(1, iterations + 1)}}

    longer, exact = curve("grpo-s1000", 4), curve("grpo-s1001", 2)
    learning._write_archive(tmp_path / "archive" / "another-section.json.gz", {"a": longer, "b": exact})
    done = _run_all(runs, setup, args)  # nothing left to train: both are read back
    assert done["grpo-s1001"] == exact
    half = done["grpo-s1000"]
    assert half["spec"] == keys["grpo-s1000"] and half["points"] == longer["points"][:3]
    assert training_cpu_s(half) == 2.0 and half["constant_fraction"] == 1 / 16
    assert half["cpu_s"] is None and half["seconds"] is None  # the first half's totals were not measured apart
    kept = json.loads(gzip.decompress((tmp_path / "archive" / "learning-kept.json.gz").read_bytes()))
    assert {c["name"]: c["spec"]["iterations"] for c in kept} == {"grpo-s1000": 2, "grpo-s1001": 2}


@pytest.mark.parametrize(("compare", "at_the_budget"), [(learning.against_full_trca, "final"),
                                                        (learning.against_sparse_grpo, "at 256")])
def test_a_method_run_at_fewer_seeds_is_compared_on_the_seeds_both_ran(
        compare: Callable[[list[int], np.ndarray, np.ndarray], dict[str, Any]], at_the_budget: str) -> None:
    # the baseline at 4 seeds, an ablation at its first 2: the interval must centre on the seed-paired difference, the
    # mean over those 2 seeds of (ablation's area - baseline's), and not on the baseline's 4-seed mean
    rng = np.random.default_rng(7)
    rollouts = [0, 64, 128, 256]
    baseline = (rng.random((4, 4, 6, 3)) < np.linspace(0.1, 0.9, 4)[None, :, None, None]).astype(float)
    baseline[2:] = 1.0  # seeds the ablation did not run, far from its first two: mixing them in would move the estimate
    ablation = (rng.random((2, 4, 6, 3)) < 0.4).astype(float)

    def area(run: np.ndarray) -> float:
        success = run.mean(axis=(1, 2))
        return float(sum((b - a) * (s + t) / 2 for a, b, s, t in
                         zip(rollouts, rollouts[1:], success, success[1:], strict=False)) / rollouts[-1])

    expected = np.mean([area(ablation[i]) - area(baseline[i]) for i in range(2)])
    final = np.mean(ablation[:, -1]) - np.mean(baseline[:2, -1])
    found = compare(rollouts, baseline, ablation)
    assert float(found["area"].split()[0]) == pytest.approx(expected, abs=5e-4)
    assert float(found["seed-paired area"].split()[0]) == pytest.approx(expected, abs=5e-4)
    assert found["seed-paired area"].endswith("n = 2)")
    assert float(found[at_the_budget].split()[0]) == pytest.approx(final, abs=5e-4)
