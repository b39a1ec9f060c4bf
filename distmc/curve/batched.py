"""Step-bounded checks of many policies' DTMCs in one pass over their common rows.

Every checkpoint of a softmax policy induces a DTMC on the same states with the same fused rows
(:class:`~distmc.curve.engine.SharedModel`): only the probabilities differ. A step-bounded property (``F<=k``,
``U<=k``, ``C<=k``, ``I=k``) is ``k`` Jacobi steps ``x <- add + P x`` (:func:`distmc.check.native.step_recurrence`,
the recurrence Storm's bounded checks iterate), so ``K`` checkpoints can take their steps together: one value
column per checkpoint, the probabilities stored ``[T, K]`` (each transition's ``K`` probabilities side by side), and
one sweep reads each row's targets once for all ``K`` columns instead of ``K`` times.

Why a kernel of its own (measured, ``benchmarks/RESULTS.md``, issue 24): a sweep of the native checker is bound by
its random reads of ``x[target]``; here each such read fetches the ``K`` values of one target at once (adjacent in
memory), so ``K`` checks cost much less than ``K`` sweeps. Each column is summed in the native checker's order
(``0 + p_1 x_1 + ... + p_m x_m``, then ``add +`` that sum), so a column's value has the native checker's bits on
the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numba as nb
import numpy as np

from distmc.check.native import Recurrence

__all__ = ["steps_many"]


@nb.njit(cache=True, nogil=True, parallel=True)
def _sweep_many(offsets, targets, probs, x, add, active, fixed, out):  # pragma: no cover - compiled
    # out[r, k] = add[r, k] + sum_j probs[j, k] x[targets[j], k] over row r's branches, for the active rows;
    # fixed[r, k] for the others. Column k is summed in the native checker's order (kernels._sweep).
    n = offsets.shape[0] - 1
    kk = x.shape[1]
    for r in nb.prange(n):
        if active[r]:
            for k in range(kk):
                out[r, k] = 0.0
            for j in range(offsets[r], offsets[r + 1]):
                t = targets[j]
                for k in range(kk):
                    out[r, k] += probs[j, k] * x[t, k]
            for k in range(kk):
                out[r, k] = add[r, k] + out[r, k]
        else:
            for k in range(kk):
                out[r, k] = fixed[r, k]


def steps_many(
    offsets: np.ndarray,
    targets: np.ndarray,
    probs: np.ndarray,
    recurrences: Sequence[Recurrence],
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Each column's :class:`~distmc.check.native.Recurrence` on its own probabilities; ``[n, K]`` values.

    Args:
        offsets: ``[n + 1]`` int64, the rows of the common CSR.
        targets: ``[T]`` int64 (the same for every column).
        probs: ``[T, K]`` float64, column ``k`` the probabilities of the ``k``-th DTMC.
        recurrences: ``K`` recurrences with the same ``active`` rows and step count (the same labelled states).
        progress: called after each step with the number of steps done (e.g. to check a time limit).
    """
    kk = len(recurrences)
    if probs.ndim != 2 or probs.shape[1] != kk:
        raise AssertionError(f"probabilities of shape {probs.shape} for {kk} recurrences")
    first = recurrences[0]
    if any(r.k != first.k or not np.array_equal(r.active, first.active) for r in recurrences[1:]):
        raise AssertionError("the recurrences differ in their active rows or step count")
    x = np.ascontiguousarray(np.stack([r.x0 for r in recurrences], axis=1), dtype=np.float64)
    add = np.ascontiguousarray(np.stack([r.add for r in recurrences], axis=1), dtype=np.float64)
    fixed = np.ascontiguousarray(np.stack([r.fixed for r in recurrences], axis=1), dtype=np.float64)
    active = np.ascontiguousarray(first.active, dtype=np.bool_)
    y = np.empty_like(x)
    for i in range(first.k):
        _sweep_many(offsets, targets, probs, x, add, active, fixed, y)
        x, y = y, x
        if progress is not None:
            progress(i + 1)
    return x
