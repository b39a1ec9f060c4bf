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
  ``x + y * [L, U]`` on every value, iterated until they are within ``2 * precision``; the midpoint is within
  ``precision`` (1e-12, as Storm's check in :mod:`distmc.check.checker`) of the exact value;
* ``R=? [F phi]``: infinite where ``phi`` is reached with probability below 1 (prob1 as above), 0 on ``phi``,
  elsewhere the same sound value iteration with the state's reward (state plus policy-weighted action reward)
  added in every step; ``R=? [C<=k]``: ``k`` steps of ``x <- r + P x`` from 0; ``R=? [I=k]``: ``k`` steps of
  ``x <- P x`` from the state rewards (refused, as by Storm, when the structure has none).

``phi1`` and ``phi2`` are the property's atoms (labels the reducer wrote), ``true``/``false``, or their negation.
Anything else (MDPs, nested P operators, lower step bounds, total or long-run rewards) is refused by
:func:`unsupported`, and the caller keeps Storm. Products are Jacobi steps, parallel over rows and summed in row
order, so the result does not depend on the thread count.
"""

from __future__ import annotations

import re
from typing import Any

import numba as nb
import numpy as np
import stormpy.logic as sl

from distmc.assemble.reducer import InducedModel
from distmc.check.checker import DTMC_PRECISION
from distmc.check.properties import PropertySpec
from distmc.errors import PropertyError

__all__ = ["check_native", "unsupported"]

_STEP_BOUND = re.compile(r"U(<=|<)")


def _state_formula_supported(f: Any) -> bool:
    # Propositional parts over variables and PRISM labels are one atomic expression once the property's labels
    # are expanded (:func:`~distmc.check.properties.parse_property`); only the negation of a built-in label
    # ("init", "deadlock") stays a formula of its own.
    if isinstance(f, sl.UnaryBooleanStateFormula):  # negation, the only unary one
        return _state_formula_supported(f.subformula)
    return isinstance(f, (sl.AtomicExpressionFormula, sl.AtomicLabelFormula, sl.BooleanLiteralFormula))


def _path(spec: PropertySpec) -> tuple[Any, Any, int | None]:
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


def _states(f: Any, m: InducedModel) -> np.ndarray:
    """``[N]`` bool: the states satisfying the propositional state formula ``f``."""
    n = m.n_states
    if f is None:
        return np.ones(n, dtype=bool)
    if isinstance(f, sl.BooleanLiteralFormula):
        return np.full(n, str(f) == "true", dtype=bool)
    if isinstance(f, sl.UnaryBooleanStateFormula):
        return ~_states(f.subformula, m)
    name = f.label if isinstance(f, sl.AtomicLabelFormula) else str(f)
    if name not in m.labels:
        raise PropertyError(f"the induced model has no label for '{name}'")
    return m.labels[name]


@nb.njit(cache=True, nogil=True, parallel=True)
def _sweep(row_offsets, first_row, chunk_base, t_list, p_list, x, add, active, fixed, out):  # pragma: no cover
    # out[r] = add[r] + sum_j P[r, j] x[j] (summed in row order) for the active rows, fixed[r] for the others. Chunk c
    # holds rows first_row[c]:first_row[c + 1], row r's branches at t_list[c][row_offsets[r] - chunk_base[c]:].
    for c in range(len(t_list)):
        t = t_list[c]
        p = p_list[c]
        b = chunk_base[c]
        for r in nb.prange(first_row[c], first_row[c + 1]):
            if active[r]:
                acc = 0.0
                for j in range(row_offsets[r] - b, row_offsets[r + 1] - b):
                    acc += p[j] * x[t[j]]
                out[r] = add[r] + acc
            else:
                out[r] = fixed[r]


@nb.njit(cache=True, nogil=True, parallel=True)
def _sweep2(row_offsets, first_row, chunk_base, t_list, p_list, lo, add, hi, active, lo_out, hi_out):  # pragma: no cover
    # _sweep for two vectors in one pass over the matrix (``add`` to the first only; fixed rows keep their value).
    for c in range(len(t_list)):
        t = t_list[c]
        p = p_list[c]
        b = chunk_base[c]
        for r in nb.prange(first_row[c], first_row[c + 1]):
            if active[r]:
                a_lo = 0.0
                a_hi = 0.0
                for j in range(row_offsets[r] - b, row_offsets[r + 1] - b):
                    a_lo += p[j] * lo[t[j]]
                    a_hi += p[j] * hi[t[j]]
                lo_out[r] = add[r] + a_lo
                hi_out[r] = a_hi
            else:
                lo_out[r] = lo[r]
                hi_out[r] = hi[r]


@nb.njit(cache=True, nogil=True)
def _count_in(targets, counts):  # pragma: no cover - compiled
    for j in range(targets.shape[0]):
        counts[targets[j] + 1] += 1


@nb.njit(cache=True, nogil=True)
def _fill_in(offsets, targets, base, fill, sources):  # pragma: no cover - compiled
    for i in range(offsets.shape[0] - 1):
        for j in range(offsets[i], offsets[i + 1]):
            t = targets[j]
            sources[fill[t]] = base + i
            fill[t] += 1


@nb.njit(cache=True, nogil=True)
def _reach_back(in_off, sources, start, through):  # pragma: no cover - compiled
    # States that reach a `start` state along branches whose source lies in `through` (the start states too).
    seen = start.copy()
    stack = np.empty(seen.shape[0], np.int64)
    top = 0
    for s in range(seen.shape[0]):
        if seen[s]:
            stack[top] = s
            top += 1
    while top > 0:
        top -= 1
        t = stack[top]
        for k in range(in_off[t], in_off[t + 1]):
            s = sources[k]
            if not seen[s] and through[s]:
                seen[s] = True
                stack[top] = s
                top += 1
    return seen


class _Matrix:
    """The reducer's chunked CSR as numba sees it: typed lists of the chunks, each chunk's first row and branch."""

    def __init__(self, m: InducedModel) -> None:
        self.row_offsets = m.row_offsets
        self.t_list, self.p_list = nb.typed.List(), nb.typed.List()
        n_chunks = len(m.target_chunks)
        bases = np.zeros(n_chunks + 1, dtype=np.int64)
        for i, (t, p) in enumerate(zip(m.target_chunks, m.prob_chunks, strict=True)):
            self.t_list.append(t)
            self.p_list.append(p)
            bases[i + 1] = bases[i] + t.shape[0]
        if bases[-1] != m.n_transitions:
            raise AssertionError("the chunks do not hold every transition")
        self.chunk_base = bases[:-1]
        # Chunks hold whole rows, and every row of an induced DTMC has a branch: chunk c starts at the row whose
        # first branch is bases[c].
        self.first_row = np.searchsorted(m.row_offsets, bases, side="left")
        if not np.array_equal(m.row_offsets[self.first_row], bases):
            raise AssertionError("a chunk does not start at a row boundary")
        self.n = m.n_rows

    def sweep(self, x: np.ndarray, add: np.ndarray, active: np.ndarray, fixed: np.ndarray, out: np.ndarray) -> None:
        _sweep(self.row_offsets, self.first_row, self.chunk_base, self.t_list, self.p_list, x, add, active, fixed,
               out)

    def sweep2(self, lo: np.ndarray, add: np.ndarray, hi: np.ndarray, active: np.ndarray, lo_out: np.ndarray,
               hi_out: np.ndarray) -> None:
        _sweep2(self.row_offsets, self.first_row, self.chunk_base, self.t_list, self.p_list, lo, add, hi, active,
                lo_out, hi_out)

    def transpose(self) -> tuple[np.ndarray, np.ndarray]:
        """Predecessor lists: ``sources[in_off[t]:in_off[t + 1]]`` are the states with a branch to ``t``."""
        counts = np.zeros(self.n + 1, dtype=np.int64)
        for t in self.t_list:
            _count_in(t, counts)
        in_off = np.cumsum(counts)
        sources = np.empty(int(in_off[-1]), dtype=np.int32 if self.n < 2**31 else np.int64)
        fill = in_off[:-1].copy()
        for c, t in enumerate(self.t_list):
            r0, r1 = int(self.first_row[c]), int(self.first_row[c + 1])
            _fill_in(self.row_offsets[r0 : r1 + 1] - self.chunk_base[c], t, r0, fill, sources)
        return in_off, sources


def _steps(a: _Matrix, x: np.ndarray, add: np.ndarray, active: np.ndarray, fixed: np.ndarray, k: int) -> np.ndarray:
    """``k`` Jacobi steps ``x <- add + P x`` on the active rows (the others held at ``fixed``)."""
    y = np.empty_like(x)
    for _ in range(k):
        a.sweep(x, add, active, fixed, y)
        x, y = y, x
    return x


def _graph(a: _Matrix, phi1: np.ndarray, phi2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(probability > 0, probability 1) of ``phi1 U phi2``: Storm's prob0/prob1 by backward search."""
    in_off, sources = a.transpose()
    greater0 = _reach_back(in_off, sources, phi2, phi1 & ~phi2)
    # prob1 = states that cannot reach a prob0 state while staying in greater0 & !phi2 (Storm's performProb1)
    prob1 = ~_reach_back(in_off, sources, ~greater0, greater0 & ~phi2)
    return greater0, prob1


def _sound(a: _Matrix, x: np.ndarray, add: np.ndarray, active: np.ndarray, precision: float,
           max_iterations: int) -> np.ndarray:
    """The fixpoint of ``x = add + P x`` on the active rows (others fixed at ``x``), by sound value iteration.

    Quatmann and Katoen (CAV 2018), Storm's SOUND_VALUE_ITERATION for DTMCs: after k steps ``x(s)`` is what was
    collected within k steps (probability of reaching the fixed states with value 1, or reward) and ``y(s)`` the
    probability of still being among the active states. The value is ``x + y * (the value where those paths
    stand)``, and once every ``y < 1`` it lies in ``x + y * [L, U]`` with L, U the least and greatest
    ``x / (1 - y)`` over the active states. Needs every active state to leave the active states with probability 1.
    """
    live = np.flatnonzero(active)
    y = np.zeros_like(x)
    y[live] = 1.0
    x2, y2 = np.empty_like(x), np.empty_like(y)
    gap = np.inf
    for _ in range(max_iterations):
        if live.size == 0:
            return x
        a.sweep2(x, add, y, active, x2, y2)
        x, x2, y, y2 = x2, x, y2, y
        ym = y[live]
        if ym.max() >= 1.0:
            continue
        ratio = x[live] / (1.0 - ym)
        lo, hi = float(ratio.min()), float(ratio.max())
        gap = float(ym.max()) * (hi - lo)
        if gap <= 2 * precision:
            out = x.copy()
            out[live] += ym * (lo + hi) / 2
            return out
    raise PropertyError(
        f"the native checker's value iteration did not reach precision {precision:g} in {max_iterations} "
        f"iterations (bound gap {gap:.3g})"
    )


def _probability(a: _Matrix, m: InducedModel, spec: PropertySpec, precision: float,
                 max_iterations: int) -> np.ndarray:
    left, right, k = _path(spec)
    phi1, phi2 = _states(left, m), _states(right, m)
    zero = np.zeros(m.n_states)
    if k is not None:
        fixed = phi2.astype(np.float64)
        return _steps(a, fixed.copy(), zero, phi1 & ~phi2, fixed, max(k, 0))
    greater0, prob1 = _graph(a, phi1, phi2)
    return _sound(a, prob1.astype(np.float64), zero, greater0 & ~prob1, precision, max_iterations)


def _reward(a: _Matrix, m: InducedModel, spec: PropertySpec, precision: float, max_iterations: int) -> np.ndarray:
    n = m.n_states
    (given, action), = m.rewards.values()  # the reducer keeps the property's structure only
    state = np.zeros(n) if given is None else given
    total = state + (0.0 if action is None else action)  # a DTMC's row r is state r's only choice
    sub = spec.formula.subformula
    every = np.ones(n, dtype=bool)
    if not isinstance(sub, sl.EventuallyFormula):
        kind, _, k = _REWARD_BOUND.match(str(sub).replace(" ", "")).groups()  # type: ignore[union-attr]
        if kind == "C":  # reward collected in the first k steps
            return _steps(a, np.zeros(n), total, every, total, int(k))
        if given is None:
            raise PropertyError(f"'{spec.text}': the reward structure has no state rewards (as Storm refuses it: "
                                "the instantaneous reward would be 0 everywhere)")
        return _steps(a, state.copy(), np.zeros(n), every, state, int(k))  # I=k: the state reward at step k
    target = _states(sub.subformula, m)
    _, prob1 = _graph(a, every, target)
    active = prob1 & ~target  # Storm: infinite where the target is reached with probability < 1, 0 on it
    out = _sound(a, np.zeros(n), np.where(active, total, 0.0), active, precision, max_iterations)
    out[~prob1] = np.inf
    return out


def check_native(m: InducedModel, spec: PropertySpec, *, precision: float = DTMC_PRECISION,
                 max_iterations: int = 1_000_000) -> float | dict[str, float]:
    """The property's value at the initial state(s) of the induced DTMC ``m`` (like :func:`checker.check`).

    Raises:
        PropertyError: when :func:`unsupported` names a reason, or the iteration does not converge.
    """
    why = unsupported(spec, m.kind)
    if why is not None:
        raise PropertyError(f"the native checker cannot check '{spec.text}': {why}")
    a = _Matrix(m)
    values = (_reward if spec.is_reward else _probability)(a, m, spec, precision, max_iterations)
    vals = values[m.initial]
    return float(vals[0]) if vals.shape[0] == 1 else {"min": float(vals.min()), "max": float(vals.max())}
