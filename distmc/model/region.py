"""Parameter regions: ``'0.05<=slip<=0.15,0.8<=p<=0.9'`` (Storm's region syntax) and what a model allows of them.

A region is a box over some of the model's undefined ``double`` constants. distmc explores the policy-induced chain
once for the whole box, so the chain's structure must not depend on a region's constant: the policy sees the
state, never the constants, and it sees the same states everywhere in the box only if no guard, assignment,
variable range or initial value, label, initial-states expression or reward depends on the constant. Such a
constant is refused in one line naming where it occurs (:func:`check_region`).

The bounds of :mod:`distmc.region` take every transition's probability at the box's corners, which is sound
when each entry of the induced chain is *multilinear* in the region's constants (affine in each constant with the
others fixed): a multilinear function on a box takes its minimum and maximum at corners, and its value anywhere
in the box is the multilinear interpolation of its corner values. An entry is a policy-weighted sum of products,
one factor per synchronising module, of branch probabilities; so it is multilinear when every branch probability
has degree at most 1 in each constant and, for each constant, at most one module's probabilities depend on it.
:func:`check_region` checks that on the expressions (sums, differences, products, division by a constant
expression); anything else (``slip*slip``, ``min(slip, 0.1)``, a constant in two modules) is refused.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import stormpy
from stormpy import expressions as sx

from distmc._internal.stderr import storm_quiet
from distmc.errors import ModelError, UnsupportedError, UsageError

__all__ = ["Region", "check_region", "parse_region"]

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_BOUND = re.compile(rf"\s*({_NUM})\s*<=\s*([A-Za-z_][A-Za-z0-9_]*)\s*<=\s*({_NUM})\s*")


@dataclass(frozen=True)
class Region:
    """A box: ``params[i] = (name, lo, hi)`` with ``lo <= hi``."""

    params: tuple[tuple[str, float, float], ...]

    @property
    def names(self) -> list[str]:
        return [p[0] for p in self.params]

    @property
    def volume(self) -> float:
        """The product of the widths (a point parameter counts as width 1)."""
        out = 1.0
        for _, lo, hi in self.params:
            out *= (hi - lo) if hi > lo else 1.0
        return out

    def corners(self) -> list[tuple[float, ...]]:
        """The ``2^d`` corners, the first parameter varying slowest (``lo`` before ``hi``)."""
        return list(itertools.product(*[(lo, hi) for _, lo, hi in self.params]))

    def center(self) -> tuple[float, ...]:
        return tuple((lo + hi) / 2 for _, lo, hi in self.params)

    def split(self) -> tuple[Region, Region]:
        """Two halves, cut across the widest parameter (relative to nothing: its absolute width)."""
        i = max(range(len(self.params)), key=lambda j: self.params[j][2] - self.params[j][1])
        name, lo, hi = self.params[i]
        mid = (lo + hi) / 2
        a = list(self.params)
        b = list(self.params)
        a[i], b[i] = (name, lo, mid), (name, mid, hi)
        return Region(tuple(a)), Region(tuple(b))

    def contains(self, other: Region) -> bool:
        return all(p[1] <= q[1] and q[2] <= p[2] for p, q in zip(self.params, other.params, strict=True))

    def constants(self, point: tuple[float, ...]) -> str:
        """``slip=0.1`` for ``--const``: each value written as the shortest text that reads back as the double."""
        return ",".join(f"{name}={value!r}" for (name, _, _), value in zip(self.params, point, strict=True))

    def __str__(self) -> str:
        return ",".join(f"{lo!r}<={name}<={hi!r}" for name, lo, hi in self.params)


def parse_region(text: str) -> Region:
    """``'0.05<=slip<=0.15,0.8<=p<=0.9'`` -> :class:`Region` (UsageError: the syntax, an empty or inverted box)."""
    params: list[tuple[str, float, float]] = []
    for part in text.split(","):
        m = _BOUND.fullmatch(part)
        if m is None:
            raise UsageError(
                f"cannot read region part '{part.strip()}': expected LO<=NAME<=HI, as in "
                "--region '0.05<=slip<=0.15' (several separated by commas)"
            )
        lo, name, hi = float(m.group(1)), m.group(2), float(m.group(3))
        if not lo < hi:
            raise UsageError(
                f"region '{part.strip()}' is {'empty' if lo > hi else 'a single point'}: "
                "give LO < HI (a single value goes to --const)"
            )
        if name in (p[0] for p in params):
            raise UsageError(f"region names '{name}' twice")
        params.append((name, lo, hi))
    return Region(tuple(params))


def _degree(e: Any, var: Any) -> float:
    """The polynomial degree of ``e`` in ``var`` when it is a polynomial of it (``inf`` where it is not)."""
    if not e.contains_variable({var}):
        return 0.0
    if e.is_variable():
        return 1.0
    if not e.is_function_application:
        return 0.0
    op = e.operator
    args = [e.get_operand(i) for i in range(e.arity)]
    if op in (sx.OperatorType.PLUS, sx.OperatorType.MINUS):
        return max(_degree(a, var) for a in args)
    if op == sx.OperatorType.TIMES:
        return sum(_degree(a, var) for a in args)
    if op == sx.OperatorType.DIVIDE and _degree(args[1], var) == 0:
        return _degree(args[0], var)
    return float("inf")


def _program(path: Path, constants: dict[str, str]) -> Any:
    """The program with ``constants`` defined and formulas substituted, the region's constants left open."""
    from distmc.model.program import LITERAL  # the literal check of --const

    with storm_quiet():
        prog = stormpy.parse_prism_program(str(path), prism_compatibility=True)
    parser = sx.ExpressionParser(prog.expression_manager)
    parser.set_identifier_mapping({})
    defs = {}
    for c in prog.constants:  # only literals reach Storm's parser (it crashes the process on an unknown name)
        text = constants.get(c.name, "")
        if not c.defined and LITERAL.fullmatch(text.strip()):
            with storm_quiet():
                defs[c.expression_variable] = parser.parse_from_string(text, True)
    if defs:
        prog = prog.define_undefined_constants(defs)
    return prog.substitute_formulas().substitute_constants()


def check_region(path: str | Path, region: Region, constants: dict[str, str]) -> None:
    """Refuse a region the model does not allow, in one line (see the module docstring).

    Raises:
        UsageError: a region's constant is also given with ``--const``.
        ModelError: a name that is no undefined constant of the model, or not a ``double``.
        UnsupportedError: a constant that the structure (and so what the policy observes) depends on, or whose
            probabilities are not multilinear.
    """
    path = Path(path)
    raw = stormpy.parse_prism_program(str(path), prism_compatibility=True) if path.is_file() else None
    if raw is None:
        raise ModelError(f"{path}: no such model file")
    known = {c.name: c for c in raw.constants}
    for name in region.names:
        if name in constants:
            raise UsageError(f"constant '{name}' is given both a value (--const) and a range (--region)")
        c = known.get(name)
        if c is None or c.defined:
            open_ = [x.name for x in raw.constants if not x.defined]
            raise ModelError(
                f"{path}: --region names '{name}', which is no undefined constant of the model "
                f"(its undefined constants: {', '.join(open_) or 'none'})"
            )
        if c.expression_variable.has_integer_type() or c.expression_variable.has_boolean_type():
            raise ModelError(f"{path}: --region names '{name}', an int or bool constant; a region ranges over doubles")
    prog = _program(path, constants)
    variables = {prog.get_constant(n).expression_variable: n for n in region.names}
    _structure(prog, variables, path)
    for var, name in variables.items():
        modules = []
        for m in prog.modules:
            degree = max((_degree(u.probability_expression, var) for c in m.commands for u in c.updates), default=0.0)
            if degree > 1:
                raise UnsupportedError(
                    f"{path}: a probability of module '{m.name}' is not affine in '{name}' "
                    "(distmc bounds a region by its corners, which needs degree 1)"
                )
            if degree == 1:
                modules.append(m.name)
        if len(modules) > 1:
            raise UnsupportedError(
                f"{path}: the probabilities of modules {', '.join(modules)} all depend on "
                f"'{name}' (their product is not affine in it; distmc bounds a region by its "
                "corners, which needs one)"
            )


def _structure(prog: Any, variables: dict[Any, str], path: Path) -> None:
    """UnsupportedError when the chain's structure (what the policy sees) depends on a region's constant."""
    where: list[tuple[str, Any]] = []
    for v in itertools.chain(prog.global_integer_variables, prog.global_boolean_variables):
        where.append((f"the range or initial value of '{v.name}'", v))
    for m in prog.modules:
        for v in itertools.chain(m.integer_variables, m.boolean_variables):
            where.append((f"the range or initial value of '{v.name}'", v))
        for i, c in enumerate(m.commands):
            where.append((f"the guard of module '{m.name}', command {i + 1}", c.guard_expression))
            for u in c.updates:
                for a in u.assignments:
                    where.append((f"an assignment of module '{m.name}', command {i + 1}", a.expression))
    for lab in prog.labels:
        where.append((f"label '{lab.name}'", lab.expression))
    if prog.has_initial_states_expression:
        where.append(("the init ... endinit block", prog.initial_states_expression))
    reward_text = "\n".join(re.findall(r"^rewards.*?^endrewards", str(prog), re.S | re.M))
    keys = set(variables)
    for what, e in where:
        exprs = (
            [e]
            if isinstance(e, sx.Expression)
            else [
                x
                for x in (
                    getattr(e, "lower_bound_expression", None),
                    getattr(e, "upper_bound_expression", None),
                    e.initial_value_expression if not prog.has_initial_states_expression else None,
                )
                if x is not None and str(x) != ""
            ]
        )
        for x in exprs:
            found = [variables[v] for v in x.get_variables() if v in keys]
            if found:
                raise UnsupportedError(
                    f"{path}: {what} depends on '{found[0]}', so the states the policy sees "
                    "would change within the region; give it one value with --const"
                )
    for name in variables.values():
        if re.search(rf"\b{re.escape(name)}\b", reward_text):
            raise UnsupportedError(
                f"{path}: a reward structure depends on '{name}'; a region ranges over "
                "probabilities only; give it one value with --const"
            )
