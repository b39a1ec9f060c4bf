"""The Ray driver: W actors, each owning the states whose packed key hashes to it, exploring level by level.

Every actor (:class:`PartitionActor`) builds its own model, kernel and policy replica from the run's
:class:`~distmc.pipeline.Job`. Ownership: ``owner = mix(key) mod W`` (:func:`owner_of`, a splitmix64 mix of the key's
words, so that the packed keys' regular low bits do not decide it).

Termination and numbering: level-synchronous breadth-first search with a barrier per level. One level is:

1. ``expand``: every actor expands its frontier (its states of the current level, in global-id order) in batches,
   keeps the rows, and sends each owner the distinct successor keys it found for it, as an Arrow record batch
   (``key``, and ``occ`` = position of the key's first occurrence: source global id x 2^20 + branch index);
2. ``lookup``: every owner looks the keys up in its visited set, takes the unknown ones in (the new states) and
   reports each new state's first occurrence to the driver;
3. the driver sorts all new states of the level by first occurrence and hands out global ids in that order: this
   is exactly the order in which the in-process driver numbers them (by first occurrence in the sequence of
   successors, sources in id order), so any W gives the identical model, state for state;
4. ``answer``: every owner sends each source the global ids of the keys it asked about; ``store``: the sources
   turn their rows' successor keys into global ids and keep the rows.

The fixpoint is the first level that finds no new state anywhere (the driver sums the counts of step 2). States
and transitions never cross as Python objects: keys travel as Arrow arrays, ids and rows as numpy arrays through
Ray's object store. A lone actor (W = 1) owns every successor: it runs a level in one call
(:meth:`PartitionActor.level_solo`), its visited set numbering the new states as steps 1-4 would. Every actor merges
its rows as it keeps them (branches sorted by target, duplicates added up: the reducer's routine, spread over the
workers). The reducer then takes the partitions' rows in global order (:func:`gather`: as they are, read-only in
Ray's object store, when they are in that order already, else placed row by row) and uses them without a merge.

A finished run's actors are kept, emptied, for the next run of the same shape in this process (:func:`explore_ray`'s
``keep_workers``, :func:`release_workers`).
"""

from __future__ import annotations

import logging
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from distmc._internal.jit import HAVE_NUMBA, first_occurrences, place_rows
from distmc.assemble.reducer import merge_csr_rows
from distmc.errors import DistmcError, ResourceLimitError, WorkerError
from distmc.explore.arrowio import keys_from_arrow, keys_to_arrow
from distmc.explore.checkpoint import Checkpoint, file_digest, write_level
from distmc.explore.expander import policy_counters
from distmc.explore.limits import LimitCheck, Limits, rss_bytes
from distmc.explore.partition import Explored
from distmc.explore.visited import VisitedSet
from distmc.model.packing import StateCodec
from distmc.pipeline import Job

__all__ = ["explore_ray", "gpu_share", "owner_of", "release_workers"]

log = logging.getLogger("distmc.ray")

#: How long the workers may take to start (build their model, kernel and policy) before the run gives up.
START_TIMEOUT_S = 300

#: Branches of one state must stay below this (the first-occurrence position packs the branch index in 20 bits).
OCC_SHIFT = 20


def owner_of(words: np.ndarray, w: int) -> np.ndarray:
    """Owner ``[N]`` int64 in ``0..w-1`` of packed keys given as their words ``[N, W]`` uint64."""
    h = np.zeros(words.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(words.shape[1]):
            k = h ^ words[:, j]
            k = (k ^ (k >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            k = (k ^ (k >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            h = k ^ (k >> np.uint64(31))
    return (h % np.uint64(w)).astype(np.int64)


def _to_arrow(keys: np.ndarray, occ: np.ndarray, codec: StateCodec) -> Any:
    import pyarrow as pa

    col = keys_to_arrow(keys, codec.dtype)
    return pa.RecordBatch.from_arrays([col, pa.array(occ, type=pa.int64())], names=["key", "occ"])


def _first_occurrences(uid: np.ndarray, size0: int, branch_offsets: np.ndarray, row_state: np.ndarray,
                       source: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`~distmc._internal.jit.first_occurrences` with the shift of ``occ``, also without numba."""
    if HAVE_NUMBA:
        return first_occurrences(uid, size0, branch_offsets, row_state, source, OCC_SHIFT)
    pos = np.flatnonzero(uid >= size0)  # without numba (tests/test_jit.py checks it against the compiled pass)
    ids = uid[pos]
    pos = pos[ids > np.maximum.accumulate(np.concatenate([[size0 - 1], ids]))[:-1]]  # a new id's first place
    counts = np.diff(branch_offsets)
    per_state = np.bincount(row_state, weights=counts, minlength=source.shape[0]).astype(np.int64)
    branch_src = np.repeat(row_state, counts)[pos]
    index = pos - (np.cumsum(per_state) - per_state)[branch_src]
    return (source[branch_src] << OCC_SHIFT) + index, int(index.max(initial=0))


def _from_arrow(batch: Any, codec: StateCodec) -> tuple[np.ndarray, np.ndarray]:
    return keys_from_arrow(batch.column(0), codec.dtype), batch.column(1).to_numpy(zero_copy_only=False)


def _at_least(ids: np.ndarray, size: int) -> np.ndarray:
    """``ids`` grown (by doubling, new entries -1) to hold at least ``size`` entries; itself if it does already."""
    if size <= ids.shape[0]:
        return ids
    grown = np.full(max(size, 2 * ids.shape[0]), -1, dtype=np.int64)
    grown[: ids.shape[0]] = ids
    return grown


def _job_stamp(job: Any) -> tuple[Any, ...] | None:
    """What makes a job's parts reusable: the job and its files' contents (SHA-256; None: never reuse)."""
    if not isinstance(job, Job):
        return None
    return (job, *(file_digest(path) for path in (job.model_path, job.policy, job.interface)))


class PartitionActor:
    """One partition: its visited set (key -> local id), the global ids of its states, its frontier and rows."""

    def __init__(self, job: Job, rank: int, workers: int, batch_states: int, threads: int,
                 checkpoint_dir: str | None = None, limits: Limits | None = None, start: float | None = None,
                 server: tuple[Any, dict[str, Any]] | None = None) -> None:
        try:  # one node's cores are shared by the actors on it
            import numba

            numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))  # type: ignore[attr-defined]
        except ImportError:  # pragma: no cover
            pass
        self.setup(job, rank, workers, batch_states, checkpoint_dir, limits, start, server)
        VisitedSet(self.codec.dtype).insert(np.zeros(1, dtype=self.codec.dtype))  # numba's start, not in level 1

    def setup(self, job: Job, rank: int, workers: int, batch_states: int, checkpoint_dir: str | None = None,
              limits: Limits | None = None, start: float | None = None,
              server: tuple[Any, dict[str, Any]] | None = None) -> None:
        """Build the parts of ``job`` and start empty (also a kept actor, for its next run).

        A kept actor given the same job again, with the same file contents, reuses the parts it built for it.
        ``server``: a :class:`~distmc.explore.policy_server.PolicyServer` (handle, description) that evaluates the
        policy for this worker, which then loads none.
        """
        stamp = None if server is not None else _job_stamp(job)  # a served policy is bound to this run's server
        built = self.__dict__.get("built")
        if stamp is not None and built is not None and built[0] == stamp:
            self.parts = built[1]
        elif server is not None:
            from distmc.explore.policy_server import RemotePolicy

            self.parts = job.build(policy=RemotePolicy(*server))
        else:
            self.parts = job.build()
        self.built: tuple[Any, Any] | None = (stamp, self.parts)
        assert self.parts.expander is not None
        self.expander = self.parts.expander
        self.codec = self.parts.codec
        self.rank, self.workers, self.batch_states = rank, workers, batch_states
        self.visited = VisitedSet(self.codec.dtype)
        self.gids = np.zeros(0, dtype=np.int64)  # [N_local] global id of each local state
        self.identity = True  # local id == global id for every state so far (a lone actor, not restored out of order)
        self.frontier = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=self.codec.dtype))  # (gids, keys)
        self.rows: list[tuple[np.ndarray, ...]] = []  # (row gid, row action, branch counts, target gids, prob)
        self.rewards: list[dict[str, np.ndarray]] = []
        self.shipped_transitions = self.shipped_bytes = 0  # rows handed over by take()
        self.flags: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (gids, loop, deadlock) of expanded states
        self.pending: list[tuple[Any, np.ndarray, np.ndarray]] = []  # (rows, source gids, level-unique target ids)
        self.sent: list[np.ndarray] = []
        self.n_unique = 0
        self.asked: list[np.ndarray] = []  # per source: local ids of the keys it asked about, in its order
        self.new_local: np.ndarray = np.zeros(0, dtype=np.int64)  # this level's new states: local ids, keys
        self.new_keys: np.ndarray = np.zeros(0, dtype=self.codec.dtype)
        self.policy_states = self.policy_reported = 0
        self.calls_reported, self.policy_s0 = policy_counters(self.expander)  # a reused policy's counts so far
        self.checkpoint_dir = checkpoint_dir
        # Time and memory are checked here, after every batch (states are counted by the driver).
        self.check = None
        if limits is not None and (limits.timeout is not None or limits.max_memory is not None):
            self.check = LimitCheck(Limits(max_memory=limits.max_memory, timeout=limits.timeout), start, 1 / workers)
        # other owners' keys this source has asked about, with their global ids (never asked again)
        self.cache = VisitedSet(self.codec.dtype)
        self.seen = VisitedSet(self.codec.dtype)  # a level's distinct successor keys (emptied every level)
        self.cache_gids = np.zeros(0, dtype=np.int64)
        self.known = np.zeros(0, dtype=np.int64)
        self.ukeys = np.zeros(0, dtype=self.codec.dtype)
        self.stats: dict[str, Any] = {"expand_s": 0.0, "lookup_s": 0.0, "store_s": 0.0, "exchange_s": 0.0,
                                      "checkpoint_s": 0.0,
                                      "batches": 0, "bytes_sent": 0, "bytes_self": 0, "keys_sent": 0, "keys_self": 0,
                                      "checkpoint_bytes": 0}

    def release(self) -> None:
        """Drop the run's parts, states and rows: the actor is kept idle for a next run (:meth:`setup`)."""
        built = self.__dict__.get("built")
        self.__dict__.clear()
        self.built = built  # the parts of the last job, for a next run of the same job

    def ready(self) -> dict[str, Any]:
        """The Ray node and process this actor runs on."""
        import ray

        node = ray.get_runtime_context().get_node_id()
        self.stats["node"] = node
        self.stats["start_rss"] = rss_bytes()  # model, kernel and policy replica loaded
        return {"node": str(node), "pid": os.getpid()}

    # -- initial states ----------------------------------------------------------------------------------------

    def restore(self, keys: np.ndarray, gids: np.ndarray, frontier: np.ndarray) -> None:
        """Take in owned states ``keys`` with their global ids; those with ``frontier`` are yet to be expanded."""
        ids, _ = self.visited.insert(keys)
        self._grow(ids, gids)
        self.identity = bool(np.array_equal(self.gids[: self.visited.size], np.arange(self.visited.size)))
        f = np.flatnonzero(frontier)
        order = f[np.argsort(gids[f], kind="stable")]
        self.frontier = (gids[order], keys[order])

    def _grow(self, local: np.ndarray, gids: np.ndarray) -> None:
        self.gids = _at_least(self.gids, self.visited.size)
        self.gids[local] = gids

    # -- one level ---------------------------------------------------------------------------------------------

    def level_solo(self, level: int, n: int) -> dict[str, int]:
        """One whole level when this actor is the only one (W = 1): expand, number, store, in one call.

        It owns every successor, so no key leaves it: each batch's successor keys go straight into its visited
        set, which numbers the new ones by first occurrence (sources in global-id order, then branches), the order
        the driver would give them. ``n`` is the number of states before the level; the new states get global ids
        ``n, n + 1, ...``. Returns what :meth:`store` returns, and ``new``, the number of new states.
        """
        t = time.perf_counter()
        gids, keys = self.frontier
        self.frontier = (gids[:0], keys[:0])
        size0 = self.visited.size
        shift = n - size0  # global id of a state new in this level = its local id + shift
        direct = self.identity and shift == 0  # local ids are the global ids: no translation of the targets
        new_keys: list[np.ndarray] = []
        transitions = 0
        t_lookup = t_store = 0.0
        for start in range(0, gids.shape[0], self.batch_states):
            bg, bk = gids[start : start + self.batch_states], keys[start : start + self.batch_states]
            rows = self._expand_batch(bk)
            t1 = time.perf_counter()
            before = self.visited.size
            ids, new = self.visited.insert(rows.target_keys)
            new_keys.append(new)
            if direct:
                target = ids
            else:
                self.gids = _at_least(self.gids, self.visited.size)
                self.gids[before : self.visited.size] = np.arange(before, self.visited.size, dtype=np.int64) + shift
                target = self.gids[ids]
            t2 = time.perf_counter()
            transitions += int(target.shape[0])
            self._keep(bg, rows, target)
            t_lookup, t_store = t_lookup + t2 - t1, t_store + time.perf_counter() - t2
        if direct:
            self.gids = _at_least(self.gids, self.visited.size)
            self.gids[size0 : self.visited.size] = np.arange(size0, self.visited.size, dtype=np.int64)
        else:
            self.identity = False
        self.new_keys = np.concatenate(new_keys) if new_keys else keys[:0]
        self.frontier = (n + np.arange(self.new_keys.shape[0], dtype=np.int64), self.new_keys)
        self.stats["lookup_s"] += t_lookup
        self.stats["store_s"] += t_store
        self.stats["expand_s"] += time.perf_counter() - t - t_lookup - t_store
        return dict(self._level_done(level, transitions), new=int(self.new_keys.shape[0]))

    def _expand_batch(self, keys: np.ndarray) -> Any:
        """Rows of one batch of frontier states, with the per-batch limit check."""
        rows = self.expander.expand(keys)
        self.policy_states += rows.policy_states
        self.stats["batches"] += 1
        if self.check is not None:
            why = self.check.exceeded()
            if why is not None:
                raise ResourceLimitError(why)
        return rows

    def _keep(self, gids: np.ndarray, rows: Any, target: np.ndarray) -> None:
        """Keep a batch's rows (sources ``gids``) with their global target ids, merged.

        Each row's branches are sorted by target and duplicates added up here, as the reducer would (the same
        routine, in the same order, so the same bits): the work is spread over the workers, and the reducer takes
        the rows as they come, read-only in Ray's object store, instead of merging them into a copy.
        """
        offsets, target, prob = merge_csr_rows(rows.branch_offsets - rows.branch_offsets[0], target, rows.prob)
        self.rows.append((gids[rows.row_state], rows.row_action, np.diff(offsets), target, prob))
        self.rewards.append(rows.rewards)
        self.flags.append((gids, rows.terminal | rows.deadlock, rows.deadlock))

    def expand(self) -> Any:
        """Expand the frontier; one record batch of (distinct key, first occurrence) per owner."""
        t = time.perf_counter()
        gids, keys = self.frontier
        self.frontier = (gids[:0], keys[:0])
        # The level's distinct successor keys, numbered by first occurrence (a hash set for one-word keys).
        seen = self.seen
        seen.clear()
        first_occ: list[np.ndarray] = []
        self.pending = []
        for start in range(0, gids.shape[0], self.batch_states):
            bg, bk = gids[start : start + self.batch_states], keys[start : start + self.batch_states]
            rows = self._expand_batch(bk)
            size0 = seen.size
            uid, _ = seen.insert(rows.target_keys)
            # first occurrence of each new id: source gid, then the branch's index among its source's branches
            occ, widest = _first_occurrences(uid, size0, rows.branch_offsets, rows.row_state, bg)
            if widest >= (1 << OCC_SHIFT):
                raise ResourceLimitError(f"a state has more than {1 << OCC_SHIFT} branches")
            first_occ.append(occ)
            self.pending.append((rows, bg, uid))
        ukeys = seen.keys_by_id()
        uocc = np.concatenate(first_occ) if first_occ else np.zeros(0, dtype=np.int64)
        owner = owner_of(self.codec.to_words(ukeys), self.workers)
        # Keys whose global id this source knows already are not sent: its own states (its visited set) and the
        # other owners' states it asked about before (its cache). Only keys that may be new states travel.
        known = np.full(ukeys.shape[0], -1, dtype=np.int64)
        for mine, table, gids_of in ((True, self.visited, self.gids), (False, self.cache, self.cache_gids)):
            sel = np.flatnonzero((owner == self.rank) == mine)
            found = table.lookup(ukeys[sel]) if table.size else np.full(sel.shape[0], -1, dtype=np.int64)
            hit = found >= 0
            known[sel[hit]] = gids_of[found[hit]]
        t_route = time.perf_counter()
        out = []
        self.sent = []  # per owner: the level-unique ids sent to it, in the order sent
        for o in range(self.workers):
            sel = np.flatnonzero((owner == o) & (known < 0))
            self.sent.append(sel)
            batch = _to_arrow(ukeys[sel], uocc[sel], self.codec)
            self.stats["bytes_sent" if o != self.rank else "bytes_self"] += int(batch.nbytes)
            self.stats["keys_sent" if o != self.rank else "keys_self"] += int(sel.shape[0])
            out.append(batch)
        self.known, self.ukeys = known, ukeys
        self.n_unique = int(ukeys.shape[0])
        t_end = time.perf_counter()
        self.stats["expand_s"] += t_route - t
        self.stats["exchange_s"] += t_end - t_route  # the per-owner Arrow batches
        return out if self.workers > 1 else out[0]  # Ray: num_returns=1 is one object, not a list of one

    def lookup(self, *batches: Any) -> np.ndarray:
        """Owner side: take in the keys of all sources; the first occurrences ``[new]`` of the states new to it."""
        t = time.perf_counter()
        decoded = [_from_arrow(b, self.codec) for b in batches]
        self.stats["exchange_s"] += time.perf_counter() - t
        t = time.perf_counter()
        keys = np.concatenate([k for k, _ in decoded]) if decoded else np.zeros(0, dtype=self.codec.dtype)
        occ = np.concatenate([o for _, o in decoded]) if decoded else np.zeros(0, dtype=np.int64)
        local = self.visited.lookup(keys)  # -1: new to this owner
        unknown = np.flatnonzero(local < 0)
        order = unknown[np.argsort(occ[unknown], kind="stable")]
        uniq, first_idx, inv = np.unique(keys[order], return_index=True, return_inverse=True)
        first_occ = occ[order][first_idx]
        by_occ = np.argsort(first_occ, kind="stable")  # the new states in order of first occurrence
        self.new_keys, new_occ = uniq[by_occ], first_occ[by_occ]
        self.new_local, _ = self.visited.insert(self.new_keys)
        rank = np.empty(by_occ.shape[0], dtype=np.int64)
        rank[by_occ] = np.arange(by_occ.shape[0], dtype=np.int64)
        local[order] = self.new_local[rank[inv.reshape(-1)]]
        # local ids of the keys each source asked about, for the answer once the global ids are known
        self.asked = np.split(local, np.cumsum([k.shape[0] for k, _ in decoded])[:-1])
        self.stats["lookup_s"] += time.perf_counter() - t
        return new_occ

    def answer(self, new_gids: np.ndarray) -> Any:
        """Owner side: record the new states' global ids; the global ids of the keys each source asked about."""
        t = time.perf_counter()
        self._grow(self.new_local, new_gids)
        self.frontier = (new_gids, self.new_keys)
        out = [self.gids[ids] for ids in self.asked]
        self.stats["exchange_s"] += time.perf_counter() - t
        return out if self.workers > 1 else out[0]

    def store(self, *answers: np.ndarray, level: int = 0) -> dict[str, int]:
        """Source side: turn the pending rows' successor keys into global ids, and keep the rows.

        ``answers[o]`` is owner ``o``'s answer: the global ids of the distinct keys this source sent it. With a
        checkpoint directory the level's rows and new states go to disk (:func:`write_level`) instead of staying
        in memory. Returns the level's transitions and policy states, and this process's memory.
        """
        t = time.perf_counter()
        gid_of = self.known  # level-unique id -> global id
        for o in range(self.workers):
            gid_of[self.sent[o]] = answers[o]
            if o != self.rank and self.sent[o].shape[0]:  # remember the other owners' answers
                cid, _ = self.cache.insert(self.ukeys[self.sent[o]])
                self.cache_gids = _at_least(self.cache_gids, self.cache.size)
                self.cache_gids[cid] = answers[o]
        self.ukeys = self.ukeys[:0]
        transitions = 0
        for rows, bg, uid in self.pending:
            target = gid_of[uid]
            transitions += int(target.shape[0])
            self._keep(bg, rows, target)
        self.pending = []
        self.stats["store_s"] += time.perf_counter() - t
        return self._level_done(level, transitions)

    def _level_done(self, level: int, transitions: int) -> dict[str, int]:
        """After a level's rows are kept: the checkpoint's files, and the level's counts for the driver."""
        if self.checkpoint_dir is not None:
            t1 = time.perf_counter()
            self.stats["checkpoint_bytes"] += write_level(
                self.checkpoint_dir, level, self.rank, self.codec.dtype, (self.new_keys, self.frontier[0]),
                self.rows, self.rewards, self.flags, self.parts.reward_names)
            self.rows, self.rewards, self.flags = [], [], []  # with checkpoints every level's rows go to disk
            self.stats["checkpoint_s"] += time.perf_counter() - t1
        delta, self.policy_reported = self.policy_states - self.policy_reported, self.policy_states
        calls = policy_counters(self.expander)[0]
        calls, self.calls_reported = calls - self.calls_reported, calls
        return {"transitions": transitions, "policy_states": delta, "policy_calls": calls, "rss": rss_bytes()}

    # -- the end -----------------------------------------------------------------------------------------------

    def take(self) -> dict[str, Any]:
        """The rows kept since the last call, handed over (the driver places them while the next level runs)."""
        t = time.perf_counter()
        out = self._rows_out()
        self.shipped_transitions += sum(int(r[3].shape[0]) for r in self.rows)
        self.shipped_bytes += self._row_bytes()
        self.rows, self.rewards = [], []
        self.stats["exchange_s"] += time.perf_counter() - t
        return out

    def _row_bytes(self) -> int:
        return (sum(sum(int(a.nbytes) for a in r) for r in self.rows)
                + sum(sum(int(a.nbytes) for a in d.values()) for d in self.rewards))

    def _rows_out(self) -> dict[str, Any]:
        cat = np.concatenate
        return {
            "row_state": cat([r[0] for r in self.rows]) if self.rows else np.zeros(0, dtype=np.int64),
            "row_action": cat([r[1] for r in self.rows]) if self.rows else np.zeros(0, dtype=np.int64),
            "counts": cat([r[2] for r in self.rows]) if self.rows else np.zeros(0, dtype=np.int64),
            # the branches stay in the batches' chunks: no copy here, and none in the driver when it can hand
            # them on as they are (see gather)
            "targets": [r[3] for r in self.rows],
            "prob": [r[4] for r in self.rows],
            "chunk_rows": [int(r[2].shape[0]) for r in self.rows],
            "rewards": {n: cat([r[n] for r in self.rewards]) for n in (self.rewards[0] if self.rewards else {})},
        }

    def result(self, rows: bool = True) -> dict[str, Any]:
        """The partition's states and the rows not taken yet (with ``rows=False``, its statistics only)."""
        self.stats.update(
            states=self.visited.size,
            transitions=self.shipped_transitions + sum(int(r[3].shape[0]) for r in self.rows),
            state_bytes=self.visited.nbytes + self.gids.nbytes,  # visited set + global ids, what a state costs
            cache_bytes=self.cache.nbytes + self.cache_gids.nbytes,
            # every row this partition built (also those handed over level by level), and its states' flags
            row_bytes=self.shipped_bytes + self._row_bytes() + sum(sum(int(a.nbytes) for a in f) for f in self.flags),
            rss=rss_bytes(),
            policy_s=policy_counters(self.expander)[1] - self.policy_s0,
            peak_rss=int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,
        )
        if not rows:
            return {"stats": dict(self.stats)}
        cat = np.concatenate
        return {
            "gids": self.gids[: self.visited.size],
            "keys": self.visited.keys_by_id(),
            **self._rows_out(),
            "flag_gids": cat([f[0] for f in self.flags]) if self.flags else np.zeros(0, dtype=np.int64),
            "loop": cat([f[1] for f in self.flags]) if self.flags else np.zeros(0, dtype=bool),
            "deadlock": cat([f[2] for f in self.flags]) if self.flags else np.zeros(0, dtype=bool),
            "stats": dict(self.stats),
        }


def _chunks(r: dict[str, Any]) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """A result's branches as (rows, targets, prob) chunks of whole rows (a result may hold one array or a list)."""
    if isinstance(r["targets"], list):
        return list(zip(r["chunk_rows"], r["targets"], r["prob"], strict=True))
    return [(int(r["counts"].shape[0]), r["targets"], r["prob"])]


@dataclass
class RowBlock:
    """Rows in global order: their sources, actions, branch counts, action rewards, and branches in chunks."""

    row_state: np.ndarray
    row_action: np.ndarray
    counts: np.ndarray
    rewards: dict[str, np.ndarray]
    chunks: list[tuple[int, np.ndarray, np.ndarray]]  # (rows, targets, prob), whole rows each


def order_rows(pieces: list[dict[str, Any]]) -> RowBlock:
    """The rows of ``pieces`` (each in increasing global id) in global order, as one :class:`RowBlock`.

    When the pieces' rows, taken in turn, are in global order already (one worker, or one worker's levels read
    from a checkpoint), the chunks are handed on as they are, without a copy: read-only views of Ray's object
    store or of the files. Else every row is copied once to its global position (one chunk).
    """
    names = next((list(r["rewards"]) for r in pieces if r["counts"].shape[0]), [])
    row_state = np.concatenate([r["row_state"] for r in pieces]) if pieces else np.zeros(0, dtype=np.int64)
    row_action = np.concatenate([r["row_action"] for r in pieces]) if pieces else np.zeros(0, dtype=np.int64)
    counts = np.concatenate([r["counts"] for r in pieces]) if pieces else np.zeros(0, dtype=np.int64)
    rewards = {k: np.concatenate([r["rewards"].get(k, np.zeros(0)) for r in pieces]) for k in names}
    chunks = [c for r in pieces for c in _chunks(r) if c[0]]
    if row_state.shape[0] > 1 and (np.diff(row_state) < 0).any():
        order = np.argsort(row_state, kind="stable")  # every piece's rows are in increasing global id already
        row_state, row_action, counts = row_state[order], row_action[order], counts[order]
        rewards = {k: v[order] for k, v in rewards.items()}
        row_pos = np.empty(order.shape[0], dtype=np.int64)
        row_pos[order] = np.arange(order.shape[0], dtype=np.int64)  # global row of each (piece, row)
        del order
        offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        chunks = [(counts.shape[0], *_place(chunks, row_pos, counts, offsets))]
    return RowBlock(row_state, row_action, counts, rewards, chunks)


def gather(results: list[dict[str, Any]], n_initial: int, merged: bool = False,
           blocks: list[RowBlock] | None = None) -> Explored:
    """The reducer's first step: the partitions' states, and all rows in global-id order.

    ``blocks``: rows ordered already (:func:`order_rows`, the driver does it level by level while the next level
    runs); they come first, then the rows still in ``results`` (:func:`order_rows`). ``merged``: the rows are
    merged already (the actors' own rows); the reducer then takes the chunks as they are, where it would otherwise
    merge them into new arrays (rows read from a checkpoint, which a run of an older version may have written
    unmerged; merging is idempotent).
    """
    n = int(sum(r["gids"].shape[0] for r in results))
    key_dtype = results[0]["keys"].dtype
    keys = np.empty(n, dtype=key_dtype)
    loop = np.zeros(n, dtype=bool)
    deadlock = np.zeros(n, dtype=bool)
    for r in results:
        keys[r["gids"]] = r["keys"]
        loop[r["flag_gids"]] = r["loop"]
        deadlock[r["flag_gids"]] = r["deadlock"]
    parts = [*(blocks or []), order_rows(results)]
    row_state = np.concatenate([b.row_state for b in parts])
    if row_state.shape[0] > 1 and (np.diff(row_state) < 0).any():
        raise AssertionError("the row blocks are not in global order")
    counts = np.concatenate([b.counts for b in parts])
    offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    chunks = [c for b in parts for c in b.chunks]
    names = next((list(b.rewards) for b in parts if b.row_state.shape[0]), [])  # a part without rows may lack them
    return Explored(
        keys=keys, loop=loop, deadlock=deadlock, row_state=row_state,
        row_action=np.concatenate([b.row_action for b in parts]), branch_offsets=offsets,
        target_chunks=[c[1] for c in chunks], prob_chunks=[c[2] for c in chunks],
        chunk_rows=np.array([c[0] for c in chunks], dtype=np.int64),
        rewards={k: np.concatenate([b.rewards.get(k, np.zeros(0)) for b in parts]) for k in names},
        initial=np.arange(n_initial, dtype=np.int64), merged=merged,
    )


def _place(chunks: list[tuple[int, np.ndarray, np.ndarray]], row_pos: np.ndarray, counts: np.ndarray,
           offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The chunks' branches copied to their global positions.

    Row ``i`` of the chunks, taken in turn, is global row ``row_pos[i]``, of ``counts`` branches per global row at
    CSR ``offsets``.
    """
    targets = np.empty(int(offsets[-1]), dtype=np.int64)
    prob = np.empty(int(offsets[-1]), dtype=np.float64)
    r0 = 0
    for rows, t, p in chunks:
        pos = row_pos[r0 : r0 + rows]
        local = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(counts[pos], out=local[1:])
        if HAVE_NUMBA:
            place_rows(local, pos, offsets, t, p, targets, prob)
        else:  # pragma: no cover - exercised only without numba
            dest = np.repeat(offsets[pos] - local[:-1], np.diff(local)) + np.arange(int(local[-1]), dtype=np.int64)
            targets[dest], prob[dest] = t, p
        r0 += rows
    return targets, prob


def gpu_share(gpus: float, workers: int, requested: float | None = None) -> float:
    """The GPU share each worker asks Ray for, so that its policy replica runs on a GPU where the cluster has one.

    Automatic (``requested`` None): no GPU, 0; else the cluster's GPUs split evenly over the workers, at most one
    each (fractional ``num_gpus``: several workers, each with its own replica, share a GPU, and Ray places them on
    the GPU nodes). ``requested`` overrides it (0 keeps every replica on the CPU).
    """
    if requested is not None:
        if requested < 0 or (requested > 1 and requested != int(requested)):
            raise DistmcError(f"--gpus-per-worker must be 0, a fraction up to 1, or a whole number, not {requested}")
        return float(requested)
    if gpus <= 0:
        return 0.0
    return min(1.0, gpus / workers)


#: The actors of the last finished run, kept idle for the next run of the same shape (same Ray job, worker count,
#: resources and threads): a new actor costs its process, its imports and numba's start, a kept one only its parts.
#: Its policy servers (``"servers"``) are kept for a next run of the same job with files of the same content.
_kept: dict[str, tuple[tuple[Any, ...], list[Any]]] = {}


def release_workers() -> None:
    """End the actors kept from the last run (they also end with this process, or with ``ray.shutdown()``)."""
    for what in ("run", "servers"):
        kept = _kept.pop(what, None)
        if kept is not None:
            _kill(kept[1])


def _kill(actors: list[Any]) -> None:
    import ray

    for a in actors:
        try:
            ray.kill(a)
        except Exception:  # noqa: BLE001 - already gone, or its Ray session has ended
            pass


class _WorkerLost(Exception):
    """A worker's process or node is gone (Ray lost the actor or an object it held)."""


def explore_ray(
    job: Job,
    codec: StateCodec,
    initial_keys: np.ndarray,
    workers: int,
    *,
    address: str | None = None,
    batch_states: int = 20_000,
    limits: Limits | None = None,
    checkpoint: Checkpoint | None = None,
    progress: Callable[[dict[str, float]], None] | None = None,
    max_restarts: int = 3,
    gpus_per_worker: float | None = None,
    keep_workers: bool = True,
    threads_per_worker: int | None = None,
    policy_servers: int = 0,
) -> Explored:
    """Explore ``job`` on ``workers`` Ray actors; the same :class:`Explored` as the in-process driver gives.

    Args:
        job: what to explore; every actor builds its own parts from it.
        codec: the state packing (the driver's, for routing the initial states).
        initial_keys: ``[I]`` packed initial states.
        workers: number of actors (partitions).
        address: a running Ray cluster (``auto`` or ``HOST:PORT``); None: the cluster in ``RAY_ADDRESS`` if set,
            else a new local Ray (unless this process is connected to one already).
        batch_states: states per expansion batch inside an actor.
        limits: stop with :class:`ResourceLimitError` (and a partial report) once a limit is passed.
        checkpoint: write every level to this checkpoint and, if it already holds levels, continue from the last
            one; a lost worker is then replaced (up to ``max_restarts`` times) and the run goes on.
        progress: called after every level (depth, states, frontier, transitions, policy states, memory, ...).
        max_restarts: how many worker losses a checkpointed run survives.
        gpus_per_worker: the GPU share each actor asks Ray for (:func:`gpu_share`; None: automatic).
        keep_workers: after a successful run, keep the actors (emptied) for the next run of the same shape in
            this process, which then skips their start-up (:func:`release_workers` ends them); a failed run's
            actors always end.
        threads_per_worker: numba threads of each actor (None: the cluster's CPUs divided by the workers, at least
            one; so a lone actor on this machine uses every core, and W actors one core each when W >= cores).
        policy_servers: 0: every actor loads its own policy replica; S > 0: S policy-server actors each load one
            (a GPU each where the cluster has them) and serve the workers' batches
            (:mod:`distmc.explore.policy_server`).
    """
    if threads_per_worker is not None and threads_per_worker < 1:
        raise DistmcError(f"--threads-per-worker must be at least 1, not {threads_per_worker}")
    if policy_servers < 0:
        raise DistmcError(f"--policy-servers must be 0 or more, not {policy_servers}")
    # A lost worker is handled here (recovery, or one clear error): Ray need not also print it as unhandled.
    os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    import ray

    if not ray.is_initialized():
        # No address: a Ray of our own (or RAY_ADDRESS's), never whichever cluster this machine started last, which
        # ray.init() would otherwise join (and which its owner may shut down in the middle of our run).
        address = address or os.environ.get("RAY_ADDRESS") or "local"
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    run = _RayRun(ray, job, codec, workers, batch_states, limits or Limits(), checkpoint, progress, gpus_per_worker,
                  threads_per_worker, policy_servers)
    try:
        out = run.run(initial_keys, max_restarts)
    except BaseException:
        run.kill()
        raise
    if keep_workers:
        run.keep()
    else:
        run.kill()
    return out


class _RayRun:
    """The driver's side of one distributed exploration: actors, the level loop, recovery."""

    def __init__(self, ray: Any, job: Job, codec: StateCodec, workers: int, batch_states: int, limits: Limits,
                 checkpoint: Checkpoint | None, progress: Callable[[dict[str, float]], None] | None,
                 gpus_per_worker: float | None = None, threads_per_worker: int | None = None,
                 policy_servers: int = 0) -> None:
        self.ray, self.job, self.codec, self.workers = ray, job, codec, workers
        self.policy_servers = policy_servers
        self.servers: list[Any] = []
        self.servers_key: tuple[Any, ...] = ()
        self.gpus_per_worker, self.threads_per_worker = gpus_per_worker, threads_per_worker
        self.batch_states, self.limits, self.ckpt, self.progress = batch_states, limits, checkpoint, progress
        self.start = time.time()
        self.check = LimitCheck(limits, self.start)
        self.actors: list[Any] = []
        self.info: list[dict[str, Any]] = []
        self.key: tuple[Any, ...] = ()  # what a kept actor must match to be reused
        self.n = self.n_initial = self.depth = self.transitions = self.policy_states = self.policy_calls = 0
        self.restarts = 0
        self.frontier = 0
        # Without a checkpoint the rows come to the driver level by level: each level's are taken from the actors
        # (``taken``: their refs) and placed in global order while the actors run the next level (``blocks``).
        self.stream = checkpoint is None
        self.taken: list[Any] = []
        self.blocks: list[RowBlock] = []
        self.absorb_s = 0.0

    # -- actors ------------------------------------------------------------------------------------------------

    def spawn(self) -> None:
        # One CPU per actor when the cluster has them (so Ray spreads the actors over its nodes); none when there
        # are more actors than CPUs, which is allowed (the scaling experiment oversubscribes on purpose).
        ray, w = self.ray, self.workers
        # CPUs of the nodes alive now (after a lost node, the cluster's totals may still count it for a while)
        alive = [n for n in ray.nodes() if n.get("Alive")]
        cpus = int(sum(n["Resources"].get("CPU", 0) for n in alive) or 1)
        gpus = float(sum(n["Resources"].get("GPU", 0) for n in alive))
        threads = self.threads_per_worker or max(1, cpus // w)
        opts: dict[str, Any] = {"num_cpus": 1 if cpus >= w else 0, "scheduling_strategy": "SPREAD"}
        served = self.start_servers(gpus)
        share = 0.0 if served else gpu_share(gpus, w, self.gpus_per_worker)  # served workers load no network
        if share:
            opts["num_gpus"] = share
        ckdir = None if self.ckpt is None else str(self.ckpt.directory)
        self.key = (ray.get_runtime_context().get_job_id(), w, threads, repr(sorted(opts.items())), len(served))
        if self.reuse(ckdir, served):
            return
        actor_cls = ray.remote(**opts)(PartitionActor)
        self.actors = [actor_cls.remote(self.job, r, w, self.batch_states, threads, ckdir, self.limits, self.start,
                                        served[r % len(served)] if served else None)
                       for r in range(w)]
        self.info = self.started([a.ready.remote() for a in self.actors], f"the {w} workers", "a worker")

    def start_servers(self, gpus: float) -> list[tuple[Any, dict[str, Any]]]:
        """Start this run's policy servers (none unless ``policy_servers``); (handle, description) of each."""
        from distmc.explore.policy_server import PolicyServer

        self.kill_servers()
        s = self.policy_servers
        kept = _kept.pop("servers", None)
        if not s:
            if kept is not None:
                _kill(kept[1])
            return []
        opts: dict[str, Any] = {"num_cpus": 0, "scheduling_strategy": "SPREAD"}  # mostly waiting, or on the GPU
        share = gpu_share(gpus, s, self.gpus_per_worker)
        if share:
            opts["num_gpus"] = share
        stamp = _job_stamp(self.job)
        self.servers_key = (self.ray.get_runtime_context().get_job_id(), s, repr(sorted(opts.items())), stamp)
        if kept is not None and stamp is not None and kept[0] == self.servers_key:
            try:  # the last run's servers, with the same policy loaded
                infos = self.ray.get([x.describe.remote() for x in kept[1]], timeout=START_TIMEOUT_S)
                self.servers = kept[1]
                return list(zip(self.servers, infos, strict=True))
            except Exception:  # noqa: BLE001 - lost: new ones say why if they cannot start
                log.info("kept policy servers not reusable; starting new ones")
        if kept is not None:
            _kill(kept[1])
        self.servers = [self.ray.remote(**opts)(PolicyServer).remote(self.job) for _ in range(s)]
        infos = self.started([x.describe.remote() for x in self.servers], f"the {s} policy servers", "a policy server")
        return list(zip(self.servers, infos, strict=True))

    def started(self, refs: list[Any], all_of: str, one: str) -> list[Any]:
        """The answers of newly started actors, or one clear error (resources missing, or the actor's own)."""
        ray = self.ray
        try:
            return list(ray.get(refs, timeout=START_TIMEOUT_S))
        except ray.exceptions.GetTimeoutError:
            raise WorkerError(f"{all_of} did not all start within {START_TIMEOUT_S} s: the cluster lacks the "
                              f"resources for them (see `ray status`)") from None
        except Exception as exc:  # an actor failed to build its parts: report the cause, not Ray's wrapper
            cause = getattr(exc, "cause", None) or exc
            if isinstance(cause, DistmcError):
                raise cause from None
            raise WorkerError(f"{one} could not start: {type(cause).__name__}: {cause}") from exc

    def kill_servers(self) -> None:
        _kill(self.servers)
        self.servers = []

    def reuse(self, ckdir: str | None, served: list[tuple[Any, dict[str, Any]]]) -> bool:
        """Take the kept actors if they have this run's shape and answer (else end them); True if taken."""
        kept = _kept.pop("run", None)
        if kept is None:
            return False
        key, actors = kept
        if key == self.key:
            ray = self.ray
            try:
                ray.get([a.setup.remote(self.job, r, self.workers, self.batch_states, ckdir, self.limits, self.start,
                                        served[r % len(served)] if served else None)
                         for r, a in enumerate(actors)], timeout=START_TIMEOUT_S)
                self.info = ray.get([a.ready.remote() for a in actors], timeout=START_TIMEOUT_S)
                self.actors = actors
                return True
            except Exception:  # noqa: BLE001 - lost, or its parts fail to build: new actors say why
                log.info("kept workers not reusable; starting new ones")
        _kill(actors)
        return False

    def keep(self) -> None:
        """Empty the actors and keep them for the next run (:func:`release_workers`)."""
        for a in self.actors:
            a.release.remote()
        _kept["run"] = (self.key, self.actors)
        self.actors = []
        if self.servers:  # for a next run of the same job (another job starts its own)
            _kept["servers"] = (self.servers_key, self.servers)
            self.servers = []

    def kill(self) -> None:
        _kill(self.actors)
        self.actors = []
        self.kill_servers()

    def get(self, refs: Any) -> Any:
        """``ray.get``, with a lost worker as :class:`_WorkerLost` and a worker's own error as itself."""
        ray = self.ray
        try:
            return ray.get(refs)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, ResourceLimitError):  # a worker's time or memory: report the global counts
                raise self.check.stop(str(cause), states=self.n, transitions=self.transitions,
                                      frontier=self.frontier, depth=self.depth) from None
            if isinstance(cause, DistmcError):
                raise cause from None
            if isinstance(cause, ray.exceptions.RayError):
                raise _WorkerLost(str(cause).splitlines()[0]) from exc
            raise WorkerError(f"a worker failed at depth {self.depth}: {type(cause).__name__}: {cause}") from exc
        except ray.exceptions.RayError as exc:
            raise _WorkerLost(str(exc).splitlines()[0]) from exc

    # -- the run -----------------------------------------------------------------------------------------------

    def run(self, initial_keys: np.ndarray, max_restarts: int) -> Explored:
        t0 = time.perf_counter()
        self.spawn()
        self.startup_s = time.perf_counter() - t0
        if self.ckpt is not None and self.ckpt.level >= 0:
            self.restore()
        else:
            self.begin(initial_keys)
        while True:
            try:
                done = self.level()
            except _WorkerLost as exc:
                self.recover(exc, max_restarts)
                continue
            if done:
                break
        t1 = time.perf_counter()
        out = self.finish()
        levels_s = t1 - t0 - self.startup_s
        out.stats.update(startup_s=self.startup_s, levels_s=levels_s, gather_s=time.perf_counter() - t1)
        for ws in out.worker_stats:  # a worker's level time it was not working: at the barriers, or Ray's transfers
            busy = sum(float(ws.get(k, 0.0)) for k in ("expand_s", "lookup_s", "store_s", "exchange_s", "checkpoint_s"))
            ws["idle_s"] = max(0.0, levels_s - busy)
        return out

    def begin(self, initial_keys: np.ndarray) -> None:
        uniq, first = np.unique(initial_keys, return_index=True)
        keys = uniq[np.argsort(first, kind="stable")]
        gids = np.arange(keys.shape[0], dtype=np.int64)
        if self.ckpt is not None:
            self.ckpt.write_initial(keys, gids)
        self.hand_out(keys, gids, np.ones(keys.shape[0], dtype=bool))
        self.n = self.n_initial = self.frontier = int(keys.shape[0])

    def hand_out(self, keys: np.ndarray, gids: np.ndarray, frontier: np.ndarray) -> None:
        """Give each actor the states it owns."""
        owner = owner_of(self.codec.to_words(keys), self.workers)
        self.get([a.restore.remote(keys[owner == o], gids[owner == o], frontier[owner == o])
                  for o, a in enumerate(self.actors)])

    def restore(self) -> None:
        """Go on from the checkpoint's last committed level (a resumed run, or after a lost worker)."""
        ckpt = self.ckpt
        assert ckpt is not None
        ckpt.drop_uncommitted()
        keys, gids, levels = ckpt.states()
        m = ckpt.meta
        self.depth, self.n, self.transitions = ckpt.level, m["states"], m["transitions"]
        self.policy_states, self.policy_calls = m["policy_states"], m["policy_calls"]
        if gids.shape[0] != self.n:
            raise DistmcError(f"checkpoint {ckpt.directory} is damaged: {gids.shape[0]} states in its files, "
                              f"{self.n} in meta.json")
        self.n_initial = int((levels == 0).sum())
        frontier = levels == ckpt.level
        self.frontier = int(frontier.sum())
        self.hand_out(keys, gids, frontier)
        log.info("resumed depth=%d states=%d frontier=%d from=%s", self.depth, self.n, self.frontier, ckpt.directory)

    def recover(self, exc: _WorkerLost, max_restarts: int) -> None:
        if self.ckpt is None:
            raise WorkerError(
                f"a worker was lost at depth {self.depth + 1} ({exc}); the {self.n} states explored so far were "
                f"held by the workers and are lost with the run. Run again with --checkpoint-dir DIR: a lost "
                f"worker is then replaced and the run goes on from its last finished level (and a stopped run "
                f"continues with --resume DIR)"
            ) from None
        self.restarts += 1
        if self.restarts > max_restarts:
            raise WorkerError(
                f"workers were lost {self.restarts} times (last: {exc}); giving up. Everything up to depth "
                f"{self.ckpt.level} is in {self.ckpt.directory}: continue with --resume {self.ckpt.directory}"
            ) from None
        log.warning("worker lost at depth=%d (%s); restarting %d workers from checkpoint level %d",
                    self.depth + 1, exc, self.workers, self.ckpt.level)
        self.kill()
        self.spawn()
        self.restore()

    def level(self) -> bool:
        """One breadth-first level on every actor; True at the fixpoint."""
        actors, w = self.actors, self.workers
        if w == 1:  # a lone actor numbers its new states itself: one call per level
            ref = actors[0].level_solo.remote(self.depth + 1, self.n)
            self.absorb()
            stored = self.get([ref])
            new = stored[0]["new"]
        else:
            new, stored = self.exchange()
        if self.stream:  # this level's rows, placed during the next level (an actor runs its calls in order)
            self.taken = [a.take.remote() for a in actors]
        self.depth += 1
        self.n += new
        self.frontier = new
        self.transitions += sum(x["transitions"] for x in stored)
        self.policy_states += sum(x["policy_states"] for x in stored)
        self.policy_calls += sum(x["policy_calls"] for x in stored)
        if self.ckpt is not None:
            self.ckpt.commit(self.depth, self.n, self.transitions, self.policy_states, self.policy_calls)
        memory = rss_bytes() + sum(x["rss"] for x in stored)
        info = {"depth": self.depth, "states": self.n, "frontier": self.frontier, "transitions": self.transitions,
                "policy_states": self.policy_states, "policy_calls": self.policy_calls, "memory": memory,
                "restarts": self.restarts,
                "elapsed_s": time.time() - self.start, "worker_pids": [i["pid"] for i in self.info],
                "worker_nodes": [i["node"] for i in self.info]}
        log.info("level depth=%d states=%d frontier=%d transitions=%d memory=%d", self.depth, self.n,
                 self.frontier, self.transitions, memory)
        if self.progress is not None:
            self.progress(info)
        if self.frontier:
            self.check.check(states=self.n, transitions=self.transitions, frontier=self.frontier, depth=self.depth,
                             memory=memory)
        return self.frontier == 0

    def exchange(self) -> tuple[int, list[dict[str, int]]]:
        """Steps 1-4 of a level (module docstring) on W > 1 actors; the number of new states, and what they stored."""
        actors, w = self.actors, self.workers
        sent = [a.expand.options(num_returns=w).remote() for a in actors]
        sent = [s if isinstance(s, list) else [s] for s in sent]
        self.absorb()  # the last level's rows, while the actors expand
        news = self.get([actors[o].lookup.remote(*[sent[s][o] for s in range(w)]) for o in range(w)])
        occ = np.concatenate(news)
        tag = np.concatenate([np.full(x.shape[0], o, dtype=np.int64) for o, x in enumerate(news)])
        order = np.argsort(occ, kind="stable")
        gids = np.empty(occ.shape[0], dtype=np.int64)
        gids[order] = self.n + np.arange(occ.shape[0], dtype=np.int64)
        answers = [actors[o].answer.options(num_returns=w).remote(gids[tag == o]) for o in range(w)]
        answers = [x if isinstance(x, list) else [x] for x in answers]
        stored = self.get([actors[s].store.remote(*[answers[o][s] for o in range(w)], level=self.depth + 1)
                           for s in range(w)])
        return int(occ.shape[0]), stored

    def absorb(self) -> None:
        """Place the rows taken from the actors after the last level (:meth:`PartitionActor.take`)."""
        if not self.taken:
            return
        t = time.perf_counter()
        pieces = [p for p in self.get(self.taken) if p["counts"].shape[0]]
        self.taken = []
        if pieces:
            self.blocks.append(order_rows(pieces))
        self.absorb_s += time.perf_counter() - t

    def finish(self) -> Explored:
        self.absorb()
        if self.ckpt is not None:
            stats = self.get([a.result.remote(rows=False) for a in self.actors])
            out = gather(self.ckpt.results(), self.n_initial)
        else:
            stats = results = self.get([a.result.remote() for a in self.actors])
            # the actors merged their rows (_keep)
            out = gather(results, self.n_initial, merged=True, blocks=self.blocks)
            self.blocks = []
            del results
        out.stats.update({"depth": self.depth, "policy_states": self.policy_states, "policy_calls": self.policy_calls,
                          "restarts": self.restarts, "place_s": self.absorb_s})
        out.worker_stats = [dict(r["stats"], pid=i["pid"]) for r, i in zip(stats, self.info, strict=True)]
        return out
