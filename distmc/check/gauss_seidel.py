"""The update order of the native and distributed checkers' sound value iteration: breadth-first levels, deepest first.

Jacobi steps (every state from the values of the last step) need about as many steps as the chain is deep times its
mixing time: 1,918 steps on delivery 48/480 (depth 482), 150 times Storm's sound value iteration, which updates in
place in an order that follows the graph. Here the states are updated in place by *levels*: the level of a state is
its breadth-first distance from the initial states (:func:`levels`, a property of the model); the levels are taken
from the deepest to the first, and within a level every state is updated from the values the deeper levels were just
given and the others' as they were (a Jacobi step inside the level, so the states of a level are independent and
threads share them). Most branches of an explored chain lead one level deeper, so one pass settles an almost acyclic
part of the chain: 18 passes on delivery 48/480. Blocks of consecutive ids instead of levels were measured too (on
delivery, where a level holds about 4,200 states): 67 passes with 4,096 ids a block, 607 with 8,000, 1,756 with
65,536: a block spanning two levels is a Jacobi step across them.

Since the order is the model's (levels, then global ids), not the partition's, every value is the same for any
number of workers and threads: the distributed checker runs the same blocks, exchanging a level's new values between
the workers before the level above it is computed (:mod:`distmc.check.distributed`).

Each pass also carries a third vector ``w``, a bound on the floating-point error of both iterated vectors: an update
``add + P x`` of a row with ``d`` branches is off by at most ``gamma_{d+1} (|add| + P |x|)`` (Higham's bound of a
rounded dot product) plus what its inputs were off by, weighted by their probabilities; so ``w <- g (|add| + P |x| +
P y) + P w`` (:meth:`Blocks.sweep`, ``g`` twice ``gamma`` for margin: :func:`row_gamma`) bounds the error of ``x``
and of ``y`` in every state, and the bounds sound value iteration reports are taken over the boxes ``x +- w``, ``y +-
w`` (:func:`svi_stats`, :func:`bounds_into`). The precision's rule is tested on the iteration's own bounds (those of
the computed vectors, as Storm does): the rounding term of an expected reward of 100 after a few dozen steps is
already past 1e-12, a rule no float64 iteration could then meet. On delivery 48/480 ``w`` ends at 3.9e-15 at the initial state (value 0.00703): a margin a
fixed number of units in the last place would not have guaranteed.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from distmc.check.kernels import ChunkedCSR

__all__ = [
    "PARALLEL_BLOCK",
    "Blocks",
    "bounds_into",
    "gamma",
    "level_blocks",
    "level_round",
    "levels",
    "row_gamma",
    "svi_stats",
]

#: Blocks with at least this many rows are shared by the threads (a smaller one costs more to hand out than to
#: compute: 0.27 s a pass on delivery 48/480 with every level parallel, 0.10 s with none).
PARALLEL_BLOCK = 8192


@nb.njit(cache=True, nogil=True, inline="always")
def _row3(row_offsets, first_row, chunk_base, t_list, p_list, i_list, lo, hi, w, r):  # pragma: no cover - compiled
    # (P[r] . lo, P[r] . |lo|, P[r] . hi, P[r] . w), summed in row order
    c = np.searchsorted(first_row, r, side="right") - 1
    t = t_list[c]
    p = p_list[c]
    ix = i_list[c]
    b = chunk_base[c]
    a_lo = 0.0
    a_abs = 0.0
    a_hi = 0.0
    a_w = 0.0
    compact = ix.shape[0] > 0
    for j in range(row_offsets[r] - b, row_offsets[r + 1] - b):
        q = p[ix[j]] if compact else p[j]
        k = t[j]
        v = lo[k]
        a_lo += q * v
        a_abs += q * abs(v)
        a_hi += q * hi[k]
        a_w += q * w[k]
    return a_lo, a_abs, a_hi, a_w


@nb.njit(cache=True, nogil=True, inline="always")
def _update(
    row_offsets, first_row, chunk_base, t_list, p_list, i_list, lo, add, hi, w, active, order, i, i0, tmp, g
):  # pragma: no cover - compiled
    # row order[i]'s new values into tmp[:, i - i0]
    r = order[i]
    if active[r]:
        a_lo, a_abs, a_hi, a_w = _row3(row_offsets, first_row, chunk_base, t_list, p_list, i_list, lo, hi, w, r)
        tmp[0, i - i0] = add[r] + a_lo
        tmp[1, i - i0] = a_hi
        tmp[2, i - i0] = g * (abs(add[r]) + a_abs + a_hi) + a_w


@nb.njit(cache=True, nogil=True, parallel=True)
def _sweep3_blocks(
    row_offsets,
    first_row,
    chunk_base,
    t_list,
    p_list,
    i_list,
    lo,
    add,
    hi,
    w,
    active,
    order,
    i0,
    i1,
    tmp,
    g,
    parallel_block,
):  # pragma: no cover - compiled
    # One level: the rows order[i0:i1] from the values as they are, written once all are computed
    # (lo <- add + P lo, hi <- P hi on the active rows, and w <- g (|add| + P |lo| + P hi) + P w, the bound on the
    # rounding error of both; the other rows keep their values).
    if i1 - i0 >= parallel_block:
        for i in nb.prange(i0, i1):
            _update(
                row_offsets, first_row, chunk_base, t_list, p_list, i_list, lo, add, hi, w, active, order, i, i0, tmp, g
            )
    else:
        for i in range(i0, i1):
            _update(
                row_offsets, first_row, chunk_base, t_list, p_list, i_list, lo, add, hi, w, active, order, i, i0, tmp, g
            )
    for i in range(i0, i1):
        r = order[i]
        if active[r]:
            lo[r] = tmp[0, i - i0]
            hi[r] = tmp[1, i - i0]
            w[r] = tmp[2, i - i0]


@nb.njit(cache=True, nogil=True)
def _all_blocks(
    row_offsets,
    first_row,
    chunk_base,
    t_list,
    p_list,
    i_list,
    lo,
    add,
    hi,
    w,
    active,
    order,
    block_off,
    tmp,
    g,
    parallel_block,
):  # pragma: no cover - compiled
    for k in range(block_off.shape[0] - 2, -1, -1):
        _sweep3_blocks(
            row_offsets,
            first_row,
            chunk_base,
            t_list,
            p_list,
            i_list,
            lo,
            add,
            hi,
            w,
            active,
            order,
            block_off[k],
            block_off[k + 1],
            tmp,
            g,
            parallel_block,
        )


class Blocks:
    """The update blocks of one engine's rows, with the scratch space of one level.

    ``order``: the rows by level, then global id; ``block_off``: level ``k``'s rows are
    ``order[block_off[k]:block_off[k + 1]]``.
    """

    def __init__(self, order: np.ndarray, block_off: np.ndarray) -> None:
        self.order = order
        self.block_off = block_off
        self.tmp = np.empty((3, int(np.diff(block_off).max(initial=0))))

    @property
    def count(self) -> int:
        return int(self.block_off.shape[0] - 1)

    def sweep(
        self,
        a: ChunkedCSR,
        lo: np.ndarray,
        add: np.ndarray,
        hi: np.ndarray,
        w: np.ndarray,
        active: np.ndarray,
        g: float,
        k: int | None = None,
    ) -> None:
        """Update level ``k`` in place (None: every level, the deepest first, in one compiled call).

        ``lo <- add + P lo``, ``hi <- P hi`` on the active rows, and ``w``, a bound on the rounding error of both,
        ``<- g (|add| + P |lo| + P hi) + P w`` (``g``: :func:`row_gamma`).
        """
        args = (
            a.row_offsets,
            a.first_row,
            a.chunk_base,
            a.t_list,
            a.p_list,
            a.i_list,
            lo,
            add,
            hi,
            w,
            active,
            self.order,
        )
        if k is None:
            _all_blocks(*args, self.block_off, self.tmp, g, PARALLEL_BLOCK)
        else:
            _sweep3_blocks(*args, int(self.block_off[k]), int(self.block_off[k + 1]), self.tmp, g, PARALLEL_BLOCK)


@nb.njit(cache=True, nogil=True)
def _levels(row_offsets, first_row, chunk_base, t_list, frontier, level, depth):  # pragma: no cover - compiled
    # One breadth-first round: the own rows not yet reached that a frontier row points to get ``depth``.
    n = level.shape[0]
    nxt = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(frontier.shape[0]):
        r = frontier[i]
        c = np.searchsorted(first_row, r, side="right") - 1
        t = t_list[c]
        b = chunk_base[c]
        for j in range(row_offsets[r] - b, row_offsets[r + 1] - b):
            q = t[j]
            if q < n and level[q] < 0:
                level[q] = depth
                nxt[k] = q
                k += 1
    return nxt[:k]


def level_round(a: ChunkedCSR, frontier: np.ndarray, level: np.ndarray, depth: int) -> np.ndarray:
    """One breadth-first round from the rows ``frontier``: the own rows it reaches first, given ``depth``."""
    return _levels(
        a.row_offsets, a.first_row, a.chunk_base, a.t_list, frontier.astype(np.int64, copy=False), level, depth
    )


def levels(a: ChunkedCSR, start: np.ndarray) -> np.ndarray:
    """``[R]`` int64 breadth-first distance of every row from the rows ``start`` (-1: not reached)."""
    level = np.full(a.n, -1, dtype=np.int64)
    frontier = np.unique(start.astype(np.int64))
    level[frontier] = 0
    depth = 0
    while frontier.shape[0]:
        depth += 1
        frontier = level_round(a, frontier, level, depth)
    return level


def level_blocks(level: np.ndarray, deepest: int) -> Blocks:
    """The :class:`Blocks` of rows (in global-id order) from their levels.

    ``-1`` (not reached from an initial state) is taken as level ``deepest + 1``; ``deepest``: the model's deepest
    level (the same on every worker).
    """
    lv = np.where(level < 0, deepest + 1, level)
    order = np.argsort(lv, kind="stable").astype(np.int64)
    block_off = np.searchsorted(lv[order], np.arange(deepest + 3), side="left").astype(np.int64)
    return Blocks(order, block_off)


#: The unit roundoff of float64.
UNIT = 2.0**-53


def gamma(n: int) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)``: the relative error bound of a sum of ``n`` rounded products."""
    return n * UNIT / (1.0 - n * UNIT)


def row_gamma(a: ChunkedCSR) -> float:
    """The rounding factor of one update of ``a``'s rows.

    Twice :func:`gamma` of the longest row plus two: its products, the added reward, and a margin for the rounding of
    the error bound itself.
    """
    d = int(np.diff(a.row_offsets).max(initial=0))
    return 2.0 * gamma(d + 2)


@nb.njit(cache=True, nogil=True)
def svi_stats(x, y, w, live, lo, hi, eps, floor):  # pragma: no cover - compiled
    # Over the live states: the largest y, the least and the greatest ratio x / (1 - y) (sound value iteration's L
    # and U candidates) of the computed vectors and (the same with x and y anywhere within w: rounding included) of
    # every vector they may stand for, and how far the widest state bound x + y * [lo, hi] is over the absolute rule
    # max(eps, floor * m) (the rule applies to the iteration's own bounds, see the module docstring).
    ymax = -np.inf
    y2max = -np.inf
    lmin = np.inf
    umax = -np.inf
    lmin_r = np.inf
    umax_r = -np.inf
    over = -np.inf
    finite = np.isfinite(hi - lo)
    for i in range(live.shape[0]):
        s = live[i]
        xs = x[s]
        ys = y[s]
        ymax = max(ymax, ys)
        if ys < 1.0:
            lmin = min(lmin, xs / (1.0 - ys))
            umax = max(umax, xs / (1.0 - ys))
        x1 = xs - w[s]
        x2 = xs + w[s]
        y1 = max(ys - w[s], 0.0)
        y2 = min(ys + w[s], 1.0)
        y2max = max(y2max, y2)
        if y2 < 1.0:
            lmin_r = min(lmin_r, x1 / (1.0 - y1), x1 / (1.0 - y2))
            umax_r = max(umax_r, x2 / (1.0 - y1), x2 / (1.0 - y2))
        if finite:
            b1 = xs + ys * lo
            b2 = xs + ys * hi
            if b2 > b1:
                m = min(abs(b1), abs(b2)) if b1 * b2 > 0 else 0.0
                over = max(over, (b2 - b1) - max(eps, floor * m))
    return ymax, lmin, umax, y2max, lmin_r, umax_r, over


@nb.njit(cache=True, nogil=True, parallel=True)
def bounds_into(x, y, w, live, lo, hi, lower, upper):  # pragma: no cover - compiled
    # The live states' bounds x + y * [lo, hi] with x and y each known to within w, into lower and upper.
    for i in nb.prange(live.shape[0]):
        s = live[i]
        x1 = x[s] - w[s]
        x2 = x[s] + w[s]
        y1 = max(y[s] - w[s], 0.0)
        y2 = min(y[s] + w[s], 1.0)
        lower[s] = x1 + min(y1 * lo, y2 * lo)
        upper[s] = x2 + max(y1 * hi, y2 * hi)
