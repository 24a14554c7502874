"""The type checker: resolves every name of schemas, rubrics and capabilities, types every expression, and reports
all errors of a file in one pass (environments are checked by `tracec.dsl.check_env`).

The result keeps the syntax tree and adds what the compiler needs: the type of every expression node (keyed by node
identity, valid while the tree lives) and which bare names are enum members rather than bindings.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeGuard

from tracec.dsl import ast
from tracec.dsl import types as T
from tracec.dsl.check_env import check_environment
from tracec.dsl.check_expr import CheckedSchema, ExprChecker, Typing
from tracec.dsl.defaults import DEFAULT_BUDGET, DEFAULT_GAMMA, DEFAULT_LAMBDA, DEFAULT_STEP_SCALE, STEP_SCALES
from tracec.dsl.errors import CheckError, Loc, Source, did_you_mean
from tracec.dsl.parse import parse
from tracec.dsl.reporter import Reporter
from tracec.dsl.types import Type

BIND_TYPES = ("entity", "int", "float", "bool", "enum")


@dataclass(frozen=True)
class CheckedRubric:
    decl: ast.Rubric
    schema: CheckedSchema
    binds: tuple[ast.Bind, ...]
    bind_types: dict[str, Type]
    operators: tuple[ast.Operator, ...]
    budgets: dict[str, float]
    lam: float
    gamma: float
    step_scale: str
    context: tuple[ast.Expr, ...]
    typing: Typing


@dataclass(frozen=True)
class CheckedCapability:
    decl: ast.Capability
    schema: CheckedSchema
    typing: Typing


@dataclass(frozen=True)
class CheckedModule:
    module: ast.Module
    schemas: dict[str, CheckedSchema]
    rubrics: dict[str, CheckedRubric]
    capabilities: dict[str, CheckedCapability]
    environments: dict[str, Any]  # name -> tracec.dsl.check_env.CheckedEnvironment


BUILTIN_SCHEMA_FILES = ("toolenv.rubric", "textworld.rubric")  # in the package `tracec.grammars`


@functools.cache
def builtin_schemas() -> tuple[ast.Schema, ...]:
    """Schemas every file may use: `toolenv`, the facts tool environments emit, and `textworld`, TextWorld's."""
    schemas: list[ast.Schema] = []
    for name in BUILTIN_SCHEMA_FILES:
        module = parse(resources.files("tracec.grammars").joinpath(name).read_text(), f"<builtin {name}>")
        schemas += [d for d in module.decls if isinstance(d, ast.Schema)]
    return tuple(schemas)


def check(module: ast.Module) -> CheckedModule:
    """Check a parsed file; raises `CheckError` with every problem found."""
    checker = _Checker(Source(module.path, module.source))
    result = checker.module(module)
    if checker.errors:
        raise CheckError(checker.errors)
    return result


def check_source(text: str, path: str = "<string>") -> CheckedModule:
    """Parse and check a file's text: the front end's first two steps, as every caller that holds text takes them."""
    return check(parse(text, path))


class _Checker(Reporter):

    # ------------------------------------------------------------------ declarations
    def module(self, module: ast.Module) -> CheckedModule:
        schemas: dict[str, CheckedSchema] = {}
        for builtin in builtin_schemas():
            schemas[builtin.name] = _quiet_schema(builtin)
        seen: dict[str, Loc] = {}
        for decl in module.decls:
            if decl.name in seen:
                self.error(decl.loc, f"`{decl.name}` is declared twice (first at line {seen[decl.name].line})")
            elif decl.name in schemas:
                self.error(decl.loc, f"`{decl.name}` is the name of a built-in schema")
            seen.setdefault(decl.name, decl.loc)
            self.name_ok(decl.name, decl.loc, "declaration")
        for decl in module.decls:
            if isinstance(decl, ast.Schema) and decl.name not in schemas:
                schemas[decl.name] = self.schema(decl)
        environments: dict[str, Any] = {}
        for decl in module.decls:
            if isinstance(decl, ast.Environment):
                checked, errors = check_environment(decl, self.source)
                self.errors.extend(errors)
                if checked is not None:
                    environments[decl.name] = checked
        env_names = {d.name for d in module.decls if isinstance(d, ast.Environment)}
        rubrics, capabilities = {}, {}
        for decl in module.decls:
            if isinstance(decl, (ast.Rubric, ast.Capability)):
                schema = self.resolve_schema(decl.schema, decl.schema_loc, schemas, env_names)
                if schema is None:
                    continue
                if isinstance(decl, ast.Rubric):
                    rubrics[decl.name] = self.rubric(decl, schema)
                else:
                    capabilities[decl.name] = self.capability(decl, schema)
        return CheckedModule(module, schemas, rubrics, capabilities, environments)

    def resolve_schema(
        self, name: str, loc: Loc, schemas: dict[str, CheckedSchema], env_names: set[str]
    ) -> CheckedSchema | None:
        if name in schemas:
            return schemas[name]
        if name in env_names and "toolenv" in schemas:
            return schemas["toolenv"]  # an environment's transitions carry the built-in tool facts
        self.error(loc, f"unknown schema `{name}`{did_you_mean(name, list(schemas) + sorted(env_names))}")
        return None

    def schema(self, decl: ast.Schema) -> CheckedSchema:
        state = self.fields(decl.state, "state")
        action = self.fields(decl.action, "action")
        return CheckedSchema(decl.name, state, action)

    def fields(self, decls: tuple[ast.FieldDecl, ...], part: str) -> dict[str, Type]:
        out: dict[str, Type] = {}
        for f in decls:
            self.name_ok(f.name, f.loc, "field")
            if f.name in out:
                self.error(f.loc, f"field `{f.name}` is declared twice in `{part}`")
            type_ = self.type_ref(f.type)
            if type_ is not None:
                out.setdefault(f.name, type_)
        return out

    def type_ref(self, ref: ast.TypeRef) -> Type | None:
        if ref.name == "set":
            if ref.args != ("entity",):
                self.error(ref.loc, f"sets hold entities: write `set(entity)`, not `set({', '.join(ref.args)})`")
                return None
            return T.SET
        if ref.name == "enum":
            if not ref.args:
                self.error(ref.loc, "an enum needs at least one member")
                return None
            duplicates = sorted({m for m in ref.args if ref.args.count(m) > 1})
            if duplicates:
                self.error(ref.loc, f"enum member `{duplicates[0]}` is listed twice")
            for member in ref.args:
                self.name_ok(member, ref.loc, "enum member")
            return T.enum(*dict.fromkeys(ref.args))
        if ref.name in T.PLAIN_TYPES:
            if ref.args:
                self.error(ref.loc, f"type `{ref.name}` takes no arguments")
            return T.PLAIN_TYPES[ref.name]
        known = [*T.PLAIN_TYPES, "enum", "set"]
        self.error(ref.loc, f"unknown type `{ref.name}`{did_you_mean(ref.name, known)}")
        return None

    def rubric(self, decl: ast.Rubric, schema: CheckedSchema) -> CheckedRubric:
        typing = Typing()
        binds: list[ast.Bind] = []
        bind_types: dict[str, Type] = {}
        operators: list[ast.Operator] = []
        budgets: dict[str, float] = {}
        settings: dict[str, float] = {}
        contexts: list[ast.Context] = []
        step_scale: str | None = None
        names: dict[str, Loc] = {}
        budget_loc: Loc | None = None
        for item in decl.items:
            if isinstance(item, ast.Bind):
                self.name_ok(item.name, item.loc, "binding")
                if item.name in bind_types:
                    self.error(item.loc, f"binding `{item.name}` is declared twice")
                    continue
                scope = ExprChecker(self.error, schema, bind_types, typing, mode="bind")
                declared = self.type_ref(item.type)
                odd = _unbindable(item.value)
                if odd is not None:
                    self.error(odd.loc, _unbindable_message(odd))
                got = scope.expr(item.value) if odd is None else None
                if declared is not None:
                    if declared.kind not in BIND_TYPES:
                        self.error(item.type.loc, f"a binding is one of {', '.join(BIND_TYPES)}, not `{declared}`")
                    elif got is not None and not _bindable(got, declared):
                        self.error(item.value.loc, f"binding `{item.name}` is `{declared}` but its value is `{got}`")
                    bind_types[item.name] = declared
                binds.append(item)
            elif isinstance(item, ast.Operator):
                self.name_ok(item.name, item.loc, "operator")
                if item.name in names:
                    self.error(item.loc, f"operator `{item.name}` is declared twice "
                                         f"(first at line {names[item.name].line})")
                names.setdefault(item.name, item.loc)
                scope = ExprChecker(self.error, schema, bind_types, typing, mode="transition")
                got = scope.expr(item.expr)
                if got is not None and got.kind != "bool":
                    self.error(item.expr.loc, f"operator `{item.name}` must be a bool expression, not `{got}`")
                operators.append(item)
            elif isinstance(item, ast.Budget):
                budget_loc = budget_loc or item.loc
                for entry in item.entries:
                    if entry.category in budgets:
                        self.error(entry.loc, f"budget for {entry.category} is given twice")
                    elif not math.isfinite(entry.value) or (entry.category != "invalidity" and entry.value < 0):
                        self.error(entry.loc, f"budget for {entry.category} must be a finite number >= 0")
                    budgets.setdefault(entry.category, entry.value)
            elif isinstance(item, ast.Setting):
                if item.key in settings:
                    self.error(item.loc, f"`{item.key}` is given twice")
                elif not 0.0 <= item.value <= 1.0:
                    self.error(item.loc, f"`{item.key}` must lie in [0, 1], got {item.value}")
                settings.setdefault(item.key, item.value)
            elif isinstance(item, ast.StepScale):
                if step_scale is not None:
                    self.error(item.loc, "`step_scale` is given twice")
                elif item.mode not in STEP_SCALES:
                    self.error(item.loc, f"`step_scale` is {' or '.join(STEP_SCALES)}, not `{item.mode}`")
                step_scale = step_scale or item.mode
            else:
                if contexts:
                    self.error(item.loc, "`context` is given twice; list every key in one `context` line")
                contexts.append(item)
                scope = ExprChecker(self.error, schema, bind_types, typing, mode="transition")
                for expr in item.exprs:
                    got = scope.expr(expr)
                    if got is not None and got.kind in ("string", "regex"):
                        self.error(expr.loc, f"a context key must read facts, not a `{got}` literal")
                    elif got is not None and got.kind == "text":
                        self.error(expr.loc, "a context key cannot be `text` (only contains() and matches() read text)")
        if not operators:
            self.error(decl.loc, f"rubric `{decl.name}` has no operators")
        if budget_loc is not None and not math.isfinite(sum(abs(v) for v in budgets.values())):
            self.error(budget_loc, "the budgets add up to more than the largest float; a step's reward is their sum")
        return CheckedRubric(
            decl=decl,
            schema=schema,
            binds=tuple(binds),
            bind_types=bind_types,
            operators=tuple(operators),
            budgets={c: budgets.get(c, DEFAULT_BUDGET) for c in ast.CATEGORIES},
            lam=settings.get("lambda", DEFAULT_LAMBDA),
            gamma=settings.get("gamma", DEFAULT_GAMMA),
            step_scale=step_scale or DEFAULT_STEP_SCALE,
            context=contexts[0].exprs if contexts else (),
            typing=typing,
        )

    def capability(self, decl: ast.Capability, schema: CheckedSchema) -> CheckedCapability:
        typing = Typing()
        for part, expr in (("needed", decl.needed), ("present", decl.present)):
            got = ExprChecker(self.error, schema, {}, typing, mode="episode").expr(expr)
            if got is not None and got.kind != "bool":
                self.error(expr.loc, f"`{part}` must be a bool expression, not `{got}`")
        return CheckedCapability(decl, schema, typing)


def _quiet_schema(decl: ast.Schema) -> CheckedSchema:
    checker = _Checker(Source("<builtin>", ""))
    schema = checker.schema(decl)
    assert not checker.errors, checker.errors
    return schema


def _unbindable(expr: ast.Expr) -> ast.Expr | None:
    """The part of a binding's value that is none of its forms (a literal, `-` and a number, a name, `match(...)`,
    `lower(...)`), or None; the forms' arguments are the expression checker's to judge, and so are facts (which it
    rejects with a message of its own)."""
    if isinstance(expr, (ast.Literal, ast.Name, ast.Regex, ast.Fact)):
        return None
    if _negated_number(expr) and (expr.loc.end_line, expr.loc.end_column) == (
            expr.operand.loc.end_line, expr.operand.loc.end_column):  # `-4`, not `-(4)`: it ends with the number
        return None
    if isinstance(expr, ast.Call) and expr.func in ("match", "lower") and expr.args:
        return _unbindable(expr.args[0])
    return expr


def _negated_number(expr: ast.Expr) -> TypeGuard[ast.Unary]:
    return isinstance(expr, ast.Unary) and expr.op == "-" and isinstance(expr.operand, ast.Literal) \
        and isinstance(expr.operand.value, (int, float)) and not isinstance(expr.operand.value, bool)


def _unbindable_message(odd: ast.Expr) -> str:
    if _negated_number(odd):  # `-(4)`: a negated expression, where the literal `-4` is meant
        assert isinstance(odd.operand, ast.Literal)
        return (f"a binding's value is a literal: write `-{odd.operand.value!r}`, with the `-` right before the "
                "number")
    return ("a binding's value is a literal, `instruction`, `match(instruction, /re/, group)` or `lower(...)` of "
            "one of those; compute with the binding in the operators")


def _bindable(got: Type, declared: Type) -> bool:
    if got.kind in ("string", "text"):
        return True  # converted at run time; a failed conversion is missing
    if got.kind == "float" and declared.kind == "int":
        return False  # the fraction would be lost without a word
    return T.comparable(got, declared)
