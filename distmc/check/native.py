"""distmc's own checker for reachability probabilities and rewards of an induced DTMC, for models Storm cannot hold.

Storm is the reference checker and the default. Its import and check need about 80 B per transition beyond
what the explorer holds (its matrix with 64-bit columns, the import's buffers, the check's backward transitions
and submatrix; measured, see ``benchmarks/RESULTS.md``), which puts avoid 12x12 (354 M transitions) past a
24 GiB machine. This checker works on the reducer's CSR chunks as they are (no copy), so an induced model that
could be explored can also be checked:

* ``P=? [phi1 U<=k phi2]`` and ``P=? [F<=k phi]`` (also ``<k``): ``k`` matrix-vector products from the indicator
  of ``phi2``, each row of a ``phi1 & !phi2`` state multiplied with the previous vector and every other state held
  at 1 (``phi2``) or 0, which is the recurrence Storm's bounded-until check iterates (there on its "maybe"
  states only; the values agree, ``tests/test_native_checker.py``);
* ``P=? [phi1 U phi2]`` and ``P=? [F phi]``: Storm's graph analysis first (``prob0``: states that cannot reach
  ``phi2`` through ``phi1`` states; ``prob1``: states that cannot reach a ``prob0`` state through the others,
  both by backward search on the transposed graph), then sound value iteration on the remaining states, the
  method Storm uses for distmc's DTMC checks (Quatmann and Katoen, CAV 2018): the probability ``x`` of having
  reached the ``prob1`` states within k steps and the probability ``y`` of still being undecided give bounds
  ``x + y * [L, U]`` on every value, iterated until these bounds at the initial states meet the precision's rule
  (:class:`~distmc.check.result.Precision`: by default within 1e-12 absolute and 1e-6 relative); the report
  gives these lower and upper bounds themselves (the value is their midpoint). A chain on which the bounds close
  too slowly to get there within :data:`~distmc.check.checker.MAX_ITERATIONS` is stopped early
  (:class:`~distmc.errors.SlowConvergenceError`);
* ``R=? [F phi]``: infinite where ``phi`` is reached with probability below 1 (prob1 as above), 0 on ``phi``,
  elsewhere the same sound value iteration with the state's reward (state plus policy-weighted action reward)
  added in every step; ``R=? [C<=k]``: ``k`` steps of ``x <- r + P x`` from 0; ``R=? [I=k]``: ``k`` steps of
  ``x <- P x`` from the state rewards (refused, as by Storm, when the structure has none).

``phi1`` and ``phi2`` are the property's atoms (labels the reducer wrote), ``true``/``false``, or their negation.
Anything else (MDPs, nested P operators, lower step bounds, total or long-run rewards) is refused by
:func:`~distmc.check.forms.unsupported`, and the caller keeps Storm. Products are Jacobi steps, parallel over rows and summed in row
order, so the result does not depend on the thread count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from distmc.assemble.reducer import InducedModel
from distmc.check.checker import MAX_ITERATIONS
from distmc.check.forms import (
    Labelled,
    path_of,
    rewards_of,
    states_of,
    step_recurrence,
    unsupported,
)
from distmc.check.kernels import ChunkedCSR, reach_back_from
from distmc.check.properties import PropertySpec
from distmc.check.result import DEFAULT_PRECISION, Precision
from distmc.errors import PropertyError, SlowConvergenceError

__all__ = ["Engine", "LocalEngine", "Stop", "at_initial", "check_native", "matrix_of", "native_values", "values_of"]

class Engine(Protocol):
    """The collective operations the checks below are written against (one per worker, the same calls on all).

    Vectors are "extended": ``[C]`` with the caller's ``n`` own states first (its rows), then, for a worker of
    the distributed checker, copies of the other workers' states its rows point to; the checks only read and write
    the first ``n`` entries. :class:`LocalEngine` is the native checker (``C = n``, nothing to exchange);
    :class:`distmc.check.distributed.WorkerEngine` is one worker of the distributed one.
    """

    n: int
    workers: int  # the number of engines checking together (1: the native checker)

    def vector(self, own: np.ndarray) -> np.ndarray:
        """A new ``[C]`` float64 vector with ``own`` (``[n]``) first and the peers' values of it after."""
        ...

    def sweep(self, x: np.ndarray, add: np.ndarray, active: np.ndarray, fixed: np.ndarray, out: np.ndarray) -> None:
        """``out[:n] = add + P x`` on the active rows (``fixed`` elsewhere); then ``out``'s copies refreshed."""
        ...

    def sweep2(self, lo: np.ndarray, add: np.ndarray, hi: np.ndarray, active: np.ndarray, lo_out: np.ndarray,
               hi_out: np.ndarray) -> None:
        """:meth:`sweep` of two vectors in one pass over the rows."""
        ...

    def reach_back(self, start: np.ndarray, through: np.ndarray) -> np.ndarray:
        """``[n]`` bool: own states that reach a ``start`` state (anywhere) along ``through`` states."""
        ...

    def allmax(self, values: np.ndarray) -> np.ndarray:
        """The element-wise maximum of every worker's ``values`` (a few numbers)."""
        ...

    def check_limits(self) -> None:
        """Raise :class:`~distmc.errors.ResourceLimitError` when a time or memory limit is passed."""
        ...

    def progress(self, what: str) -> None:
        """Report a step of the check (e.g. ``"iteration 41/100"``)."""
        ...


class LocalEngine:
    """The native checker's engine: the whole matrix in this process, nothing to exchange."""

    def __init__(self, matrix: ChunkedCSR, progress: Callable[[str], None] | None = None) -> None:
        self.a = matrix
        self.n = matrix.n
        self.workers = 1
        self._progress = progress

    def vector(self, own: np.ndarray) -> np.ndarray:
        return np.array(own, dtype=np.float64)

    def sweep(self, x: np.ndarray, add: np.ndarray, active: np.ndarray, fixed: np.ndarray, out: np.ndarray) -> None:
        self.a.sweep(x, add, active, fixed, out)

    def sweep2(self, lo: np.ndarray, add: np.ndarray, hi: np.ndarray, active: np.ndarray, lo_out: np.ndarray,
               hi_out: np.ndarray) -> None:
        self.a.sweep2(lo, add, hi, active, lo_out, hi_out)

    def reach_back(self, start: np.ndarray, through: np.ndarray) -> np.ndarray:
        in_off, sources = self.a.transpose()
        seen = start.copy()
        reach_back_from(in_off, sources, seen, through, np.flatnonzero(start))
        return seen

    def allmax(self, values: np.ndarray) -> np.ndarray:
        return values

    def check_limits(self) -> None:
        return None

    def progress(self, what: str) -> None:
        if self._progress is not None:
            self._progress(what)


def matrix_of(m: InducedModel) -> ChunkedCSR:
    """The reducer's chunked CSR of ``m`` as the kernels take it (no copy)."""
    return ChunkedCSR(m.row_offsets, m.target_chunks, m.prob_chunks, m.n_states)


#: Report the iteration every this many steps.
_EVERY = 10


def _steps(e: Engine, x: np.ndarray, add: np.ndarray, active: np.ndarray, fixed: np.ndarray, k: int) -> np.ndarray:
    """``k`` Jacobi steps ``x <- add + P x`` on the active rows (the others held at ``fixed``); ``[n]``."""
    x = e.vector(x)
    y = np.empty_like(x)
    for i in range(k):
        e.sweep(x, add, active, fixed, y)
        x, y = y, x
        if i % _EVERY == 0 or i == k - 1:
            e.check_limits()
            e.progress(f"checking: step {i + 1}/{k}")
    return x[: e.n]


def _graph(e: Engine, phi1: np.ndarray, phi2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(probability > 0, probability 1) of ``phi1 U phi2``: Storm's prob0/prob1 by backward search."""
    e.progress("checking: graph analysis")
    greater0 = e.reach_back(phi2, phi1 & ~phi2)
    # prob1 = states that cannot reach a prob0 state while staying in greater0 & !phi2 (Storm's performProb1)
    prob1 = ~e.reach_back(~greater0, greater0 & ~phi2)
    return greater0, prob1


#: The slow-convergence test runs every :data:`_RATE_WINDOW` iterations. An undecided probability that still rounds
#: to 1 after that many iterations (and more than there are states) means fewer than 1e-16 of the paths leave per
#: window: over 1e19 iterations. The prediction from the gap's rate starts after :data:`_SLOW_AFTER` iterations
#: (every model of the project's benchmarks converged in fewer).
_SLOW_AFTER = 10_000
_RATE_WINDOW = 1_000


def _slow(e: Engine, i: int, width: float, allowed: float, before: float | None, max_iterations: int) -> str | None:
    """Why the iteration will not reach the precision within ``max_iterations`` (None: it may).

    ``width``: the widest bound gap at the relevant states now, ``before``: :data:`_RATE_WINDOW` iterations ago
    (None: undefined then, every undecided probability still rounded to 1). The gap shrinks geometrically once
    every state can leave the undecided ones; its rate over the window predicts the iterations still needed.
    """
    if math.isfinite(width) and width <= allowed:
        return None
    if not math.isfinite(width):  # no bounds yet: some undecided probability still rounds to 1
        total = e.allmax(np.array([float(e.n)]))[0] * e.workers  # at least the number of states
        if i < total:
            return None  # a path may still be longer than i steps
        return (f"after {i:,} iterations some state's probability of staying undecided still rounds to 1 (it "
                f"leaves with probability below 1e-16 per {i:,} steps)")
    if before is None or i < _SLOW_AFTER:
        return None
    rate = (width / before) ** (1.0 / _RATE_WINDOW) if before > 0 else 0.0
    if rate >= 1.0:
        return f"after {i:,} iterations the bound gap ({width:.2g}) no longer shrinks"
    needed = math.log(allowed / width) / math.log(rate) if allowed > 0 else math.inf
    if i + needed <= max_iterations:
        return None
    return (f"after {i:,} iterations the bound gap is {width:.2g} and shrinks by a factor of {1 - rate:.2g} a step: "
            f"about {needed:.2g} more iterations would be needed")


def _sound(e: Engine, x: np.ndarray, add: np.ndarray, active: np.ndarray, stop: Stop,
           max_iterations: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fixpoint of ``x = add + P x`` on the active rows (others fixed at ``x``), by sound value iteration.

    Quatmann and Katoen (CAV 2018), Storm's SOUND_VALUE_ITERATION for DTMCs: after k steps ``x(s)`` is what was
    collected within k steps (probability of reaching the fixed states with value 1, or reward) and ``y(s)`` the
    probability of still being among the active states. The value is ``x + y * (the value where those paths
    stand)``, and once every ``y < 1`` it lies in ``x + y * [L, U]`` with L, U the least and greatest
    ``x / (1 - y)`` over the active states (bounds on every active state's value, so the best ones seen so far
    stay valid: L only grows, U only shrinks). Needs every active state to leave the active states with
    probability 1. It stops when the bounds at the relevant states meet ``stop.precision``'s rule
    (:meth:`~distmc.check.result.Precision.excess`), and raises
    :class:`~distmc.errors.SlowConvergenceError` when the bound gap shrinks too slowly to get there within
    ``max_iterations`` (:func:`_slow`). Returns the midpoint and the lower and upper bounds, ``[n]`` each (equal
    outside the active states).
    """
    live = np.flatnonzero(active)
    rel = np.flatnonzero(active & stop.relevant)
    x = e.vector(x)
    y = e.vector(active.astype(np.float64))
    x2, y2 = np.empty_like(x), np.empty_like(y)
    if e.allmax(np.array([float(live.size)]))[0] == 0:
        own = x[: e.n]
        return own, own, own
    lo, hi = -np.inf, np.inf  # the best bounds L, U seen so far
    before: float | None = None  # the relevant gap _RATE_WINDOW iterations ago
    width = np.inf
    for i in range(max_iterations):
        e.sweep2(x, add, y, active, x2, y2)
        x, x2, y, y2 = x2, x, y2, y
        ym = y[live]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = x[live] / (1.0 - ym)
        # the relevant states' bounds with the L, U known so far (still valid), tested against the rule
        xr, yr = x[rel], y[rel]
        if math.isfinite(hi - lo):
            over = stop.precision.excess(xr + yr * lo, xr + yr * hi)
            if stop.everywhere is not None:  # every state's bounds to an absolute precision too
                over = max(over, stop.everywhere.excess(x[live] + ym * lo, x[live] + ym * hi))
            w = float((yr * (hi - lo)).max(initial=0.0))
            allowed = stop.precision.target(xr + yr * lo, xr + yr * hi)
            least = float(allowed.min(initial=np.inf))
        else:
            over, w, least = np.inf, np.inf, np.inf
        # one reduction a step: the largest y, the least and the greatest ratio (as maxima), the rule's excess, the
        # widest relevant gap and the least width allowed
        ymax, neg_lo, new_hi, over, width, neg_least = e.allmax(np.array([
            ym.max(initial=-np.inf), -ratio.min(initial=np.inf), ratio.max(initial=-np.inf), over, w, -least]))
        if over <= 0:
            mid, lower, upper = (x[: e.n].copy() for _ in range(3))
            if math.isfinite(hi - lo):  # else no relevant state is undecided: the others' values are not asked
                mid[live] += ym * (lo + hi) / 2
                lower[live] += ym * lo
                upper[live] += ym * hi
            return mid, lower, upper
        if ymax < 1.0:
            lo, hi = max(lo, -neg_lo), min(hi, new_hi)
        if i % _EVERY == 0:
            e.check_limits()
            if math.isfinite(width):
                e.progress(f"sound value iteration: gap {width:.1e}")
        if i >= _RATE_WINDOW and i % _RATE_WINDOW == 0:
            why = _slow(e, i, width, -neg_least, before, max_iterations)
            if why is not None:
                raise SlowConvergenceError(f"value iteration converges too slowly on this model: {why}")
            before = width if math.isfinite(width) else None
    raise SlowConvergenceError(
        f"value iteration converges too slowly on this model: it did not meet the precision ({stop.precision.describe()}) "
        f"in {max_iterations:,} iterations (bound gap {width:.3g})"
    )


@dataclass(frozen=True)
class Stop:
    """When sound value iteration stops.

    The bounds at the ``relevant`` states (``[n]`` bool) meet ``precision``, and, unless None, every state's
    meet ``everywhere`` (an absolute precision).
    """

    precision: Precision
    relevant: np.ndarray
    everywhere: Precision | None = None


Values = tuple[np.ndarray, np.ndarray, np.ndarray]  # ([n] value, [n] lower bound, [n] upper bound)


def _exact(x: np.ndarray) -> Values:
    return x, x, x


def values_of(e: Engine, m: Labelled, spec: PropertySpec, precision: Precision | float | None = None,
              max_iterations: int = MAX_ITERATIONS) -> Values:
    """The property's value at each of the ``n`` states, with lower and upper bounds (equal where exact).

    Bounded properties are a fixed number of steps, exact up to floating point (``lower == upper == value``);
    unbounded ones come from sound value iteration, whose bounds contain the exact value. ``precision``: the
    rule its bounds must meet at the initial states (default: :class:`~distmc.check.result.Precision`'s; a
    number: that absolute precision); every state's bounds also meet the rule's absolute part (1e-12 for a
    relative rule; not a relative part, which could hold up the iteration on a state whose value is 1e-200), so
    that ``--values`` and the plain check are one and the same run.
    """
    if precision is None:
        precision = Precision()
    elif not isinstance(precision, Precision):
        precision = Precision(float(precision), rel=None)
    relevant = np.zeros(m.n_states, dtype=bool)
    relevant[m.initial] = True
    everywhere = Precision(DEFAULT_PRECISION if precision.relative else precision.eps, rel=None)
    stop = Stop(precision, relevant, everywhere)
    rec = step_recurrence(spec, m)
    if rec is not None:
        return _exact(_steps(e, rec.x0, rec.add, rec.active, rec.fixed, rec.k))
    return (_reward if spec.is_reward else _probability)(e, m, spec, stop, max_iterations)


def _probability(e: Engine, m: Labelled, spec: PropertySpec, precision: Stop, max_iterations: int) -> Values:
    left, right, _ = path_of(spec)
    phi1, phi2 = states_of(left, m), states_of(right, m)
    greater0, prob1 = _graph(e, phi1, phi2)
    return _sound(e, prob1.astype(np.float64), np.zeros(m.n_states), greater0 & ~prob1, precision, max_iterations)


def _reward(e: Engine, m: Labelled, spec: PropertySpec, precision: Stop, max_iterations: int) -> Values:
    n = m.n_states
    sub = spec.formula.subformula
    every = np.ones(n, dtype=bool)
    _, _, total = rewards_of(m, spec)
    target = states_of(sub.subformula, m)
    _, prob1 = _graph(e, every, target)
    active = prob1 & ~target  # Storm: infinite where the target is reached with probability < 1, 0 on it
    out = _sound(e, np.zeros(n), np.where(active, total, 0.0), active, precision, max_iterations)
    for v in out:
        v[~prob1] = np.inf
    return out


def at_initial(values: np.ndarray, initial: np.ndarray) -> float | dict[str, float]:
    """The result as the report gives it: the value of the one initial state, else their min and max."""
    vals = values[initial]
    return float(vals[0]) if vals.shape[0] == 1 else {"min": float(vals.min()), "max": float(vals.max())}


def check_native(m: InducedModel, spec: PropertySpec, *, precision: Precision | float | None = None,
                 max_iterations: int = MAX_ITERATIONS,
                 progress: Callable[[str], None] | None = None) -> float | dict[str, float]:
    """The property's value at the initial state(s) of the induced DTMC ``m`` (like :func:`checker.check`).

    Raises:
        PropertyError: when :func:`~distmc.check.forms.unsupported` names a reason.
        SlowConvergenceError: the iteration converges too slowly to meet the precision.
    """
    return at_initial(native_values(m, spec, precision, max_iterations, progress)[0], m.initial)


def native_values(m: InducedModel, spec: PropertySpec, precision: Precision | float | None = None,
                  max_iterations: int = MAX_ITERATIONS, progress: Callable[[str], None] | None = None) -> Values:
    """:func:`values_of` on the whole model in this process (value, lower and upper bound in every state)."""
    why = unsupported(spec, m.kind)
    if why is not None:
        raise PropertyError(f"the native checker cannot check '{spec.text}': {why}")
    return values_of(LocalEngine(matrix_of(m), progress), m, spec, precision, max_iterations)
