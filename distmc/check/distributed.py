"""The distributed checker: each Ray worker checks the rows of the states it owns; no process holds the model.

After a Ray exploration every worker (:class:`~distmc.distributed.actor.PartitionActor`) still holds the rows of
its own states, with global target ids. :func:`~distmc.check.worker_part.build_part` turns them into a
:class:`~distmc.check.worker_part.WorkerPart` (:mod:`distmc.check.worker_part`):

* the worker's ``n`` states in global-id order (its *slots*), one row each (an induced DTMC);
* its rows as a :class:`~distmc.check.kernels.ChunkedCSR` whose columns index an *extended* vector: the ``n`` own
  states first, then copies of the other workers' states its rows point to, grouped by owner (``recv_off``), so
  that owner ``o``'s values land in one contiguous block. Columns are int32 and the probabilities stay the
  float64 chunks the exploration merged: 12 B per transition, against the 16 B of the reducer's int64 targets;
* its labels and rewards (decoded from its own keys, :func:`~distmc.assemble.reducer.label_states`).

Once, before the check, every worker tells each owner which of the owner's states it needs (their global ids,
:meth:`WorkerPart.requests`); the owner keeps, per peer, the slots to send (:meth:`WorkerPart.serve`). Every
iteration then sends each peer exactly those values.

The check itself is :func:`distmc.check.native.values_of`, the native checker's own code, run on every worker at
once (SPMD) against a :class:`WorkerEngine`: a sweep is the native kernel on the worker's rows followed by the
exchange of the new boundary values; the backward search of the graph analysis (prob0/prob1) runs locally along
reversed branches and exchanges, per round, the boundary states it newly marked, until a round marks none
anywhere; sound value iteration's stopping test is one max-reduction a step. The workers talk to each other
directly: :meth:`WorkerEngine` sends with ``peer.deliver`` (a Ray call in its own concurrency group, so it is
taken while the peer computes) into the peer's :class:`Mailbox`; the driver only starts the check and collects
the initial states' values. Since the rows, their order and the reductions are the native checker's, the values
are the native checker's, bit for bit (``tests/test_distributed_checker.py``).

Why not ``ray.util.collective``: its CPU backend needs ``pygloo``, which PyPI does not have for this platform
(``pip download pygloo``: no matching distribution). Ray calls through the object store carry a worker's boundary
well enough between nodes: on avoid 14x14 each worker sent 46 MB a step and spent 0.1 s a step sending and 0.1 s
waiting, against 1.2 s in the kernel (``benchmarks/RESULTS.md``). Between workers on one node a step's values go
through shared memory instead, Ray carrying only a note (:mod:`distmc.check.channels`, measured there).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from distmc.check.block_exchange import BlockExchange
from distmc.check.channels import Channels, Mailbox
from distmc.check.gauss_seidel import row_gamma
from distmc.check.kernels import reach_back_from
from distmc.check.level_exchange import LevelExchange
from distmc.check.pipes import Pipes
from distmc.check.worker_part import WorkerPart
from distmc.errors import ResourceLimitError, UsageError
from distmc.explore.limits import LimitCheck

__all__ = ["ORDERS", "Mailbox", "WorkerEngine", "check_order", "combine_checks"]

#: The distributed check's update orders (``DISTMC_CHECK_ORDER`` on the driver; the first is the default).
ORDERS = ("blocks", "levels")


def check_order() -> str:
    """The update order the driver's environment asks for (``DISTMC_CHECK_ORDER``, default ``blocks``)."""
    order = os.environ.get("DISTMC_CHECK_ORDER", ORDERS[0])
    if order not in ORDERS:
        raise UsageError(f"DISTMC_CHECK_ORDER={order!r}: one of {', '.join(ORDERS)}")
    return order


class WorkerEngine:
    """One worker's side of the collective operations of :class:`distmc.check.native.Engine`.

    Args:
        part: this worker's part (served: :meth:`WorkerPart.serve` done).
        peers: every worker's Ray actor handle, by rank (``deliver`` and ``mail`` as in
            :class:`~distmc.distributed.actor.PartitionActor`).
        mailbox: where the peers' messages arrive.
        limits: time and memory limits of the run, checked every few steps.
        progress: where the step being done is written (the driver reads it for the live line).
        channels: the shared-memory channels to the same-node peers (:mod:`distmc.check.channels`; None: Ray only).
        pipes: the message pipes to the same-node peers (:mod:`distmc.check.pipes`; None: every message by Ray).
        order: the update order of sound value iteration: ``blocks`` (:mod:`distmc.check.block_exchange`, the
            native ``order="blocks"``'s) or ``levels`` (:mod:`distmc.check.level_exchange`, the native ``levels``').
    """

    def __init__(
        self,
        part: WorkerPart,
        peers: list[Any],
        mailbox: Mailbox,
        limits: LimitCheck | None = None,
        progress: Callable[[str], None] | None = None,
        channels: Channels | None = None,
        pipes: Pipes | None = None,
        order: str = "blocks",
    ) -> None:
        self.part = part
        self.pipes = pipes
        self.channels = channels
        if channels is not None:
            channels.attach()
        self.n = part.n_states
        self.workers = part.workers
        self.peers = peers
        self.mailbox = mailbox
        self.limits = limits
        self._progress = progress
        self.step = 0
        #: the update order of sound value iteration: ``blocks`` (:mod:`distmc.check.block_exchange`) or ``levels``
        self.order = order
        self._levels: LevelExchange | None = None  # the levels order's exchange (on its first pass)
        self._blocks: BlockExchange | None = None  # the blocks order's, for the active rows it was keyed for
        self.stats = {
            "check_compute_s": 0.0,
            "check_exchange_s": 0.0,
            "check_wait_s": 0.0,
            "check_bytes_sent": 0,
            "check_bytes_shm": 0,
            "check_messages": 0,
            "check_rounds": 0,
        }

    # -- messages -------------------------------------------------------------------------------------------------

    def send_to(self, kind: str, pieces: list[Any]) -> None:
        """Send ``pieces[p]`` to every peer ``p`` whose piece is not None (:class:`~distmc.check.level_exchange.Peers`)."""
        t = time.perf_counter()
        for p, peer in enumerate(self.peers):
            if p != self.part.rank and pieces[p] is not None:
                key = (kind, self.step, self.part.rank)
                if self.pipes is None or not self.pipes.send(p, key, pieces[p]):
                    peer.deliver.options(concurrency_group="mail").remote(key, pieces[p])
                self.stats["check_bytes_sent"] += int(getattr(pieces[p], "nbytes", 0))
                self.stats["check_messages"] += 1
        self.stats["check_exchange_s"] += time.perf_counter() - t

    def receive_from(self, kind: str, owners: list[bool]) -> list[Any]:
        """This step's pieces from the ``owners`` marked (None for the others), then the next step."""
        t = time.perf_counter()
        take = self.mailbox.take if self.pipes is None else self.pipes.take
        out = [take((kind, self.step, o)) if owners[o] else None for o in range(self.part.workers)]
        self.stats["check_wait_s"] += time.perf_counter() - t
        self.step += 1
        return out

    def _receive(self, kind: str) -> list[Any]:
        """Every peer's piece of this step (None for itself), then the next step."""
        out = self.receive_from(kind, [o != self.part.rank for o in range(self.part.workers)])
        if self.channels is not None:  # every peer has sent a message: it has mapped this worker's files
            self.channels.unlink()
        if self.pipes is not None:  # and opened this worker's pipes
            self.pipes.unlink()
        return out

    def _refresh(self, vectors: list[np.ndarray]) -> None:
        """Bring the copies in ``vectors`` (extended, same layout) up to date with their owners' values."""
        part, n = self.part, self.n
        if part.workers == 1:
            self.step += 1
            return
        t = time.perf_counter()
        ch, own = self.channels, [v[:n] for v in vectors]
        pieces: list[Any] = [None] * part.workers
        for p in range(part.workers):
            if p != part.rank:
                note = None if ch is None else ch.write(p, own, part.send[p])  # a same-node peer: no Ray copy
                if note is not None:  # counted here (the note itself is a few bytes)
                    nbytes = 8 * len(own) * int(part.send[p].shape[0])
                    self.stats["check_bytes_shm"] += nbytes
                    self.stats["check_bytes_sent"] += nbytes
                pieces[p] = note if note is not None else np.stack([v[part.send[p]] for v in own])
        self.stats["check_exchange_s"] += time.perf_counter() - t
        self.send_to("v", pieces)
        got = self._receive("v")
        t = time.perf_counter()
        for o, piece in enumerate(got):
            if piece is not None:
                lo, hi = n + part.recv_off[o], n + part.recv_off[o + 1]
                if isinstance(piece, np.ndarray):
                    block = piece
                else:  # a note: the block is in the peer's file
                    assert ch is not None
                    block = ch.read(o, piece)
                for v, values in zip(vectors, block, strict=True):
                    v[lo:hi] = values
        self.stats["check_exchange_s"] += time.perf_counter() - t

    # -- Engine ---------------------------------------------------------------------------------------------------

    def vector(self, own: np.ndarray) -> np.ndarray:
        v = np.empty(self.part.n_cols, dtype=np.float64)
        v[: self.n] = own
        self._refresh([v])
        return v

    def sweep(self, x: np.ndarray, add: np.ndarray, active: np.ndarray, fixed: np.ndarray, out: np.ndarray) -> None:
        t = time.perf_counter()
        self.part.matrix.sweep(x, add, active, fixed, out)
        self.stats["check_compute_s"] += time.perf_counter() - t
        self._refresh([out])

    def sweep3(
        self, lo: np.ndarray, add: np.ndarray, hi: np.ndarray, w: np.ndarray, active: np.ndarray, g: float
    ) -> None:
        part = self.part
        if self.order == "levels":
            if self._levels is None:
                self._levels = LevelExchange(self, part.matrix, part.initial, part.send, part.recv_off, part.rank)
            self._levels.sweep(lo, add, hi, w, active, g, self._computed)
            return
        b = self._blocks
        stale = b is None or not np.array_equal(b.active, active[: self.n])
        if self.workers > 1:  # every worker keys the blocks again, or none
            stale = bool(self.allmax(np.array([float(stale)]))[0])
        if stale:
            t = time.perf_counter()
            self._blocks = b = BlockExchange(self, part, active, None if b is None else b.level)
            self.stats["check_order_s"] = self.stats.get("check_order_s", 0.0) + time.perf_counter() - t
            for k, v in b.times.items():
                self.stats[f"check_order_{k}"] = self.stats.get(f"check_order_{k}", 0.0) + v
        assert b is not None
        b.sweep(lo, add, hi, w, g, self._computed)

    def _computed(self, seconds: float) -> None:
        self.stats["check_compute_s"] += seconds

    def row_gamma(self) -> float:
        return row_gamma(self.part.matrix)

    def reach_back(self, start: np.ndarray, through: np.ndarray) -> np.ndarray:
        part, n = self.part, self.n
        t = time.perf_counter()
        in_off, sources = part.matrix.transpose()
        seen = np.zeros(part.n_cols, dtype=bool)
        seen[:n] = start
        self.stats["check_compute_s"] += time.perf_counter() - t
        # the copies of the start states, then rounds: search locally, send the boundary states newly marked
        seeds = np.flatnonzero(start)
        if part.workers > 1:
            self.send_to(
                "s", [None if p == part.rank else np.flatnonzero(start[part.send[p]]) for p in range(part.workers)]
            )
            seeds = np.concatenate([seeds, self._marked(seen, self._receive("s"))])
        while True:
            t = time.perf_counter()
            newly = reach_back_from(in_off, sources, seen, through, seeds)
            self.stats["check_compute_s"] += time.perf_counter() - t
            self.stats["check_rounds"] += 1
            if part.workers == 1:
                break
            mark = np.zeros(n, dtype=bool)
            mark[newly] = True
            self.send_to(
                "b", [None if p == part.rank else np.flatnonzero(mark[part.send[p]]) for p in range(part.workers)]
            )
            seeds = self._marked(seen, self._receive("b"))
            if self.allmax(np.array([float(seeds.shape[0])]))[0] == 0:
                break
            self.check_limits()
        return seen[:n]

    def _marked(self, seen: np.ndarray, got: list[Any]) -> np.ndarray:
        """Mark the copies the peers reported (positions in their blocks); the columns newly marked."""
        part, out = self.part, []
        for o, pos in enumerate(got):
            if pos is not None and pos.shape[0]:
                cols = self.n + part.recv_off[o] + pos
                cols = cols[~seen[cols]]
                seen[cols] = True
                out.append(cols)
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def allmax(self, values: np.ndarray) -> np.ndarray:
        if self.part.workers == 1:
            return values
        self.send_to("m", [values] * self.part.workers)
        got = self._receive("m")
        got[self.part.rank] = values
        return np.maximum.reduce(np.stack(got))  # the same on every worker: every worker reduces in rank order

    def check_limits(self) -> None:
        if self.limits is not None:
            why = self.limits.exceeded()
            if why is not None:
                raise ResourceLimitError(f"the distributed check stopped: {why} (worker {self.part.rank})")

    def progress(self, what: str) -> None:
        if self._progress is not None:
            self._progress(what)


def combine_checks(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per property, the workers' arrays at their initial states (their ``check_run`` results), in global-id order.

    The arrays: ``value``, ``lower``, ``upper``, or a partial check's sides; with the slowest worker's ``check_s``.
    """
    gids = np.concatenate([r["gids"] for r in results])
    order = np.argsort(gids, kind="stable")
    out = []
    for i in range(len(results[0]["checks"])):
        first = results[0]["checks"][i]
        one: dict[str, Any] = {
            k: np.concatenate([r["checks"][i][k] for r in results])[order]
            for k, v in first.items()
            if isinstance(v, np.ndarray)
        }
        one["check_s"] = max(float(r["checks"][i]["check_s"]) for r in results)
        if "note" in first:
            one["note"] = first["note"]
        out.append(one)
    return out
