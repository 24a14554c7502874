"""Lowering and the passes: what each produces, and that no pass changes what a rubric computes."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.compiler import interp
from tracec.compiler.explain import explain
from tracec.compiler.ir import KernelProgram, Node, entity_id
from tracec.compiler.lift import lift_text
from tracec.compiler.lower import Lowerer
from tracec.compiler.pipeline import compile_rubric, run_passes
from tracec.compiler.rewrite import walk_nodes
from tracec.dsl.check import check_source
from tracec.runtime.facts.fact_batch import Column

SCHEMA = """
schema game {
  state { room: entity  bag: set(entity)  seen: set(entity)  gold: int  hp: float  log: text }
  action { verb: enum(go, take, drop, look)  obj: entity  ok: bool }
}
"""


def compiled(body: str, extra: str = ""):
    module = check_source(SCHEMA + f"rubric r for game {{\n{extra}\n{body}\n}}\n", "t.rubric")
    return compile_rubric(module.rubrics["r"])


def one(expr: str, extra: str = "") -> Node:
    return compiled(f'evidence e "e": {expr}', extra).program.operators[0]


def test_enum_member_lowers_to_its_index_and_entity_literal_to_its_id():
    node = one('act.verb == drop and act.obj == "lamp"')
    verb, obj = node.args
    assert verb.args[1] == Node("const", (), verb.args[0].type, 2)
    assert obj.args[1].value == entity_id("lamp")


def test_changed_on_a_set_compares_next_with_prev():
    node = one("changed(bag)")
    assert node.op == "ne"
    assert [a.value for a in node.args] == ["next.bag", "prev.bag"]
    assert all(a.op == "load_set" for a in node.args)


def test_set_literal_membership_becomes_a_chain_of_equalities():
    node = one("act.verb in {go, take, look}")
    ops = [n.op for n in walk_nodes((node,))]
    assert ops.count("eq") == 3 and ops.count("or") == 2


def test_constant_folding_uses_three_valued_rules():
    assert one("1 + 2 > 2") == Node("const", (), one("true").type, True)
    assert one("false and act.ok").value is False
    assert one("true and act.ok") == Node("load", (), one("act.ok").type, "act.ok")
    assert one("false or act.ok").op == "load"
    division = one("next.gold / 0 > 1")
    assert division.op == "gt"  # x / 0 is unknown: it has no constant form and stays


def test_cse_shares_each_distinct_subexpression():
    result = compiled(
        'evidence a "a": act.obj in next.bag and act.ok\n'
        'evidence b "b": act.obj in next.bag and not act.ok\n'
        'execution c "c": act.obj in next.bag'
    )
    nodes = walk_nodes(result.program.operators)
    assert len(nodes) == len(set(nodes))  # no two distinct objects are equal
    has = [n for n in nodes if n.op == "has"]
    assert len(has) == 1


def test_equal_text_predicates_share_one_lifted_column():
    result = compiled(
        'invalidity a "a": contains(next.log, "Nothing happens")\n'
        'invalidity b "b": contains(next.log, "Nothing happens") and act.ok\n'
        'invalidity c "c": matches(next.log, /you can.t/i)'
    )
    assert [lift.column for lift in result.plan.lifts] == ["lift.0", "lift.1"]
    assert result.plan.lifts[1].ignore_case and result.plan.lifts[1].pattern == "you can.t"
    assert {c.name for c in result.program.columns} == {"lift.0", "lift.1", "act.ok"}


def test_a_binding_used_only_as_a_needle_is_still_planned():
    result = compiled(
        'evidence a "a": contains(next.log, target)', "bind target: entity = match(instruction, /take (\\w+)/, 1)"
    )
    assert [b.name for b in result.plan.binds] == ["target"]
    assert result.plan.lifts[0].needle.kind == "bind"


def test_operator_weights_are_budget_over_count():
    result = compiled(
        'evidence a "a": act.ok\nevidence b "b": act.ok\nexecution c "c": act.ok\n'
        'invalidity d "d": not act.ok\nbudget evidence 1.0, execution 2.0, invalidity 0.5'
    )
    assert [op.weight for op in result.operators] == [0.5, 0.5, 2.0, 0.5]


def test_explain_lists_exactly_what_the_kernel_computes():
    """The listing read back gives the program: the operator table's rows, and the SSA lines rebuilt into nodes equal
    to the kernel program's, shared subexpressions once, then the facts the plan reads."""
    result = compiled('evidence takes "takes it": act.verb == take and act.obj in next.bag\n'
                      'invalidity idle "idles": not changed(room) and act.obj in next.bag\n'
                      'budget invalidity 0.25\ncontext prev.room, count(prev.bag) + 1')
    sections = explain(result).split("\n\n")
    table = [re.split(r"\s{2,}", line, maxsplit=3) for line in sections[1].splitlines()[1:]]
    assert [(name, category, float(weight), description) for name, category, weight, description in table] == [
        (op.name, op.category, op.weight, op.description) for op in result.operators]
    ir_lines = sections[3].splitlines()[1:]
    rebuilt: dict[str, tuple] = {}
    for line in ir_lines:
        if line.startswith("  %"):
            name, op, rest, type_ = re.fullmatch(r"  (%\d+) = (\S+)(?: (.*?))? : (.*)", line).groups()
            args = tuple(rebuilt[a] for a in rest.split(", ")) if op not in ("const", "load", "load_set") else ()
            rebuilt[name] = (op, args, type_, rest if not args else None)
    program = result.program

    def shape(node: Node) -> tuple:
        args = tuple(shape(a) for a in node.args)
        value = None if args else (node.value if node.op != "const" else None)
        return (node.op, args, str(node.type), value)

    def simplified(entry: tuple) -> tuple:
        op, args, type_, value = entry
        return (op, tuple(simplified(a) for a in args), type_, value if op in ("load", "load_set") else None)

    outs = [re.fullmatch(r"  out (\w+) = (%\d+)", line).groups() for line in ir_lines if line.startswith("  out")]
    assert [name for name, _ in outs] == [op.name for op in result.operators]
    assert [simplified(rebuilt[ref]) for _, ref in outs] == [shape(n) for n in program.operators]
    contexts = [line.split()[1] for line in ir_lines if line.startswith("  context")]
    assert [simplified(rebuilt[ref]) for ref in contexts] == [shape(n) for n in program.context]
    assert len(rebuilt) == len(walk_nodes(program.operators + program.context))  # each shared node once
    assert "const 1 (take) : enum(go, take, drop, look)" in sections[3]  # an enum member shows its name
    facts = [line.strip().split(": ") for line in sections[4].splitlines()[1:]]
    assert {(column, type_) for column, type_ in facts} == {(f.column, str(f.type)) for f in result.plan.fields}


# ---------------------------------------------------------------------------------------------- interpreter tables


def scalar(values, known) -> Column:
    return Column(np.asarray(values), np.asarray(known, dtype=np.uint8))


def sets(rows) -> Column:
    known = np.array([r is not None for r in rows], dtype=np.uint8)
    flat = [sorted(entity_id(x) for x in (r or ())) for r in rows]
    offsets = np.cumsum([0] + [len(r) for r in flat]).astype(np.int64)
    return Column(np.array([x for r in flat for x in r], dtype=np.int64), known, offsets)


def test_interpreter_matches_a_hand_computed_table_with_missing_facts():
    result = compiled(
        'evidence and_ "": act.ok and act.obj in next.bag\n'
        'evidence or_ "": act.ok or act.obj in next.bag\n'
        'evidence not_ "": not act.ok\n'
        'execution cmp "": next.gold > 2'
    )
    lamp = entity_id("lamp")
    columns = {
        # transitions:        0: T,in   1: F,?   2: ?,in   3: ?,out   4: ?,?
        "act.ok": scalar([1, 0, 0, 0, 0], [1, 1, 0, 0, 0]),
        "act.obj": scalar([lamp] * 5, [1, 1, 1, 1, 0]),
        "next.bag": sets([["lamp"], None, ["lamp", "key"], ["key"], ["lamp"]]),
        "next.gold": scalar([3, 2, 0, 5, 9], [1, 1, 0, 1, 0]),
    }
    fired, keys = interp.run(result.program, columns, 5)
    assert keys is None
    expected = np.array(
        [
            # and  or  not  cmp
            [1, 1, 0, 1],  # true and true
            [0, 0, 1, 0],  # false and unknown = false; false or unknown = unknown
            [0, 1, 0, 0],  # unknown and true = unknown; unknown or true = true
            [0, 0, 0, 1],  # unknown and false = false; unknown or false = unknown
            [0, 0, 0, 0],  # element missing: membership unknown
        ],
        dtype=np.uint8,
    )
    np.testing.assert_array_equal(fired, expected)


def test_context_key_treats_missing_as_its_own_value_and_sets_as_sets():
    result = compiled('evidence a "": act.ok\ncontext prev.room, prev.bag')
    room = entity_id("hall")
    columns = {
        "act.ok": scalar([1, 1, 1, 1], [1, 1, 1, 1]),
        "prev.room": scalar([room, room, room, 0], [1, 1, 1, 0]),
        "prev.bag": sets([["a", "b"], ["b", "a"], ["a"], ["a", "b"]]),
    }
    _, keys = interp.run(result.program, columns, 4)
    assert keys[0] == keys[1]  # same room, same set in another order
    assert len({keys[0], keys[2], keys[3]}) == 3


# ---------------------------------------------------------------------------------------------- passes keep semantics

_EXPRESSIONS = [
    "act.ok and (1 + 2 > 2 or act.obj in next.bag)",
    "not (false or act.ok) or next.gold * 2 >= 3",
    "(next.gold / 0 > 1) or (act.verb in {go, look} and true)",
    "min(next.gold, 3, 1 + 1) < max(prev.gold, 2) and abs(next.hp - 1.5) > 0.25",
    "count(next.bag) - count(prev.bag) == 1 and changed(room)",
    "act.obj in next.bag and act.obj in next.bag and not (act.obj in prev.bag)",
]


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_the_passes_never_change_the_interpreters_answer(data):
    module = check_source(
        SCHEMA + "rubric r for game {\n" + "\n".join(f'evidence e{i} "": {e}' for i, e in enumerate(_EXPRESSIONS))
        + "\n}",
        "t.rubric",
    )
    checked = module.rubrics["r"]
    lowerer = Lowerer(checked.schema, checked.typing, checked.bind_types)
    lowered = tuple(lowerer.expr(op.expr) for op in checked.operators)
    raw, _ = lift_text(lowered)
    optimized, _ = run_passes(lowered)
    n = data.draw(st.integers(1, 6))
    names = ["a", "b", "c"]

    def column(kind: str) -> Column:
        known = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
        if kind == "set":
            return sets([data.draw(st.lists(st.sampled_from(names), max_size=3)) if k else None for k in known])
        draw = {
            "bool": st.integers(0, 1),
            "int": st.integers(-3, 3),
            "float": st.sampled_from([-1.0, 0.0, 1.5, 2.0]),
            "enum": st.integers(0, 3),
            "entity": st.sampled_from([entity_id(x) for x in names]),
        }[kind]
        return scalar(data.draw(st.lists(draw, min_size=n, max_size=n)), known)

    kinds = {"act.ok": "bool", "act.obj": "entity", "act.verb": "enum", "next.bag": "set", "prev.bag": "set",
             "next.gold": "int", "prev.gold": "int", "next.hp": "float", "next.room": "entity", "prev.room": "entity"}
    columns = {name: column(kind) for name, kind in kinds.items()}
    before, _ = interp.run(KernelProgram(raw, (), ()), columns, n)
    after, _ = interp.run(KernelProgram(optimized, (), ()), columns, n)
    np.testing.assert_array_equal(before, after)
