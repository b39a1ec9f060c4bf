"""A partition of the Ray driver: one actor owning the states whose key hashes to it.

See :mod:`distmc.distributed` for the protocol of one level, :mod:`distmc.check.distributed` for the check.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from distmc._internal.jit import set_thread_budget
from distmc.assemble.reducer import merge_csr_rows
from distmc.distributed.actor_output import PartitionOutput
from distmc.distributed.checkpoint import write_level
from distmc.distributed.exchange import (
    OCC_SHIFT,
    _at_least,
    _first_occurrences,
    _from_arrow,
    _to_arrow,
    compact_rows,
    owner_of,
    pack_ids,
    pack_increasing,
    unpack_ids,
    unpack_increasing,
    widened_rows,
)
from distmc.distributed.priority_worker import PriorityWorker
from distmc.distributed.setup import WorkerSetup, job_stamp
from distmc.distributed.worker_check import WorkerCheck
from distmc.errors import ResourceLimitError
from distmc.explore.contracts import Rows, WorkerJob, WorkerParts
from distmc.explore.expander import Expander, policy_counters
from distmc.explore.limits import LimitCheck, Limits, reset_peak_rss, rss_bytes
from distmc.explore.visited import VisitedSet
from distmc.pipeline import Job
from distmc.policy.base import policy_precision

__all__ = ["PartitionActor", "WorkerSetup"]


class PartitionActor(WorkerCheck, PriorityWorker, PartitionOutput):
    """One partition: its visited set (key -> local id), the global ids of its states, its frontier and rows.

    The distributed check on the rows it keeps is its :class:`~distmc.distributed.worker_check.WorkerCheck` side,
    what it hands the driver its :class:`~distmc.distributed.actor_output.PartitionOutput` side.
    """

    def __init__(self, job: WorkerJob, ws: WorkerSetup, threads: int) -> None:
        # One node's cores are shared by the actors on it: the thread budget. The process started with its pools
        # sized to it (budget_env); numba's count is also set per thread, here and in ready(), which runs on the
        # thread Ray runs this actor's calls on (not this one: the actor has a concurrency group).
        self.threads = threads
        set_thread_budget(threads)
        self.setup(job, ws)
        warm = VisitedSet(self.codec.dtype)  # numba's start (its cache loaded), not in level 1
        warm.insert(np.zeros(1, dtype=self.codec.dtype))
        warm.clear()

    def setup(self, job: WorkerJob, ws: WorkerSetup) -> None:
        """Build the parts of ``job`` and start empty (also a kept actor, for its next run).

        A kept actor given the same job again, with the same file contents, reuses the parts it built for it.
        ``ws.server``: a :class:`~distmc.distributed.policy_server.PolicyServer` (handle, description) that
        evaluates the policy for this worker, which then loads none.
        """
        rank, workers, batch_states, checkpoint_dir = ws.rank, ws.workers, ws.batch_states, ws.checkpoint_dir
        limits, start, server = ws.limits, ws.start, ws.server
        reset_peak_rss()  # the worker's peak in the report is this run's (a kept actor ran others before)
        self.clock0 = (time.perf_counter(), time.process_time())  # this run's wall and CPU time start here
        stamp = None if server is not None else job_stamp(job)  # a served policy is bound to this run's server
        built = self.__dict__.get("built")
        self.parts: WorkerParts
        if stamp is not None and built is not None and built[0] == stamp:
            self.parts = built[1]
        elif server is not None and isinstance(job, Job):  # only a PRISM job has a policy to serve
            from distmc.distributed.policy_server import RemotePolicy

            self.parts = job.build(policy=RemotePolicy(*server))
        else:
            self.parts = job.build()
        self.built: tuple[Any, WorkerParts] | None = (stamp, self.parts)
        expander = self.parts.expander
        assert expander is not None  # built with the explorer
        self.expander = expander
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
        self.pending: list[tuple[Rows, np.ndarray, np.ndarray]] = []  # (rows, source gids, level-unique target ids)
        self.sent: list[np.ndarray] = []
        self.n_unique = 0
        self.expanding = self.frontier  # the frontier the last expand() took
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
        self.keep_rows = False  # rows stay here after the run (distributed check), also with a checkpoint
        self.written = (0, 0)  # with keep_rows and a checkpoint: rows and flags already in the level files
        self.part: Any = None  # this worker's part of the induced DTMC for the distributed check
        self.peers: list[Any] = []
        self.channels = None  # made by check_connect
        self.pipes = None  # made by check_connect
        self.status = ""
        self.prio_rank = None  # a priority run's rank (PriorityWorker.prio_start), else None
        # the box front end's expander (distmc.abstract) runs no policy
        policy = self.expander.policy if isinstance(self.expander, Expander) else None
        self.stats: dict[str, Any] = {
            "policy_dtype": policy_precision(policy),
            "expand_s": 0.0,
            "expander_s": 0.0,
            "lookup_s": 0.0,
            "store_s": 0.0,
            "exchange_s": 0.0,
            "checkpoint_s": 0.0,
            "batches": 0,
            "bytes_sent": 0,
            "bytes_self": 0,
            "keys_sent": 0,
            "keys_self": 0,
            "keys_in": 0,
            "keys_in_new": 0,
            "bytes_answer": 0,
            "bytes_driver": 0,
            "checkpoint_bytes": 0,
        }

    def keep_rows_here(self) -> None:
        """Keep the rows after the run, also with a checkpoint (the distributed check runs on them).

        Also builds a tiny row matrix of each kind now, at the start: numba compiles its typed lists' methods in
        every new process (they are not cached on disk: 1.0 s of CPU, measured), which would otherwise fall in
        the check.
        """
        self.keep_rows = True
        if not self.__dict__.get("warm"):
            from distmc.check.kernels import ChunkedCSR

            offsets, target = np.array([0, 1], dtype=np.int64), np.zeros(1, dtype=np.int32)
            for prob in (np.ones(1), (np.ones(1), np.zeros(1, dtype=np.uint16))):
                ChunkedCSR(offsets, [target], [prob], 1)
            self.warm = True

    def release(self) -> None:
        """Drop the run's parts, states and rows: the actor is kept idle for a next run (:meth:`setup`)."""
        kept: dict[str, Any] = {k: self.__dict__[k] for k in ("built", "threads", "warm") if k in self.__dict__}
        self.__dict__.clear()
        self.__dict__.update(kept)  # the parts of the last job (for a next run of the same job), the budget

    def ready(self) -> dict[str, Any]:
        """The Ray node and process this actor runs on."""
        import ray

        node = ray.get_runtime_context().get_node_id()
        self.stats["node"] = node
        self.stats["threads"] = set_thread_budget(self.threads)  # on the thread that runs the actor's calls
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

    def _expand_batch(self, keys: np.ndarray) -> Rows:
        """Rows of one batch of frontier states, with the per-batch limit check."""
        t = time.perf_counter()
        rows = self.expander.expand(keys)
        self.stats["expander_s"] += time.perf_counter() - t  # the kernel and policy alone (part of expand_s)
        self.policy_states += rows.policy_states
        self.stats["batches"] += 1
        if self.check is not None:
            why = self.check.exceeded()
            if why is not None:
                raise ResourceLimitError(why)
        return rows

    def _keep(self, gids: np.ndarray, rows: Rows, target: np.ndarray, lut: np.ndarray | None = None) -> None:
        """Keep a batch's rows (sources ``gids``) with their global target ids (``lut[target]`` with ``lut``), merged.

        Each row's branches are sorted by target and duplicates added up here, as the reducer would (the same
        routine, in the same order, so the same bits): the work is spread over the workers, and the reducer takes
        the rows as they come (widened from their compact form) instead of merging them again.
        """
        offsets, target, prob = merge_csr_rows(rows.branch_offsets - rows.branch_offsets[0], target, rows.prob, lut)
        # compact (int32 targets, a table of the distinct probabilities): held until the end for a distributed
        # check, and what travels to the driver otherwise (6 B a branch instead of 16 with a uniform policy)
        target, prob = compact_rows(target, prob)
        self.rows.append((gids[rows.row_state], rows.row_action, np.diff(offsets), target, prob))
        self.rewards.append(rows.rewards)
        self.flags.append((gids, rows.terminal | rows.deadlock, rows.deadlock))

    def expand(self) -> Any:
        """Expand the frontier; one record batch of (distinct key, first occurrence) per owner."""
        t = time.perf_counter()
        gids, keys = self.frontier
        self.expanding = self.frontier  # given back by unexpand() if the driver stops before this level's store
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
        self.known, self.ukeys, self.uowner = known, ukeys, owner
        self.n_unique = int(ukeys.shape[0])
        t_end = time.perf_counter()
        self.stats["expand_s"] += t_route - t
        self.stats["exchange_s"] += t_end - t_route  # the per-owner Arrow batches
        return out if self.workers > 1 else out[0]  # Ray: num_returns=1 is one object, not a list of one

    def store_expand(self, *answers: tuple[int, np.ndarray], level: int = 0) -> list[Any]:
        """:meth:`store`, then the next level's :meth:`expand` (the store's counts first): the next level surely runs.

        No round trip, and one barrier less a level lets the workers' uneven stores and expansions even out.
        """
        stored = self.store(*answers, level=level)
        out = self.expand()
        return [stored, *(out if self.workers > 1 else [out])]

    def unexpand(self) -> None:
        """Take back the last :meth:`expand` (its level will not run: the run stopped): its frontier is again."""
        self.frontier = self.expanding
        self.pending, self.sent = [], []
        self.known, self.ukeys = self.known[:0], self.ukeys[:0]

    def lookup(self, *batches: Any) -> tuple[int, int, np.ndarray]:
        """Owner side: take in the keys of all sources; the first occurrences ``[new]`` of the states new to it.

        Returned packed (:func:`~distmc.distributed.exchange.pack_increasing`), as :meth:`answer` takes the new
        states' global ids.
        """
        t = time.perf_counter()
        decoded = [_from_arrow(b, self.codec) for b in batches]
        self.stats["exchange_s"] += time.perf_counter() - t
        t = time.perf_counter()
        keys = np.concatenate([k for k, _ in decoded]) if decoded else np.zeros(0, dtype=self.codec.dtype)
        occ = np.concatenate([o for _, o in decoded]) if decoded else np.zeros(0, dtype=np.int64)
        # In order of first occurrence (codes are unique: a branch leads to one key), every key goes into the
        # visited set: the new ones are numbered by their first (smallest) occurrence, the order of their global ids
        size0 = self.visited.size
        order = np.argsort(occ, kind="stable")  # a level's sources send their keys in order: runs
        ids, self.new_keys = self.visited.insert(keys[order])
        first = np.flatnonzero(ids > np.maximum.accumulate(np.concatenate([[size0 - 1], ids]))[:-1])
        new_occ = occ[order[first]]
        self.new_local = np.arange(size0, self.visited.size, dtype=np.int64)
        local = np.empty_like(ids)
        local[order] = ids
        # local ids of the keys each source asked about, for the answer once the global ids are known
        self.asked = np.split(local, np.cumsum([k.shape[0] for k, _ in decoded])[:-1])
        # what the other sources' keys were: states known here already, or new ones (each new state counted once
        # per source that found it in this level; the level's own new states are self.new_keys)
        remote = np.concatenate([a for s, a in enumerate(self.asked) if s != self.rank] or [local[:0]])
        self.stats["keys_in"] += int(remote.shape[0])
        self.stats["keys_in_new"] += int((remote >= self.visited.size - self.new_keys.shape[0]).sum())
        self.stats["lookup_s"] += time.perf_counter() - t
        out = pack_increasing(new_occ)  # in order of first occurrence: increasing
        self.stats["bytes_driver"] += int(out[2].nbytes)
        return out

    def answer(self, packed_gids: tuple[int, int, np.ndarray]) -> Any:
        """Owner side: record the new states' global ids; the global ids of the keys each source asked about."""
        t = time.perf_counter()
        self.stats["bytes_driver"] += int(packed_gids[2].nbytes)
        new_gids = unpack_increasing(packed_gids)
        self._grow(self.new_local, new_gids)
        self.frontier = (new_gids, self.new_keys)
        out = [pack_ids(self.gids[ids]) for ids in self.asked]
        self.stats["bytes_answer"] += sum(int(a[1].nbytes) for s, a in enumerate(out) if s != self.rank)
        self.stats["exchange_s"] += time.perf_counter() - t
        return out if self.workers > 1 else out[0]

    def store(self, *answers: tuple[int, np.ndarray], level: int = 0) -> dict[str, int]:
        """Source side: turn the pending rows' successor keys into global ids, and keep the rows.

        ``answers[o]`` is owner ``o``'s answer: the global ids of the distinct keys this source sent it
        (:func:`~distmc.distributed.exchange.pack_ids`). With a checkpoint directory the level's rows and new states
        go to disk (:func:`write_level`) instead of staying in memory. Returns the level's transitions and policy states, and this process's memory.
        """
        t = time.perf_counter()
        gid_of = self.known  # level-unique id -> global id
        for o in range(self.workers):
            got = unpack_ids(answers[o])
            gid_of[self.sent[o]] = got
            if o != self.rank and self.sent[o].shape[0]:  # remember the other owners' answers
                cid, _ = self.cache.insert(self.ukeys[self.sent[o]])
                self.cache_gids = _at_least(self.cache_gids, self.cache.size)
                self.cache_gids[cid] = got
        self.ukeys = self.ukeys[:0]
        transitions = start = 0
        noting = self.prio_rank is not None  # a priority run: what each branch hands on (PriorityWorker)
        for rows, bg, uid in self.pending:
            transitions += int(uid.shape[0])
            if noting:
                self.prio_note(start, rows, bg, gid_of[uid], self.uowner[uid])
            self._keep(bg, rows, uid, gid_of)  # the targets' ids looked up in the merge's pass (uid is overwritten)
            start += int(bg.shape[0])
        self.pending = []
        self.stats["store_s"] += time.perf_counter() - t
        return self._level_done(level, transitions)

    def _level_done(self, level: int, transitions: int) -> dict[str, int]:
        """After a level's rows are kept: the checkpoint's files, and the level's counts for the driver."""
        if self.checkpoint_dir is not None:
            t1 = time.perf_counter()
            r, f = self.written  # the rows and flags of earlier levels (kept for a distributed check) are written
            self.stats["checkpoint_bytes"] += write_level(
                self.checkpoint_dir,
                level,
                self.rank,
                self.codec.dtype,
                (self.new_keys, self.frontier[0]),
                [widened_rows(x) for x in self.rows[r:]],
                self.rewards[r:],
                self.flags[f:],
                self.parts.reward_names,
            )
            if self.keep_rows:  # every level's rows go to disk, and stay here for a distributed check
                self.written = (len(self.rows), len(self.flags))
            else:
                self.rows, self.rewards, self.flags = [], [], []
            self.stats["checkpoint_s"] += time.perf_counter() - t1
        delta, self.policy_reported = self.policy_states - self.policy_reported, self.policy_states
        calls = policy_counters(self.expander)[0]
        calls, self.calls_reported = calls - self.calls_reported, calls
        return {"transitions": transitions, "policy_states": delta, "policy_calls": calls, "rss": rss_bytes()}
