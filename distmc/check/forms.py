"""Which property forms distmc's own checkers take, and what a check reads of a model for them.

:func:`unsupported` says why a form is refused (the caller then keeps Storm); for the forms taken,
:func:`reachability` gives ``P=? [phi1 U phi2]``'s state sets and step bound, and :func:`step_recurrence` turns a
step-bounded property into the recurrence its value is (:class:`Recurrence`), which the native and distributed
checkers iterate (:mod:`distmc.check.native`) and the curve iterates for many policies at once
(:mod:`distmc.curve.batched`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import stormpy.logic as sl

from distmc.check.properties import PropertySpec
from distmc.errors import PropertyError

__all__ = [
    "Labelled",
    "Recurrence",
    "path_of",
    "reachability",
    "rewards_of",
    "states_of",
    "step_recurrence",
    "unsupported",
]

_STEP_BOUND = re.compile(r"U(<=|<)")


def _state_formula_supported(f: Any) -> bool:
    # Propositional parts over variables and PRISM labels are one atomic expression once the property's labels
    # are expanded (:func:`~distmc.check.properties.parse_property`); only the negation of a built-in label
    # ("init", "deadlock") stays a formula of its own.
    if isinstance(f, sl.UnaryBooleanStateFormula):  # negation, the only unary one
        return _state_formula_supported(f.subformula)
    return isinstance(f, (sl.AtomicExpressionFormula, sl.AtomicLabelFormula, sl.BooleanLiteralFormula))


def path_of(spec: PropertySpec) -> tuple[Any, Any, int | None]:
    """(phi1, phi2, step bound or None) of the property's path formula; phi1 None means ``true``."""
    sub = spec.formula.subformula
    if isinstance(sub, sl.EventuallyFormula):
        return None, sub.subformula, None
    if isinstance(sub, sl.UntilFormula):
        return sub.left_subformula, sub.right_subformula, None
    if isinstance(sub, sl.BoundedUntilFormula):
        bound = _STEP_BOUND.search(str(sub))
        k = int(str(sub.upper_bound_expression))
        return sub.left_subformula, sub.right_subformula, k - 1 if bound and bound.group(1) == "<" else k
    raise AssertionError("unreachable: unsupported() admits no other path formula")


_REWARD_BOUND = re.compile(r"^(C|I)(<=|=)(\d+)$")


def unsupported(spec: PropertySpec, kind: str) -> str | None:
    """Why the native checker cannot check ``spec`` on an induced ``kind`` model (None: it can)."""
    if kind != "dtmc":
        return "it checks DTMCs only (this induced model keeps nondeterminism: an MDP)"
    f = spec.formula
    if isinstance(f, sl.LongRunAverageOperatorFormula):
        return "long-run averages (S=?, LRA=?) are checked by Storm only (use --checker storm or auto)"
    if isinstance(f, sl.TimeOperatorFormula):
        return "expected times (T=?) are checked by Storm only; R=? [F ...] with a reward of 1 per step is the same"
    sub = f.subformula
    if spec.is_reward:
        if isinstance(sub, sl.EventuallyFormula):
            sides = [sub.subformula]
        elif isinstance(sub, (sl.CumulativeRewardFormula, sl.InstantaneousRewardFormula)):
            bound = _REWARD_BOUND.match(str(sub).replace(" ", ""))
            if bound is None or (bound.group(1) == "C") != (bound.group(2) == "<="):
                return "it checks rewards of the forms F phi, C<=k and I=k only"
            return None
        else:
            return "it checks rewards of the forms F phi, C<=k and I=k only"
    elif not isinstance(f, sl.ProbabilityOperatorFormula):
        return "it checks P=? and R=? properties only"
    elif isinstance(sub, sl.EventuallyFormula):
        sides = [sub.subformula]
    elif isinstance(sub, sl.UntilFormula):
        sides = [sub.left_subformula, sub.right_subformula]
    elif isinstance(sub, sl.BoundedUntilFormula):
        if sub.has_lower_bound or sub.is_multi_dimensional or _STEP_BOUND.search(str(sub)) is None:
            return "it checks step bounds of the form <=k or <k only"
        try:
            int(str(sub.upper_bound_expression))
        except ValueError:
            return f"the step bound {sub.upper_bound_expression} is not an integer"
        sides = [sub.left_subformula, sub.right_subformula]
    else:
        return "it checks F, U and their step-bounded forms only"
    if not all(_state_formula_supported(s) for s in sides):
        return "it checks propositional state formulas inside the path formula only"
    return None


def states_of(f: Any, m: Labelled) -> np.ndarray:
    """``[N]`` bool: the states satisfying the propositional state formula ``f``."""
    n = m.n_states
    if f is None:
        return np.ones(n, dtype=bool)
    if isinstance(f, sl.BooleanLiteralFormula):
        return np.full(n, str(f) == "true", dtype=bool)
    if isinstance(f, sl.UnaryBooleanStateFormula):
        return ~states_of(f.subformula, m)
    name = f.label if isinstance(f, sl.AtomicLabelFormula) else str(f)
    if name not in m.labels:
        raise PropertyError(f"the induced model has no label for '{name}'")
    return m.labels[name]


def reachability(spec: PropertySpec, m: Labelled) -> tuple[np.ndarray, np.ndarray, int | None]:
    """``phi1`` ``[N]`` bool, ``phi2`` ``[N]`` bool and the step bound (None: unbounded) of ``P=? [phi1 U phi2]``.

    ``F phi`` is ``true U phi``; ``<k`` is ``<=k-1``. Only for a property :func:`unsupported` admits.
    """
    left, right, k = path_of(spec)
    return states_of(left, m), states_of(right, m), k


class Labelled(Protocol):
    """What the checks read of a model besides its rows: an :class:`InducedModel`, or one worker's part of it."""

    labels: dict[str, np.ndarray]  # name -> [n] bool
    rewards: dict[str, tuple[np.ndarray | None, np.ndarray | None]]  # name -> (state [n], action [n]) rewards
    initial: np.ndarray  # [I] int64, the initial states among the n

    @property
    def n_states(self) -> int: ...


@dataclass(frozen=True)
class Recurrence:
    """A step-bounded property's value as ``k`` Jacobi steps.

    ``x <- add + P x`` from ``x0`` (``[n]`` each) on the ``active`` rows, the others held at ``fixed``. The same
    for every DTMC on the same labelled states, except ``x0``, ``add`` and ``fixed`` where they hold rewards
    (policy-weighted action rewards).
    """

    x0: np.ndarray
    add: np.ndarray
    active: np.ndarray
    fixed: np.ndarray
    k: int


def rewards_of(m: Labelled, spec: PropertySpec) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """(the given state rewards or None, state rewards ``[n]``, state plus action rewards ``[n]``) of a reward spec."""
    # the property's structure (the model may carry several, for several properties)
    given, action = m.rewards[str(spec.reward_name)] if spec.reward_name is not None else next(iter(m.rewards.values()))
    state = np.zeros(m.n_states) if given is None else given
    return given, state, state + (0.0 if action is None else action)  # a DTMC's row r is state r's only choice


def step_recurrence(spec: PropertySpec, m: Labelled) -> Recurrence | None:
    """The :class:`Recurrence` of a step-bounded property (``U<=k``, ``F<=k``, ``C<=k``, ``I=k``); None otherwise.

    Only for a property :func:`unsupported` admits.
    """
    n = m.n_states
    zero = np.zeros(n)
    sub = spec.formula.subformula
    if not spec.is_reward:
        left, right, k = path_of(spec)
        if k is None:
            return None
        phi2 = states_of(right, m)
        fixed = phi2.astype(np.float64)
        return Recurrence(fixed, zero, states_of(left, m) & ~phi2, fixed, max(k, 0))
    if isinstance(sub, sl.EventuallyFormula):
        return None
    given, state, total = rewards_of(m, spec)
    form = _REWARD_BOUND.match(str(sub).replace(" ", ""))
    if form is None:  # unsupported() turned every other form away before
        raise PropertyError(f"{spec.text}: the native checker checks rewards of the forms F phi, C<=k and I=k only")
    kind, _, bound = form.groups()
    every = np.ones(n, dtype=bool)
    if kind == "C":  # reward collected in the first k steps
        return Recurrence(zero, total, every, total, int(bound))
    if given is None:
        raise PropertyError(
            f"'{spec.text}': the reward structure has no state rewards (as Storm refuses it: "
            "the instantaneous reward would be 0 everywhere)"
        )
    return Recurrence(state, zero, every, state, int(bound))  # I=k: the state reward at step k
