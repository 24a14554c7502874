"""What the command-line tests share: a small rubric about a door, trajectories for it, and a way to run `tracec`
in a child process (so that a crash, a hang or a traceback is seen as the user would see it)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOOR_RUBRIC = """
schema door {
  state { room: entity  open: set(entity)  note: text }
  action { verb: enum(go, open, wait)  obj: entity }
}
rubric door_rubric for door {
  evidence   moves   "changes room":       changed(room)
  execution  opens   "opens the door":     act.verb == open and "door" in next.open
  invalidity waits   "waits":              act.verb == wait
  invalidity stuck   "the game says no":   contains(next.note, "can't")
  context prev.room
}
"""


def door_episode(name: str, task: str, verbs: list[str], reward: float) -> dict[str, Any]:
    states: list[dict[str, Any]] = [{"room": "hall", "open": [], "note": ""}]
    for verb in verbs:
        last = dict(states[-1])
        if verb == "open":
            last["open"] = ["door"]
        if verb == "go":
            last["room"] = "yard" if last["room"] == "hall" else "hall"
        last["note"] = "You can't." if verb == "wait" else "ok"
        states.append(last)
    actions = [{"verb": v, "obj": "door"} for v in verbs]
    return {"episode": name, "task": task, "instruction": "leave", "states": states, "actions": actions,
            "env_reward": reward, "success": reward > 0}


DOOR_EPISODES = [
    door_episode("a", "t1", ["open", "go"], 1.0),
    door_episode("b", "t1", ["wait", "wait", "go"], 0.0),
    door_episode("c", "t2", ["go"], 0.0),
]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str
    cpu_seconds: float  # the child's user + system time


ENTRY = "import sys; from tracec.cli import main; sys.exit(main(sys.argv[1:]))"  # what the `tracec` script does


def run_tracec(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, cpu_limit: float = 10.0,
               timeout: float = 60.0) -> Run:
    """`tracec ARGV` in `cwd`, as the installed script runs it. Issue 9: every hostile input is answered within 10 s;
    the bound is on the child's CPU time, so that a machine busy with other work does not fail the test, and `timeout`
    (wall time) only stops a child that hangs."""
    environ = {**os.environ, **(env or {})}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", ENTRY, *argv], cwd=cwd, env=environ, capture_output=True,
                          text=True, errors="replace", timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu <= cpu_limit, f"tracec {' '.join(argv)[:80]} took {cpu:.1f} s of CPU (limit {cpu_limit} s)"
    return Run(done.returncode, done.stdout, done.stderr, cpu)
