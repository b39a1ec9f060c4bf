"""Vectorised evaluation of PRISM expressions over a batch of states.

A stormpy expression tree (constants already substituted) is translated once into the source of a numpy
function ``f(S) -> values`` where ``S`` is the int64 state matrix ``[B, V]`` (one column per state variable,
booleans stored as 0/1). The function is compiled with :func:`compile` so evaluation is one numpy call per
operator over the whole batch, never a Python loop over states.

Semantics follow Storm's (the reference): ``/`` is real division, ``mod`` truncates like C, ``floor``/``ceil``
return integers, ``pow`` of two integers is an integer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from stormpy import expressions as sx

from distmc.errors import ModelError

__all__ = ["CompiledExpr", "compile_expression", "reparseable"]

_OP = sx.OperatorType

# Operator -> (numpy template, arity). Boolean operands are numpy bools, so &, |, ~ are logical.
_BINARY: dict[Any, str] = {
    _OP.AND: "({0} & {1})",
    _OP.OR: "({0} | {1})",
    _OP.XOR: "({0} ^ {1})",
    _OP.IMPLIES: "(~{0} | {1})",
    _OP.IFF: "({0} == {1})",
    _OP.PLUS: "({0} + {1})",
    _OP.MINUS: "({0} - {1})",
    _OP.TIMES: "({0} * {1})",
    _OP.DIVIDE: "_np.true_divide({0}, {1})",
    _OP.MIN: "_np.minimum({0}, {1})",
    _OP.MAX: "_np.maximum({0}, {1})",
    _OP.MODULO: "_np.fmod({0}, {1})",
    _OP.EQUAL: "_np.equal({0}, {1})",
    _OP.NOT_EQUAL: "_np.not_equal({0}, {1})",
    _OP.LESS: "_np.less({0}, {1})",
    _OP.LESS_OR_EQUAL: "_np.less_equal({0}, {1})",
    _OP.GREATER: "_np.greater({0}, {1})",
    _OP.GREATER_OR_EQUAL: "_np.greater_equal({0}, {1})",
}


@dataclass(frozen=True)
class CompiledExpr:
    """An expression compiled to a vectorised numpy function.

    Attributes:
        text: the expression as Storm prints it (for error messages).
        source: the generated numpy source.
        kind: ``"bool"``, ``"int"`` or ``"real"``.
        fn: ``fn(S[B, V] int64) -> array[B] or scalar``.
        tree: the expression as nested tuples (:data:`Tree`), for the compiled kernel (:mod:`distmc.model._compiled`).
    """

    text: str
    source: str
    kind: str
    fn: Callable[[np.ndarray], Any]
    tree: Tree = ()

    @property
    def is_constant(self) -> bool:
        return "S[" not in self.source

    def __call__(self, states: np.ndarray) -> np.ndarray:
        """Evaluate over ``states`` ``[B, V]``; always returns an array of shape ``[B]``."""
        with np.errstate(divide="ignore", invalid="ignore"):
            out = self.fn(states)
        # Storm types some quotients of integers (1/2) as int; numpy's own result type is the truth here.
        out = np.asarray(out, dtype=np.bool_) if self.kind == "bool" else np.asarray(out)
        if out.shape != (states.shape[0],):
            out = np.broadcast_to(out, (states.shape[0],)).copy()
        return out


def _kind(e: sx.Expression) -> str:
    if e.has_boolean_type():
        return "bool"
    if e.has_integer_type():
        return "int"
    return "real"


def _translate(e: sx.Expression, columns: Mapping[str, tuple[int, bool]]) -> str:
    if e.is_literal():
        k = _kind(e)
        if k == "bool":
            return "_T" if e.evaluate_as_bool() else "_F"
        if k == "int":
            return f"_np.int64({e.evaluate_as_int()})"
        return f"_np.float64({e.evaluate_as_double()!r})"
    if e.is_variable():
        name = e.get_identifier()
        if name not in columns:
            raise ModelError(
                f"expression '{e}' uses '{name}', which is neither a state variable nor a defined constant; "
                "define it with --const NAME=VALUE"
            )
        col, is_bool = columns[name]
        return f"(S[:, {col}] != 0)" if is_bool else f"S[:, {col}]"
    if not e.is_function_application:
        raise ModelError(f"unsupported expression '{e}'")
    op = e.operator
    args = [_translate(e.get_operand(i), columns) for i in range(e.arity)]
    if op == _OP.NOT:
        return f"(~{args[0]})"
    if op == _OP.ITE:
        return f"_np.where({args[0]}, {args[1]}, {args[2]})"
    if op == _OP.FLOOR:
        return f"_np.floor({args[0]}).astype(_np.int64)"
    if op == _OP.CEIL:
        return f"_np.ceil({args[0]}).astype(_np.int64)"
    if op == _OP.POWER:
        if _kind(e) == "int":
            return f"_np.power({args[0]}, {args[1]})"
        return f"_np.power(_np.float64(1.0) * {args[0]}, {args[1]})"
    if op in _BINARY:
        return _BINARY[op].format(*args)
    raise ModelError(f"unsupported operator {op} in expression '{e}'")


_NAMESPACE = {"_np": np, "_T": np.True_, "_F": np.False_}

# Tree form for the compiled kernel's register machine (distmc.model._compiled): every value is a float64, booleans
# are 0/1. Operator names the register machine knows; unary minus becomes ("sub", 0, x).
_TREE_OPS: dict[Any, str] = {
    _OP.AND: "and",
    _OP.OR: "or",
    _OP.XOR: "ne",
    _OP.IMPLIES: "implies",
    _OP.IFF: "eq",
    _OP.PLUS: "add",
    _OP.MINUS: "sub",
    _OP.TIMES: "mul",
    _OP.DIVIDE: "div",
    _OP.MIN: "min",
    _OP.MAX: "max",
    _OP.MODULO: "fmod",
    _OP.EQUAL: "eq",
    _OP.NOT_EQUAL: "ne",
    _OP.LESS: "lt",
    _OP.LESS_OR_EQUAL: "le",
    _OP.GREATER: "gt",
    _OP.GREATER_OR_EQUAL: "ge",
    _OP.NOT: "not",
    _OP.ITE: "ite",
    _OP.FLOOR: "floor",
    _OP.CEIL: "ceil",
    _OP.POWER: "pow",
}

#: A node of the tree form: ``("var", column)``, ``("const", value)`` or ``(operator, child, ...)``.
Tree = tuple[Any, ...]


def _tree(e: sx.Expression, columns: Mapping[str, tuple[int, bool]]) -> Tree:
    if e.is_literal():
        k = _kind(e)
        if k == "bool":
            return ("const", 1.0 if e.evaluate_as_bool() else 0.0)
        return ("const", float(e.evaluate_as_int() if k == "int" else e.evaluate_as_double()))
    if e.is_variable():
        return ("var", columns[e.get_identifier()][0])
    op = e.operator
    args = [_tree(e.get_operand(i), columns) for i in range(e.arity)]
    if op == _OP.MINUS and len(args) == 1:
        return ("sub", ("const", 0.0), args[0])
    if op not in _TREE_OPS:
        raise ModelError(f"unsupported operator {op} in expression '{e}'")
    return (_TREE_OPS[op], *args)


def _group_end(s: str, i: int) -> int:
    """Index just past the parenthesised group that starts at ``s[i] == "("``."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "(":
            depth += 1
        elif s[j] == ")":
            depth -= 1
            if depth == 0:
                return j + 1
    return -1


def _top_split(s: str, sep: str) -> list[str]:
    """Split ``s`` at ``sep`` where it stands outside every parenthesis."""
    out, depth, start, i = [], 0, 0, 0
    while i < len(s):
        ch = s[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            out.append(s[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    out.append(s[start:])
    return out


def _unparen(s: str) -> str | None:
    s = s.strip()
    return s[1:-1] if s.startswith("(") and _group_end(s, 0) == len(s) else None


def _as_mod(group: str) -> tuple[str, str] | None:
    """``(a, b)`` if ``group`` is Storm's printout of PRISM's ``mod(a, b)``, else None."""
    inner = _unparen(group)
    if inner is None:
        return None
    q = _top_split(inner, " ? ")
    if len(q) != 2:
        return None
    branches = _top_split(q[1], " : ")
    cond = _unparen(q[0])
    then = _unparen(branches[0]) if len(branches) == 2 else None
    if cond is None or then is None:
        return None
    ge = _top_split(cond, " >= ")
    pm = _top_split(then, " % ")
    if len(ge) != 2 or ge[1].strip() != "0" or len(pm) != 2 or pm[0].strip() != ge[0].strip():
        return None
    a, b = pm[0].strip(), pm[1].strip()
    if branches[1].strip() != f"(({a} % {b}) + {b})":
        return None
    return a, b


def reparseable(text: str) -> str:
    """Storm's printout of an expression, made safe to parse again.

    Storm's PRISM parser turns ``mod(a, b)`` into ``((a >= 0) ? (a % b) : ((a % b) + b))`` with a truncating
    ``%``, and prints it that way; parsing that text applies the rewrite a second time (wrong for ``a < 0``). The
    printed form is turned back into ``mod(a, b)``.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "(":
            end = _group_end(text, i)
            if end > 0:
                m = _as_mod(text[i:end])
                if m is not None:
                    out.append(f"mod({reparseable(m[0])}, {reparseable(m[1])})")
                    i = end
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


def compile_expression(e: sx.Expression, columns: Mapping[str, tuple[int, bool]]) -> CompiledExpr:
    """Compile ``e`` against the state layout ``columns`` (variable name -> (column, is_bool))."""
    e = e.simplify()
    src = _translate(e, columns)
    fn = eval(compile(f"lambda S: {src}", f"<prism expression {e}>", "eval"), dict(_NAMESPACE))  # noqa: S307
    return CompiledExpr(text=reparseable(str(e)), source=src, kind=_kind(e), fn=fn, tree=_tree(e, columns))
