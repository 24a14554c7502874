"""What the Numba and C kernel generators share: the schedule of a KernelProgram and its walk.

`schedule` flattens the operators' and context expressions into one list of distinct subexpressions in dependency
order (each computed once per transition, whichever operators share it) and fixes how a backend holds each: a bool
as two flags, definitely true and definitely false (so Kleene logic is bitwise and / or / swap, with no branches),
a number as a value and a known flag, a set as the [start, stop) slice of its column and a known flag. It also marks
which bool flags anything reads: an operator's output needs only "definitely true", so most "definitely false"
flags are never computed (Numba's compile time grows with every statement).

`StepWriter` walks a schedule keeping, for each step, the expressions that name its value, known flag and bool
flags (a literal for a constant, None for a flag that is always set); each backend subclasses it with its syntax.
The arrays a generated kernel takes and writes are `tracec.compiler.kernel_abi`'s. Left out: any language's syntax.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tracec.compiler import values as V
from tracec.compiler.context import computed_context
from tracec.compiler.ir import KernelProgram, Node

Kind = Literal["bool", "int", "float", "set"]
HashKind = Literal["int", "float", "set"]

COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
ARITHMETIC = ("neg", "abs", "add", "sub", "mul", "div", "min", "max")
MIRRORED = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}  # a op b == b MIRRORED[op] a
_OPS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


@dataclass(frozen=True)
class Step:
    """One distinct subexpression: its op, how it is held, its argument steps, and its constant or column index."""

    op: str
    kind: Kind
    args: tuple[int, ...]
    value: Any = None


@dataclass(frozen=True)
class Schedule:
    steps: tuple[Step, ...]  # dependency order: every argument comes before its user
    operators: tuple[int, ...]  # the step of each operator, in declaration order
    context: tuple[tuple[int, HashKind], ...]  # the step of each context expression and how it is hashed
    wants_yes: tuple[bool, ...]  # per step: whether a bool's definitely-true flag is read
    wants_no: tuple[bool, ...]  # per step: whether a bool's definitely-false flag is read
    computed: tuple[int, ...] = ()  # positions in `context` of the expressions that are not a plain column


def schedule(program: KernelProgram) -> Schedule:
    """Intern every node of the program (equal subexpressions become one step) in dependency order."""
    column_index = {spec.name: i for i, spec in enumerate(program.columns)}
    steps: list[Step] = []
    interned: dict[tuple[Any, ...], int] = {}
    visited: dict[int, int] = {}  # by object identity, so a shared subtree is walked once

    def visit(node: Node) -> int:
        if id(node) in visited:
            return visited[id(node)]
        args = tuple(visit(arg) for arg in node.args)
        step = _step(node, args, steps, column_index)
        # Keyed by the constant's Python type too, so that 1, 1.0 and True (equal in Python) stay apart.
        key = (step.op, step.kind, args, type(step.value).__name__, _constant_key(step.value))
        if key not in interned:
            interned[key] = len(steps)
            steps.append(step)
        visited[id(node)] = interned[key]
        return interned[key]

    operators = tuple(visit(node) for node in program.operators)
    context = tuple((visit(node), _hash_kind(node)) for node in program.context)
    for j, node in enumerate(program.operators):
        if steps[operators[j]].kind != "bool":
            raise ValueError(f"operator {j} is of type {node.type}, not bool")
    # Leaves first (they depend on nothing): every column is loaded before any set is scanned, so one scan of a
    # set can answer all of its membership tests (`StepWriter.scan`).
    order = sorted(range(len(steps)), key=lambda i: (bool(steps[i].args), i))
    new = {old: position for position, old in enumerate(order)}
    steps = [Step(steps[i].op, steps[i].kind, tuple(new[a] for a in steps[i].args), steps[i].value) for i in order]
    operators = tuple(new[i] for i in operators)
    context = tuple((new[i], kind) for i, kind in context)
    yes, no = _wanted_flags(steps, operators, context)
    return Schedule(tuple(steps), operators, context, yes, no, computed_context(program))


def _wanted_flags(steps: list[Step], operators: tuple[int, ...],
                  context: tuple[tuple[int, HashKind], ...]) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    """Which bool flags are read, from the outputs back: O reads definitely-true; a value reads both."""
    yes, no = [False] * len(steps), [False] * len(steps)
    for i in operators:
        yes[i] = True
    for i, _ in context:
        yes[i] = no[i] = True
    for i in reversed(range(len(steps))):
        step = steps[i]
        for a in step.args:
            if step.op in ("and", "or"):
                yes[a] |= yes[i]
                no[a] |= no[i]
            elif step.op == "not":
                yes[a] |= no[i]
                no[a] |= yes[i]
            else:  # a strict op reads a bool argument as a value with a known flag
                yes[a] = no[a] = True
    return tuple(yes), tuple(no)


def _constant_key(value: Any) -> Any:
    # -0.0 == 0.0 in Python, yet they are distinct constants.
    return value.hex() if isinstance(value, float) else value


def _hash_kind(node: Node) -> HashKind:
    """How the context key mixes this expression (`tracec.compiler.ir`): sets by elements, floats by bits."""
    if node.type.kind == "set":
        return "set"
    return "float" if node.type.kind == "float" else "int"


def _step(node: Node, args: tuple[int, ...], steps: list[Step], column_index: Mapping[str, int]) -> Step:
    """The step for `node`, with the kind its value has under the interpreter's (Python's) arithmetic."""
    op = node.op
    kinds = [steps[a].kind for a in args]
    if op == "const":
        if node.type.kind == "bool" or isinstance(node.value, bool):
            return Step(op, "bool", args, bool(node.value))
        return Step(op, "float" if isinstance(node.value, float) else "int", args, node.value)
    if op in ("load", "load_set"):
        if node.value not in column_index:
            raise ValueError(f"`{op}` reads column `{node.value}`, which the program's column list lacks")
        kind = node.type.kind
        held: Kind = "set" if op == "load_set" else "bool" if kind == "bool" else "float" if kind == "float" else "int"
        if (held == "set") != (kind == "set"):
            raise ValueError(f"`{op}` of column `{node.value}` of type {node.type}")
        return Step(op, held, args, column_index[node.value])
    if op in ("not", "and", "or"):
        if any(k != "bool" for k in kinds):
            raise ValueError(f"`{op}` takes bools, got {kinds}")
        return Step(op, "bool", args)
    if op in COMPARISONS or op == "has":
        return Step(op, "bool", args)
    if op == "count":
        return Step(op, "int", args)
    if op == "div":
        return Step(op, "float", args)
    if op in ARITHMETIC:
        return Step(op, "float" if "float" in kinds else "int", args)
    raise ValueError(f"no kernel op `{op}` (kernel ops: const load load_set not and or neg abs add sub mul div "
                     "min max eq ne lt le gt ge has count)")


def int_test(op: str, c: float) -> bool | tuple[str, int]:
    """`x op c` for every int64 x, c a finite float, as a test against an int: (op, t), or a constant."""
    if op in ("eq", "ne"):
        holds = c == math.floor(c) and V.fits_int64(int(c))
        if not holds:
            return op == "ne"
        return op, int(c)
    # x < c <=> x < ceil(c); x <= c <=> x <= floor(c); and so on: an int lies on one side of every gap.
    t = math.ceil(c) if op in ("lt", "ge") else math.floor(c)
    if t > V.INT64_MAX:
        return op in ("lt", "le")
    if t < V.INT64_MIN:
        return op in ("gt", "ge")
    return op, t


def int_range(op: str, c: int, constant_first: bool) -> tuple[int, int]:
    """[lo, hi]: the int64 values x for which `x op c` (`c op x` when constant_first) fits in int64, for op add,
    sub or mul; lo > hi when none does."""
    low, high = V.INT64_MIN, V.INT64_MAX
    if op == "add":
        lo, hi = low - c, high - c
    elif op == "sub":
        lo, hi = (c - high, c - low) if constant_first else (low + c, high + c)
    elif c == 0:
        lo, hi = low, high
    else:  # mul: x in [low / c, high / c] (the other way round for c < 0), rounded inwards
        first, last = (low, high) if c > 0 else (high, low)
        lo, hi = -((-first) // c), last // c
    return max(lo, low), min(hi, high)


class StepWriter(ABC):
    """Statements computing every step of a schedule for transition `r`, reading columns as `c{i}_{v|k|o}[...]`."""

    def __init__(self, plan: Schedule) -> None:
        self.plan = plan
        self.lines: list[str] = []
        self.val: dict[int, str] = {}
        self.known: dict[int, str | None] = {}
        self.yes: dict[int, str] = {}
        self.no: dict[int, str] = {}
        self.scanned: set[int] = set()  # `has` steps whose membership flag is already computed

    @abstractmethod
    def literal(self, value: Any, kind: Kind) -> str: ...

    @abstractmethod
    def declare(self, name: str, kind: Kind | Literal["index"], expr: str) -> str:
        """A statement binding `name` (a flag for kind bool) to `expr`."""

    @abstractmethod
    def negate(self, flag: str) -> str: ...

    @abstractmethod
    def membership(self, tests: list[tuple[str, str]], values: str, lo: str, hi: str) -> list[str]:
        """Statements setting each (flag, element) flag to whether the element is among values[lo:hi], in one pass."""

    @abstractmethod
    def set_equality(self, target: str, a: tuple[str, str, str], b: tuple[str, str, str]) -> list[str]:
        """Statements setting `target` to whether the slices (values, lo, hi) `a` and `b` hold the same elements."""

    @abstractmethod
    def arithmetic(self, i: int, op: str, operands: list[str], kinds: list[Kind],
                   constants: list[Any]) -> tuple[list[str], str | None]:
        """Statements setting `v{i}` to the op (neg abs add sub mul div min max) of the operands, as
        `tracec.compiler.values` defines it, and the expression that says whether the result is known (None:
        always): false where an int result leaves int64, a float result is not finite, or a divisor is zero.
        `constants` holds each operand's value where it is a constant, else None."""

    @abstractmethod
    def int_against_float(self, op: str, x: str, y: str) -> str:
        """An expression comparing int `x` with float `y` exactly (op one of eq ne lt le gt ge)."""

    def comparison(self, op: str, operands: list[str], kinds: list[Kind], constants: list[Any]) -> str:
        """A comparison as `tracec.compiler.values` defines it: an int and a float compare exactly."""
        if sorted(kinds) != ["float", "int"]:
            return f"{operands[0]} {_OPS[op]} {operands[1]}"
        first = 0 if kinds[0] == "int" else 1  # write it as `int op float`
        x, y, c_x, c_y = operands[first], operands[1 - first], constants[first], constants[1 - first]
        op = op if first == 0 else MIRRORED[op]
        if c_y is not None:
            test = int_test(op, float(c_y))
            return (self.literal(test, "bool") if isinstance(test, bool)
                    else f"{x} {_OPS[test[0]]} {self.literal(test[1], 'int')}")
        if c_x is not None and abs(int(c_x)) <= 2**53:  # an int the float type holds exactly
            return f"{self.literal(float(c_x), 'float')} {_OPS[op]} {y}"
        return self.int_against_float(op, x, y)

    def write(self) -> list[str]:
        for i in range(len(self.plan.steps)):
            self.step(i)
        return self.lines

    def step(self, i: int) -> None:
        step = self.plan.steps[i]
        op, args, c = step.op, step.args, step.value
        if op == "const":
            if step.kind == "bool":
                self.yes[i], self.no[i] = self.literal(bool(c), "bool"), self.literal(not c, "bool")
                self.val[i], self.known[i] = self.yes[i], None
            else:
                self.val[i], self.known[i] = self.literal(c, step.kind), None
        elif op == "load" and step.kind == "bool":
            self.lines.append(self.declare(f"k{i}", "bool", f"c{c}_k[r] != 0"))
            self.flags(i, f"c{c}_v[r] != 0", f"k{i}")
        elif op in ("load", "load_set"):
            if op == "load":
                self.lines.append(self.declare(f"v{i}", step.kind, f"c{c}_v[r]"))
            else:
                self.lines += [self.declare(f"lo{i}", "index", f"c{c}_o[r]"),
                               self.declare(f"hi{i}", "index", f"c{c}_o[r + 1]")]
            self.lines.append(self.declare(f"k{i}", "bool", f"c{c}_k[r] != 0"))
            self.val[i], self.known[i] = f"v{i}", f"k{i}"
        elif op == "not":
            (a,) = args
            self.yes[i], self.no[i], self.known[i] = self.no[a], self.yes[a], self.known[a]
            self.val[i] = self.yes[i]
        elif op in ("and", "or"):
            yes, no = ("&", "|") if op == "and" else ("|", "&")
            a, b = args
            if self.plan.wants_yes[i]:
                self.lines.append(self.declare(f"y{i}", "bool", f"{self.yes[a]} {yes} {self.yes[b]}"))
            if self.plan.wants_no[i]:
                self.lines.append(self.declare(f"n{i}", "bool", f"{self.no[a]} {no} {self.no[b]}"))
            self.yes[i], self.no[i], self.val[i], self.known[i] = f"y{i}", f"n{i}", f"y{i}", f"(y{i} | n{i})"
        else:
            self.strict(i)

    def strict(self, i: int) -> None:
        """Ops that are unknown when any operand is: known is the and of the operands' known flags (and, for
        arithmetic, of the result's validity)."""
        steps = self.plan.steps
        step = steps[i]
        op, args = step.op, step.args
        operands = [self.val.get(a, "") for a in args]
        kinds = [steps[a].kind for a in args]
        constants = [steps[a].value if steps[a].op == "const" else None for a in args]
        parts = [k for a in args if (k := self.known[a]) is not None]
        if op in ARITHMETIC:
            lines, valid = self.arithmetic(i, op, operands, kinds, constants)
            self.lines += lines
            self.val[i], self.known[i] = f"v{i}", self.conjunction(i, parts + ([valid] if valid else []))
            return
        known = self.conjunction(i, parts)
        if op == "has":
            if i not in self.scanned:
                self.scan(i)
            self.flags(i, f"m{i}", known)
        elif op in ("eq", "ne") and kinds[0] == "set":
            a, b = ((f"c{steps[s].value}_v", f"lo{s}", f"hi{s}") for s in args)
            self.lines += self.set_equality(f"m{i}", a, b)
            self.flags(i, f"m{i}" if op == "eq" else self.negate(f"m{i}"), known)
        elif op == "count":
            self.lines.append(self.declare(f"v{i}", "int", f"hi{args[0]} - lo{args[0]}"))
            self.val[i], self.known[i] = f"v{i}", known
        else:
            self.flags(i, self.comparison(op, operands, kinds, constants), known)

    def conjunction(self, i: int, parts: list[str]) -> str | None:
        """The and of known flags, declared as `k{i}` when it has more than one part."""
        if len(parts) <= 1:
            return parts[0] if parts else None
        self.lines.append(self.declare(f"k{i}", "bool", " & ".join(parts)))
        return f"k{i}"

    def scan(self, i: int) -> None:
        """One pass over the set of `has` step i that answers every later `has` on that set whose element is
        already computed: the loop over a set (with its unpredictable length) is the costly part of a kernel."""
        steps = self.plan.steps
        s = steps[i].args[1]
        group = [h for h in range(i, len(steps)) if steps[h].op == "has" and steps[h].args[1] == s
                 and steps[h].args[0] in self.val]
        self.lines += self.membership([(f"m{h}", self.val[steps[h].args[0]]) for h in group],
                                      f"c{steps[s].value}_v", f"lo{s}", f"hi{s}")
        self.scanned.update(group)

    def flags(self, i: int, match: str, known: str | None) -> None:
        """A bool that is `match` when known; definitely-false is derived from definitely-true (no branch)."""
        self.lines.append(self.declare(f"y{i}", "bool", match if known is None else f"{known} & ({match})"))
        if self.plan.wants_no[i]:
            no = self.negate(f"y{i}") if known is None else f"{known} ^ y{i}"
            self.lines.append(self.declare(f"n{i}", "bool", no))
        self.yes[i], self.no[i], self.val[i], self.known[i] = f"y{i}", f"n{i}", f"y{i}", known
