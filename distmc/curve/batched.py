"""Step-bounded checks of many policies' DTMCs in one pass over the shared MDP's rows.

Every checkpoint of a softmax policy induces a DTMC on the MDP's states whose row in state ``s`` is
``sum_r w(r) P(r)`` over the MDP rows ``r`` of ``s`` (``w(r)``: the policy's probability of the row's action). A
step-bounded property (``F<=k``, ``U<=k``, ``C<=k``, ``I=k``) is ``k`` Jacobi steps ``x <- add + P x``
(:func:`distmc.check.forms.step_recurrence`, the recurrence Storm's bounded checks iterate), so ``K``
checkpoints take their steps together on the MDP itself: a value column per checkpoint, a weight column per
checkpoint (``w`` ``[R, K]``), and one sweep reads each MDP transition (target, probability) once for all ``K``
columns, with the ``K`` values of its target side by side in memory.

Why a kernel of its own (measured, ``benchmarks/RESULTS.md``, issue 24): a sweep of the native checker streams each
DTMC's own probabilities, so ``K`` checks read ``K`` matrices; checking ``K`` fused DTMCs side by side (``[T, K]``
probabilities) was measured no faster than one at a time (gridworld N=32: 335 ms a sweep for 10 against 10 x
37 ms). The MDP is read once for all of them: 10 checkpoints' sweep took 213 ms against 10 x 56 ms on gridworld
N=32 and 257 ms against 10 x 85 ms on avoid N=8 (same load). A column's sums run in another order than the native
checker's on the fused rows (state by state, row by row), so its values agree with it to rounding (1e-15), not
bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba as nb
import numpy as np

from distmc.check.forms import Recurrence

__all__ = ["steps_many"]


@nb.njit(cache=True, nogil=True, parallel=True)
def _sweep_rows(row_groups, row_offsets, targets, prob, w, x, add, active, fixed, out, n):  # pragma: no cover
    # out[s, k] = add[s, k] + sum over the rows r of s, over their branches j: (w[r, k] * prob[j]) * x[targets[j], k],
    # for the active states; fixed[s, k] for the others; states 0..n-1 only (the others are not read any more).
    kk = x.shape[1]
    for s in nb.prange(n):
        if active[s]:
            for k in range(kk):
                out[s, k] = add[s, k]
            for r in range(row_groups[s], row_groups[s + 1]):
                for j in range(row_offsets[r], row_offsets[r + 1]):
                    t = targets[j]
                    p = prob[j]
                    for k in range(kk):
                        out[s, k] += (w[r, k] * p) * x[t, k]
        else:
            for k in range(kk):
                out[s, k] = fixed[s, k]


def steps_many(
    row_groups: np.ndarray,
    row_offsets: np.ndarray,
    targets: np.ndarray,
    prob: np.ndarray,
    weights: np.ndarray,
    recurrences: Sequence[Recurrence],
    levels: np.ndarray | None = None,
) -> np.ndarray:
    """Each column's :class:`~distmc.check.forms.Recurrence` on the MDP weighted by its column; ``[n, K]`` values.

    Args:
        row_groups: ``[n + 1]`` int64, the MDP's rows of each state.
        row_offsets: ``[R + 1]`` int64, the branches of each row.
        targets: ``[T]`` int32 or int64.
        prob: ``[T]`` float64, the MDP's probabilities.
        weights: ``[R, K]`` float64, column ``k`` the ``k``-th policy's weight of each row (rows sum to 1 per state).
        recurrences: ``K`` recurrences with the same ``active`` rows and step count (the same labelled states).
        levels: ``[D + 1]`` int64, the number of states within ``d`` steps of the initial states for each ``d``,
            the states numbered in that order (breadth first). Then step ``i`` of ``k`` updates only the states
            within ``k - i`` steps: the initial states' values after ``k`` steps read no other (a state reads its
            successors, one step further), so those are exactly the values of full sweeps, bit for bit; the other
            states' values are left unfinished. None: every state, every step.
    """
    kk = len(recurrences)
    if weights.ndim != 2 or weights.shape[1] != kk:
        raise AssertionError(f"weights of shape {weights.shape} for {kk} recurrences")
    first = recurrences[0]
    if any(r.k != first.k or not np.array_equal(r.active, first.active) for r in recurrences[1:]):
        raise AssertionError("the recurrences differ in their active rows or step count")
    x = np.ascontiguousarray(np.stack([r.x0 for r in recurrences], axis=1), dtype=np.float64)
    add = np.ascontiguousarray(np.stack([r.add for r in recurrences], axis=1), dtype=np.float64)
    fixed = np.ascontiguousarray(np.stack([r.fixed for r in recurrences], axis=1), dtype=np.float64)
    active = np.ascontiguousarray(first.active, dtype=np.bool_)
    y = x.copy()  # the states a step does not update keep finite values
    n = x.shape[0]
    for i in range(first.k):
        m = n if levels is None else int(levels[min(first.k - i - 1, levels.shape[0] - 1)])
        _sweep_rows(row_groups, row_offsets, targets, prob, weights, x, add, active, fixed, y, m)
        x, y = y, x
    return x
