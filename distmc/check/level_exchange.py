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

__all__ = ["LevelExchange", "Peers", "exchange_block", "exchange_plan", "levels_of"]


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
        # the copies' levels, from their owners; per peer and level what to send and where it lands
        lv = np.where(level[:n] < 0, deepest + 1, level[:n])
        self.out, self.inp = exchange_plan(engine, lv, np.arange(deepest + 2), send, recv_off, rank, "l")
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
            if self.workers > 1:
                exchange_block(self.e, self.out, self.inp, k, vecs, rank)


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


def exchange_block(
    engine: Peers,
    out: list[tuple[np.ndarray, np.ndarray]],
    inp: list[tuple[np.ndarray, np.ndarray]],
    k: int,
    vecs: tuple[np.ndarray, ...],
    rank: int,
) -> None:
    """Send each peer block ``k``'s new values it copies, and take the owners' into the copies.

    ``out[p]``: (own slots by block, block offsets) to send peer ``p``; ``inp[o]``: (copy columns by block, block
    offsets) owner ``o`` fills (empty for ``rank``). Only messages that carry something are sent, and both sides
    know which from the offsets.
    """
    workers = len(out)
    pieces: list[Any] = [None] * workers
    for p, (slots, off) in enumerate(out):
        if p != rank and off[k + 1] > off[k]:
            s = slots[off[k] : off[k + 1]]
            pieces[p] = np.stack([v[s] for v in vecs])
    engine.send_to("L", pieces)
    got = engine.receive_from("L", [p != rank and inp[p][1][k + 1] > inp[p][1][k] for p in range(workers)])
    for o, piece in enumerate(got):
        if piece is not None:
            cols, off = inp[o]
            c = cols[off[k] : off[k + 1]]
            for v, values in zip(vecs, piece, strict=True):
                v[c] = values


def exchange_plan(
    engine: Peers,
    own_key: np.ndarray,
    keys: np.ndarray,
    send: list[np.ndarray],
    recv_off: np.ndarray,
    rank: int,
    kind: str,
) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[tuple[np.ndarray, np.ndarray]]]:
    """The ``out`` and ``inp`` of :func:`exchange_block`: every owner tells each peer the keys of its copies.

    ``own_key``: ``[n]`` the block key of each own state (-1: in no block, never sent); ``keys``: every block's key,
    increasing (the same on every worker); block ``k`` is the states of key ``keys[k]``.
    """
    workers, n = len(send), own_key.shape[0]
    engine.send_to(kind, [None if p == rank else own_key[send[p]] for p in range(workers)])
    got = engine.receive_from(kind, [p != rank for p in range(workers)])
    edges = np.arange(keys.shape[0] + 1)

    def by_block(items: np.ndarray, item_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        on = item_keys >= 0
        items, block = items[on], np.searchsorted(keys, item_keys[on])
        order = np.argsort(block, kind="stable")
        return items[order].astype(np.int64), np.searchsorted(block[order], edges).astype(np.int64)

    none = (np.zeros(0, dtype=np.int64), np.zeros(edges.shape[0], dtype=np.int64))
    out = [none if p == rank else by_block(send[p], own_key[send[p]]) for p in range(workers)]
    inp = [
        none if p == rank else by_block(n + recv_off[p] + np.arange(got[p].shape[0], dtype=np.int64), got[p])
        for p in range(workers)
    ]
    return out, inp
