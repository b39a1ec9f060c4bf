"""The native checker's update order: strongly connected components, the bottom ones first, in place within each.

Breadth-first levels (:mod:`distmc.check.gauss_seidel`) settle a chain whose branches lead one level deeper, but an
edge inside a level or back to a shallower one is taken with the value of the last pass: on Storm's brp at
``N=8192, MAX=10`` (1.2 M states, depth above 40,000) that costs 484 passes. Here the order follows the graph itself,
as Storm's topological solver does: Tarjan's algorithm finds the strongly connected components of the active states
(:func:`components`) and emits each after every component it can reach, so a pass that updates the components in
that order, in place, sees every successor outside the component already updated: an acyclic part is settled in one
pass, and the passes that remain are those the cycles need.

For threads, the components are grouped by their *height* (the longest chain of components below them): no edge
joins two components of the same height, so the components of one height are updated side by side, each by one
thread, its states one after the other in Tarjan's order (the order is the model's and the threads only share out
independent work: the values are the same for any number of threads).

The update of a state and the third vector that bounds its rounding are those of :mod:`distmc.check.gauss_seidel`,
but for a state's own loop, solved at once: ``x <- (add + sum_{t != s} P(s, t) x_t) / (1 - P(s, s))`` and ``y`` the
same without ``add`` (so a chain whose states may stay a step is still settled in one pass: the deep chain of
``benchmarks/check_speed.py``, where every state stays with 0.05, took 213 passes with the loop iterated and takes
2 with it solved); its rounding bound is the plain update's over the other branches, divided by ``1 - P(s, s)`` and
widened by ``1 + g`` for the subtraction and the division (each within one unit roundoff). Soundness does not
depend on the order or on the loops being solved: every in-place update keeps the invariant ``v = x + Y v`` (``Y``
substochastic, ``y`` its row sums) that sound value iteration's bounds rest on, and so does the solved loop
(``v_s = (add + sum_{t != s} P(s, t) v_t) / (1 - P(s, s))``).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from distmc.check.gauss_seidel import PARALLEL_BLOCK
from distmc.check.kernels import ChunkedCSR

__all__ = ["INNER", "INNER_TOL", "Components", "components", "solved_update"]

#: A component of several states is swept up to this many times a pass, until no value moves by more than
#: :data:`INNER_TOL` (Storm's topological solver solves each component before the ones above it; a cap keeps a
#: pass short where a component converges slowly, which the passes' own stopping test then sees).
INNER = 32
INNER_TOL = 1e-16


@nb.njit(cache=True, nogil=True)
def _tarjan(row_offsets, first_row, chunk_base, t_list, active):  # pragma: no cover - compiled
    # Iterative Tarjan over the active rows (edges to inactive rows and to columns past the rows are left out):
    # (comp [n], -1 where inactive; order: the active rows by component, in emission order; comp_off [C + 1]).
    n = active.shape[0]
    index = np.full(n, -1, dtype=np.int64)
    low = np.zeros(n, dtype=np.int64)
    onstack = np.zeros(n, dtype=np.bool_)
    stack = np.empty(n, dtype=np.int64)
    cs_node = np.empty(n, dtype=np.int64)
    cs_edge = np.empty(n, dtype=np.int64)
    comp = np.full(n, -1, dtype=np.int64)
    order = np.empty(n, dtype=np.int64)
    comp_off = np.empty(n + 1, dtype=np.int64)
    sp = 0
    no = 0
    nc = 0
    counter = 0
    for root in range(n):
        if not active[root] or index[root] >= 0:
            continue
        index[root] = counter
        low[root] = counter
        counter += 1
        stack[sp] = root
        sp += 1
        onstack[root] = True
        cs_node[0] = root
        cs_edge[0] = row_offsets[root]
        csp = 1
        while csp > 0:
            v = cs_node[csp - 1]
            e = cs_edge[csp - 1]
            c = np.searchsorted(first_row, v, side="right") - 1
            t = t_list[c]
            b = chunk_base[c]
            end = row_offsets[v + 1]
            pushed = False
            while e < end:
                q = t[e - b]
                e += 1
                if q >= n or not active[q]:
                    continue
                if index[q] < 0:
                    cs_edge[csp - 1] = e
                    index[q] = counter
                    low[q] = counter
                    counter += 1
                    stack[sp] = q
                    sp += 1
                    onstack[q] = True
                    cs_node[csp] = q
                    cs_edge[csp] = row_offsets[q]
                    csp += 1
                    pushed = True
                    break
                if onstack[q] and index[q] < low[v]:
                    low[v] = index[q]
            if pushed:
                continue
            if low[v] == index[v]:
                comp_off[nc] = no
                while True:
                    sp -= 1
                    x = stack[sp]
                    onstack[x] = False
                    comp[x] = nc
                    order[no] = x
                    no += 1
                    if x == v:
                        break
                nc += 1
            csp -= 1
            if csp > 0:
                u = cs_node[csp - 1]
                if low[v] < low[u]:
                    low[u] = low[v]
    comp_off[nc] = no
    return comp, order[:no].copy(), comp_off[: nc + 1].copy()


@nb.njit(cache=True, nogil=True)
def _heights(row_offsets, first_row, chunk_base, t_list, comp, order, comp_off):  # pragma: no cover - compiled
    # The longest chain of components below each (0: a bottom one); every successor component was emitted first.
    nc = comp_off.shape[0] - 1
    n = comp.shape[0]
    h = np.zeros(nc, dtype=np.int64)
    for k in range(nc):
        m = 0
        for i in range(comp_off[k], comp_off[k + 1]):
            r = order[i]
            c = np.searchsorted(first_row, r, side="right") - 1
            t = t_list[c]
            b = chunk_base[c]
            for j in range(row_offsets[r] - b, row_offsets[r + 1] - b):
                q = t[j]
                if q < n and comp[q] >= 0 and comp[q] != k and h[comp[q]] + 1 > m:
                    m = h[comp[q]] + 1
        h[k] = m
    return h


@nb.njit(cache=True, nogil=True)
def _permuted(row_offsets, first_row, chunk_base, t_list, p_list, i_list, order, pos, off, tt, pp):  # pragma: no cover
    # The rows order[i] one after the other (off, tt, pp: a plain CSR), their columns renumbered by pos.
    for i in range(order.shape[0]):
        r = order[i]
        c = np.searchsorted(first_row, r, side="right") - 1
        t = t_list[c]
        p = p_list[c]
        ix = i_list[c]
        b = chunk_base[c]
        o = off[i]
        compact = ix.shape[0] > 0
        for j in range(row_offsets[r] - b, row_offsets[r + 1] - b):
            tt[o] = pos[t[j]]
            pp[o] = p[ix[j]] if compact else p[j]
            o += 1


@nb.njit(cache=True, nogil=True, inline="always")
def solved_update(add, a_lo, a_abs, a_hi, a_w, stay, old_lo, old_hi, old_w, g):  # pragma: no cover - compiled
    # a state's new (lo, hi, w) from its sums over the other branches (a_*) and its own loop's probability stay
    e = g * (abs(add) + a_abs + a_hi) + a_w
    if stay == 0.0:
        return add + a_lo, a_hi, e
    if stay < 1.0:
        d = 1.0 - stay
        return (add + a_lo) / d, a_hi / d, e / d * (1.0 + g)
    # a row that only stays (not active in a check; kept as the plain update, its loop included)
    return (
        add + a_lo + stay * old_lo,
        a_hi + stay * old_hi,
        g * (abs(add) + a_abs + stay * abs(old_lo) + a_hi + stay * old_hi) + a_w + stay * old_w,
    )


@nb.njit(cache=True, nogil=True, inline="always")
def _component(off, tt, pp, v, add, comp_off, k, g):  # pragma: no cover - compiled
    # Component k's rows (i: the position in the update order) one after the other, in place: v[i] = (lo, hi, w);
    # a row's own loop solved at once (its value is (add + the other branches) / (1 - stay), the bound of its
    # rounding widened by 1 + g for the division's). Returns the largest change of lo or hi.
    change = 0.0
    for i in range(comp_off[k], comp_off[k + 1]):
        a_lo = 0.0
        a_abs = 0.0
        a_hi = 0.0
        a_w = 0.0
        stay = 0.0
        for j in range(off[i], off[i + 1]):
            q = pp[j]
            t = tt[j]
            if t == i:
                stay += q
                continue
            x = v[t, 0]
            a_lo += q * x
            a_abs += q * abs(x)
            a_hi += q * v[t, 1]
            a_w += q * v[t, 2]
        old_lo = v[i, 0]
        old_hi = v[i, 1]
        v[i, 0], v[i, 1], v[i, 2] = solved_update(add[i], a_lo, a_abs, a_hi, a_w, stay, old_lo, old_hi, v[i, 2], g)
        change = max(change, abs(v[i, 0] - old_lo), abs(v[i, 1] - old_hi))
    return change


@nb.njit(cache=True, nogil=True, inline="always")
def _solve(off, tt, pp, v, add, comp_off, k, g, inner, tol):  # pragma: no cover - compiled
    # Component k swept until no value moves by more than tol, at most ``inner`` times (once: a single state).
    n_sweeps = 1 if comp_off[k + 1] - comp_off[k] == 1 else inner
    for _ in range(n_sweeps):
        if _component(off, tt, pp, v, add, comp_off, k, g) <= tol:
            break


@nb.njit(cache=True, nogil=True, parallel=True)
def _height(off, tt, pp, v, add, comp_off, k0, k1, g, parallel_block, inner, tol):  # pragma: no cover - compiled
    # The components k0:k1 (one height: independent of each other), side by side when they hold many states.
    if comp_off[k1] - comp_off[k0] >= parallel_block:
        for k in nb.prange(k0, k1):
            _solve(off, tt, pp, v, add, comp_off, k, g, inner, tol)
    else:
        for k in range(k0, k1):
            _solve(off, tt, pp, v, add, comp_off, k, g, inner, tol)


@nb.njit(cache=True, nogil=True)
def _all_heights(off, tt, pp, v, add, comp_off, height_off, g, parallel_block, inner, tol):  # pragma: no cover
    for h in range(height_off.shape[0] - 1):
        _height(off, tt, pp, v, add, comp_off, height_off[h], height_off[h + 1], g, parallel_block, inner, tol)


@nb.njit(cache=True, nogil=True, parallel=True)
def _gather(order, lo, add, hi, w, v, add_p):  # pragma: no cover - compiled
    for i in nb.prange(order.shape[0]):
        r = order[i]
        v[i, 0] = lo[r]
        v[i, 1] = hi[r]
        v[i, 2] = w[r]
        add_p[i] = add[r]


@nb.njit(cache=True, nogil=True, parallel=True)
def _scatter(order, m, v, lo, hi, w):  # pragma: no cover - compiled
    for i in nb.prange(m):
        r = order[i]
        lo[r] = v[i, 0]
        hi[r] = v[i, 1]
        w[r] = v[i, 2]


class Components:
    """The active rows' strongly connected components in the update order, grouped by height, and their rows copied.

    ``order``: the active rows, component by component; ``comp_off``: component ``k``'s rows are
    ``order[comp_off[k]:comp_off[k + 1]]``; ``height_off``: the components of height ``h`` are
    ``height_off[h]:height_off[h + 1]`` (the bottom ones first). A pass runs on a copy of the active rows in this
    order (a plain CSR, its columns renumbered: the other rows after the active ones) and on the vectors gathered
    into it, three values a row side by side: on the delivery truck a sweep takes a third of the time it takes on
    the chunks in place, for 12 bytes a transition while the check runs.
    """

    def __init__(self, a: ChunkedCSR, order: np.ndarray, comp_off: np.ndarray, height_off: np.ndarray) -> None:
        self.order, self.comp_off, self.height_off = order, comp_off, height_off
        m = order.shape[0]
        inactive = np.ones(a.n, dtype=np.bool_)
        inactive[order] = False
        #: every row's position: the active rows in the update order, then the others
        self.full_order = np.concatenate([order, np.flatnonzero(inactive)]).astype(np.int64)
        pos = np.empty(a.n, dtype=np.int64)  # the native checker's columns are its rows
        pos[self.full_order] = np.arange(a.n, dtype=np.int64)
        counts = np.diff(a.row_offsets)[order]
        self.off = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(counts, out=self.off[1:])
        self.tt = np.empty(int(self.off[-1]), dtype=np.int32 if a.n < 2**31 else np.int64)
        self.pp = np.empty(int(self.off[-1]), dtype=np.float64)
        _permuted(
            a.row_offsets,
            a.first_row,
            a.chunk_base,
            a.t_list,
            a.p_list,
            a.i_list,
            order,
            pos,
            self.off,
            self.tt,
            self.pp,
        )
        self._v = np.empty((a.n, 3), dtype=np.float64)
        self._add = np.empty(a.n, dtype=np.float64)

    @property
    def count(self) -> int:
        """The number of components."""
        return int(self.comp_off.shape[0] - 1)

    def sweep(self, lo: np.ndarray, add: np.ndarray, hi: np.ndarray, w: np.ndarray, g: float) -> None:
        """One pass: ``lo <- add + P lo``, ``hi <- P hi`` and their rounding bound ``w`` on every active row, in place.

        The active rows are those the components were found for.
        """
        _gather(self.full_order, lo, add, hi, w, self._v, self._add)
        _all_heights(
            self.off,
            self.tt,
            self.pp,
            self._v,
            self._add,
            self.comp_off,
            self.height_off,
            g,
            PARALLEL_BLOCK,
            INNER,
            INNER_TOL,
        )
        _scatter(self.full_order, self.order.shape[0], self._v, lo, hi, w)


def components(a: ChunkedCSR, active: np.ndarray, level: np.ndarray | None = None) -> Components:
    """The :class:`Components` of ``a``'s active rows (edges to inactive rows, held fixed, are left out).

    ``level``: the rows' breadth-first levels (:func:`~distmc.check.gauss_seidel.levels`; -1: not reached); where
    given, the rows of each component are updated deepest level first, then by id, instead of in Tarjan's order
    (the order in which a depth-first search closed them follows its search, not the model's progress: on the
    delivery truck's two components of 889,344 states each it took minutes where the levels order takes 18 passes).
    """
    comp, order, comp_off = _tarjan(a.row_offsets, a.first_row, a.chunk_base, a.t_list, active)
    if level is not None and order.shape[0]:
        lv = np.where(level < 0, int(level.max(initial=0)) + 1, level)[order]
        which = np.repeat(np.arange(comp_off.shape[0] - 1, dtype=np.int64), np.diff(comp_off))
        order = order[np.lexsort((order, -lv, which))]
    h = _heights(a.row_offsets, a.first_row, a.chunk_base, a.t_list, comp, order, comp_off)
    by_height = np.argsort(h, kind="stable")  # the bottom components first; within a height, in emission order
    sizes = np.diff(comp_off)[by_height]
    new_off = np.zeros(by_height.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=new_off[1:])
    starts = comp_off[:-1][by_height]
    # the rows of the components in their new order: each component's run of ``order`` in turn
    index = np.repeat(starts - new_off[:-1], sizes) + np.arange(order.shape[0], dtype=np.int64)
    height_off = np.searchsorted(h[by_height], np.arange(int(h.max(initial=-1)) + 2), side="left").astype(np.int64)
    return Components(a, order[index], new_off, height_off)
