"""The distributed checker: each Ray worker checks the rows of the states it owns; no process holds the model.

After a Ray exploration every worker (:class:`~distmc.distributed.actor.PartitionActor`) still holds the rows of
its own states, with global target ids. :func:`build_part` turns them into a :class:`WorkerPart`:

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

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distmc.assemble.reducer import label_states
from distmc.check.channels import Channels, Mailbox
from distmc.check.gauss_seidel import row_gamma
from distmc.check.kernels import ChunkedCSR, expand_probabilities, prob_nbytes, reach_back_from
from distmc.check.level_exchange import LevelExchange
from distmc.errors import PropertyError, ResourceLimitError
from distmc.explore.limits import LimitCheck
from distmc.explore.visited import VisitedSet
from distmc.model.expr import CompiledExpr
from distmc.model.packing import StateCodec
from distmc.model.program import Model

__all__ = ["Mailbox", "WorkerEngine", "WorkerPart", "build_part", "combine_checks", "own_slots"]



@dataclass
class WorkerPart:
    """One worker's share of the induced DTMC (see the module docstring).

    Attributes:
        rank, workers: this worker and the number of workers.
        gids: ``[n]`` int64 global ids of the own states, increasing (slot ``i`` is state ``gids[i]``).
        keys: ``[n]`` packed keys of the own states, by slot.
        matrix: the own rows by slot; columns index the extended vector ``[n + sum of the blocks]``.
        remote_gids: ``[C - n]`` int64 global ids of the copies, in column order (by owner, then global id).
        recv_off: ``[W + 1]`` int64: owner ``o``'s copies are columns ``n + recv_off[o] : n + recv_off[o + 1]``.
        labels, rewards: as :class:`~distmc.assemble.reducer.InducedModel`'s, over the own states.
        initial: ``[I_own]`` slots of the own initial states.
        send: per peer, the slots whose values it needs, in the order of its copies (after :meth:`serve`).
    """

    rank: int
    workers: int
    gids: np.ndarray
    keys: np.ndarray
    matrix: ChunkedCSR
    remote_gids: np.ndarray
    recv_off: np.ndarray
    labels: dict[str, np.ndarray]
    rewards: dict[str, tuple[np.ndarray | None, np.ndarray | None]]
    initial: np.ndarray
    send: list[np.ndarray] = field(default_factory=list)

    @property
    def n_states(self) -> int:
        return int(self.gids.shape[0])

    @property
    def n_cols(self) -> int:
        return self.matrix.n_cols

    def requests(self) -> list[np.ndarray]:
        """Per owner, the global ids of its states this worker's rows point to (empty for itself)."""
        return [self.remote_gids[self.recv_off[o] : self.recv_off[o + 1]] for o in range(self.workers)]

    def serve(self, asked: list[np.ndarray]) -> None:
        """Take each peer's request (``asked[p]``: global ids of own states, increasing): what to send it."""
        self.send = []
        for gids in asked:
            slots = np.searchsorted(self.gids, gids)
            if gids.shape[0] and (slots.max() >= self.n_states or not np.array_equal(self.gids[slots], gids)):
                raise AssertionError("a peer asked for a state this worker does not own")
            self.send.append(slots.astype(np.int64))

    def nbytes(self) -> dict[str, int]:
        """Bytes held for the check: rows, copies' ids and send lists, labels and rewards."""
        exch = int(self.remote_gids.nbytes + sum(s.nbytes for s in self.send))
        lab = int(sum(v.nbytes for v in self.labels.values())
                  + sum(0 if a is None else a.nbytes for pair in self.rewards.values() for a in pair))
        return {"rows": self.matrix.nbytes, "exchange": exch, "labels": lab, "keys": int(self.keys.nbytes)}


def own_slots(gids: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(slot where ``t`` would be among the own ``gids``, whether it is there) for global ids ``t``."""
    pos = np.searchsorted(gids, t)
    if gids.shape[0] == 0:
        return pos, np.zeros(t.shape[0], dtype=bool)
    return pos, gids[np.minimum(pos, gids.shape[0] - 1)] == t


def build_part(
    rank: int,
    workers: int,
    gids: np.ndarray,
    keys: np.ndarray,
    rows: list[tuple[np.ndarray, ...]],
    action_rewards: list[dict[str, np.ndarray]],
    flags: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    owner_of_gid: Callable[[np.ndarray], np.ndarray],
    n_initial: int,
    n_total: int,
    model: Model,
    codec: StateCodec,
    atoms: Mapping[str, CompiledExpr],
    reward_names: list[str],
    direct: bool | None = None,
) -> WorkerPart:
    """A worker's :class:`WorkerPart` from what its exploration kept.

    Args:
        rank: this worker.
        workers: the number of workers.
        gids: ``[n]`` global ids of the own states (in any order).
        keys: ``[n]`` their packed keys.
        rows: the kept rows, chunk by chunk: (source global ids ``[r]``, actions ``[r]``, branch counts ``[r]``,
            target global ids ``[t]`` (int32 or int64), probabilities ``[t]`` (float64, or compact:
            :func:`~distmc.check.kernels.compact_probabilities`)), each row's branches merged (sorted by target).
            The list is emptied as the chunks are converted (their int64 targets are freed one by one).
        action_rewards: per chunk, name -> ``[r]`` action rewards.
        flags: per expanded batch, (global ids, loop, deadlock).
        owner_of_gid: the owner of the given global ids of other workers' states.
        n_initial: the initial states are global ids ``0 .. n_initial - 1``.
        n_total: the number of states of the whole model (all global ids are below it).
        model: the model (labels, rewards).
        codec: the packing of ``keys``.
        atoms: the property's atoms.
        reward_names: the property's reward structure (none or one).
        direct: how targets become columns: a map over every global id (True; fast, ``5 N`` bytes) or hash
            tables (False; memory by the worker's own share); None: the map when it costs less than the rows.

    Raises:
        PropertyError: the own states do not have exactly one row each (an induced MDP).
    """
    order = np.argsort(gids, kind="stable")
    gids, keys = gids[order], keys[order]
    n = int(gids.shape[0])
    row_gid = np.concatenate([r[0] for r in rows]) if rows else np.zeros(0, dtype=np.int64)
    slots, found = own_slots(gids, row_gid)
    in_order = n < 2 or bool((np.diff(slots) > 0).all())  # increasing: also one row per slot
    if row_gid.shape[0] != n or not found.all() or (not in_order and np.unique(slots).shape[0] != n):
        raise PropertyError("the distributed checker checks induced DTMCs (one row per state); this induced "
                            "model keeps nondeterminism: use --checker storm")
    if not in_order:
        rows = _in_slot_order(rows, slots)
    del row_gid, slots, found
    col_dtype = np.int32 if n_total < 2**31 else np.int64
    counts = np.concatenate([r[2] for r in rows]) if rows else np.zeros(0, dtype=np.int64)
    row_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=row_offsets[1:])
    held = sum(int(r[3].nbytes) + prob_nbytes(r[4]) for r in rows)
    if direct is None:  # a map over every global id when it costs less than the rows themselves
        direct = 5 * n_total <= held
    def copies(remote: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The copies' columns (``n + ...``, by owner, then global id), ``recv_off``, and their ids in that order."""
        owner = owner_of_gid(remote).astype(np.int64)
        if remote.shape[0] and (owner == rank).any():
            raise AssertionError("a target is neither owned here nor known elsewhere")
        by_owner = np.lexsort((remote, owner))
        ext = np.empty(remote.shape[0], dtype=col_dtype)
        ext[by_owner] = n + np.arange(remote.shape[0], dtype=np.int64)  # column of each copy
        recv_off = np.zeros(workers + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=workers), out=recv_off[1:])
        return ext, recv_off, remote[by_owner]

    if direct:  # the copies' columns are known before the chunks are converted
        t_chunks, p_chunks, (recv_off, remote) = _columns_direct(gids, rows, n_total, col_dtype, copies)
    else:
        t_chunks, p_chunks, provisional = _columns_hashed(gids, rows, n_total, col_dtype)
        ext, recv_off, remote = copies(provisional)
        for col in t_chunks:  # the copies' provisional numbers (stored as -1 - number) become their columns
            neg = np.flatnonzero(np.asarray(col) < 0)
            col[neg] = ext[-1 - col[neg].astype(np.int64)]
        del ext, provisional
    n_cols = n + int(remote.shape[0])
    matrix = ChunkedCSR(row_offsets, t_chunks, p_chunks, n_cols)
    # labels and rewards of the own states
    flag_gids = np.concatenate([f[0] for f in flags]) if flags else np.zeros(0, dtype=np.int64)
    loop = np.zeros(n, dtype=bool)
    deadlock = np.zeros(n, dtype=bool)
    fs, ff = own_slots(gids, flag_gids)
    if flags:
        loop[fs[ff]] = np.concatenate([f[1] for f in flags])[ff]
        deadlock[fs[ff]] = np.concatenate([f[2] for f in flags])[ff]
    names = next((list(d) for d in action_rewards if d), list(reward_names))
    act = {k: np.concatenate([d[k] for d in action_rewards if k in d]) if action_rewards else np.zeros(0)
           for k in names}
    labels, rewards = label_states(keys, model, codec, atoms, reward_names, gids < n_initial, deadlock, loop, act)
    return WorkerPart(rank, workers, gids, keys, matrix, remote, recv_off, labels, rewards,
                      np.flatnonzero(gids < n_initial))


def _columns_direct(gids: np.ndarray, rows: list[tuple[Any, ...]], n_total: int, col_dtype: type,
                    copies: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]],
                    ) -> tuple[list[np.ndarray], list[Any], tuple[np.ndarray, np.ndarray]]:
    """Columns by a map over every global id (``[N]`` int32 and ``[N]`` bool, no more than the rows cost).

    Two passes over the branches: mark the targets, then gather each chunk's columns from the map of the own
    slots and the copies' columns (``copies``: their columns, ``recv_off`` and ids by column, from the copies'
    global ids). Returns the chunks and (``recv_off``, the copies' ids by column). Empties ``rows``.
    """
    n = gids.shape[0]
    needed = np.zeros(n_total, dtype=bool)
    for r in rows:
        needed[r[3]] = True
    needed[gids] = False
    remote = np.flatnonzero(needed)
    del needed
    ext, recv_off, by_column = copies(remote)
    col_of: np.ndarray = np.empty(n_total, dtype=col_dtype)
    col_of[gids] = np.arange(n, dtype=np.int64)
    col_of[remote] = ext
    del ext, remote
    t_chunks, p_chunks = [], []
    rows.reverse()  # pop from the end: each chunk's global targets are freed as soon as converted
    while rows:
        r = rows.pop()
        t_chunks.append(col_of[r[3]])
        p_chunks.append(r[4])
        del r
    return t_chunks, p_chunks, (recv_off, by_column)


def _columns_hashed(gids: np.ndarray, rows: list[tuple[Any, ...]], n_total: int,
                    col_dtype: type) -> tuple[list[np.ndarray], list[Any], np.ndarray]:
    """Columns by hash tables (own gid -> slot; the copies numbered by first occurrence), one pass; empties ``rows``.

    For a worker whose rows are few against the whole model's states (many workers, few branches per state),
    where a map over every global id would cost more than its rows.
    """
    own_table, remote_table = VisitedSet(np.dtype(np.uint64)), VisitedSet(np.dtype(np.uint64))
    own_table.insert(gids.astype(np.uint64))  # ids = slots (gids are in slot order)
    t_chunks: list[np.ndarray] = []
    p_chunks: list[Any] = []
    rows.reverse()
    while rows:
        r = rows.pop()
        t = r[3].astype(np.uint64)
        col = own_table.lookup(t)
        rem = col < 0
        rid, _ = remote_table.insert(t[rem])
        col[rem] = -1 - rid
        t_chunks.append(col.astype(col_dtype))
        p_chunks.append(r[4])
        del r, t, col, rem, rid
    return t_chunks, p_chunks, remote_table.keys_by_id().astype(np.int64)


def _in_slot_order(rows: list[tuple[np.ndarray, ...]], slots: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    """The rows as one chunk in slot order (rows restored from a checkpoint out of order; rare, copies them)."""
    order = np.argsort(slots, kind="stable")
    counts = np.concatenate([r[2] for r in rows])
    starts = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    t = np.concatenate([r[3].astype(np.int64, copy=False) for r in rows])
    p = np.concatenate([expand_probabilities(r[4]) for r in rows])
    moved = counts[order]
    dest = np.zeros(moved.shape[0] + 1, dtype=np.int64)
    np.cumsum(moved, out=dest[1:])
    idx = np.repeat(starts[:-1][order] - dest[:-1], moved) + np.arange(int(dest[-1]), dtype=np.int64)
    src = np.concatenate([r[0] for r in rows])[order]
    act = np.concatenate([r[1] for r in rows])[order]
    return [(src, act, counts[order], t[idx], p[idx])]


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
    """

    def __init__(self, part: WorkerPart, peers: list[Any], mailbox: Mailbox, limits: LimitCheck | None = None,
                 progress: Callable[[str], None] | None = None, channels: Channels | None = None) -> None:
        self.part = part
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
        self._levels: LevelExchange | None = None  # the update order of sound value iteration (on its first pass)
        self.stats = {"check_compute_s": 0.0, "check_exchange_s": 0.0, "check_wait_s": 0.0, "check_bytes_sent": 0,
                      "check_bytes_shm": 0, "check_messages": 0, "check_rounds": 0}

    # -- messages -------------------------------------------------------------------------------------------------

    def send_to(self, kind: str, pieces: list[Any]) -> None:
        """Send ``pieces[p]`` to every peer ``p`` whose piece is not None (:class:`~distmc.check.level_exchange.Peers`)."""
        t = time.perf_counter()
        for p, peer in enumerate(self.peers):
            if p != self.part.rank and pieces[p] is not None:
                peer.deliver.options(concurrency_group="mail").remote((kind, self.step, self.part.rank), pieces[p])
                self.stats["check_bytes_sent"] += int(getattr(pieces[p], "nbytes", 0))
                self.stats["check_messages"] += 1
        self.stats["check_exchange_s"] += time.perf_counter() - t

    def receive_from(self, kind: str, owners: list[bool]) -> list[Any]:
        """This step's pieces from the ``owners`` marked (None for the others), then the next step."""
        t = time.perf_counter()
        out = [self.mailbox.take((kind, self.step, o)) if owners[o] else None for o in range(self.part.workers)]
        self.stats["check_wait_s"] += time.perf_counter() - t
        self.step += 1
        return out

    def _receive(self, kind: str) -> list[Any]:
        """Every peer's piece of this step (None for itself), then the next step."""
        out = self.receive_from(kind, [o != self.part.rank for o in range(self.part.workers)])
        if self.channels is not None:  # every peer has sent a message: it has mapped this worker's files
            self.channels.unlink()
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

    def sweep3(self, lo: np.ndarray, add: np.ndarray, hi: np.ndarray, w: np.ndarray, active: np.ndarray,
               g: float) -> None:
        if self._levels is None:
            part = self.part
            self._levels = LevelExchange(self, part.matrix, part.initial, part.send, part.recv_off, part.rank)
        self._levels.sweep(lo, add, hi, w, active, g, self._computed)

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
            self.send_to("s", [None if p == part.rank else np.flatnonzero(start[part.send[p]])
                             for p in range(part.workers)])
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
            self.send_to("b", [None if p == part.rank else np.flatnonzero(mark[part.send[p]])
                             for p in range(part.workers)])
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
        one: dict[str, Any] = {k: np.concatenate([r["checks"][i][k] for r in results])[order]
                               for k, v in first.items() if isinstance(v, np.ndarray)}
        one["check_s"] = max(float(r["checks"][i]["check_s"]) for r in results)
        if "note" in first:
            one["note"] = first["note"]
        out.append(one)
    return out
