"""Storm's formulas of a property: parsing against the model, walking them, their atoms, terminal and stop states.

:mod:`distmc.check.properties` builds a :class:`~distmc.check.properties.PropertySpec` from these. Storm's parser
has no step-bounded ``G``: :func:`bounded_globally` writes it in a form it parses. The terminal states mirror
Storm's property-driven builder (:func:`terminal_of`, ``storm::builder::getTerminalStatesFromFormula``).
"""

from __future__ import annotations

import re
from typing import Any

import stormpy
import stormpy.logic as sl

from distmc._internal.stderr import storm_lines, storm_quiet
from distmc.errors import PropertyError
from distmc.model.expr import CompiledExpr
from distmc.model.program import Model, split_top

__all__ = [
    "COMPARISON",
    "EXPOSED",
    "OPERATORS",
    "atom_of",
    "bounded_globally",
    "children",
    "has_opaque_combination",
    "lower_step_bound",
    "names_of",
    "opaque_atoms",
    "parse_all",
    "parse_one",
    "solution_of",
    "stop_of",
    "terminal_of",
]


#: Words of the property language itself (PCTL operators, functions, literals).
_KEYWORDS = {
    "P",
    "R",
    "S",
    "F",
    "G",
    "U",
    "W",
    "X",
    "C",
    "I",
    "LRA",
    "min",
    "max",
    "Pmin",
    "Pmax",
    "Rmin",
    "Rmax",
    "true",
    "false",
    "floor",
    "ceil",
    "pow",
    "mod",
    "log",
    "multi",
    "filter",
    "T",
}


_GLOBALLY = re.compile(r"(?<![\w\"])G\s*(<=|<|>=|>|\[)")


def _operand_end(text: str, start: int) -> int:
    """Where the path formula that starts at ``start`` ends: at the bracket closing the group it is in."""
    depth = 0
    for i in range(start, len(text)):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return i
            depth -= 1
    return len(text)


def bounded_globally(text: str) -> str:
    """``text`` with every step-bounded ``G`` written in a form Storm parses (its parser has no bounded ``G``).

    ``G<=k phi`` (``phi`` in each of the steps 0..k) is ``phi U[k+1,k+1] true`` and ``G<k phi`` is ``phi U[k,k]
    true``: a step-bounded until, checked by matrix-vector steps like ``F<=k``; ``G[a,b] phi`` and ``G>=k phi``
    become the path formulas ``!(F[a,b] !phi)`` and ``!(F>=k !phi)``, which Storm checks as LTL.
    """
    while (m := _GLOBALLY.search(text)) is not None:
        if m.group(1) == "[":
            close = text.index("]", m.end())
            bound, after = text[m.end() : close], close + 1
        else:
            bm = re.match(r"\s*(\([^()]*\)|[\w.]+)", text[m.end() :])
            if bm is None:
                return text
            bound, after = bm.group(1), m.end() + bm.end()
        end = _operand_end(text, after)
        phi = text[after:end].strip()
        op = m.group(1)
        if op == "<=":
            new = f"({phi}) U[({bound})+1, ({bound})+1] true"
        elif op == "<":
            new = f"({phi}) U[{bound}, {bound}] true"
        elif op == "[":
            lo, _, hi = bound.partition(",")
            new = (
                f"({phi}) U[({hi.strip()})+1, ({hi.strip()})+1] true"
                if lo.strip() == "0"
                else f"!(F[{bound}] {_negate(phi)})"
            )
        else:
            new = f"!(F{op}{bound} {_negate(phi)})"
        text = text[: m.start()] + new + text[end:]
    return text


def _negate(phi: str) -> str:
    """``!(phi)``, or the operand of ``phi = !psi`` (Storm's LTL takes ``!(!psi)`` for an unknown label)."""
    rest = phi[1:].strip() if phi.startswith("!") else ""
    if rest and all(len(split_top(rest, op)) == 1 for op in "&|=<>"):
        return rest
    return f"!({phi})"


def names_of(model: Model) -> set[str]:
    """The identifiers a property may use: variables, constants and PRISM formulas."""
    return (
        {v.name for v in model.variables}
        | {c.name for c in model.program.constants}
        | {v.name for v in model.program.expression_manager.get_variables()}
    )


def _unknown_names(text: str, model: Model) -> list[str]:
    """Identifiers in ``text`` (outside quoted labels and reward names) that the model does not define."""
    bare = re.sub(r'"[^"]*"', " ", text)
    known = names_of(model)
    return sorted({w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", bare) if w not in known | _KEYWORDS})


def parse_all(text: str, model: Model) -> list[Any]:
    """Storm's properties in ``text`` (``;``-separated, with ``const`` definitions and ``"name":`` prefixes)."""
    try:
        with storm_quiet():
            return list(stormpy.parse_properties(text, model.program))
    except RuntimeError as exc:
        unknown = _unknown_names(text, model)
        if unknown:
            raise PropertyError(
                f"property '{text}' names {', '.join(unknown)}: not a variable or constant of "
                f"{model.path.name} (variables: {', '.join(v.name for v in model.variables)}; labels are written "
                f'in quotes, as in F "goal")'
            ) from None
        raise PropertyError(f"cannot parse property '{text}': {' '.join(storm_lines(str(exc))) or repr(exc)}") from None


def parse_one(text: str, model: Model) -> Any:
    props = parse_all(text, model)
    if len(props) != 1:
        raise PropertyError(f"expected exactly one property, got {len(props)} in '{text}'")
    return props[0].get_raw_formula()


def atom_of(f: Any, model: Model) -> tuple[str, CompiledExpr] | None:
    """(label name, expression) of an atomic formula, else None."""
    if isinstance(f, sl.AtomicExpressionFormula):
        return str(f), model.compile(f.get_expression())
    if isinstance(f, sl.AtomicLabelFormula):
        name = f.label
        if name in model.labels:
            return f'"{name}"', model.labels[name]
        return None
    return None


#: Formula classes stormpy exposes with their operands; a formula of another class (``X``, an LTL path formula,
#: total rewards ``C``) is opaque: its atoms are found in its text (:func:`opaque_atoms`).
EXPOSED = (
    sl.ProbabilityOperatorFormula,
    sl.RewardOperatorFormula,
    sl.LongRunAverageOperatorFormula,
    sl.TimeOperatorFormula,
    sl.EventuallyFormula,
    sl.GloballyFormula,
    sl.UntilFormula,
    sl.BoundedUntilFormula,
    sl.UnaryBooleanStateFormula,
    sl.BinaryBooleanStateFormula,
    sl.AtomicExpressionFormula,
    sl.AtomicLabelFormula,
    sl.BooleanLiteralFormula,
    sl.CumulativeRewardFormula,
    sl.InstantaneousRewardFormula,
    sl.LongRunAverageRewardFormula,
    sl.ConditionalFormula,
)


def children(f: Any) -> list[Any]:
    out = []
    for attr in ("subformula", "left_subformula", "right_subformula", "main_subformula", "conditional_subformula"):
        if hasattr(f, attr):
            try:
                out.append(getattr(f, attr))
            except RuntimeError:
                pass
    return out


def _groups(text: str) -> list[str]:
    """Every balanced parenthesised part of ``text``, outermost first."""
    out, open_at = [], []
    for i, ch in enumerate(text):
        if ch == "(":
            open_at.append(i)
        elif ch == ")" and open_at:
            out.append((open_at.pop(), i + 1))
    return [text[a:b] for a, b in sorted(out)]


def opaque_atoms(f: Any, model: Model) -> dict[str, CompiledExpr]:
    """The atomic expressions inside a formula stormpy does not expose the operands of, found in its text.

    Storm prints an atomic expression in parentheses, ``X (s = 1)``; each parenthesised part that parses (on its
    own, against the model) as one atomic expression printed the same way is one. The text comes from a formula
    Storm has parsed already, so every identifier in it is known (Storm's parser crashes on unknown ones).
    """
    out: dict[str, CompiledExpr] = {}
    inside: list[str] = []
    for g in _groups(str(f)):
        if any(g in outer for outer in inside):  # part of an atom found already
            continue
        try:
            with storm_quiet():
                (prop,) = stormpy.parse_properties(f"P=? [F {g}]", model.program)
        except (RuntimeError, ValueError):
            continue
        sub = prop.get_raw_formula().subformula.subformula
        if isinstance(sub, sl.AtomicExpressionFormula) and str(sub) == g:
            out[g] = model.compile(sub.get_expression())
            inside.append(g)
    return out


COMPARISON = {"GEQ": ">=", "GREATER": ">", "LEQ": "<=", "LESS": "<"}


OPERATORS = (
    (sl.ProbabilityOperatorFormula, "P"),
    (sl.RewardOperatorFormula, "R"),
    (sl.LongRunAverageOperatorFormula, "LRA"),
    (sl.TimeOperatorFormula, "T"),
)


def lower_step_bound(f: Any) -> bool:
    """Whether a bounded until has a lower step bound above 0 (``U[2, 5]``, ``U>=2``); stormpy hides it."""
    if not f.has_lower_bound:
        return False
    text = str(f)
    m = re.search(r"U\[([^,\]]+),", text) or re.search(r"U>=?\s*([^\s\[(]+)", text)
    return m is None or m.group(1).strip() != "0"


def _propositional(f: Any) -> bool:
    if isinstance(f, sl.UnaryBooleanStateFormula):
        return _propositional(f.subformula)
    return isinstance(f, (sl.AtomicExpressionFormula, sl.AtomicLabelFormula, sl.BooleanLiteralFormula))


def solution_of(f: Any) -> str:
    """``sound``, ``steps`` or ``other``: see :class:`PropertySpec`'s ``solution``."""
    sub = f.subformula
    if isinstance(f, sl.LongRunAverageOperatorFormula) or isinstance(sub, sl.LongRunAverageRewardFormula):
        return "other"
    if isinstance(sub, (sl.CumulativeRewardFormula, sl.InstantaneousRewardFormula)):
        return "steps"
    text = str(sub)
    if not isinstance(sub, EXPOSED):  # X, total rewards, LTL
        if text.strip() == "C":
            return "sound"  # total reward: Storm reduces it to a reachability reward, solved the same way
        nexts = re.fullmatch(r"(?:X\s*)+(.*)", text)
        operand = "" if nexts is None else nexts.group(1)
        if operand and not re.search(r"\b(F|G|U|W|X|P|R|LRA|T)\b|\[", operand):  # X ... X over a state formula
            return "steps"
        return "other"
    if not all(_propositional(c) for c in children(sub)):
        return "other"
    if isinstance(sub, sl.BoundedUntilFormula):
        return "steps"
    return "sound"


def has_opaque_combination(f: Any) -> bool:
    """Whether ``f`` holds a Boolean combination that stays a ``BinaryBooleanStateFormula``.

    With labels expanded, that happens only where a built-in label ("init", "deadlock") is combined with something
    else; stormpy does not expose such a formula's operands, so their atoms could not be labelled.
    """
    stack = [f]
    while stack:
        g = stack.pop()
        if isinstance(g, sl.BinaryBooleanStateFormula):
            return True
        stack.extend(children(g))
    return False


def terminal_of(f: Any, model: Model) -> list[tuple[CompiledExpr, bool]]:
    # Mirrors storm::builder::getTerminalStatesFromFormula.
    out: list[tuple[CompiledExpr, bool]] = []
    if not isinstance(f, (sl.ProbabilityOperatorFormula, sl.RewardOperatorFormula, sl.TimeOperatorFormula)):
        return out
    sub = f.subformula
    if isinstance(sub, sl.EventuallyFormula):
        a = atom_of(sub.subformula, model)
        if a is not None:
            out.append((a[1], True))
    elif isinstance(sub, (sl.UntilFormula, sl.BoundedUntilFormula)) and isinstance(f, sl.ProbabilityOperatorFormula):
        # Storm uses an until formula only when its left side is atomic or the literal true (measured: with a
        # compound left side, e.g. !"a" U "b", it builds the whole reachable model).
        left_f = sub.left_subformula
        left = atom_of(left_f, model)
        if left is None and not (isinstance(left_f, sl.BooleanLiteralFormula) and str(left_f) == "true"):
            return out
        right = atom_of(sub.right_subformula, model)
        if right is not None and not (isinstance(sub, sl.BoundedUntilFormula) and lower_step_bound(sub)):
            out.append((right[1], True))
        if left is not None:
            out.append((left[1], False))
    return out


def _literal(f: Any, model: Model) -> tuple[CompiledExpr, bool] | None:
    """``(expression, value)`` of an atom or a negated atom (``f`` holds where the expression equals the value)."""
    if isinstance(f, sl.UnaryBooleanStateFormula):  # Storm's only unary Boolean operator: not
        inner = _literal(f.subformula, model)
        return None if inner is None else (inner[0], not inner[1])
    a = atom_of(f, model)
    return None if a is None else (a[1], True)


def stop_of(f: Any, model: Model) -> list[tuple[CompiledExpr, bool]]:
    """The stop states of a reward-bounded until ``f`` with literal sides (see ``PropertySpec.stop``), else []."""
    sub = f.subformula
    if not isinstance(sub, sl.BoundedUntilFormula):
        return []
    right = _literal(sub.right_subformula, model)
    left_f = sub.left_subformula
    literal_true = isinstance(left_f, sl.BooleanLiteralFormula) and str(left_f) == "true"
    left = None if literal_true else _literal(left_f, model)
    if right is None or (left is None and not literal_true):
        return []
    return [right] + ([] if left is None else [(left[0], not left[1])])
