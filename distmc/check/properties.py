"""PCTL properties: parsing against the model, the atoms to label, and the property-driven terminal states.

Terminal states follow Storm's property-driven builder (``storm/builder/TerminalStatesGetter``) exactly, so that
state and transition counts are comparable with ``stormpy.build_model(program, properties)``: only an atomic
child (a label or an expression) of the outermost ``P``/``R`` operator's path formula counts:

* ``F phi`` (unbounded): states satisfying ``phi`` are not expanded;
* ``phi1 U phi2`` (unbounded): states satisfying ``phi2``, and states violating ``phi1``, are not expanded, but
  only when ``phi1`` is atomic or ``true``;
* the same for their step-bounded forms (``F<=k``, ``phi1 U<=k phi2``);
* ``G``, cumulative and instantaneous rewards: no terminal states.

Labels of the PRISM program inside the property are replaced by their defining expressions before the formula
used for checking is parsed, so that every propositional subformula becomes one atomic expression; the reducer
labels the assembled model with each of them under the name Storm's checker looks up (the expression's text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import stormpy
import stormpy.logic as sl

from distmc._internal.stderr import storm_lines, storm_quiet
from distmc.errors import PropertyError
from distmc.model.expr import CompiledExpr
from distmc.model.program import Model

__all__ = ["PropertySpec", "parse_property"]

_LABEL_REF = re.compile(r'(?<![{\w])"([^"]+)"')
_BUILTIN_LABELS = ("init", "deadlock")


@dataclass
class PropertySpec:
    """A parsed property and what exploration and assembly need from it.

    Attributes:
        text: the property as the user gave it.
        formula: the stormpy formula used for checking (labels expanded into expressions).
        atoms: label name in the assembled model -> compiled expression.
        terminal: ``(expression, value)`` pairs: a state where ``expression == value`` is not expanded.
        reward_name: the reward structure an ``R`` operator refers to (None: the model's only/first one).
        is_reward: whether the property is an ``R`` operator.
        has_direction: whether ``min``/``max`` was given.
    """

    text: str
    formula: Any
    atoms: dict[str, CompiledExpr] = field(default_factory=dict)
    terminal: list[tuple[CompiledExpr, bool]] = field(default_factory=list)
    reward_name: str | None = None
    is_reward: bool = False
    has_direction: bool = False
    builtin_labels: set[str] = field(default_factory=set)

    def terminal_mask(self, states: np.ndarray) -> np.ndarray:
        """``[B]`` bool: which of ``states`` ``[B, V]`` are not to be expanded."""
        out = np.zeros(states.shape[0], dtype=bool)
        for e, value in self.terminal:
            v = e(states)
            out |= v if value else ~v
        return out

    def with_direction(self, direction: str) -> Any:
        """A copy of the formula with ``min`` or ``max`` set (for MDPs)."""
        f = self.formula.clone()
        f.set_optimality_type(
            sl.OptimizationDirection.MINIMIZE if direction == "min" else sl.OptimizationDirection.MAXIMIZE
        )
        return f


#: Words of the property language itself (PCTL operators, functions, literals).
_KEYWORDS = {"P", "R", "S", "F", "G", "U", "W", "X", "C", "I", "LRA", "min", "max", "Pmin", "Pmax", "Rmin", "Rmax",
             "true", "false", "floor", "ceil", "pow", "mod", "log", "multi", "filter", "T"}


def _unknown_names(text: str, model: Model) -> list[str]:
    """Identifiers in ``text`` (outside quoted labels and reward names) that the model does not define."""
    bare = re.sub(r'"[^"]*"', " ", text)
    known = {v.name for v in model.variables} | {c.name for c in model.program.constants}
    return sorted({w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", bare) if w not in known | _KEYWORDS})


def _parse(text: str, model: Model) -> Any:
    try:
        with storm_quiet():
            props = stormpy.parse_properties(text, model.program)
    except RuntimeError as exc:
        unknown = _unknown_names(text, model)
        if unknown:
            raise PropertyError(
                f"property '{text}' names {', '.join(unknown)}: not a variable or constant of "
                f"{model.path.name} (variables: {', '.join(v.name for v in model.variables)}; labels are written "
                f'in quotes, as in F "goal")'
            ) from None
        raise PropertyError(f"cannot parse property '{text}': {' '.join(storm_lines(str(exc))) or repr(exc)}") from None
    if len(props) != 1:
        raise PropertyError(f"expected exactly one property, got {len(props)} in '{text}'")
    return props[0].get_raw_formula()


def _atom(f: Any, model: Model) -> tuple[str, CompiledExpr] | None:
    """(label name, expression) of an atomic formula, else None."""
    if isinstance(f, sl.AtomicExpressionFormula):
        return str(f), model.compile(f.get_expression())
    if isinstance(f, sl.AtomicLabelFormula):
        name = f.label
        if name in model.labels:
            return f'"{name}"', model.labels[name]
        return None
    return None


def _children(f: Any) -> list[Any]:
    out = []
    for attr in ("subformula", "left_subformula", "right_subformula", "main_subformula", "conditional_subformula"):
        if hasattr(f, attr):
            try:
                out.append(getattr(f, attr))
            except RuntimeError:
                pass
    return out


def parse_property(text: str, model: Model) -> PropertySpec:
    """Parse ``text`` against ``model``; check that every label it names exists.

    Raises:
        PropertyError: on a syntax error, an unknown label or variable, or an unsupported operator.
    """
    for name in _LABEL_REF.findall(text):
        if name not in model.labels and name not in _BUILTIN_LABELS:
            raise PropertyError(
                f"property '{text}' names label \"{name}\", which {model.path} does not define "
                f"(labels: {', '.join(sorted(model.labels)) or 'none'})"
            )
    original = _parse(text, model)
    if not (original.is_probability_operator_formula or original.is_reward_operator_formula):
        raise PropertyError(f"property '{text}' must be a P=? or R=? query (optionally with min/max)")
    spec = PropertySpec(text=text, formula=None)
    spec.is_reward = bool(original.is_reward_operator_formula)
    spec.has_direction = bool(original.has_optimality_type)
    if spec.is_reward:
        if not model.rewards:
            raise PropertyError(f"property '{text}' asks for rewards, but {model.path} has no reward structure")
        if original.has_reward_model_name():
            spec.reward_name = original.reward_name
            if spec.reward_name not in [r.name for r in model.rewards]:
                raise PropertyError(
                    f"property '{text}' names reward structure '{spec.reward_name}', which the model lacks "
                    f"(have: {[r.name for r in model.rewards]})"
                )
        elif len(model.rewards) > 1:
            spec.reward_name = model.rewards[0].name
    spec.terminal = _terminal(original, model)
    # The formula for checking: PRISM labels expanded, so propositional parts are single atomic expressions.
    expanded = _LABEL_REF.sub(
        lambda m: f"({model.labels[m.group(1)].text})" if m.group(1) in model.labels else m.group(0), text
    )
    spec.formula = _parse(expanded, model)
    if _has_opaque_combination(spec.formula):
        expanded = _expand_builtin(expanded, text, model)
        spec.formula = _parse(expanded, model)
    spec.builtin_labels = {n for n in _LABEL_REF.findall(expanded) if n in _BUILTIN_LABELS}
    stack = [spec.formula]
    while stack:
        f = stack.pop()
        a = _atom(f, model)
        if a is not None:
            spec.atoms[a[0]] = a[1]
        stack.extend(_children(f))
    return spec


def _has_opaque_combination(f: Any) -> bool:
    """Whether ``f`` holds a Boolean combination that stays a ``BinaryBooleanStateFormula``.

    With labels expanded, that happens only where a built-in label ("init", "deadlock") is combined with something
    else; stormpy does not expose such a formula's operands, so their atoms could not be labelled.
    """
    stack = [f]
    while stack:
        g = stack.pop()
        if isinstance(g, sl.BinaryBooleanStateFormula):
            return True
        stack.extend(_children(g))
    return False


#: At most this many initial states are spelled out for "init" inside a Boolean combination.
_MAX_INIT_DISJUNCTS = 64


def _expand_builtin(expanded: str, text: str, model: Model) -> str:
    """``expanded`` with "init" written as the disjunction of the initial states' valuations."""
    if '"deadlock"' in expanded:
        raise PropertyError(
            f"property '{text}': \"deadlock\" inside a Boolean combination is not supported (use it on its own, "
            f"e.g. F \"deadlock\")"
        )
    states = model.initial_states
    if states.shape[0] > _MAX_INIT_DISJUNCTS:
        raise PropertyError(
            f"property '{text}': \"init\" inside a Boolean combination is spelled out as the initial states, and "
            f"this model has {states.shape[0]} (at most {_MAX_INIT_DISJUNCTS}); use it on its own"
        )
    disjuncts = []
    for row in states.tolist():
        parts = [(v.name if val else f"!{v.name}") if v.is_bool else f"{v.name}={val}"
                 for v, val in zip(model.variables, row, strict=True)]
        disjuncts.append("(" + (" & ".join(parts) or "true") + ")")
    return expanded.replace('"init"', "(" + " | ".join(disjuncts) + ")")


def _terminal(f: Any, model: Model) -> list[tuple[CompiledExpr, bool]]:
    # Mirrors storm::builder::getTerminalStatesFromFormula.
    out: list[tuple[CompiledExpr, bool]] = []
    if not isinstance(f, (sl.ProbabilityOperatorFormula, sl.RewardOperatorFormula)):
        return out
    sub = f.subformula
    if isinstance(sub, sl.EventuallyFormula):
        a = _atom(sub.subformula, model)
        if a is not None:
            out.append((a[1], True))
    elif isinstance(sub, (sl.UntilFormula, sl.BoundedUntilFormula)) and isinstance(f, sl.ProbabilityOperatorFormula):
        # Storm uses an until formula only when its left side is atomic or the literal true (measured: with a
        # compound left side, e.g. !"a" U "b", it builds the whole reachable model).
        left_f = sub.left_subformula
        left = _atom(left_f, model)
        if left is None and not (isinstance(left_f, sl.BooleanLiteralFormula) and str(left_f) == "true"):
            return out
        right = _atom(sub.right_subformula, model)
        if right is not None:
            out.append((right[1], True))
        if left is not None:
            out.append((left[1], False))
    return out
