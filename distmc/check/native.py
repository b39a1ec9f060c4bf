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
  gives these lower and upper bounds themselves (the value is their midpoint), widened by a third vector that
  bounds the rounding of every step. The updates are in place (Gauss-Seidel) in an order the model defines, not
  the thread count or the partition: by default (``order="components"``, :mod:`distmc.check.topological`) the
  strongly connected components of the undecided states bottom-up, each swept until it settles, a state's own
  loop solved at once; or (``order="blocks"``, :mod:`distmc.check.blocks`, the distributed checker's order) the
  same heights bottom-up, Jacobi within a block (a height's states, or one breadth-first level of them where a
  component has several); or (``order="levels"``, :mod:`distmc.check.gauss_seidel`) block by block through the
  breadth-first levels from the initial states, deepest first, Jacobi within a level. The first two settle an
  acyclic part in one pass. A chain on which the bounds close too slowly to get there within
  :data:`~distmc.check.checker.MAX_ITERATIONS` is stopped early (:class:`~distmc.errors.SlowConvergenceError`);
* ``R=? [F phi]``: infinite where ``phi`` is reached with probability below 1 (prob1 as above), 0 on ``phi``,
  elsewhere the same sound value iteration with the state's reward (state plus policy-weighted action reward)
  added in every step; ``R=? [C<=k]``: ``k`` steps of ``x <- r + P x`` from 0; ``R=? [I=k]``: ``k`` steps of
  ``x <- P x`` from the state rewards (refused, as by Storm, when the structure has none).

``phi1`` and ``phi2`` are the property's atoms (labels the reducer wrote), ``true``/``false``, or their negation.
Anything else (MDPs, nested P operators, lower step bounds, total or long-run rewards) is refused by
:func:`~distmc.check.forms.unsupported`, and the caller keeps Storm. The step-bounded products are Jacobi steps,
parallel over rows and summed in row order, so the result does not depend on the thread count; their bounds cover
the steps' rounding (``(1 + g)^k``, :func:`_step_bounds`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from distmc.assemble.reducer import InducedModel
from distmc.check.blocks import Schedule, block_keys, native_pass, schedule_of
from distmc.check.checker import MAX_ITERATIONS
from distmc.check.forms import (
    Labelled,
    Recurrence,
    path_of,
    rewards_of,
    states_of,
    step_recurrence,
    unsupported,
)
from distmc.check.gauss_seidel import Blocks, level_blocks, levels, row_gamma
from distmc.check.kernels import ChunkedCSR, reach_back_from
from distmc.check.properties import PropertySpec
from distmc.check.result import DEFAULT_PRECISION, Precision
from distmc.check.svi import EVERY, Engine, Stop, sound
from distmc.check.topological import Components, components
from distmc.errors import PropertyError

#: The update orders of :class:`LocalEngine`'s sound value iteration.
ORDERS = ("components", "levels", "blocks")

__all__ = [
    "ORDERS",
    "Engine",
    "LocalEngine",
    "Stop",
    "at_initial",
    "check_native",
    "matrix_of",
    "native_values",
    "values_of",
]


class LocalEngine:
    """The native checker's engine: the whole matrix in this process, nothing to exchange."""

    def __init__(
        self,
        matrix: ChunkedCSR,
        progress: Callable[[str], None] | None = None,
        initial: np.ndarray | None = None,
        order: str = "components",
    ) -> None:
        self.a = matrix
        self.n = matrix.n
        self.workers = 1
        #: where the breadth-first levels of the update order start (default: state 0)
        self._initial = np.zeros(min(self.n, 1), dtype=np.int64) if initial is None else initial
        if order not in ORDERS:
            raise ValueError(f"order {order!r}: one of {', '.join(ORDERS)}")
        #: the update order of sound value iteration: ``components`` (:mod:`distmc.check.topological`), ``blocks``
        #: (:mod:`distmc.check.blocks`: the distributed checker's, whose values it gives bit for bit) or ``levels``
        #: (:mod:`distmc.check.gauss_seidel`: the distributed checker's ``order="levels"``)
        self.order = order
        self._blocks: Blocks | None = None
        self._components: tuple[np.ndarray, Components] | None = None
        self._schedule: tuple[np.ndarray, Schedule] | None = None
        self._level: np.ndarray | None = None
        self._progress = progress

    def vector(self, own: np.ndarray) -> np.ndarray:
        return np.array(own, dtype=np.float64)

    def sweep(self, x: np.ndarray, add: np.ndarray, active: np.ndarray, fixed: np.ndarray, out: np.ndarray) -> None:
        self.a.sweep(x, add, active, fixed, out)

    def sweep3(
        self, lo: np.ndarray, add: np.ndarray, hi: np.ndarray, w: np.ndarray, active: np.ndarray, g: float
    ) -> None:
        if self.order == "components":
            if self._components is None or not np.array_equal(self._components[0], active):
                self._components = (active.copy(), components(self.a, active, self._levels()))
            self._components[1].sweep(lo, add, hi, w, g)
            return
        if self.order == "blocks":
            if self._schedule is None or not np.array_equal(self._schedule[0], active):
                level = self._levels()
                deepest = int(level.max(initial=0))
                self._schedule = (active.copy(), schedule_of(block_keys(self.a, active, level, deepest), deepest))
            native_pass(self.a, self._schedule[1], lo, add, hi, w, g)
            return
        if self._blocks is None:
            level = self._levels()
            self._blocks = level_blocks(level, int(level.max(initial=0)))
        self._blocks.sweep(self.a, lo, add, hi, w, active, g)

    def _levels(self) -> np.ndarray:
        # the breadth-first levels from the initial states, found once
        if self._level is None:
            self._level = levels(self.a, self._initial)
        return self._level

    def row_gamma(self) -> float:
        return row_gamma(self.a)

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


def _steps(e: Engine, x: np.ndarray, add: np.ndarray, active: np.ndarray, fixed: np.ndarray, k: int) -> np.ndarray:
    """``k`` Jacobi steps ``x <- add + P x`` on the active rows (the others held at ``fixed``); ``[n]``."""
    x = e.vector(x)
    y = np.empty_like(x)
    for i in range(k):
        e.sweep(x, add, active, fixed, y)
        x, y = y, x
        if i % EVERY == 0 or i == k - 1:
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


Values = tuple[np.ndarray, np.ndarray, np.ndarray]  # ([n] value, [n] lower bound, [n] upper bound)


def _exact(x: np.ndarray) -> Values:
    return x, x, x


def _step_bounds(e: Engine, rec: Recurrence, x: np.ndarray) -> Values:
    """A step-bounded value with the bounds of its rounding.

    Where every term of the recurrence is non-negative (probabilities, non-negative rewards), each of its ``k``
    steps leaves every value within a factor ``1 +- g`` of the step's exact result on its rounded inputs (Higham's
    ``gamma`` of the longest row, twice: :func:`~distmc.check.gauss_seidel.row_gamma`), and ``k`` steps within
    ``(1 + g)^k``: the bounds are ``x (1 -+ ((1 + g)^k - 1))``, rounded outwards. A recurrence with a negative
    term gets none (lower == upper).
    """
    g = float(e.allmax(np.array([e.row_gamma()]))[0])
    terms = (rec.x0[rec.active], rec.add[rec.active], rec.fixed[~rec.active])
    if any(bool((t < 0).any()) for t in terms) or not np.all(np.isfinite(x)):
        return _exact(x)
    rel = math.expm1(rec.k * math.log1p(g)) * (1.0 + 1e-9)  # (1 + g)^k - 1, with a margin for its own rounding
    return x, np.nextafter(x * (1.0 - rel), -np.inf), np.nextafter(x * (1.0 + rel), np.inf)


def values_of(
    e: Engine,
    m: Labelled,
    spec: PropertySpec,
    precision: Precision | float | None = None,
    max_iterations: int = MAX_ITERATIONS,
) -> Values:
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
        return _step_bounds(e, rec, _steps(e, rec.x0, rec.add, rec.active, rec.fixed, rec.k))
    return (_reward if spec.is_reward else _probability)(e, m, spec, stop, max_iterations)


def _probability(e: Engine, m: Labelled, spec: PropertySpec, precision: Stop, max_iterations: int) -> Values:
    left, right, _ = path_of(spec)
    phi1, phi2 = states_of(left, m), states_of(right, m)
    greater0, prob1 = _graph(e, phi1, phi2)
    return sound(e, prob1.astype(np.float64), np.zeros(m.n_states), greater0 & ~prob1, precision, max_iterations)


def _reward(e: Engine, m: Labelled, spec: PropertySpec, precision: Stop, max_iterations: int) -> Values:
    n = m.n_states
    sub = spec.formula.subformula
    every = np.ones(n, dtype=bool)
    _, _, total = rewards_of(m, spec)
    target = states_of(sub.subformula, m)
    _, prob1 = _graph(e, every, target)
    active = prob1 & ~target  # Storm: infinite where the target is reached with probability < 1, 0 on it
    out = sound(e, np.zeros(n), np.where(active, total, 0.0), active, precision, max_iterations)
    for v in out:
        v[~prob1] = np.inf
    return out


def at_initial(values: np.ndarray, initial: np.ndarray) -> float | dict[str, float]:
    """The result as the report gives it: the value of the one initial state, else their min and max."""
    vals = values[initial]
    return float(vals[0]) if vals.shape[0] == 1 else {"min": float(vals.min()), "max": float(vals.max())}


def check_native(
    m: InducedModel,
    spec: PropertySpec,
    *,
    precision: Precision | float | None = None,
    max_iterations: int = MAX_ITERATIONS,
    progress: Callable[[str], None] | None = None,
) -> float | dict[str, float]:
    """The property's value at the initial state(s) of the induced DTMC ``m`` (like :func:`checker.check`).

    Raises:
        PropertyError: when :func:`~distmc.check.forms.unsupported` names a reason.
        SlowConvergenceError: the iteration converges too slowly to meet the precision.
    """
    return at_initial(native_values(m, spec, precision, max_iterations, progress)[0], m.initial)


def native_values(
    m: InducedModel,
    spec: PropertySpec,
    precision: Precision | float | None = None,
    max_iterations: int = MAX_ITERATIONS,
    progress: Callable[[str], None] | None = None,
) -> Values:
    """:func:`values_of` on the whole model in this process (value, lower and upper bound in every state)."""
    why = unsupported(spec, m.kind)
    if why is not None:
        raise PropertyError(f"the native checker cannot check '{spec.text}': {why}")
    return values_of(LocalEngine(matrix_of(m), progress, m.initial), m, spec, precision, max_iterations)
