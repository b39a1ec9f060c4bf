"""What a check returns (:class:`CheckResult`: value, bounds, truth) and the precision it is asked for.

Every checker (Storm, the native one, a distributed one) returns a :class:`CheckResult`. ``bounds`` is the interval
the checker guarantees to contain the exact value of the induced model (up to the floating-point rounding of the
iteration itself), or None where the method states none: step-bounded properties (``X``, ``F<=k``, ``C<=k``,
``I=k``: finitely many matrix-vector steps, exact but for floating point), long-run averages, nested operators.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from distmc.errors import UsageError

__all__ = [
    "DEFAULT_PRECISION",
    "DEFAULT_RELATIVE",
    "ROUNDING_ULPS",
    "TRUTH_FILTERS",
    "VALUE_FILTERS",
    "CheckResult",
    "JsonBounds",
    "Precision",
    "Value",
    "bound_pairs",
    "decide",
    "filtered",
    "json_bounds",
    "result_entry",
    "result_line",
    "summarise",
    "widen",
]

#: Absolute part of the default precision of every unbounded check (``--precision-abs`` replaces the default rule).
DEFAULT_PRECISION = 1e-12

#: Relative part of the default precision: by default the bounds must be within both, so that a rare event's
#: probability keeps its digits (brp's 7.0e-10 within 1e-12 absolute alone has a relative error of 6e-4).
DEFAULT_RELATIVE = 1e-6

#: An absolute precision never asks for less than this relative width (about 64 units in the last
#: place): 1e-12 absolute is below float64's resolution for values above about 4,500.
FLOAT_FLOOR = 2.0**-46

#: Every reported interval is widened by this many units in the last place of its ends: a margin for the rounding
#: of the iteration's last step (the bounds are the iteration's own lower and upper vectors, computed in floating
#: point; neither Storm nor distmc bounds the rounding of the whole iteration, see ``tests/test_bounds.py``).
ROUNDING_ULPS = 16

#: A value at the initial state(s): one number, or ``{"min", "max"}`` (an MDP without direction, or the range
#: over several initial states).
Value = float | dict[str, float]
Bounds = tuple[float, float] | dict[str, tuple[float, float]]
#: :data:`Bounds` as a report's JSON holds them: lists, not tuples.
JsonBounds = list[float] | dict[str, list[float]]


@dataclass(frozen=True)
class Precision:
    """How close a sound method's bounds ``[lo, hi]`` must be (the rule its iteration stops at).

    * the default rule (``relative`` False, ``rel`` set): ``hi - lo <= min(max(eps, FLOAT_FLOOR * m), rel * m)``,
      ``m`` the smaller of ``|lo|, |hi|`` (0 when the interval holds 0): within 1e-12 absolute and 1e-6
      relative; for a value above about 70 (an expected reward), where 1e-12 is finer than float64 resolves
      reliably, the absolute part is :data:`FLOAT_FLOOR` relative instead;
    * ``--precision-abs EPS`` (``rel`` None): ``hi - lo <= max(eps, FLOAT_FLOOR * m)``;
    * ``--precision EPS`` (``relative``): ``hi - lo <= eps * m``;
    * ``exact``: Storm's exact rational engine instead.

    The interval tested is the iteration's own (the report widens it by :data:`ROUNDING_ULPS`), at the states
    whose values are reported (the initial states; every state for ``--values``).
    """

    eps: float = DEFAULT_PRECISION
    relative: bool = False
    exact: bool = False
    sound_mdp: bool = False  # MDPs by interval iteration, with bounds; else Storm's default min-max VI, none
    rel: float | None = DEFAULT_RELATIVE  # the default rule's relative part (absolute ``eps`` only: None)

    def __post_init__(self) -> None:
        if not (0.0 < self.eps < 1.0):
            raise UsageError(f"--precision{'' if self.relative else '-abs'} must be in (0, 1), not {self.eps}")

    @classmethod
    def from_options(
        cls, precision: float | None, precision_abs: float | None, exact: bool = False, sound_mdp: bool = False
    ) -> Precision:
        """``--precision`` (relative) or ``--precision-abs`` (absolute), at most one; neither: the default rule.

        MDPs get sound bounds (interval iteration) whenever a precision is given, or with ``sound_mdp``.
        """
        if precision is not None and precision_abs is not None:
            raise UsageError("give --precision (relative) or --precision-abs (absolute), not both")
        given = precision is not None or precision_abs is not None
        if precision is not None:
            return cls(float(precision), relative=True, exact=exact, sound_mdp=True, rel=None)
        if precision_abs is not None:
            return cls(float(precision_abs), exact=exact, sound_mdp=True, rel=None)
        return cls(exact=exact, sound_mdp=sound_mdp or given)

    def target(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """``[k]``: the width the rule allows the intervals ``[lo, hi]`` (``[k]`` each)."""
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            m = np.where(lo * hi > 0, np.minimum(np.abs(lo), np.abs(hi)), 0.0)
        if self.relative:
            return self.eps * m
        if self.rel is None:  # never finer than float64 resolves (a large expected reward)
            return np.maximum(self.eps, FLOAT_FLOOR * m)
        return np.minimum(np.maximum(self.eps, FLOAT_FLOOR * m), self.rel * m)

    def excess(self, lo: np.ndarray, hi: np.ndarray) -> float:
        """How far the widest of the intervals ``[lo, hi]`` (``[k]`` each) is over what the rule allows.

        At most 0 when every one meets it; an infinite or NaN end counts as met (an infinite reward is exact), and
        so does a point (exact: a prob0/prob1 state, a step-bounded value). The rule applies to the iteration's
        own bounds; the report widens them by :data:`ROUNDING_ULPS` (:func:`widen`) on top, which is below the
        rule's resolution (32 ulps: 7e-15 at 1, 1.8e-12 at 315).
        """
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        with np.errstate(invalid="ignore"):  # infinite rewards: inf - inf
            over = (hi - lo) - self.target(lo, hi)
        over = over[np.isfinite(over) & (hi > lo)]
        return float(over.max(initial=-np.inf))

    def interval(self, v: float, probability: bool, complement: bool = False) -> tuple[float, float]:
        """The bounds ``v +- eps`` (absolute) or ``v +- eps * scale`` (relative): a method's stated tolerance.

        For a value whose method hands out no bounds of its own; the checkers report the sound iteration's own
        lower and upper bounds instead. ``complement``: ``v`` is 1 minus the value iterated (``G phi`` is
        ``1 - F !phi``), whose relative error is relative to ``1 - v``. Probabilities are clipped to [0, 1].
        """
        if not math.isfinite(v):
            return (v, v)
        scale = max(abs(v), abs(1.0 - v)) if complement else abs(v)
        err = self.eps * scale if self.relative else self.eps
        lo, hi = v - err, v + err
        if probability:
            lo, hi = max(lo, 0.0), min(hi, 1.0)
        return (lo, hi)

    def describe(self) -> str:
        if self.exact:
            return "exact"
        if self.relative:
            text = f"{self.eps:g} relative"
        elif self.rel is not None:
            text = f"{self.eps:g} absolute and {self.rel:g} relative"
        else:
            text = f"{self.eps:g} absolute"
        return text + (", sound MDPs" if self.sound_mdp and self.rel is not None and not self.relative else "")


def widen(lo: np.ndarray, hi: np.ndarray, probability: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``[lo, hi]`` (arrays, or numbers) widened by :data:`ROUNDING_ULPS` units in the last place of each end.

    ``probability``: the result clipped to [0, 1]. Infinite ends stay as they are, and so do ends that are 0 (a
    bound of 0 comes from the graph analysis, exact, not from a rounded iteration step).
    """
    lo_a, hi_a = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out_lo = np.where(np.isfinite(lo_a) & (lo_a != 0), lo_a - ROUNDING_ULPS * np.spacing(np.abs(lo_a)), lo_a)
        out_hi = np.where(np.isfinite(hi_a) & (hi_a != 0), hi_a + ROUNDING_ULPS * np.spacing(np.abs(hi_a)), hi_a)
    if probability:
        out_lo, out_hi = np.clip(out_lo, 0.0, 1.0), np.clip(out_hi, 0.0, 1.0)
    return out_lo, out_hi


@dataclass(frozen=True)
class CheckResult:
    """One property's answer at the initial state(s).

    Attributes:
        value: the value (of the quantitative form, for a threshold property).
        bounds: ``[lo, hi]`` guaranteed to contain the exact value (the same shape as ``value``: ``{"min": [lo,
            hi], "max": [lo, hi]}`` for a range), or None (see the module docstring).
        truth: a threshold property's truth value at every initial state (all of them), else None.
        decided: whether ``bounds`` settle ``truth`` (False: the threshold lies within the bounds, so a finer
            precision may change it; None: no bounds, or no threshold).
        exact: with the exact engine, the value as a rational (``"1/6"``), else None.
        method: ``sound``, ``steps``, ``exact``, ``other`` or ``iterative`` (how the value was found).
        checker: who checked: ``storm``, ``native``, ...
        check_s: seconds the check took.
        note: one sentence the report prints under the value (an MDP value without bounds is not sound; a slowly
            converging chain answered by the exact engine).
    """

    value: Value
    bounds: Bounds | None = None
    truth: bool | None = None
    decided: bool | None = None
    exact: str | dict[str, str] | None = None
    method: str = "sound"
    checker: str = "storm"
    check_s: float = 0.0
    note: str | None = None


def decide(values: Iterable[float | Fraction], threshold: tuple[str, Fraction]) -> bool:
    """Whether every one of ``values`` satisfies ``comparison bound`` (floats compared exactly, as rationals)."""
    op, bound = threshold
    for v in values:
        q: Fraction | float = v if isinstance(v, Fraction) or not math.isfinite(v) else Fraction(v)
        ok = {">=": q >= bound, ">": q > bound, "<=": q <= bound, "<": q < bound}[op]
        if not ok:
            return False
    return True


#: Filters over the initial states (``filter(op, P=? [...], "init")``) whose result is a value of the property.
VALUE_FILTERS = ("min", "max", "avg", "sum", "first", "range")
#: Filters over the initial states that count or quantify a threshold property's truth values.
TRUTH_FILTERS = ("count", "forall", "exists")


def filtered(values: np.ndarray, filter_op: str) -> float:
    """One number of the initial states' ``values``: a filter's ``min``, ``max``, ``avg``, ``sum`` or ``first``."""
    return float(
        values[0] if filter_op == "first" else getattr(np, "mean" if filter_op == "avg" else filter_op)(values)
    )


def summarise(
    per_state: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None, filter_op: str | None = None
) -> tuple[Value, Bounds | None]:
    """The value and bounds of one direction at the initial states ``[I]``: one number, or their range.

    ``filter_op``: a filter of :data:`VALUE_FILTERS` over the initial states (PRISM's and Storm's ``filter(op,
    prop, "init")``): one number, its bounds the same function of the states' bounds (``range``: the range).
    """
    if filter_op in ("min", "max", "avg", "sum", "first"):

        def f(a: np.ndarray) -> float:
            return filtered(a, filter_op)

        return f(per_state), None if lo is None or hi is None else (f(lo), f(hi))
    if per_state.shape[0] == 1:
        return float(per_state[0]), None if lo is None or hi is None else (float(lo[0]), float(hi[0]))
    value = {"min": float(per_state.min()), "max": float(per_state.max())}
    if lo is None or hi is None:
        return value, None
    return value, {"min": (float(lo.min()), float(hi.min())), "max": (float(lo.max()), float(hi.max()))}


def _fmt(v: object) -> str:
    return f"{v:.12g}" if isinstance(v, float) else str(v)


def json_bounds(bounds: Bounds | None) -> JsonBounds | None:
    """``bounds`` as the report's JSON holds them (lists)."""
    if isinstance(bounds, dict):
        return {k: list(v) for k, v in bounds.items()}
    return None if bounds is None else list(bounds)


def bound_pairs(bounds: object) -> list[tuple[float, float]]:
    """The ``(lo, hi)`` pairs of bounds as a result or a report's entry holds them: one, or min's and max's."""
    pairs = list(bounds.values()) if isinstance(bounds, dict) else [bounds]
    out: list[tuple[float, float]] = []
    for pair in pairs:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise TypeError(f"bounds {bounds!r} are not [lo, hi] or {{'min': [lo, hi], 'max': [lo, hi]}}")
        out.append((pair[0], pair[1]))
    return out


def _value_text(value: object, bounds: object) -> str:
    """``v (+-err)``, or ``[min (+-e), max (+-e)] (min, max)``."""

    def one(v: object, b: object) -> str:
        if b is None or not isinstance(v, int | float) or not math.isfinite(v):
            return _fmt(v)
        ((lo, hi),) = bound_pairs(b)
        return f"{_fmt(v)} (+-{max(hi - v, v - lo):.2g})"

    if isinstance(value, dict):
        bd = bounds if isinstance(bounds, dict) else {}
        return f"[{one(value['min'], bd.get('min'))}, {one(value['max'], bd.get('max'))}] (min, max)"
    return one(value, bounds)


def result_entry(text: str, name: str | None, res: CheckResult) -> dict[str, object]:
    """One property's entry of the report's ``results``: property, name, value (and truth), bounds, checker, ..."""
    entry: dict[str, object] = {"property": text, "name": name}
    if res.truth is not None:
        entry["truth"] = res.truth
        entry["decided"] = res.decided
    entry.update(
        value=res.value, bounds=json_bounds(res.bounds), method=res.method, checker=res.checker, check_s=res.check_s
    )
    if res.exact is not None:
        entry["exact"] = res.exact
    if res.note is not None:
        entry["note"] = res.note
    return entry


def _width(bounds: object) -> float:
    """Hi - lo of a partial answer's bounds (the widest of min and max)."""
    return max(float(hi) - float(lo) for lo, hi in bound_pairs(bounds))


def result_line(entry: dict[str, object]) -> str:
    """The text report's line of one property."""
    label = entry["property"] if entry.get("name") is None else f'"{entry["name"]}": {entry["property"]}'
    value = _value_text(entry["value"], None if entry.get("method") == "exact" else entry.get("bounds"))
    if entry.get("partial"):  # a partial model: the bounds are the answer (distmc.check.partial)
        b = entry["bounds"]
        if isinstance(b, dict):
            value = "in " + ", ".join(f"{k} [{_fmt(v[0])}, {_fmt(v[1])}]" for k, v in b.items())
        else:
            ((lo, hi),) = bound_pairs(b)
            value = f"in [{_fmt(lo)}, {_fmt(hi)}]"
        value += f" (width {_fmt(_width(b))}, partial model" + (
            f"; {entry['not_bounded']})" if entry.get("not_bounded") else ")"
        )
        if "truth" in entry:
            value = f"{str(entry['truth']).lower()} ({value})"
        return f"{label}  =  {value}"
    if "truth" in entry:
        note = (
            "" if entry.get("decided") is not False else ": the bounds contain the threshold, ask a finer --precision"
        )
        value = f"{str(entry['truth']).lower()} (value {value}{note})"
    if entry.get("exact") is not None:
        value += f" = {entry['exact']}" if len(str(entry["exact"])) <= 40 else " (exact rational)"
    note = f"\n    ({entry['note']})" if entry.get("note") else ""
    return f"{label}  =  {value}{note}"
