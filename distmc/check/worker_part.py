"""A worker's part of the induced DTMC for the distributed checker: its own states' rows, in global-id order.

:func:`build_part` turns the rows a Ray worker kept (global target ids) into a :class:`WorkerPart`: the worker's
own states as *slots*, its rows' columns indexing an extended vector (own states first, then copies of the other
workers' states, grouped by owner), its labels and rewards; see :mod:`distmc.check.distributed` for the check
that runs on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distmc.assemble.reducer import label_states
from distmc.check.kernels import ChunkedCSR, expand_probabilities, prob_nbytes
from distmc.errors import PropertyError
from distmc.explore.visited import VisitedSet
from distmc.model.expr import CompiledExpr
from distmc.model.packing import StateCodec
from distmc.model.program import Model

__all__ = ["WorkerPart", "build_part", "own_slots"]


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
        lab = int(
            sum(v.nbytes for v in self.labels.values())
            + sum(0 if a is None else a.nbytes for pair in self.rewards.values() for a in pair)
        )
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
        raise PropertyError(
            "the distributed checker checks induced DTMCs (one row per state); this induced "
            "model keeps nondeterminism: use --checker storm"
        )
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
    act = {
        k: np.concatenate([d[k] for d in action_rewards if k in d]) if action_rewards else np.zeros(0) for k in names
    }
    labels, rewards = label_states(keys, model, codec, atoms, reward_names, gids < n_initial, deadlock, loop, act)
    return WorkerPart(
        rank, workers, gids, keys, matrix, remote, recv_off, labels, rewards, np.flatnonzero(gids < n_initial)
    )


def _columns_direct(
    gids: np.ndarray,
    rows: list[tuple[Any, ...]],
    n_total: int,
    col_dtype: type,
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


def _columns_hashed(
    gids: np.ndarray, rows: list[tuple[Any, ...]], n_total: int, col_dtype: type
) -> tuple[list[np.ndarray], list[Any], np.ndarray]:
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
