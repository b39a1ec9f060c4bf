"""The distributed checker's blocks order (:mod:`distmc.check.blocks`) on the workers: keyed once, one exchange a block.

The keys need the strongly connected components of the undecided states, which no worker can find alone (a cycle
runs through several workers' states). The graph alone (no probabilities) is gathered on worker 0 for it: every
worker sends the global ids of its undecided rows, their levels (found by the workers together,
:func:`~distmc.check.level_exchange.levels_of`) and their targets' global ids, 8 bytes a transition; worker 0 runs
the native checker's Tarjan and heights on it (:func:`~distmc.check.blocks.block_keys`), sends each worker its
rows' keys and every worker the list of keys, and drops the graph. Worker 0 holds it for that moment only (on
delivery 48/480: 10 M transitions, 80 MB, against the 120 MB of rows the two workers keep); a model whose graph does
not fit one process's memory is past this order, and the levels order (:mod:`distmc.check.level_exchange`, which
never gathers anything) remains for it.

Then each owner tells every peer the keys of the states it copies, and a pass of sound value iteration takes the
blocks in key order: every worker updates its rows of the block from the values as they were, then sends each peer
the block's new values it copies, before any worker computes the next block; a height with a component of several
states is swept again until a max-reduction of the largest change says it settled. Only messages that carry
something are sent (which ones is known to both sides from the keys).
"""

from __future__ import annotations

import time
from typing import Any

import numba as nb
import numpy as np

from distmc.check.blocks import Schedule, _repeat, block_keys, block_pass
from distmc.check.kernels import ChunkedCSR
from distmc.check.level_exchange import Peers, exchange_block, exchange_plan, levels_of
from distmc.check.worker_part import WorkerPart

__all__ = ["BlockExchange"]


class _Graph:
    """The gathered graph as :func:`~distmc.check.blocks.block_keys` reads it (one chunk of int64 targets)."""

    def __init__(self, row_offsets: np.ndarray, targets: np.ndarray) -> None:
        self.row_offsets = row_offsets
        self.n = int(row_offsets.shape[0] - 1)
        self.first_row = np.array([0, self.n], dtype=np.int64)
        self.chunk_base = np.zeros(1, dtype=np.int64)
        self.t_list = nb.typed.List([targets])


@nb.njit(cache=True, nogil=True)
def _gather_targets(row_offsets, first_row, chunk_base, t_list, rows, col_gid, out_off, out):  # pragma: no cover
    for i in range(rows.shape[0]):
        r = rows[i]
        c = np.searchsorted(first_row, r, side="right") - 1
        t = t_list[c]
        b = chunk_base[c]
        o = out_off[i]
        for j in range(row_offsets[r] - b, row_offsets[r + 1] - b):
            out[o] = col_gid[t[j]]
            o += 1


def _rows_of(a: ChunkedCSR, rows: np.ndarray, col_gid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The branch counts and the targets' global ids of ``a``'s rows ``rows``."""
    counts = np.diff(a.row_offsets)[rows].astype(np.int64)
    off = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=off[1:])
    targets = np.empty(int(off[-1]), dtype=np.int64)
    _gather_targets(a.row_offsets, a.first_row, a.chunk_base, a.t_list, rows.astype(np.int64), col_gid, off, targets)
    return counts, targets


class BlockExchange:
    """One worker's blocks and the per-block exchange of the distributed check's sound value iteration.

    Args:
        engine: the worker's engine (messages and reductions).
        part: the worker's part (served: its ``send`` lists are set).
        active: ``[n]`` the own rows that sound value iteration updates.
        level: the levels (:func:`~distmc.check.level_exchange.levels_of`) if found before: (level, deepest).
    """

    def __init__(
        self, engine: Peers, part: WorkerPart, active: np.ndarray, level: tuple[np.ndarray, int] | None = None
    ) -> None:
        matrix, send, recv_off, rank = part.matrix, part.send, part.recv_off, part.rank
        self.e, self.a, self.rank = engine, matrix, rank
        workers = part.workers
        n = part.n_states
        t0 = time.perf_counter()
        if level is None:
            lv, deepest, _ = levels_of(engine, matrix, part.initial, send, recv_off, rank)
            level = (lv, deepest)
        t1 = time.perf_counter()
        self.level = level
        lv, deepest = level
        self.active = active[:n].copy()
        rows = np.flatnonzero(self.active)
        col_gid = np.concatenate([part.gids, part.remote_gids]).astype(np.int64)
        counts, targets = _rows_of(matrix, rows, col_gid)
        small = np.int32 if int(col_gid.max(initial=0)) < 2**31 - 1 else np.int64  # 4 bytes a transition
        piece = (
            part.gids[rows].astype(small),
            lv[rows].astype(np.int32),
            counts.astype(np.int32),
            targets.astype(small),
        )
        engine.send_to("G", [piece if p == 0 else None for p in range(workers)])
        got = engine.receive_from("G", [rank == 0 and p != 0 for p in range(workers)])
        t2 = time.perf_counter()
        if rank == 0:
            got[0] = piece
            mine, keys, repeat = self._keys_on_zero(got, deepest)
            engine.send_to("K", [None if p == 0 else (mine[p], keys, repeat) for p in range(workers)])
            own = mine[0]
            del got, mine
        back = engine.receive_from("K", [rank != 0 and p == 0 for p in range(workers)])
        if rank != 0:
            own, keys, repeat = back[0]
        t3 = time.perf_counter()
        key = np.full(n, -1, dtype=np.int64)
        key[rows] = own
        self.schedule = Schedule(key, keys, deepest, repeat)
        self.out, self.inp = exchange_plan(engine, key, keys, send, recv_off, rank, "k")
        self.workers = workers
        self.times = {"levels_s": t1 - t0, "gather_s": t2 - t1, "keys_s": t3 - t2, "plan_s": time.perf_counter() - t3}

    @staticmethod
    def _keys_on_zero(got: list[Any], deepest: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """Worker 0: every worker's rows' keys, the model's keys and the heights to repeat, from the gathered graph.

        The rows are taken in the order they came (worker by worker), their targets renumbered to those positions
        (a target no worker sent, not undecided, to one past the rows: the components leave it out).
        """
        gids = np.concatenate([g[0] for g in got]).astype(np.int64)
        m = int(gids.shape[0])
        top = 1 + max([int(gids.max(initial=-1))] + [int(g[3].max(initial=-1)) for g in got])
        pos = np.full(top, m, dtype=np.int64 if m >= 2**31 - 1 else np.int32)
        pos[gids] = np.arange(m, dtype=pos.dtype)
        row_offsets = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.concatenate([g[2] for g in got]), out=row_offsets[1:])
        targets = np.concatenate([pos[g[3]] for g in got])
        level = np.concatenate([g[1] for g in got]).astype(np.int64)
        del pos, gids
        key = block_keys(_Graph(row_offsets, targets), np.ones(m, dtype=np.bool_), level, deepest)
        del targets, row_offsets
        keys = np.unique(key)
        cut = np.cumsum([0] + [int(g[0].shape[0]) for g in got])
        return [key[cut[i] : cut[i + 1]] for i in range(len(got))], keys, _repeat(keys, deepest)

    def sweep(self, lo: np.ndarray, add: np.ndarray, hi: np.ndarray, w: np.ndarray, g: float, clock: Any) -> None:
        """One pass over the blocks in key order, each followed by its exchange (``clock(compute_s)``)."""
        s, vecs = self.schedule, (lo, hi, w)

        def update(b: int) -> float:
            t = time.perf_counter()
            change = s.update(self.a, lo, add, hi, w, g, b)
            clock(time.perf_counter() - t)
            if self.workers > 1:
                exchange_block(self.e, self.out, self.inp, b, vecs, self.rank)
            return change

        block_pass(s, update, None if self.workers == 1 else lambda c: float(self.e.allmax(np.array([c]))[0]))
