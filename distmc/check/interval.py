"""Robust value iteration on an interval chain: sound lower and upper bounds over every distribution in its boxes.

An interval chain (:class:`IntervalChain`) has the structure of an induced DTMC (one row per state, the targets
sorted) and, for each transition, an interval ``[lo, hi]`` that holds its probability for every parameter value of
a region (:mod:`distmc.region` builds it). The true chain at any point of the region picks, in each row, one
distribution inside the row's box (with sum 1); so the minimum over *every* such choice, row by row, is a lower
bound on the property there, and the maximum an upper bound (the robust semantics of Storm's interval models,
looser than the region's exact range because the choice may differ from row to row).

One step of the iteration gives each row the worst (or best) distribution in its box for the current values, by
the standard greedy: every successor its lower bound, then the remaining mass to the successors in the order of
their values (ascending for the minimum, descending for the maximum), each up to its upper bound.

* ``P=? [phi1 U<=k phi2]``, ``F<=k`` and the step-bounded reward forms (:func:`~distmc.check.forms.step_recurrence`):
  ``k`` robust steps each way, exact up to floating point.
* ``P=? [phi1 U phi2]``, ``F``: graph analysis on the structure (prob0 and prob1, as the native checker), which is
  the same for every distribution in the boxes because every lower bound is positive (the builder refuses a
  region where a probability reaches 0); then the minimum iterated from below (from 0 on the undecided states) and
  the maximum from above (from 1). Every iterate of the first is at most the minimal fixpoint, every iterate of the
  second at least the maximal one, and with positive lower bounds every undecided state reaches ``phi2`` under every
  choice, so both fixpoints are unique and the iterations converge to them; they stop when a step moves no value
  by more than ``eps`` (each side is sound at any stop, only slightly looser).
* ``R=? [F phi]``: infinite where ``phi`` is reached with probability below 1, else the minimum iterated from 0
  (sound from below) and the maximum by optimistic value iteration (Hartmanns and Kaminski, CAV 2020): iterate it
  from 0 until it settles, guess ``u = x (1 + d) + d`` and accept it once one robust step does not raise it
  (``F(u) <= u`` makes ``u`` an upper bound of the fixpoint, and the iteration from it stays one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from distmc.check.checker import MAX_ITERATIONS
from distmc.check.forms import path_of, rewards_of, states_of, step_recurrence
from distmc.check.kernels import ChunkedCSR
from distmc.check.native import LocalEngine
from distmc.check.properties import PropertySpec
from distmc.errors import PropertyError, SlowConvergenceError

__all__ = ["IntervalChain", "interval_bounds", "robust_step"]


@dataclass
class IntervalChain:
    """A DTMC structure with an interval ``[lo[j], hi[j]]`` on each transition ``j`` (see the module docstring).

    Attributes:
        row_offsets: ``[N + 1]`` int64, state ``s``'s transitions are ``row_offsets[s]:row_offsets[s+1]``.
        targets: ``[T]`` int64.
        lo, hi: ``[T]`` float64, ``0 < lo <= hi <= 1``, each row's ``sum(lo) <= 1 <= sum(hi)``.
        initial: ``[I]`` int64.
        labels: name -> ``[N]`` bool.
        rewards: name -> (state rewards ``[N]`` or None, action rewards ``[N]`` or None).
    """

    row_offsets: np.ndarray
    targets: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    initial: np.ndarray
    labels: dict[str, np.ndarray]
    rewards: dict[str, tuple[np.ndarray | None, np.ndarray | None]]

    @property
    def n_states(self) -> int:
        return int(self.row_offsets.shape[0] - 1)


@nb.njit(cache=True, nogil=True, parallel=True)
def _robust(offsets, targets, lo, hi, x, add, active, fixed, out, maximize):  # pragma: no cover - compiled
    for r in nb.prange(offsets.shape[0] - 1):
        if not active[r]:
            out[r] = fixed[r]
            continue
        a, b = offsets[r], offsets[r + 1]
        vals = np.empty(b - a)
        rest = 1.0
        acc = 0.0
        for j in range(a, b):
            vals[j - a] = -x[targets[j]] if maximize else x[targets[j]]
            rest -= lo[j]
            acc += lo[j] * x[targets[j]]
        order = np.argsort(vals)
        for i in range(b - a):
            if rest <= 0.0:
                break
            j = a + order[i]
            d = min(hi[j] - lo[j], rest)
            acc += d * x[targets[j]]
            rest -= d
        out[r] = add[r] + acc


def robust_step(
    c: IntervalChain, x: np.ndarray, add: np.ndarray, active: np.ndarray, fixed: np.ndarray, maximize: bool
) -> np.ndarray:
    """``add + min (or max) over the boxes of P x`` on the active states, ``fixed`` elsewhere: ``[N]``."""
    out = np.empty_like(x)
    _robust(c.row_offsets, c.targets, c.lo, c.hi, x, add, active, fixed, out, maximize)
    return out


def _steps(
    c: IntervalChain, x0: np.ndarray, add: np.ndarray, active: np.ndarray, fixed: np.ndarray, k: int, maximize: bool
) -> np.ndarray:
    x = x0.astype(np.float64)
    for _ in range(k):
        x = robust_step(c, x, add, active, fixed, maximize)
    return x


def _graph(c: IntervalChain, phi1: np.ndarray, phi2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(probability > 0, probability 1) of ``phi1 U phi2`` on the structure (the same in every box)."""
    e = LocalEngine(ChunkedCSR(c.row_offsets, [c.targets], [c.lo], c.n_states))
    greater0 = e.reach_back(phi2, phi1 & ~phi2)
    prob1 = ~e.reach_back(~greater0, greater0 & ~phi2)
    return greater0, prob1


def _slow(spec: PropertySpec, gap: float) -> SlowConvergenceError:
    return SlowConvergenceError(
        f"'{spec.text}': the region's bounds did not close within {MAX_ITERATIONS} robust "
        f"iterations (gap {gap:.3g}); narrow the region or loosen --precision-abs"
    )


def interval_bounds(
    c: IntervalChain, spec: PropertySpec, eps: float = 1e-9, max_iterations: int = MAX_ITERATIONS
) -> tuple[np.ndarray, np.ndarray]:
    """Sound (lower ``[N]``, upper ``[N]``) of ``spec`` over every distribution in the chain's boxes.

    ``eps``: the unbounded forms stop when the bounds at the initial states are within ``eps`` of their fixpoints
    (probabilities: of each other's iterations; the bounds stay sound at any stop).

    Raises:
        PropertyError: a property the robust iteration does not handle (``S``, nested operators, ...).
        SlowConvergenceError: the unbounded iteration does not close within ``max_iterations``.
    """
    n = c.n_states
    rec = step_recurrence(spec, c)
    if rec is not None:
        return (
            _steps(c, rec.x0, rec.add, rec.active, rec.fixed, rec.k, False),
            _steps(c, rec.x0, rec.add, rec.active, rec.fixed, rec.k, True),
        )
    sub = spec.formula.subformula
    if spec.is_reward:
        if type(sub).__name__ != "EventuallyFormula":
            raise PropertyError(f"'{spec.text}': over a region, distmc bounds R=? [F phi], C<=k and I=k")
        _, _, total = rewards_of(c, spec)
        target = states_of(sub.subformula, c)
        _, prob1 = _graph(c, np.ones(n, dtype=bool), target)
        active = prob1 & ~target
        add = np.where(active, total, 0.0)
        lower = _fixpoint(c, np.zeros(n), add, active, eps, max_iterations, False, spec)
        upper = _optimistic(c, add, active, eps, max_iterations, spec)
        lower[~prob1] = np.inf
        upper[~prob1] = np.inf
        return lower, upper
    left, right, _ = path_of(spec)
    phi1, phi2 = states_of(left, c), states_of(right, c)
    greater0, prob1 = _graph(c, phi1, phi2)
    maybe = greater0 & ~prob1
    x = prob1.astype(np.float64)
    y = np.where(maybe, 1.0, x)
    zero = np.zeros(n)
    for _ in range(max_iterations):
        x2 = robust_step(c, x, zero, maybe, x, False)
        y2 = robust_step(c, y, zero, maybe, y, True)
        moved = max(float(np.max(x2 - x, initial=0.0)), float(np.max(y - y2, initial=0.0)))
        x, y = x2, y2
        if moved <= eps:  # either side is sound at any stop (monotone from its side); this one has settled
            return x, y
    raise _slow(spec, float(np.max(y[c.initial] - x[c.initial])))


def _fixpoint(
    c: IntervalChain,
    x: np.ndarray,
    add: np.ndarray,
    active: np.ndarray,
    eps: float,
    max_iterations: int,
    maximize: bool,
    spec: PropertySpec,
) -> np.ndarray:
    """Iterate from ``x`` (below the fixpoint) until a step changes no value by more than ``eps`` (relative)."""
    for _ in range(max_iterations):
        y = robust_step(c, x, add, active, x, maximize)
        if np.all(np.abs(y - x) <= eps * np.maximum(1.0, np.abs(y))):
            return y
        x = y
    raise _slow(spec, float(np.max(np.abs(y - x))))


def _optimistic(
    c: IntervalChain, add: np.ndarray, active: np.ndarray, eps: float, max_iterations: int, spec: PropertySpec
) -> np.ndarray:
    """An upper bound of the maximal expected reward, verified by one robust step (optimistic value iteration)."""
    x = np.zeros(add.shape[0])
    tol = eps
    for _ in range(20):
        x = _fixpoint(c, x, add, active, tol, max_iterations, True, spec)
        u = np.where(active, x * (1 + 100 * tol) + 100 * tol, x)
        for _ in range(100):
            v = robust_step(c, u, add, active, u, True)
            if np.all(v <= u):
                return v  # F(u) <= u: u, and so F(u), is above the fixpoint
            u = np.maximum(u, v)
        tol /= 10
    raise _slow(spec, float("nan"))
