"""Evaluation on a target: every condition (base, each adapter, routed, mixture, or any agent) on every task, resumable.

    domains = [EvalDomain(name="airline", make_env=..., seeds=tuple(range(50)))]
    conditions = [Condition(name="base", make_agent=lambda env: AdapterAgent(model, None)), ...]
    table = evaluate(domains, conditions, Path("runs/eval"), max_turns=30, fingerprint={...})

A task is one seed of one domain (tau2-bench: task `seed mod n` of the domain; a capability environment or a
TextWorld family: the seed's instance), played `trials` times (default once) per condition through the one episode
loop (`run_episode`), so an agent is whatever maps a conversation to a turn: a policy with an adapter, the router, a
scripted gold agent. Decoding is the agents' business.

The preset TRACE reports, and what `evaluate` does by default: greedy decoding (the policy agents and the base-model
user decode at temperature 0, with transformers and vLLM alike), one trial per task, a fixed seed per task (the
task seed: tasks `first_seed ..`, held out from training), the step limit `max_turns` (agent turns per episode; the
environment's own step cap beside it) and the context limit `max_new_tokens` per turn (the model's own window
bounds the prompt). Each task's first trial gives the pass rate of the table.

Several trials (`trials=k`) give tau2-bench's pass^k beside it (`eval_table`). Trial t of task seed s plays the same
task (the environment is reset with s) under episode seed `episode_seed(s, t)`: s for trial 0, so that one trial
is today's run, and for t >= 1 the first 4 bytes of sha256 of `"{s}/trial/{t}"`, big-endian, modulo 2^31. Before a
trial Python's `random` and, when it is loaded, torch are seeded with the episode seed; that is what a sampling
agent draws from. The policy agents here decode greedily, so with a deterministic environment their k trials repeat
one episode and pass^k equals pass^1: pass^k measures something only with an agent or a user that samples.

The output folder holds `evaluation.json` (what the results depend on: model, adapters, caps, target), then, as
each task finishes, its trajectory (`trajectories/CONDITION.jsonl`, trajectory JSONL) and its result line
(`results.jsonl`: condition, domain, seed, task, reward, success, turns, the route taken, seconds, and for a trial
after the first its `trial` and `episode_seed`; its trajectory's episode is `DOMAIN:SEED#TRIAL`), each appended,
flushed and synced, the result last: a result line is the mark that a task is done. Run again on the same folder,
the finished tasks are read back and not rerun (a trajectory whose result never came is dropped and replayed); a
folder made with another fingerprint is refused unless `fresh`. At the end `table.md` and `table.json` hold the
table (`eval_table`). Left out: running tasks in parallel (one model decodes one episode at a time here).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tracec.trace_rl.envs.agent import Agent, run_episode
from tracec.trace_rl.envs.protocol import Environment, EnvironmentFactory
from tracec.trace_rl.targeting.adapters import AdapterModel
from tracec.trace_rl.targeting.eval_table import (
    ADAPTERS,
    BASE,
    BASELINE_NAMES,
    BASELINES,
    MIXTURE,
    ROUTED,
    EvalTable,
    TaskResult,
    summarize,
)
from tracec.trace_rl.targeting.routing import AdapterAgent, MixtureAgent, RoutedAgent, Router

from tracec.atomic import write_atomic
from tracec.json_key import json_key

RESULTS, META, TRAJECTORIES = "results.jsonl", "evaluation.json", "trajectories"
TABLE, TABLE_JSON = "table.md", "table.json"


class EvalError(ValueError):
    """An evaluation that cannot go on as asked (an output folder holding another evaluation)."""


@dataclass(frozen=True, kw_only=True)
class EvalDomain:
    name: str  # a row group of the table: `airline`, a capability environment's name, a TextWorld family
    make_env: EnvironmentFactory
    seeds: tuple[int, ...]  # the tasks: each is played once per condition

    def first_message(self, seed: int) -> str:
        """The task `seed` as its agent first reads it: what routing decides on."""
        with closing(self.make_env()) as env:
            return str(env.reset(seed).text)


@dataclass(frozen=True, kw_only=True)
class Condition:
    name: str  # a column of results: `base`, an adapter's name, `routed`, `gold`...
    make_agent: Callable[[Environment], Agent]  # called once per task with its fresh environment


def evaluate(domains: Sequence[EvalDomain], conditions: Sequence[Condition], out: Path, *, max_turns: int,
             fingerprint: dict[str, Any], fresh: bool = False, trials: int = 1,
             report: Callable[[str], None] = lambda _: None) -> EvalTable:
    """Play every (condition, domain, seed, trial) not played yet into `out`; the table of all of them."""
    if max_turns < 1:
        raise EvalError(f"max_turns = {max_turns}: an episode needs at least one turn")
    if trials < 1:
        raise EvalError(f"trials = {trials}: a task needs at least one trial")
    names = [c.name for c in conditions]
    if len(set(names)) != len(names) or any(not n or "/" in n for n in names):
        raise EvalError(f"condition names must be distinct, non-empty and without '/': {names}")
    done = open_folder(out, fingerprint, fresh=fresh)
    results = list(done.values())
    wanted = {(c.name, d.name, s, t) for c in conditions for d in domains for s in d.seeds for t in range(trials)}
    for condition in conditions:
        for domain in domains:
            for seed in domain.seeds:
                for trial in range(trials):
                    key = (condition.name, domain.name, seed, trial)
                    if key in done:
                        continue
                    result = _play(condition, domain, seed, trial, max_turns, out)
                    done[key] = result
                    results.append(result)
                    report(f"evaluate {condition.name} {domain.name} seed {seed}"
                           + (f" trial {trial}" if trials > 1 else "") + f": reward {result.reward:.2f}"
                           + (f" (routed to {result.route['choice']})" if result.route else "")
                           + f"  [{len(wanted & done.keys())}/{len(wanted)}]")
    table = summarize([r for r in results if (r.condition, r.domain, r.seed, r.trial) in wanted],
                      [c.name for c in conditions], [d.name for d in domains])
    write_atomic(out / TABLE, [table.markdown()])
    write_atomic(out / TABLE_JSON, [json.dumps(table.to_json(), indent=2) + "\n"])
    return table


def episode_seed(seed: int, trial: int) -> int:
    """Trial `trial`'s episode seed for task seed `seed`: the task seed for trial 0, else derived by sha256."""
    if trial == 0:
        return seed
    return int.from_bytes(hashlib.sha256(f"{seed}/trial/{trial}".encode()).digest()[:4], "big") % 2**31


def _play(condition: Condition, domain: EvalDomain, seed: int, trial: int, max_turns: int,
          out: Path) -> TaskResult:
    drawn = episode_seed(seed, trial)
    random.seed(drawn)
    torch = sys.modules.get("torch")  # seeded only where something already loaded it
    if torch is not None:
        torch.manual_seed(drawn)
    env = domain.make_env()
    began = time.perf_counter()
    agent: Agent | None = None
    try:
        agent = condition.make_agent(env)
        record = run_episode(env, agent, seed, max_turns, episode=episode_id(domain.name, seed, trial))
    finally:  # let a game engine, and a mixture agent's adapter mixture, go now
        env.close()
        if isinstance(agent, MixtureAgent):
            agent.close()
    decision = getattr(agent, "decision", None)
    result = TaskResult(condition=condition.name, domain=domain.name, seed=seed, task=str(record.get("task", seed)),
                        reward=float(record.get("env_reward", 0.0)), success=bool(record.get("success")),
                        turns=len(record.get("actions", [])), seconds=round(time.perf_counter() - began, 3),
                        route=decision.record() if decision is not None else None, trial=trial,
                        episode_seed=drawn if trial else None)
    _append(out / TRAJECTORIES / f"{condition.name}.jsonl", {**record, "domain": domain.name})
    line = asdict(result)
    if not trial:  # the first trial's line is the line of a one-trial run, as it always was
        del line["trial"], line["episode_seed"]
    _append(out / RESULTS, line)  # last: the mark that the task is done
    return result


def episode_id(domain: str, seed: int, trial: int) -> str:
    """A trajectory's episode: `DOMAIN:SEED`, with `#TRIAL` after the first trial."""
    return f"{domain}:{seed}" + (f"#{trial}" if trial else "")


Key = tuple[str, str, int, int]  # condition, domain, task seed, trial


def open_folder(out: Path, fingerprint: dict[str, Any], *, fresh: bool) -> dict[Key, TaskResult]:
    """The results already in `out` (after checking they answer the same question), keyed by task."""
    meta = out / META
    if fresh and out.exists():
        for name in (META, RESULTS, TABLE, TABLE_JSON):
            (out / name).unlink(missing_ok=True)
        shutil.rmtree(out / TRAJECTORIES, ignore_errors=True)
    stored = json_key(fingerprint)
    if meta.exists():
        previous = json.loads(meta.read_text(encoding="utf-8"))
        if previous.get("fingerprint") != stored:
            changed = sorted(k for k in set(previous.get("settings", {})) | set(fingerprint)
                             if previous.get("settings", {}).get(k) != json.loads(json.dumps(fingerprint.get(k),
                                                                                            default=str)))
            raise EvalError(f"{out} holds an evaluation with other settings ({', '.join(changed) or 'fingerprint'} "
                            "differ); pass --fresh to start it over, or choose another output folder")
    else:
        write_atomic(meta, [json.dumps({"fingerprint": stored, "settings": fingerprint}, indent=2, default=str)
                            + "\n"])
    done = {(r.condition, r.domain, r.seed, r.trial): r for r in read_results(out / RESULTS)}
    _drop_unfinished_trajectories(out, done)
    return done


def read_results(path: Path) -> list[TaskResult]:
    """The result lines of `path` (none if it is missing); a torn last line, left by a kill, is cut off."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except FileNotFoundError:
        return []
    results, kept = [], []
    for line in lines:
        try:
            results.append(TaskResult(**json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            break
        kept.append(line)
    if len(kept) != len(lines):
        write_atomic(path, kept)
    return results


def read_condition_trajectories(out: Path, condition: str) -> list[dict[str, Any]]:
    """The trajectory records of one condition in the output folder `out`, in the order they were played, as plain
    dicts (`runtime.trajectories.jsonl.read_trajectories` reads a trajectory file as episodes to score)."""
    path = out / TRAJECTORIES / f"{condition}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _drop_unfinished_trajectories(out: Path, done: dict[Key, TaskResult]) -> None:
    folder = out / TRAJECTORIES
    if not folder.is_dir():
        return
    for path in folder.glob("*.jsonl"):
        condition = path.stem
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if _finished(line, condition, done)]
        if len(kept) != len(lines):
            write_atomic(path, kept)


def _finished(line: str, condition: str, done: dict[Key, TaskResult]) -> bool:
    try:
        record = json.loads(line)
        domain, _, rest = str(record["episode"]).rpartition(":")
        seed, _, trial = rest.partition("#")
        return (condition, domain, int(seed), int(trial or 0)) in done
    except (json.JSONDecodeError, KeyError, ValueError):
        return False


def _append(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def seeds_for(first: int, count: int, available: int | None = None) -> tuple[int, ...]:
    """`count` task seeds from `first`, cut to the `available` tasks of a finite task list."""
    stop = first + count if available is None else min(first + count, available)
    return tuple(range(first, stop))


def conditions_named(names: Iterable[str], adapters: Sequence[str]) -> list[str]:
    """The condition list a user asks for: `base`, `adapters` (each adapter), `baselines` (each baseline adapter,
    `BASELINE_NAMES`), `routed`, or adapter names."""
    own = [a for a in adapters if a not in BASELINE_NAMES]
    baselines = [a for a in adapters if a in BASELINE_NAMES]
    out: list[str] = []
    for name in names:
        for each in (own if name == ADAPTERS else baselines if name == BASELINES else [name]):
            if each not in out:
                out.append(each)
    return out


def checked_conditions(names: Iterable[str], adapters: Sequence[str], *, routing: bool) -> list[str]:
    """`conditions_named`, checked: a ValueError names a condition that is none of base, adapters, baselines,
    routed, mixture or one of `adapters`, and `routed` / `mixture` without routing options. It needs only the
    adapters' names, so a command checks its conditions before it loads a model."""
    chosen = conditions_named(names, adapters)
    unknown = [n for n in chosen if n not in (BASE, ROUTED, MIXTURE, *adapters)]
    if unknown:
        raise ValueError(f"unknown condition {', '.join(map(repr, unknown))}: use base, adapters, baselines, "
                         f"routed, mixture or an adapter's name ({', '.join(adapters) or 'none loaded'})")
    routes = [n for n in (ROUTED, MIXTURE) if n in chosen]
    if routes and not routing:
        raise ValueError(f"the {' and '.join(routes)} condition{'s need' if len(routes) > 1 else ' needs'} routing "
                         "options (each adapter's description and example)")
    return chosen


def policy_conditions(model: AdapterModel, names: Iterable[str], router: Router | None) -> list[Condition]:
    """The conditions a user names over one multi-adapter model: `base` (no adapter), `adapters` (each adapter) or
    an adapter's name (that adapter, fixed), `baselines` (each loaded baseline), `routed` (the router's choice per
    episode), `mixture` (the router's nucleus mixture per episode, `RoutingSettings.top_p`); a ValueError names any
    other, or `routed` / `mixture` without a router."""
    chosen = checked_conditions(names, model.adapter_names, routing=router is not None)
    conditions = []
    for name in chosen:
        if name in (ROUTED, MIXTURE):
            assert router is not None
            make = _routed_agent if name == ROUTED else _mixture_agent
            conditions.append(Condition(name=name, make_agent=partial(make, model, router)))
        else:
            conditions.append(Condition(name=name, make_agent=partial(_adapter_agent, model,
                                                                      None if name == BASE else name)))
    return conditions


def _routed_agent(model: AdapterModel, router: Router, env: Environment) -> Agent:
    return RoutedAgent(model, router)


def _mixture_agent(model: AdapterModel, router: Router, env: Environment) -> Agent:
    return MixtureAgent(model, router)


def _adapter_agent(model: AdapterModel, adapter: str | None, env: Environment) -> Agent:
    return AdapterAgent(model, adapter)
