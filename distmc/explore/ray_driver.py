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
Ray's object store. The reducer then places every partition's rows in global order (:func:`gather`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from distmc.errors import ResourceLimitError, WorkerError
from distmc.explore.partition import Explored
from distmc.explore.visited import VisitedSet
from distmc.model.packing import StateCodec
from distmc.pipeline import Job

__all__ = ["explore_ray", "owner_of"]

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

    if codec.words == 1:
        col = pa.array(keys, type=pa.uint64())
    else:
        col = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(codec.key_bytes), len(keys), [None, pa.py_buffer(np.ascontiguousarray(keys).tobytes())]
        )
    return pa.RecordBatch.from_arrays([col, pa.array(occ, type=pa.int64())], names=["key", "occ"])


def _from_arrow(batch: Any, codec: StateCodec) -> tuple[np.ndarray, np.ndarray]:
    col = batch.column(0)
    if codec.words == 1:
        keys = col.to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
    else:
        buf = col.buffers()[1]
        raw = np.frombuffer(buf, dtype=np.uint8)[col.offset * codec.key_bytes : (col.offset + len(col)) * codec.key_bytes]
        keys = raw.view(codec.dtype).copy()
    return keys, batch.column(1).to_numpy(zero_copy_only=False)


class PartitionActor:
    """One partition: its visited set (key -> local id), the global ids of its states, its frontier and rows."""

    def __init__(self, job: Job, rank: int, workers: int, batch_states: int, threads: int) -> None:
        try:  # one node's cores are shared by the actors on it
            import numba

            numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))  # type: ignore[attr-defined]
        except ImportError:  # pragma: no cover
            pass
        self.parts = job.build()
        assert self.parts.expander is not None
        self.expander = self.parts.expander
        self.codec = self.parts.codec
        self.rank, self.workers, self.batch_states = rank, workers, batch_states
        self.visited = VisitedSet(self.codec.dtype)
        self.gids = np.zeros(0, dtype=np.int64)  # [N_local] global id of each local state
        self.frontier = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=self.codec.dtype))  # (gids, keys)
        self.rows: list[tuple[np.ndarray, ...]] = []  # (row gid, row action, branch counts, target gids, prob)
        self.rewards: list[dict[str, np.ndarray]] = []
        self.flags: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (gids, loop, deadlock) of expanded states
        self.pending: list[tuple[Any, np.ndarray, np.ndarray]] = []  # (rows, source gids, level-unique target ids)
        self.sent: list[np.ndarray] = []
        self.n_unique = 0
        self.asked: list[np.ndarray] = []  # per source: local ids of the keys it asked about, in its order
        self.new_local: np.ndarray = np.zeros(0, dtype=np.int64)  # this level's new states: local ids, keys
        self.new_keys: np.ndarray = np.zeros(0, dtype=self.codec.dtype)
        self.policy_states = 0
        self.stats: dict[str, Any] = {"expand_s": 0.0, "lookup_s": 0.0, "store_s": 0.0, "batches": 0, "bytes_sent": 0}

    def ready(self) -> str:
        """The Ray node this actor runs on."""
        import ray

        node = ray.get_runtime_context().get_node_id()
        self.stats["node"] = node
        return str(node)

    # -- initial states ----------------------------------------------------------------------------------------

    def add_initial(self, keys: np.ndarray, gids: np.ndarray) -> None:
        ids, new = self.visited.insert(keys)
        self._grow(ids, gids)
        order = np.argsort(gids, kind="stable")
        self.frontier = (gids[order], keys[order])

    def _grow(self, local: np.ndarray, gids: np.ndarray) -> None:
        if self.visited.size > self.gids.shape[0]:
            self.gids = np.concatenate([self.gids, np.full(self.visited.size - self.gids.shape[0], -1, dtype=np.int64)])
        self.gids[local] = gids

    # -- one level ---------------------------------------------------------------------------------------------

    def expand(self) -> Any:
        """Expand the frontier; one record batch of (distinct key, first occurrence) per owner."""
        t = time.perf_counter()
        gids, keys = self.frontier
        self.frontier = (gids[:0], keys[:0])
        # The level's distinct successor keys, numbered by first occurrence (a hash set for one-word keys).
        seen = VisitedSet(self.codec.dtype)
        first_occ: list[np.ndarray] = []
        self.pending = []
        for start in range(0, gids.shape[0], self.batch_states):
            bg, bk = gids[start : start + self.batch_states], keys[start : start + self.batch_states]
            rows = self.expander.expand(bk)
            self.policy_states += rows.policy_states
            self.stats["batches"] += 1
            size0 = seen.size
            uid, _ = seen.insert(rows.target_keys)
            # first occurrences: a new id is first seen where it exceeds every id before it
            newer = uid >= size0
            pos = np.flatnonzero(newer)
            ids = uid[pos]
            prev = np.maximum.accumulate(np.concatenate([[size0 - 1], ids]))[:-1]
            pos = pos[ids > prev]
            # position of a branch: source gid, then the branch's index among its source's branches
            counts = np.diff(rows.branch_offsets)
            per_state = np.bincount(rows.row_state, weights=counts, minlength=bk.shape[0]).astype(np.int64)
            if per_state.size and per_state.max() >= (1 << OCC_SHIFT):
                raise ResourceLimitError(f"a state has {int(per_state.max())} branches, more than {1 << OCC_SHIFT}")
            branch_src = np.repeat(rows.row_state, counts)[pos]
            start_of = np.cumsum(per_state) - per_state
            first_occ.append((bg[branch_src] << OCC_SHIFT) + (pos - start_of[branch_src]))
            self.pending.append((rows, bg, uid))
        ukeys = seen.keys_by_id()
        uocc = np.concatenate(first_occ) if first_occ else np.zeros(0, dtype=np.int64)
        owner = owner_of(self.codec.to_words(ukeys), self.workers)
        out = []
        self.sent = []  # per owner: the level-unique ids sent to it, in the order sent
        for o in range(self.workers):
            sel = np.flatnonzero(owner == o)
            self.sent.append(sel)
            batch = _to_arrow(ukeys[sel], uocc[sel], self.codec)
            self.stats["bytes_sent"] += int(batch.nbytes)
            out.append(batch)
        self.n_unique = int(ukeys.shape[0])
        self.stats["expand_s"] += time.perf_counter() - t
        return out if self.workers > 1 else out[0]  # Ray: num_returns=1 is one object, not a list of one

    def lookup(self, *batches: Any) -> np.ndarray:
        """Owner side: take in the keys of all sources; the first occurrences ``[new]`` of the states new to it."""
        t = time.perf_counter()
        decoded = [_from_arrow(b, self.codec) for b in batches]
        keys = np.concatenate([k for k, _ in decoded]) if decoded else np.zeros(0, dtype=self.codec.dtype)
        occ = np.concatenate([o for _, o in decoded]) if decoded else np.zeros(0, dtype=np.int64)
        local = self.visited.lookup(keys)  # -1: new to this owner
        unknown = np.flatnonzero(local < 0)
        order = unknown[np.argsort(occ[unknown], kind="stable")]
        uniq, first_idx, inv = np.unique(keys[order], return_index=True, return_inverse=True)
        by_occ = np.argsort(occ[order][first_idx], kind="stable")  # the new states in order of first occurrence
        self.new_keys, new_occ = uniq[by_occ], occ[order][first_idx][by_occ]
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
        self._grow(self.new_local, new_gids)
        self.frontier = (new_gids, self.new_keys)
        out = [self.gids[ids] for ids in self.asked]
        return out if self.workers > 1 else out[0]

    def store(self, *answers: np.ndarray) -> None:
        """Source side: turn the pending rows' successor keys into global ids, and keep the rows.

        ``answers[o]`` is owner ``o``'s answer: the global ids of the distinct keys this source sent it.
        """
        t = time.perf_counter()
        gid_of = np.empty(self.n_unique, dtype=np.int64)  # level-unique id -> global id
        for o in range(self.workers):
            gid_of[self.sent[o]] = answers[o]
        for rows, bg, uid in self.pending:
            target = gid_of[uid]
            self.rows.append((bg[rows.row_state], rows.row_action, np.diff(rows.branch_offsets), target, rows.prob))
            self.rewards.append(rows.rewards)
            self.flags.append((bg, rows.terminal | rows.deadlock, rows.deadlock))
        self.pending = []
        self.stats["store_s"] += time.perf_counter() - t

    # -- the end -----------------------------------------------------------------------------------------------

    def result(self) -> dict[str, Any]:
        cat = np.concatenate
        return {
            "gids": self.gids[: self.visited.size],
            "keys": self.visited.keys_by_id(),
            "row_state": cat([r[0] for r in self.rows]) if self.rows else np.zeros(0, dtype=np.int64),
            "row_action": cat([r[1] for r in self.rows]) if self.rows else np.zeros(0, dtype=np.int64),
            "counts": cat([r[2] for r in self.rows]) if self.rows else np.zeros(0, dtype=np.int64),
            "targets": cat([r[3] for r in self.rows]) if self.rows else np.zeros(0, dtype=np.int64),
            "prob": cat([r[4] for r in self.rows]) if self.rows else np.zeros(0),
            "rewards": {n: cat([r[n] for r in self.rewards]) for n in (self.rewards[0] if self.rewards else {})},
            "flag_gids": cat([f[0] for f in self.flags]) if self.flags else np.zeros(0, dtype=np.int64),
            "loop": cat([f[1] for f in self.flags]) if self.flags else np.zeros(0, dtype=bool),
            "deadlock": cat([f[2] for f in self.flags]) if self.flags else np.zeros(0, dtype=bool),
            "policy_states": self.policy_states,
            "policy_calls": int(getattr(self.expander.policy, "forward_passes", 0)),
            "stats": dict(self.stats, states=self.visited.size),
        }


def gather(results: list[dict[str, Any]], n_initial: int) -> Explored:
    """The reducer's first step: the partitions' states and rows placed in global-id order (one chunk)."""
    n = int(sum(r["gids"].shape[0] for r in results))
    key_dtype = results[0]["keys"].dtype
    keys = np.empty(n, dtype=key_dtype)
    loop = np.zeros(n, dtype=bool)
    deadlock = np.zeros(n, dtype=bool)
    for r in results:
        keys[r["gids"]] = r["keys"]
        loop[r["flag_gids"]] = r["loop"]
        deadlock[r["flag_gids"]] = r["deadlock"]
    row_state = np.concatenate([r["row_state"] for r in results])
    order = np.argsort(row_state, kind="stable")  # every partition's rows are in increasing global id already
    counts_in = np.concatenate([r["counts"] for r in results])
    counts = counts_in[order]
    offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    # Each partition's branches are scattered straight to their global positions: one copy of the transitions.
    row_pos = np.empty(order.shape[0], dtype=np.int64)
    row_pos[order] = np.arange(order.shape[0], dtype=np.int64)  # global row index of each (partition, row)
    targets = np.empty(int(offsets[-1]), dtype=np.int64)
    prob = np.empty(int(offsets[-1]), dtype=np.float64)
    r0 = 0
    for r in results:
        c = r["counts"]
        rows = row_pos[r0 : r0 + c.shape[0]]
        local = np.zeros(c.shape[0] + 1, dtype=np.int64)
        np.cumsum(c, out=local[1:])
        dest = np.repeat(offsets[rows] - local[:-1], c) + np.arange(int(local[-1]), dtype=np.int64)
        targets[dest] = r["targets"]
        prob[dest] = r["prob"]
        r0 += c.shape[0]
    del counts_in
    names = list(results[0]["rewards"])
    rewards = {k: np.concatenate([r["rewards"][k] for r in results])[order] for k in names}
    return Explored(
        keys=keys, loop=loop, deadlock=deadlock, row_state=row_state[order],
        row_action=np.concatenate([r["row_action"] for r in results])[order], branch_offsets=offsets,
        target_chunks=[targets], prob_chunks=[prob], chunk_rows=np.array([counts.shape[0]], dtype=np.int64),
        rewards=rewards, initial=np.arange(n_initial, dtype=np.int64),
    )


def explore_ray(
    job: Job,
    codec: StateCodec,
    initial_keys: np.ndarray,
    workers: int,
    *,
    address: str | None = None,
    batch_states: int = 20_000,
    max_states: int | None = None,
) -> Explored:
    """Explore ``job`` on ``workers`` Ray actors; the same :class:`Explored` as the in-process driver gives.

    Args:
        job: what to explore; every actor builds its own parts from it.
        codec: the state packing (the driver's, for routing the initial states).
        initial_keys: ``[I]`` packed initial states.
        workers: number of actors (partitions).
        address: a running Ray cluster (``auto`` or ``HOST:PORT``); None starts a local Ray when none is running.
        batch_states: states per expansion batch inside an actor.
        max_states: stop with :class:`ResourceLimitError` beyond this many states.
    """
    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    # One CPU per actor when the cluster has them (so Ray spreads the actors over its nodes); none when there are
    # more actors than CPUs, which is allowed (the scaling experiment oversubscribes on purpose).
    cpus = int(ray.cluster_resources().get("CPU", 1))
    threads = max(1, cpus // workers)
    actor_cls = ray.remote(num_cpus=1 if cpus >= workers else 0, scheduling_strategy="SPREAD")(PartitionActor)
    actors: list[Any] = [actor_cls.remote(job, r, workers, batch_states, threads) for r in range(workers)]
    try:
        ray.get([a.ready.remote() for a in actors])
    except Exception as exc:  # an actor failed to build its parts: report the cause, not Ray's wrapper
        cause = getattr(exc, "cause", None) or exc
        raise WorkerError(f"a worker could not start: {type(cause).__name__}: {cause}") from exc
    try:
        return _run(ray, actors, codec, initial_keys, workers, max_states)
    finally:
        for a in actors:
            ray.kill(a)


def _run(ray: Any, actors: list[Any], codec: StateCodec, initial_keys: np.ndarray, workers: int,
         max_states: int | None) -> Explored:
    uniq, first = np.unique(initial_keys, return_index=True)
    init_keys = uniq[np.argsort(first, kind="stable")]
    init_gids = np.arange(init_keys.shape[0], dtype=np.int64)
    owner = owner_of(codec.to_words(init_keys), workers)
    ray.get([a.add_initial.remote(init_keys[owner == o], init_gids[owner == o]) for o, a in enumerate(actors)])
    n = int(init_keys.shape[0])
    depth = 0
    while True:
        sent = [a.expand.options(num_returns=workers).remote() for a in actors]
        sent = [s if isinstance(s, list) else [s] for s in sent]
        news = ray.get([actors[o].lookup.remote(*[sent[s][o] for s in range(workers)]) for o in range(workers)])
        depth += 1
        occ = np.concatenate(news)
        tag = np.concatenate([np.full(x.shape[0], o, dtype=np.int64) for o, x in enumerate(news)])
        order = np.argsort(occ, kind="stable")
        gids = np.empty(occ.shape[0], dtype=np.int64)
        gids[order] = n + np.arange(occ.shape[0], dtype=np.int64)
        answers = [
            actors[o].answer.options(num_returns=workers).remote(gids[tag == o]) for o in range(workers)
        ]
        answers = [x if isinstance(x, list) else [x] for x in answers]
        ray.get([actors[s].store.remote(*[answers[o][s] for o in range(workers)]) for s in range(workers)])
        n += int(occ.shape[0])
        if max_states is not None and n > max_states:
            raise ResourceLimitError(f"exploration passed --max-states {max_states} at depth {depth} ({n} states)")
        if occ.shape[0] == 0:
            break
    results = ray.get([a.result.remote() for a in actors])
    out = gather(results, int(init_keys.shape[0]))
    out.stats.update({"depth": depth, "policy_states": sum(r["policy_states"] for r in results),
                      "policy_calls": sum(r["policy_calls"] for r in results)})
    out.worker_stats = [r["stats"] for r in results]
    return out
