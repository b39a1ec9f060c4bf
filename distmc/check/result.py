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

from distmc.errors import DistmcError

__all__ = ["DEFAULT_PRECISION", "CheckResult", "Precision", "Value", "decide", "result_entry", "result_line"]

#: Absolute precision of every unbounded check unless asked otherwise (``--precision-abs``).
DEFAULT_PRECISION = 1e-12

#: A value at the initial state(s): one number, or ``{"min", "max"}`` (an MDP without direction, or the range
#: over several initial states).
Value = float | dict[str, float]
Bounds = tuple[float, float] | dict[str, tuple[float, float]]


@dataclass(frozen=True)
class Precision:
    """How close a sound method's bounds must be: ``eps`` relative to the value, or absolute.

    A sound iteration stops when, in every state, its upper and lower bounds ``u, l`` satisfy ``u - l <= eps``
    (absolute) or ``u - l <= eps * l`` (relative); ``exact`` asks for Storm's exact rational engine instead.
    """

    eps: float = DEFAULT_PRECISION
    relative: bool = False
    exact: bool = False
    sound_mdp: bool = False  # MDPs by interval iteration, with bounds (--sound-mdp); else Storm's default, none

    def __post_init__(self) -> None:
        if not (0.0 < self.eps < 1.0):
            raise DistmcError(f"--precision{'' if self.relative else '-abs'} must be in (0, 1), not {self.eps}")

    @classmethod
    def from_options(cls, precision: float | None, precision_abs: float | None, exact: bool = False,
                     sound_mdp: bool = False) -> Precision:
        """``--precision`` (relative) or ``--precision-abs`` (absolute), at most one; neither: 1e-12 absolute."""
        if precision is not None and precision_abs is not None:
            raise DistmcError("give --precision (relative) or --precision-abs (absolute), not both")
        if precision is not None:
            return cls(float(precision), relative=True, exact=exact, sound_mdp=sound_mdp)
        return cls(DEFAULT_PRECISION if precision_abs is None else float(precision_abs), exact=exact,
                   sound_mdp=sound_mdp)

    def interval(self, v: float, probability: bool, complement: bool = False) -> tuple[float, float]:
        """The bounds a sound method that returned ``v`` guarantees.

        Storm's sound value iteration (DTMCs) returns the midpoint of its last lower and upper bounds, which are
        within ``eps`` (absolute) or ``eps * lower`` (relative) of each other, so the exact value is within half
        of that of ``v``; the interval given is twice as wide, a margin for the rounding of the iteration's own
        floating point (which the method does not control). Interval iteration (MDPs) stops at the same
        criterion; the interval holds whether it returns the midpoint or an end of its last interval. Probabilities are clipped to [0, 1]. ``complement``: ``v`` is
        1 minus the value iterated (``G phi`` is ``1 - F !phi``), whose relative error is relative to ``1 - v``.
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
        return f"{self.eps:g} {'relative' if self.relative else 'absolute'}" + (", sound MDPs" if self.sound_mdp else "")


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
        method: ``sound``, ``steps``, ``exact`` or ``other`` (how the value was found).
        checker: who checked: ``storm``, ``native``, ...
        check_s: seconds the check took.
    """

    value: Value
    bounds: Bounds | None = None
    truth: bool | None = None
    decided: bool | None = None
    exact: str | dict[str, str] | None = None
    method: str = "sound"
    checker: str = "storm"
    check_s: float = 0.0


def decide(values: Iterable[float | Fraction], threshold: tuple[str, Fraction]) -> bool:
    """Whether every one of ``values`` satisfies ``comparison bound`` (floats compared exactly, as rationals)."""
    op, bound = threshold
    for v in values:
        q: Fraction | float = v if isinstance(v, Fraction) or not math.isfinite(v) else Fraction(v)
        ok = {">=": q >= bound, ">": q > bound, "<=": q <= bound, "<": q < bound}[op]
        if not ok:
            return False
    return True


def summarise(per_state: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None) -> tuple[Value, Bounds | None]:
    """The value and bounds of one direction at the initial states ``[I]``: one number, or their range."""
    if per_state.shape[0] == 1:
        return float(per_state[0]), None if lo is None or hi is None else (float(lo[0]), float(hi[0]))
    value = {"min": float(per_state.min()), "max": float(per_state.max())}
    if lo is None or hi is None:
        return value, None
    return value, {"min": (float(lo.min()), float(hi.min())), "max": (float(lo.max()), float(hi.max()))}


def _fmt(v: object) -> str:
    return f"{v:.12g}" if isinstance(v, float) else str(v)


def _value_text(value: object, bounds: object) -> str:
    """``v (+-err)``, or ``[min (+-e), max (+-e)] (min, max)``."""
    def one(v: float, b: object) -> str:
        if b is None or v != v or abs(v) == float("inf"):
            return _fmt(v)
        pair: tuple[float, float] = tuple(b)  # type: ignore[arg-type,assignment]
        lo, hi = pair
        return f"{_fmt(v)} (+-{max(hi - v, v - lo):.2g})"

    if isinstance(value, dict):
        bd = bounds if isinstance(bounds, dict) else {}
        return f"[{one(value['min'], bd.get('min'))}, {one(value['max'], bd.get('max'))}] (min, max)"
    return one(value, bounds)  # type: ignore[arg-type]


def result_entry(text: str, name: str | None, res: CheckResult) -> dict[str, object]:
    """One property's entry of the report's ``results``: property, name, value (and truth), bounds, checker, ..."""
    bounds: object = res.bounds
    if isinstance(bounds, tuple):
        bounds = list(bounds)
    elif isinstance(bounds, dict):
        bounds = {k: list(v) for k, v in bounds.items()}
    entry: dict[str, object] = {"property": text, "name": name}
    if res.truth is not None:
        entry["truth"] = res.truth
        entry["decided"] = res.decided
    entry.update(value=res.value, bounds=bounds, method=res.method, checker=res.checker, check_s=res.check_s)
    if res.exact is not None:
        entry["exact"] = res.exact
    return entry


def _width(bounds: object) -> float:
    """Hi - lo of a partial answer's bounds (the widest of min and max)."""
    if isinstance(bounds, dict):
        return max(float(v[1]) - float(v[0]) for v in bounds.values())
    return float(bounds[1]) - float(bounds[0])  # type: ignore[index]


def result_line(entry: dict[str, object]) -> str:
    """The text report's line of one property."""
    label = entry["property"] if entry.get("name") is None else f'"{entry["name"]}": {entry["property"]}'
    value = _value_text(entry["value"], None if entry.get("method") == "exact" else entry.get("bounds"))
    if entry.get("partial"):  # a partial model: the bounds are the answer (distmc.check.partial)
        b = entry["bounds"]
        if isinstance(b, dict):
            value = "in " + ", ".join(f"{k} [{_fmt(v[0])}, {_fmt(v[1])}]" for k, v in b.items())
        else:
            pair: list[float] = b  # type: ignore[assignment]
            value = f"in [{_fmt(pair[0])}, {_fmt(pair[1])}]"
        value += f" (width {_fmt(_width(b))}, partial model" + (f"; {entry['not_bounded']})" if entry.get(
            "not_bounded") else ")")
        if "truth" in entry:
            value = f"{str(entry['truth']).lower()} ({value})"
        return f"{label}  =  {value}"
    if "truth" in entry:
        note = "" if entry.get("decided") is not False else ": the bounds contain the threshold, ask a finer --precision"
        value = f"{str(entry['truth']).lower()} (value {value}{note})"
    if entry.get("exact") is not None:
        value += f" = {entry['exact']}" if len(str(entry["exact"])) <= 40 else " (exact rational)"
    return f"{label}  =  {value}"
