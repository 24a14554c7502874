"""The run folder of `tracec pipeline`: one folder per step, named after it, and the files in them that later steps,
the report and `tracec route / evaluate --run` read. Every reader and writer takes the names from here.

    pipeline.toml                          the config the steps ran with (paths absolute)
    steps/NAME.json, .partial/NAME-KEY/    each step's record and its staging folder (`steps.StepStore`)
    collect/trajectories/base.jsonl        the base model's episodes (an evaluation folder of the `base` condition)
    discover/candidate_capabilities.json
    label/run_NN.json
    select/selected_capabilities.json      and, for people, table.txt and selected_capabilities.png
    environments/environments.json         the manifest: each environment's NAME/NAME.rubric, its origin, calibration
    train/adapters.json                    each adapter's folder (relative to train/), iterations, rewards; NAME/ runs
    baselines/adapters.json                the same for the baselines, built under baselines/NAME/
    route/options.json, index.jsonl, decisions.jsonl
    evaluate/table.md, table.json, results.jsonl, trajectories/
    report.md, report.png

Left out: the files inside a step's own sub-folders (a trainer's run folder, an environment's calibration), which
their modules name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracec.trace_rl.targeting import evaluate
from tracec.trace_rl.targeting.eval_table import BASE

# The steps in the order they run; each one's outputs are the run's folder of its name.
STEP_NAMES = ("collect", "discover", "label", "select", "environments", "train", "baselines", "route", "evaluate")
COLLECT, DISCOVER, LABEL, SELECT, ENVIRONMENTS, TRAIN, BASELINES, ROUTE, EVALUATE = STEP_NAMES

CONFIG = "pipeline.toml"
RECORDS, STAGING = "steps", ".partial"
REPORT, REPORT_FIGURE = "report.md", "report.png"

BASE_TRAJECTORIES = Path(evaluate.TRAJECTORIES) / f"{BASE}.jsonl"  # in collect/, an evaluation of `base`
CANDIDATES = "candidate_capabilities.json"  # in discover/
SELECTED, SELECTION_TABLE, SELECTION_CHART = "selected_capabilities.json", "table.txt", "selected_capabilities.png"
MANIFEST = "environments.json"  # in environments/
ADAPTERS = "adapters.json"  # in train/ and baselines/
OPTIONS, INDEX, DECISIONS = "options.json", "index.jsonl", "decisions.jsonl"  # in route/
# in evaluate/, an evaluation folder (`evaluate` writes it)
EVALUATION_TABLE, EVALUATION_JSON = evaluate.TABLE, evaluate.TABLE_JSON
EVALUATION_RESULTS, EVALUATION_TRAJECTORIES = evaluate.RESULTS, evaluate.TRAJECTORIES


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def adapter_folders(built: Path) -> dict[str, Path]:
    """The adapters a train or baselines step's folder `built` holds, by name, as its `adapters.json` names them."""
    return {name: built / entry["adapter"] for name, entry in read_json(built / ADAPTERS).items()}
