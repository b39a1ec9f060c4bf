"""The distributed checker's levels (:mod:`distmc.check.gauss_seidel`): found together, each sent once it is done.

The update order is the model's breadth-first levels (every worker must use the same ones for the values to be the
same for any number of workers). The workers find them together, one breadth-first round at a time: each expands its
frontier along its rows, keeps the own states it reaches first and tells each owner which of its states it reached
(positions in the block of copies the owner keeps it supplied with); then the owners tell every peer the level of each
state it copies. A pass of sound value iteration then takes the levels from the deepest: every worker updates its
rows of the level and sends each peer the level's new values it copies, before any worker computes the level above.
Only messages that carry something are sent (which ones is known to both sides from the levels), through Ray: a
level's values are a small part of the boundary, and the shared-memory channels of the full exchange take turns in
two halves that a message left out would mix up.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from distmc.check.gauss_seidel import Blocks, level_blocks, level_round
from distmc.check.kernels import ChunkedCSR

__all__ = ["LevelExchange", "Peers", "levels_of"]


class Peers(Protocol):
    """What :class:`LevelExchange` needs of a worker of the distributed checker (its WorkerEngine)."""

    n: int
    stats: dict[str, Any]

    def send_to(self, kind: str, pieces: list[Any]) -> None:
        """Send ``pieces[p]`` to every peer ``p`` whose piece is not None, under this step's key."""
        ...

    def receive_from(self, kind: str, owners: list[bool]) -> list[Any]:
        """The pieces of this step from the owners marked True (None for the others), then the next step."""
        ...

    def allmax(self, values: np.ndarray) -> np.ndarray: ...


class LevelExchange:
    """One worker's levels and the per-level exchange of the distributed check's sound value iteration.

    Args:
        engine: the worker's engine (messages and reductions).
        matrix: its rows; columns index the extended vector (own states first, then the copies by owner).
        initial: its own initial states' slots.
        send: per peer, the own slots it copies (increasing).
        recv_off: ``[W + 1]``: owner ``o``'s copies are columns ``n + recv_off[o] : n + recv_off[o + 1]``.
        rank: this worker.
    """

    def __init__(
        self,
        engine: Peers,
        matrix: ChunkedCSR,
        initial: np.ndarray,
        send: list[np.ndarray],
        recv_off: np.ndarray,
        rank: int,
    ) -> None:
        self.e, self.a, self.rank = engine, matrix, rank
        self.send, self.recv_off = send, recv_off
        self.workers = len(send)
        n = engine.n
        level, deepest, depth = levels_of(engine, matrix, initial, send, recv_off, rank)
        self.blocks: Blocks = level_blocks(level[:n], deepest)
        # the copies' levels, from their owners
        lv = np.where(level[:n] < 0, deepest + 1, level[:n])
        engine.send_to("l", [None if p == rank else lv[send[p]] for p in range(self.workers)])
        got = engine.receive_from("l", [p != rank for p in range(self.workers)])
        self.out: list[tuple[np.ndarray, np.ndarray]] = []  # per peer: own slots by level, level offsets
        self.inp: list[tuple[np.ndarray, np.ndarray]] = []  # per owner: copy columns by level, level offsets
        levels = np.arange(deepest + 3)
        for p in range(self.workers):
            if p == rank:
                empty = (np.zeros(0, dtype=np.int64), np.zeros(deepest + 3, dtype=np.int64))
                self.out.append(empty)
                self.inp.append(empty)
                continue
            order = np.argsort(lv[send[p]], kind="stable")
            self.out.append((send[p][order], np.searchsorted(lv[send[p]][order], levels)))
            clv = got[p]
            order = np.argsort(clv, kind="stable")
            cols = n + recv_off[p] + order
            self.inp.append((cols.astype(np.int64), np.searchsorted(clv[order], levels)))
        self.depth = depth

    def sweep(
        self, lo: np.ndarray, add: np.ndarray, hi: np.ndarray, w: np.ndarray, active: np.ndarray, g: float, clock: Any
    ) -> None:
        """One pass over the levels from the deepest, each followed by its exchange (``clock(compute_s)``)."""
        import time

        vecs = (lo, hi, w)
        rank = self.rank
        for k in range(self.blocks.count - 1, -1, -1):
            t = time.perf_counter()
            self.blocks.sweep(self.a, lo, add, hi, w, active, g, k)
            clock(time.perf_counter() - t)
            if self.workers == 1:
                continue
            pieces: list[Any] = [None] * self.workers
            for p, (slots, off) in enumerate(self.out):
                if p != rank and off[k + 1] > off[k]:
                    s = slots[off[k] : off[k + 1]]
                    pieces[p] = np.stack([v[s] for v in vecs])
            self.e.send_to("L", pieces)
            want = [p != rank and self.inp[p][1][k + 1] > self.inp[p][1][k] for p in range(self.workers)]
            got = self.e.receive_from("L", want)
            for o, piece in enumerate(got):
                if piece is not None:
                    cols, off = self.inp[o]
                    c = cols[off[k] : off[k + 1]]
                    for v, values in zip(vecs, piece, strict=True):
                        v[c] = values


def levels_of(
    engine: Peers, matrix: ChunkedCSR, initial: np.ndarray, send: list[np.ndarray], recv_off: np.ndarray, rank: int
) -> tuple[np.ndarray, int, int]:
    """The breadth-first levels, found by the workers together.

    Returns ``[C]`` levels of the own states, then of the copies reached (-1 elsewhere); the model's deepest level;
    the number of rounds.
    """
    workers = len(send)
    n = engine.n
    level = np.full(matrix.n_cols, -1, dtype=np.int64)  # own states' levels, then the copies' (once reached)
    frontier = np.unique(initial.astype(np.int64))
    level[frontier] = 0
    depth = 0
    while engine.allmax(np.array([float(frontier.shape[0])]))[0] > 0:
        depth += 1
        reached = level_round(matrix, frontier, level, depth)
        own, copies = reached[reached < n], reached[reached >= n]
        pieces: list[Any] = [None] * workers
        for o in range(workers):
            if o != rank:
                lo, hi = n + recv_off[o], n + recv_off[o + 1]
                pieces[o] = copies[(copies >= lo) & (copies < hi)] - lo
        engine.send_to("f", pieces)
        got = engine.receive_from("f", [p != rank for p in range(workers)])
        more = [own]
        for p, pos in enumerate(got):
            if pos is not None and pos.shape[0]:
                slots = send[p][pos]
                slots = np.unique(slots[level[slots] < 0])
                level[slots] = depth
                more.append(slots)
        frontier = np.concatenate(more)
    deepest = int(engine.allmax(np.array([float(level[:n].max(initial=0))]))[0])
    return level, deepest, depth
