"""The run folder of `tracec train`, without torch: where its checkpoints are, which is the newest, and whether a
run may start or resume there (`check_run_dir`), so that the command line answers a wrong `--out` or `--resume`
before any model loads; `checkpoint` writes and reads the checkpoints themselves."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tracec.dsl.errors import RubricError
from tracec.trace_rl.grpo.config import ConfigError, TrainConfig, config_to_dict, saved_config

_NAME = re.compile(r"iter_(\d{6,})")


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def run_started(run_dir: Path) -> bool:
    """Whether `run_dir` holds a run of the trainer: its `checkpoints/` folder, made before the first iteration."""
    return checkpoint_dir(run_dir).is_dir()


def checkpoints(run_dir: Path) -> list[Path]:
    """The run's published checkpoint folders, oldest first (staging folders and strays left out)."""
    folders = [p for p in checkpoint_dir(run_dir).glob("iter_*") if _NAME.fullmatch(p.name) and p.is_dir()]
    return sorted(folders, key=checkpoint_iteration)


def checkpoint_iteration(folder: Path) -> int:
    """The iteration a checkpoint folder (`iter_000010`) was saved after."""
    return int(folder.name[len("iter_"):])


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


def damaged_checkpoint(folder: Path, reason: str) -> ConfigError:
    """The error for a checkpoint that cannot be read back, with the way out: the one before it, or a new run."""
    return ConfigError(f"{folder}: error: --resume: the checkpoint is damaged ({reason}); delete that folder to "
                       "resume from the checkpoint before it, or start over with another --out")


def check_run_dir(run_dir: Path, config: TrainConfig, resume: bool) -> Path | None:
    """The checkpoint to resume from (None: a fresh run); refuses to mix a new run into an old folder, and to
    resume where no run is."""
    latest = latest_checkpoint(run_dir)
    if not resume:
        if latest is not None or (run_dir / "metrics.jsonl").exists():
            raise ConfigError(f"{run_dir} already holds a run; pass --resume to continue it, or choose another --out")
        return None
    if not run_started(run_dir):
        why = "it holds no checkpoints/ folder (it is not a run of `tracec train`, or its checkpoints were deleted); " \
            "start the run afresh with another --out" if run_dir.exists() else \
            "it does not exist; drop --resume to start the run there"
        raise ConfigError(f"{run_dir}: error: --resume: nothing to resume in {run_dir}: {why}")
    if latest is None:
        return None  # a run killed before its first checkpoint: it starts over
    try:
        saved = config_to_dict(saved_config(latest / "config.toml"))
    except (ConfigError, RubricError) as error:  # missing, not TOML, not UTF-8, not a config
        reason = (str(error).partition(": error: ")[2] or str(error)).splitlines()[0]
        raise damaged_checkpoint(latest, f"its config.toml: {reason}") from None
    given = config_to_dict(config)
    # A resumed run may run longer (keeping as many more checkpoints), and report elsewhere.
    for key in ("iterations", "keep_checkpoints", "out", "report_to"):
        saved["run"].pop(key, None), given["run"].pop(key, None)
    if saved != given:
        changed = sorted(_differences(saved, given))
        raise ConfigError(f"--resume: the config differs from the run's ({latest / 'config.toml'}) in "
                          f"{', '.join(changed)}; only run.iterations, run.keep_checkpoints and run.report_to may "
                          "change when resuming")
    return latest


def _differences(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(a) | set(b)):
        left, right = a.get(key), b.get(key)
        if isinstance(left, dict) and isinstance(right, dict):
            out.extend(_differences(left, right, f"{prefix}{key}."))
        elif left != right:
            out.append(f"{prefix}{key}")
    return out
