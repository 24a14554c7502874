"""The canonical `toolenv` facts: every fact an environment emits is declared in grammars/toolenv.rubric, with the
declared type, and the facts say what happened (the capability example of LANGUAGE.md reads them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracec.dsl import ast
from tracec.dsl.parse import parse_file
from tracec.trace_rl.envs.agent import run_episode
from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.envs.capability.validate import GoldAgent, RandomAgent

REPO = Path(__file__).resolve().parents[3]
ENVS = sorted((REPO / "examples" / "envs").glob("*.rubric"))


def schema() -> ast.Schema:
    module = parse_file(str(REPO / "grammars" / "toolenv.rubric"))
    (decl,) = module.decls
    assert isinstance(decl, ast.Schema) and decl.name == "toolenv"
    return decl


def fits(value: object, type_: ast.TypeRef) -> bool:
    if type_.name == "set":
        return isinstance(value, list) and all(isinstance(v, str) for v in value) and value == sorted(set(value))
    if type_.name == "enum":
        return value in type_.args
    python = {"bool": bool, "int": int, "entity": str, "text": str}[type_.name]
    return type(value) is python


def episode(path: Path, seed: int, agent: str) -> CapabilityEnvironment:
    env = CapabilityEnvironment(load_environment(str(path)))
    run_episode(env, GoldAgent(env) if agent == "gold" else RandomAgent(env), seed, env.max_steps)
    assert env.done
    return env


@pytest.mark.parametrize("path", ENVS, ids=lambda p: p.stem)
@pytest.mark.parametrize("agent", ["gold", "random"])
def test_emitted_facts_are_declared_with_their_types(path: Path, agent: str) -> None:
    decl = schema()
    state_types = {f.name: f.type for f in decl.state}
    action_types = {f.name: f.type for f in decl.action}
    for seed in range(3):
        env = episode(path, seed, agent)
        assert len(env.states) == len(env.actions) + 1
        for facts, types in [(s, state_types) for s in env.states] + [(a, action_types) for a in env.actions]:
            assert set(facts) <= set(types), set(facts) - set(types)
            for name, value in facts.items():
                assert fits(value, types[name]), (name, value)


def test_gold_of_precondition_env_checks_before_every_change() -> None:
    env = episode(REPO / "examples" / "envs" / "precondition_verification.rubric", 0, "gold")
    mutations = [i for i, a in enumerate(env.actions) if a["kind"] == "mutate"]
    assert mutations and all(env.states[i]["checked"] for i in mutations)  # prev.checked before each mutate
    assert env.actions[mutations[0]]["target"] in env.states[mutations[0]]["revealed"]
    assert env.states[mutations[0] + 1]["db_changed"] is True


def test_default_toolenv_rubric_scores_environment_trajectories(tmp_path: Path) -> None:
    from tracec.compiler.cache import KernelCache
    from tracec.runtime.facts.trajectories.records import write_records
    from tracec.runtime.scoring import RubricScorer

    scorer = RubricScorer.from_file(REPO / "examples" / "toolenv.rubric", backend="interp",
                                    cache=KernelCache(tmp_path / "cache"))
    categories = [op.category for op in scorer.compiled.operators]
    assert [categories.count(c) for c in ("evidence", "execution", "invalidity")] == [5, 5, 5]
    gold = episode(REPO / "examples" / "envs" / "precondition_verification.rubric", 0, "gold")
    env = CapabilityEnvironment(load_environment(str(REPO / "examples" / "envs" / "precondition_verification.rubric")))
    env.reset(0)
    env.step('<action>cancel_pending_order(order_id=O1, reason="ordered by mistake")</action>')
    env.step("<action>cancel_pending_order(</action>")
    env.step("done")
    write_records([gold.trajectory("gold"), env.trajectory("blind")], tmp_path / "t.jsonl")
    fired = {(r["episode"], r["t"]): {k for k, v in r["ops"].items() if v}
             for r in scorer.score(tmp_path / "t.jsonl").records()}
    assert {"checked_first", "changes_known", "changes_db"} <= fired[("gold", 2)]
    assert fired[("gold", 3)] == {"wraps_up"}
    assert fired[("blind", 0)] == {"refused", "blind_change"}
    assert fired[("blind", 1)] == {"malformed", "errors_again"}
