"""bench/learning_smollm2.py's one table of a workdir's runs: each method against sparse GRPO on the seeds they share,
and runs of another budget refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tracec.trace_rl.experiments.learning_stats import paired_difference, success_interval

from bench.learning_smollm2 import summarize


def _write_run(workdir: Path, method: str, seed: int, before: np.ndarray, after: np.ndarray, *,
               iterations: int = 10) -> None:
    settings = {"method": method, "seed": seed, "iterations": iterations, "groups": 8, "group_size": 8,
                "action_mode": "generate", "lr": 1e-3, "device": "cuda", "eval_episodes": before.shape[1]}
    summary = {"settings": settings, "seconds": 300.0,
               "points": [{"wins": before.tolist()}, {"wins": after.tolist()}], "greedy": [0.0, 0.25]}
    name = method if seed == 0 else f"{method}-s{seed}"
    (workdir / f"summary-{name}.json").write_text(json.dumps(summary), encoding="utf-8")


def _row(table: str, method: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith(f"| {method} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_each_method_is_paired_with_sparse_grpo_on_the_seeds_both_ran(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    wins = {(method, seed): (rng.random((6, 2)) < 0.2, rng.random((6, 2)) < p)
            for method, seeds, p in (("grpo", (0, 1, 2), 0.4), ("trca", (0, 2), 0.6)) for seed in seeds}
    for (method, seed), (before, after) in wins.items():
        _write_run(tmp_path, method, seed, before.astype(float), after.astype(float))
    table = summarize(tmp_path)
    grpo_after = np.stack([wins["grpo", s][1] for s in (0, 2)]).astype(float)
    trca_after = np.stack([wins["trca", s][1] for s in (0, 2)]).astype(float)
    trca = _row(table, "trca")
    assert trca[1] == "0, 2"
    assert trca[3] == success_interval(trca_after).level()
    assert trca[5] == str(paired_difference(grpo_after, trca_after))
    assert _row(table, "grpo")[1] == "0, 1, 2" and _row(table, "grpo")[5] == ""
    assert "the TextWorld family in the generate mode, 640 training episodes a run" in table


def test_runs_of_unequal_episodes_are_refused(tmp_path: Path) -> None:
    zeros = np.zeros((4, 2))
    _write_run(tmp_path, "grpo", 0, zeros, zeros, iterations=10)
    _write_run(tmp_path, "gigpo", 0, zeros, zeros, iterations=12)
    with pytest.raises(SystemExit, match=r"differ in \(episodes, mode, held-out games\): \[\(640, 'generate', 4\), "
                                         r"\(768, 'generate', 4\)\]"):
        summarize(tmp_path)

