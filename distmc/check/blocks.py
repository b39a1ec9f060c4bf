"""The distributed checker's update order: components by height, each height's levels in turn, Jacobi in a block.

The native checker's order (:mod:`distmc.check.topological`) updates the states of a strongly connected component
one after the other in place; on workers that own states by hash, every such step between two workers would be a
message. This order keeps what makes the native one converge, the bottom components first, and gives up only the
in-place updates inside a block, so that a block costs one exchange:

* every undecided state gets a *key*: the height of its component (the longest chain of components below it, as
  in :mod:`distmc.check.topological`), then, where some component of that height has more than one state, its
  breadth-first level, the deepest first (a height of single states is one block: no branch joins two components
  of one height, and a state's own loop is solved at once);
* a *block* is the states of one key, updated from the values as they were before the block (a Jacobi step inside
  the block: its states are independent, so workers and threads share them); the blocks are taken in key order;
* a height with a component of several states is swept again, up to :data:`~distmc.check.topological.INNER` times,
  until no value of the height moved by more than :data:`~distmc.check.topological.INNER_TOL` (one max-reduction
  a sweep on the workers).

Heights, levels and the components are the model's, not the partition's or the thread count's: the values are the
same for any number of workers and threads, and :class:`~distmc.check.native.LocalEngine` with ``order="blocks"``
gives them bit for bit (``tests/test_distributed_checker.py``). The update of a state and the bound of its rounding
are the native order's (:func:`distmc.check.topological.solved_update`), its own loop solved at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numba as nb
import numpy as np

from distmc.check.gauss_seidel import PARALLEL_BLOCK
from distmc.check.kernels import ChunkedCSR
from distmc.check.topological import INNER, INNER_TOL, _heights, _tarjan, solved_update

__all__ = ["Schedule", "block_keys", "block_pass", "block_sweep", "native_pass", "schedule_of", "stride"]


class Graph(Protocol):
    """What :func:`block_keys` reads of the rows: a :class:`~distmc.check.kernels.ChunkedCSR`, or targets alone."""

    row_offsets: np.ndarray
    first_row: np.ndarray
    chunk_base: np.ndarray
    t_list: Any
    n: int


def block_keys(a: Graph, active: np.ndarray, level: np.ndarray, deepest: int) -> np.ndarray:
    """``[R]`` int64 key of every active row of ``a`` (-1: inactive); see the module docstring.

    ``level``: the rows' breadth-first levels (-1: not reached, taken as ``deepest + 1``); ``deepest``: the model's
    deepest level. Edges to inactive rows and to columns past the rows are left out, as in the native order.
    """
    comp, order, comp_off = _tarjan(a.row_offsets, a.first_row, a.chunk_base, a.t_list, active)
    h = _heights(a.row_offsets, a.first_row, a.chunk_base, a.t_list, comp, order, comp_off)
    sizes = np.diff(comp_off)
    multi = np.zeros(int(h.max(initial=0)) + 1, dtype=bool)
    multi[h[sizes > 1]] = True
    key = np.full(a.n, -1, dtype=np.int64)
    on = comp >= 0
    hs = h[comp[on]]
    lv = np.where(level[on] < 0, deepest + 1, level[on])
    key[on] = hs * stride(deepest) + np.where(multi[hs], deepest + 2 - lv, 0)
    return key


class Schedule:
    """The blocks of one engine's rows from their keys, and the sweeps of each height.

    Args:
        key: ``[R]`` the own rows' keys (-1: not updated).
        keys: every key of the model, increasing (the same on every worker).
        deepest: the model's deepest level (keys ``h * stride(deepest) + sub`` belong to height ``h``).
        repeat: per height in ``keys``, whether it has a component of several states (swept until it settles).
    """

    def __init__(self, key: np.ndarray, keys: np.ndarray, deepest: int, repeat: np.ndarray) -> None:
        on = np.flatnonzero(key >= 0)
        self.order = on[np.argsort(key[on], kind="stable")].astype(np.int64)
        self.block_off = np.searchsorted(key[self.order], keys, side="left").astype(np.int64)
        self.block_off = np.append(self.block_off, self.order.shape[0]).astype(np.int64)
        self.keys = keys
        height = keys // stride(deepest)
        starts = np.flatnonzero(np.r_[True, height[1:] != height[:-1]]) if keys.shape[0] else np.zeros(0, np.int64)
        self.group_off = np.append(starts, keys.shape[0]).astype(np.int64)
        self.repeat = np.asarray(repeat, dtype=bool)
        self.tmp = np.empty((4, int(np.diff(self.block_off).max(initial=0))))

    @property
    def count(self) -> int:
        """The number of blocks."""
        return int(self.keys.shape[0])

    def sweeps(self, g: int) -> int:
        """How many sweeps height group ``g`` may take."""
        return INNER if self.repeat[g] else 1

    def update(
        self, a: ChunkedCSR, lo: np.ndarray, add: np.ndarray, hi: np.ndarray, w: np.ndarray, g: float, b: int
    ) -> float:
        """Update block ``b``'s rows (Jacobi inside it); the largest change of a value."""
        return block_sweep(
            a, lo, add, hi, w, self.order, int(self.block_off[b]), int(self.block_off[b + 1]), self.tmp, g
        )


def schedule_of(key: np.ndarray, deepest: int) -> Schedule:
    """The :class:`Schedule` of a whole model's keys (the native engine's: every row is its own)."""
    keys = np.unique(key[key >= 0])
    return Schedule(key, keys, deepest, _repeat(keys, deepest))


def stride(deepest: int) -> int:
    """Keys ``h * stride + sub`` belong to height ``h``; ``sub`` 0: a height of single states, else its level's."""
    return deepest + 3


def _repeat(keys: np.ndarray, deepest: int) -> np.ndarray:
    # per height (in key order): whether its blocks are levels (a component of several states)
    if not keys.shape[0]:
        return np.zeros(0, dtype=bool)
    height = keys // stride(deepest)
    last = np.append(np.flatnonzero(height[1:] != height[:-1]), keys.shape[0] - 1)
    return keys[last] % stride(deepest) != 0


@nb.njit(cache=True, nogil=True, inline="always")
def _state(
    row_offsets, first_row, chunk_base, t_list, p_list, i_list, lo, add, hi, w, r, out, j, g
):  # pragma: no cover
    # row r's new (lo, hi, w) and its change into out[:, j]; its own loop solved at once
    c = np.searchsorted(first_row, r, side="right") - 1
    t = t_list[c]
    p = p_list[c]
    ix = i_list[c]
    b = chunk_base[c]
    compact = ix.shape[0] > 0
    a_lo = 0.0
    a_abs = 0.0
    a_hi = 0.0
    a_w = 0.0
    stay = 0.0
    for k in range(row_offsets[r] - b, row_offsets[r + 1] - b):
        q = p[ix[k]] if compact else p[k]
        s = t[k]
        if s == r:
            stay += q
            continue
        x = lo[s]
        a_lo += q * x
        a_abs += q * abs(x)
        a_hi += q * hi[s]
        a_w += q * w[s]
    n_lo, n_hi, n_w = solved_update(add[r], a_lo, a_abs, a_hi, a_w, stay, lo[r], hi[r], w[r], g)
    out[0, j] = n_lo
    out[1, j] = n_hi
    out[2, j] = n_w
    out[3, j] = max(abs(n_lo - lo[r]), abs(n_hi - hi[r]))


@nb.njit(cache=True, nogil=True, parallel=True)
def _block(
    row_offsets, first_row, chunk_base, t_list, p_list, i_list, lo, add, hi, w, order, i0, i1, tmp, g, parallel_block
):  # pragma: no cover - compiled
    if i1 - i0 >= parallel_block:
        for i in nb.prange(i0, i1):
            _state(row_offsets, first_row, chunk_base, t_list, p_list, i_list, lo, add, hi, w, order[i], tmp, i - i0, g)
    else:
        for i in range(i0, i1):
            _state(row_offsets, first_row, chunk_base, t_list, p_list, i_list, lo, add, hi, w, order[i], tmp, i - i0, g)
    change = 0.0
    for i in range(i0, i1):
        r = order[i]
        lo[r] = tmp[0, i - i0]
        hi[r] = tmp[1, i - i0]
        w[r] = tmp[2, i - i0]
        if tmp[3, i - i0] > change:
            change = tmp[3, i - i0]
    return change


def block_sweep(
    a: ChunkedCSR,
    lo: np.ndarray,
    add: np.ndarray,
    hi: np.ndarray,
    w: np.ndarray,
    order: np.ndarray,
    i0: int,
    i1: int,
    tmp: np.ndarray,
    g: float,
) -> float:
    """Update the rows ``order[i0:i1]`` from the values as they are, written once all are computed; the largest change."""
    if i1 <= i0:
        return 0.0
    return float(
        _block(
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
            order,
            i0,
            i1,
            tmp,
            g,
            PARALLEL_BLOCK,
        )
    )


def block_pass(s: Schedule, update: Callable[[int], float], agree: Callable[[float], float] | None = None) -> None:
    """One pass over ``s``'s blocks in key order: ``update(b)`` updates block ``b`` and gives its largest change.

    A height that may take several sweeps is swept until its largest change (``agree``: the same on every worker,
    a max-reduction) is at most :data:`~distmc.check.topological.INNER_TOL`.
    """
    for grp in range(s.group_off.shape[0] - 1):
        b0, b1 = int(s.group_off[grp]), int(s.group_off[grp + 1])
        sweeps = s.sweeps(grp)
        for _ in range(sweeps):
            change = 0.0
            for b in range(b0, b1):
                change = max(change, update(b))
            if sweeps > 1 and agree is not None:
                change = agree(change)
            if change <= INNER_TOL:
                break


def native_pass(
    a: ChunkedCSR, s: Schedule, lo: np.ndarray, add: np.ndarray, hi: np.ndarray, w: np.ndarray, g: float
) -> None:
    """One pass of the blocks order over a whole model (the native engine's ``order="blocks"``)."""
    block_pass(s, lambda b: s.update(a, lo, add, hi, w, g, b))
