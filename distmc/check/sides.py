"""The two sides of a partial model's bounds: how the ``lo`` and ``hi`` checks see the frontier.

:func:`plan_sides` says, per property form, which labels and state rewards differ on the frontier states for each
side (:class:`Side`), or that a side is not bounded; the table is :mod:`distmc.check.partial`'s docstring.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import stormpy.logic as sl

from distmc.assemble.reducer import InducedModel
from distmc.check.formula import lower_step_bound
from distmc.check.properties import PropertySpec
from distmc.model.program import Model

__all__ = ["BOUNDED_REWARD", "Side", "plan_sides", "step_reward_bounds"]

#: A step-bounded reward, ``C<=k`` or ``I=k`` (the path formula's text, spaces removed).
BOUNDED_REWARD = re.compile(r"^(C|I)(<=|=)(\d+)$")


@dataclass
class Side:
    """How one of the two checks sees the frontier.

    Attributes:
        labels: label name -> ``[N]`` bool, the labels that differ from the model's.
        state_rewards: reward name -> ``[N]`` float64 state rewards that differ from the model's.
        fixed: the side's value without a check (``math.inf``: not bounded above, ``-inf`` / 0 / 1: trivially).
    """

    labels: dict[str, np.ndarray] = field(default_factory=dict)
    state_rewards: dict[str, np.ndarray] = field(default_factory=dict)
    fixed: float | None = None


def _name(f: Any) -> str:
    return f.label if isinstance(f, sl.AtomicLabelFormula) else str(f)


def _sat(f: Any, labels: dict[str, np.ndarray], n: int) -> np.ndarray:
    """``[N]`` bool: where the propositional formula ``f`` (None: ``true``) holds under ``labels``."""
    if f is None:
        return np.ones(n, dtype=bool)
    if isinstance(f, sl.BooleanLiteralFormula):
        return np.full(n, str(f) == "true", dtype=bool)
    if isinstance(f, sl.UnaryBooleanStateFormula):
        return ~_sat(f.subformula, labels, n)
    return labels[_name(f)]


def _propositional(f: Any) -> bool:
    if isinstance(f, sl.UnaryBooleanStateFormula):
        return _propositional(f.subformula)
    return isinstance(f, (sl.AtomicExpressionFormula, sl.AtomicLabelFormula, sl.BooleanLiteralFormula))


def _force(f: Any, value: bool, where: np.ndarray, labels: dict[str, np.ndarray], out: dict[str, np.ndarray]) -> None:
    """Make the propositional formula ``f`` take ``value`` on the states ``where`` (``out``: changed labels).

    A literal (``true``/``false``) cannot change; it does not need to: it holds alike on every state.
    """
    if f is None or isinstance(f, sl.BooleanLiteralFormula):
        return
    if isinstance(f, sl.UnaryBooleanStateFormula):
        _force(f.subformula, not value, where, labels, out)
        return
    name = _name(f)
    arr = out.get(name)
    if arr is None:
        arr = labels[name].copy()
    arr[where] = value
    out[name] = arr


def step_reward_bounds(model: Model, name: str | None, nvars: int) -> tuple[float, float, float, float] | None:
    """``(step_lo, step_hi, state_lo, state_hi)``: the least and greatest reward of one step and of one state.

    From the reward structure's items (their values must be constants: else None): the state part sums the
    positive (for hi) or negative (for lo) values of every state item, as several guards may hold at once; an
    action's part likewise over that action's items, and a step takes one action. Each includes 0 (a state whose
    guards all fail, or a terminal one).
    """
    rs = model.reward(name)
    probe = np.zeros((1, max(nvars, 1)), dtype=np.int64)
    items = [v for _, v in rs.state_items] + [v for _, _, v in rs.action_items]
    if not all(v.is_constant for v in items):
        return None
    state = [float(v(probe)[0]) for _, v in rs.state_items]
    s_lo, s_hi = sum(min(0.0, x) for x in state), sum(max(0.0, x) for x in state)
    per_action: dict[str, list[float]] = {}
    for action, _, v in rs.action_items:
        per_action.setdefault(action, []).append(float(v(probe)[0]))
    a_lo = min([sum(min(0.0, x) for x in xs) for xs in per_action.values()], default=0.0)
    a_hi = max([sum(max(0.0, x) for x in xs) for xs in per_action.values()], default=0.0)
    return s_lo + a_lo, s_hi + a_hi, s_lo, s_hi


def plan_sides(
    spec: PropertySpec, m: InducedModel, frontier: np.ndarray, reward_bounds: tuple[float, float, float, float] | None
) -> tuple[Side, Side, str | None]:
    """The ``lo`` and ``hi`` sides of ``spec`` on ``m`` with the frontier states ``frontier`` ``[N]`` bool.

    Returns ``(lo, hi, note)``; ``note`` says what is not bounded (None: both sides are checked).
    """
    n = m.n_states
    f = spec.formula
    sub = f.subformula if hasattr(f, "subformula") else None
    lo, hi = Side(), Side()
    if isinstance(f, sl.ProbabilityOperatorFormula):
        if isinstance(sub, (sl.EventuallyFormula, sl.UntilFormula, sl.BoundedUntilFormula)):
            left = None if isinstance(sub, sl.EventuallyFormula) else sub.left_subformula
            right = sub.subformula if isinstance(sub, sl.EventuallyFormula) else sub.right_subformula
            if _propositional(right) and (left is None or _propositional(left)):
                if isinstance(sub, sl.BoundedUntilFormula) and lower_step_bound(sub):
                    _force(right, False, frontier, m.labels, lo.labels)
                    _force(left, True, frontier, m.labels, hi.labels)
                    _force(right, True, frontier, m.labels, hi.labels)
                else:
                    _force(right, True, frontier & _sat(left, m.labels, n), m.labels, hi.labels)
                return lo, hi, None
        if isinstance(sub, sl.GloballyFormula) and _propositional(sub.subformula):
            _force(sub.subformula, False, frontier, m.labels, lo.labels)
            return lo, hi, None
        nexts = re.fullmatch(r"(?:X\s*)+(.*)", str(sub)) if sub is not None else None
        if nexts is not None and not frontier[m.initial].any() and str(sub).count("X") == 1:
            return lo, hi, None  # X phi reads the successors' labels, which are known
        return Side(fixed=0.0), Side(fixed=1.0), "not bounded (only F, U, their step-bounded forms, G and X are)"
    if spec.is_reward and isinstance(f, sl.RewardOperatorFormula):
        name = str(spec.reward_name) if spec.reward_name is not None else next(iter(m.rewards))
        state, _ = m.rewards[name]
        base = np.zeros(n) if state is None else state
        if isinstance(sub, sl.EventuallyFormula) and _propositional(sub.subformula):
            _force(sub.subformula, True, frontier, m.labels, lo.labels)
            return lo, Side(fixed=math.inf), "upper bound infinite: a reward to reach a target is not bounded"
        text = str(sub).replace(" ", "") if sub is not None else ""
        bounded = BOUNDED_REWARD.match(text)
        if text == "C":
            lo.state_rewards[name] = np.where(frontier, 0.0, base)
            return lo, Side(fixed=math.inf), "upper bound infinite: a total reward is not bounded"
        if bounded is not None:
            cumulative = bounded.group(1) == "C"
            if reward_bounds is None:
                lo.state_rewards[name] = np.where(frontier, 0.0, base)
                return (
                    lo,
                    Side(fixed=math.inf),
                    (
                        "upper bound infinite: a reward value depends on the state "
                        "(the lower bound takes rewards as non-negative)"
                    ),
                )
            r_lo, r_hi = (reward_bounds[0], reward_bounds[1]) if cumulative else (reward_bounds[2], reward_bounds[3])
            lo.state_rewards[name] = np.where(frontier, r_lo, base)
            hi.state_rewards[name] = np.where(frontier, r_hi, base)
            return lo, hi, None
        return (Side(fixed=-math.inf), Side(fixed=math.inf), "not bounded (only R of F, C, C<=k and I=k is)")
    probability = isinstance(f, sl.LongRunAverageOperatorFormula)
    return (
        Side(fixed=0.0 if probability else -math.inf),
        Side(fixed=1.0 if probability else math.inf),
        "not bounded (long-run averages and expected times are not)",
    )
