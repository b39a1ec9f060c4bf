"""Sound value iteration on an :class:`Engine`, the native and the distributed checker's, rounding included.

Quatmann and Katoen (CAV 2018), Storm's SOUND_VALUE_ITERATION for DTMCs, updated in place by breadth-first levels
from the deepest (:mod:`distmc.check.gauss_seidel`; Storm's helper also updates in place, backwards through its
state order). Why in-place updates keep the bounds: every update of a state ``s`` writes ``x(s) = add(s) + P x``,
``y(s) = P y`` from values that each satisfy ``v(t) = x(t) + y(t) * w(t)`` with ``w(t)`` a weighted mean of the
values where the still undecided paths stand; then so does ``s`` (``v(s) = add(s) + P v``), whatever the order of
the updates. Once every ``y < 1`` the value lies in ``x + y * [L, U]`` with L, U the least and greatest ``x / (1 -
y)`` over the undecided states. Rounding: ``x`` and ``y`` are each known to within the vector ``w`` the same pass
computes (:mod:`distmc.check.gauss_seidel`), and L, U and the bounds are taken over those boxes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from distmc.check.gauss_seidel import bounds_into, svi_stats
from distmc.check.result import FLOAT_FLOOR, Precision
from distmc.errors import SlowConvergenceError

__all__ = ["EVERY", "Engine", "Stop", "sound"]

#: Report the iteration every this many steps.
EVERY = 10


class Engine(Protocol):
    """The collective operations the checks are written against (one per worker, the same calls on all).

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

    def sweep3(
        self, lo: np.ndarray, add: np.ndarray, hi: np.ndarray, w: np.ndarray, active: np.ndarray, g: float
    ) -> None:
        """One pass of sound value iteration in place, by breadth-first levels from the deepest.

        :meth:`distmc.check.gauss_seidel.Blocks.sweep`: ``lo <- add + P lo``, ``hi <- P hi`` and their rounding bound
        ``w``; the copies kept up to date level by level.
        """
        ...

    def row_gamma(self) -> float:
        """:func:`distmc.check.gauss_seidel.row_gamma` of this engine's rows."""
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
        return (
            f"after {i:,} iterations some state's probability of staying undecided still rounds to 1 (it "
            f"leaves with probability below 1e-16 per {i:,} steps)"
        )
    if before is None or i < _SLOW_AFTER:
        return None
    rate = (width / before) ** (1.0 / _RATE_WINDOW) if before > 0 else 0.0
    if rate >= 1.0:
        return f"after {i:,} iterations the bound gap ({width:.2g}) no longer shrinks"
    needed = math.log(allowed / width) / math.log(rate) if allowed > 0 else math.inf
    if i + needed <= max_iterations:
        return None
    return (
        f"after {i:,} iterations the bound gap is {width:.2g} and shrinks by a factor of {1 - rate:.2g} a step: "
        f"about {needed:.2g} more iterations would be needed"
    )


def sound(
    e: Engine, x: np.ndarray, add: np.ndarray, active: np.ndarray, stop: Stop, max_iterations: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fixpoint of ``x = add + P x`` on the active rows (others fixed at ``x``), by sound value iteration.

    ``x(s)`` is what was collected so far (probability of reaching the fixed states with value 1, or reward) and
    ``y(s)`` the probability of still being among the active states (see the module docstring). Needs every active
    state to leave the active states with probability 1. The best L, U seen so far stay valid (L only grows, U only
    shrinks). It stops when the bounds at the relevant states meet ``stop.precision``'s rule
    (:meth:`~distmc.check.result.Precision.excess`), and raises :class:`~distmc.errors.SlowConvergenceError` when
    the bound gap shrinks too slowly to get there within ``max_iterations`` (:func:`_slow`). Returns the midpoint
    and the lower and upper bounds, ``[n]`` each (equal outside the active states, whose values are exact).
    """
    live = np.flatnonzero(active)
    rel = np.flatnonzero(active & stop.relevant)
    x = e.vector(x)
    y = e.vector(active.astype(np.float64))
    w = e.vector(np.zeros(e.n))
    if e.allmax(np.array([float(live.size)]))[0] == 0:
        own = x[: e.n]
        return own, own, own
    g = float(e.allmax(np.array([e.row_gamma()]))[0])  # the same on every worker: the bounds are too
    eps = stop.everywhere.eps if stop.everywhere is not None else np.inf
    lo, hi = -np.inf, np.inf  # the best bounds L, U seen so far, of the computed vectors (the stopping test's)
    lo_r, hi_r = -np.inf, np.inf  # ... and of every vector within the rounding bound w of them (the reported ones)
    before: float | None = None  # the relevant gap _RATE_WINDOW iterations ago
    width = np.inf
    for i in range(max_iterations):
        e.sweep3(x, add, y, w, active, g)
        # every state's bounds with the L, U known so far (still valid) against the absolute rule, and the new L, U
        ym, lmin, umax, y2m, lmin_r, umax_r, over_all = svi_stats(x, y, w, live, lo, hi, eps, FLOAT_FLOOR)
        xr, yr = x[rel], y[rel]
        if math.isfinite(hi - lo):  # the relevant states' bounds against the rule
            over = stop.precision.excess(xr + yr * lo, xr + yr * hi)
            if stop.everywhere is not None:
                over = max(over, over_all)
            w_rel = float((yr * (hi - lo)).max(initial=0.0))
            least = float(stop.precision.target(xr + yr * lo, xr + yr * hi).min(initial=np.inf))
        else:
            over, w_rel, least = np.inf, np.inf, np.inf
        # one reduction a step: the largest y, the least and the greatest ratio (as maxima; also rounding included),
        # the rule's excess, the widest relevant gap and the least width allowed
        ymax, neg_lo, new_hi, y2max, neg_lo_r, new_hi_r, over, width, neg_least = e.allmax(
            np.array([ym, -lmin, umax, y2m, -lmin_r, umax_r, over, w_rel, -least])
        )
        if ymax < 1.0:
            lo, hi = max(lo, -neg_lo), min(hi, new_hi)
        if y2max < 1.0:
            lo_r, hi_r = max(lo_r, -neg_lo_r), min(hi_r, new_hi_r)
        if over <= 0:
            mid, lower, upper = (x[: e.n].copy() for _ in range(3))
            if math.isfinite(hi - lo):  # else no relevant state is undecided: the others' values are not asked
                mid[live] += y[live] * (lo + hi) / 2
                bounds_into(x, y, w, live, lo_r, hi_r, lower, upper)
            return mid, lower, upper
        if i % EVERY == 0:
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
