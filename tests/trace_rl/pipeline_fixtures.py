"""The pipeline test's pieces: a config on the tiny model and two capability environments, and a scripted analyst
that proposes two capabilities and labels each failure by the environment it came from."""

from __future__ import annotations

import json
import re
from pathlib import Path

from scripted_llm import ScriptedLLM

REPO = Path(__file__).resolve().parents[2]


def _env_name(capability: str) -> str:
    """The name of the library environment of `capability` (what its episodes are called)."""
    text = (REPO / "examples" / "envs" / f"{capability}.rubric").read_text()
    found = re.search(r"^environment (\w+)", text, re.MULTILINE)
    assert found is not None, capability
    return found.group(1)


ENVS = {_env_name(c): c for c in ("precondition_verification", "multi_step_completion")}  # environment -> capability


def write_config(folder: Path, *, iterations: int = 1) -> Path:
    envs = ", ".join(json.dumps(str(REPO / "examples" / "envs" / f"{name}.rubric")) for name in ENVS.values())
    text = f"""
[run]
out = {json.dumps(str(folder / "run"))}

[model]
name = "tiny"
threads = 1

[target]
kind = "capability"
environments = [{envs}]
max_turns = 2
call_format = "text"  # the tiny tokenizer spells the native format's schemas in more ids than max_context_tokens

[collect]
tasks = 2
max_new_tokens = 12

[llm]
backend = "transformers"
model = "tiny"

[analysis]
labeler = "llm"
discover_runs = 1
label_runs = 2
k = 2

[environments]
validate_seeds = 3
calibration_seeds = 1
group_size = 2
max_new_tokens = 12
require_calibrated = false

[train.lora]
rank = 4
alpha = 8

[train.env]
max_turns = 2

[train.rollout]
group_size = 2
groups_per_batch = 1
max_new_tokens = 12
max_context_tokens = 1024

[train.optim]
lr = 1e-3
mini_batches = 1

[train.run]
iterations = {iterations}
checkpoint_every = 1

[evaluate]
tasks = 1
max_new_tokens = 12
"""
    path = folder / "pipeline.toml"
    path.write_text(text)
    return path


def analyst() -> ScriptedLLM:
    """Discovery proposes both capabilities; a failed trajectory of environment E lacks E's capability only."""

    def reply(messages: list[dict[str, str]]) -> str:
        user = messages[-1]["content"]
        if "find the general capabilities" in messages[0]["content"]:
            ids = re.findall(r"### trajectory (\S+) \(", user)
            return json.dumps({"candidates": [
                {"name": capability, "description": f"the {capability.replace('_', ' ')} an agent needs here",
                 "example_trajectories": [{"task_id": ids[0]}]} for capability in ENVS.values()]})
        case = re.search(r"### trajectory (\S+) \((FAILED|PASSED)", user)
        assert case is not None, user
        environment = case.group(1).split(":")[0]
        labels = {capability: "NA" for capability in ENVS.values()}
        labels[ENVS[environment]] = "LACKING" if case.group(2) == "FAILED" else "PRESENT"
        return json.dumps({"labels": labels})

    return ScriptedLLM(reply, name="scripted-analyst")
