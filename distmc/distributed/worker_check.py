"""The distributed check's side of a partition actor: its kept rows become its part of the induced DTMC.

:class:`WorkerCheck` is a mixin of :class:`~distmc.distributed.actor.PartitionActor` (one Ray actor does both): it
reads the states and rows the exploration left (declared below), builds the worker's
:class:`~distmc.check.worker_part.WorkerPart` and runs the native checker's code on it with its peers
(:mod:`distmc.check.distributed`). The methods in the "mail" concurrency group are called while a check runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from distmc._internal.jit import thread_settings
from distmc.check.channels import Channels, open_channels, remove_segments
from distmc.check.pipes import Pipes, open_pipes
from distmc.distributed.exchange import compact_rows, owner_of
from distmc.errors import UsageError
from distmc.explore.contracts import KeyCodec, WorkerParts
from distmc.explore.limits import LimitCheck, peak_rss_bytes, rss_bytes
from distmc.explore.visited import VisitedSet
from distmc.pipeline import Parts

if TYPE_CHECKING:
    from distmc.check.result import Precision

__all__ = ["WorkerCheck"]


class WorkerCheck:
    """The check's methods of a partition actor; the attributes are the actor's (set by its ``setup``)."""

    parts: WorkerParts
    codec: KeyCodec
    rank: int
    workers: int
    visited: VisitedSet  # own states: key -> local id
    gids: np.ndarray  # [N_local] global id of each local state
    cache: VisitedSet  # other owners' keys this worker asked about
    cache_gids: np.ndarray
    seen: VisitedSet
    known: np.ndarray
    rows: list[tuple[np.ndarray, ...]]  # (row gid, row action, branch counts, target gids, prob), compact
    rewards: list[dict[str, np.ndarray]]
    flags: list[tuple[np.ndarray, np.ndarray, np.ndarray]]  # (gids, loop, deadlock)
    keep_rows: bool
    written: tuple[int, int]
    check: LimitCheck | None
    stats: dict[str, Any]
    clock0: tuple[float, float]
    part: Any  # this worker's WorkerPart, once built
    peers: list[Any]
    channels: Channels | None  # this check's shared-memory channels to the same-node peers (check_connect)
    pipes: Pipes | None  # this check's message pipes to the same-node peers (check_connect)
    status: str

    def load_rows(self, directory: str, level: int, owner_by_gid: np.ndarray) -> None:
        """After a restore, read back the rows of the own states from the checkpoint's levels ``0..level``.

        ``owner_by_gid``: ``[N]`` the owner of every state (the restored actors know only their own states' keys).
        """
        from distmc.check.worker_part import own_slots
        from distmc.distributed.checkpoint import read_rows

        own = np.sort(self.gids[: self.visited.size])
        for rows, rewards, flags in read_rows(directory, level):
            mine = own_slots(own, rows[0])[1]
            branch = np.repeat(mine, rows[2])
            self.rows.append(
                (rows[0][mine], rows[1][mine], rows[2][mine], *compact_rows(rows[3][branch], rows[4][branch]))
            )
            self.rewards.append({k: v[mine] for k, v in rewards.items()})
            fmine = own_slots(own, flags[0])[1]
            self.flags.append((flags[0][fmine], flags[1][fmine], flags[2][fmine]))
        self.owner_by_gid = owner_by_gid
        self.written = (len(self.rows), len(self.flags))  # on disk already

    # -- the distributed check (distmc.check.distributed) --------------------------------------------------------

    @property
    def prism(self) -> Parts:
        """The parts of a PRISM job, which the distributed check needs (model, properties, the packing of states)."""
        if not isinstance(self.parts, Parts):
            raise UsageError("the distributed check runs on a PRISM model's job (the box front end checks in-process)")
        return self.parts

    def check_plan(self, n_initial: int, n_total: int) -> Any:
        """Turn the kept rows into this worker's part of the induced DTMC; per owner, the global ids it needs.

        The exploration's structures (visited set, key cache, row chunks) are freed here: the part holds what
        the check needs (rows with int32 columns, labels, rewards, the own states' keys).
        """
        from distmc.check.distributed import Mailbox
        from distmc.check.worker_part import build_part

        self._lap("explore")
        t = time.perf_counter()
        self.mailbox = Mailbox()
        by_gid = self.__dict__.get("owner_by_gid")  # restored from a checkpoint: the owners of every state
        known_keys = self.cache.keys_by_id()
        known_gids = self.cache_gids[: self.cache.size]
        owners = owner_of(self.codec.to_words(known_keys), self.workers)
        order = np.argsort(known_gids, kind="stable")
        known_gids, owners = known_gids[order], owners[order]
        del known_keys, order

        def owner_of_gid(gids: np.ndarray) -> np.ndarray:
            if by_gid is not None:
                return by_gid[gids]
            pos = np.searchsorted(known_gids, gids)
            if gids.shape[0] and (pos.max() >= known_gids.shape[0] or not np.array_equal(known_gids[pos], gids)):
                raise AssertionError("a row points to a state this worker never asked about")
            return owners[pos]

        parts = self.prism
        gids, keys = self.gids[: self.visited.size].copy(), self.visited.keys_by_id()
        rows, rewards, flags = self.rows, self.rewards, self.flags
        self.rows, self.rewards, self.flags = [], [], []
        self.visited = self.cache = self.seen = VisitedSet(self.codec.dtype)
        self.gids = self.cache_gids = self.known = np.zeros(0, dtype=np.int64)
        self.part = build_part(
            self.rank,
            self.workers,
            gids,
            keys,
            rows,
            rewards,
            flags,
            owner_of_gid,
            n_initial,
            n_total,
            parts.model,
            parts.codec,
            parts.props.atoms,
            parts.reward_names,
        )
        del rows, rewards, flags, gids, keys
        self.stats["check_build_s"] = time.perf_counter() - t
        self.stats["check_bytes"] = self.part.nbytes()
        self.stats["check_transitions"] = int(self.part.matrix.row_offsets[-1])
        self.stats["check_copies"] = int(self.part.n_cols - self.part.n_states)
        requests = self.part.requests()
        return requests if self.workers > 1 else requests[0]

    def close_frontier(self, first: int) -> None:
        """One self-loop row for each own state with a global id from ``first`` on (found, not expanded).

        A partial model's frontier (:func:`distmc.check.partial.close_frontier`), before :meth:`check_plan`.
        """
        gids = np.sort(self.gids[: self.visited.size])
        f = gids[gids >= first]
        n = int(f.shape[0])
        if n == 0:
            return
        target, prob = f, np.ones(n)
        if self.keep_rows:
            target, prob = compact_rows(target, prob)
        names = next((list(d) for d in self.rewards if d), list(self.parts.reward_names))
        self.rows.append((f, np.full(n, -1, dtype=np.int64), np.ones(n, dtype=np.int64), target, prob))
        self.rewards.append({k: np.zeros(n) for k in names})
        self.flags.append((f, np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)))

    def check_run_partial(
        self, precision: Precision | float, max_iterations: int, first: int, order: str = "blocks"
    ) -> dict[str, Any]:
        """Bounds of the job's properties on a partial model, on every worker at once (:func:`partial_values`).

        Returns ``checks``: per property, both sides' vectors at the own initial states, ``reach`` and ``note``.
        """
        from distmc.check.distributed import WorkerEngine
        from distmc.check.partial import partial_values

        t = time.perf_counter()
        engine = WorkerEngine(
            self.part, self.peers, self.mailbox, self.check, self._set_status, self.channels, self.pipes, order
        )
        part, parts = self.part, self.prism
        init = part.initial
        checks = []
        try:
            for spec in parts.props.specs:
                t_spec = time.perf_counter()
                vectors, note = partial_values(
                    engine,
                    part,
                    spec,
                    part.gids >= first,
                    parts.model,
                    len(parts.model.variables),
                    precision,
                    max_iterations,
                )
                checks.append(
                    {**{k: v[init] for k, v in vectors.items()}, "note": note, "check_s": time.perf_counter() - t_spec}
                )
        finally:
            self._unlink_channels()
            self.stats.update(engine.stats)
            self.stats["check_s"] = time.perf_counter() - t
            self._lap("check")
        self.stats["peak_rss"] = peak_rss_bytes()
        self.stats["rss"] = rss_bytes()
        return {"gids": part.gids[init], "checks": checks, "stats": dict(self.stats)}

    def check_connect(self, peers: list[Any], *asked: np.ndarray, shm: tuple[str, list[Any]] | None = None) -> None:
        """Every peer's request (``asked[p]``: global ids of this worker's states it needs) and the peers' handles.

        ``shm``: (a file prefix unique to this check, every worker's node): this worker's shared-memory channels and
        message pipes to the peers on its node are made now (:mod:`distmc.check.channels`, :mod:`distmc.check.pipes`),
        before any worker starts the check; a previous check's pipes are closed.
        """
        self._close_pipes()
        part = self.part
        part.serve(list(asked))
        self.peers = peers
        recv = [int(part.recv_off[o + 1] - part.recv_off[o]) for o in range(self.workers)]
        self.channels = (
            None
            if shm is None
            else open_channels(shm[0], self.rank, [int(s.shape[0]) for s in part.send], recv, shm[1])
        )
        self.pipes = None if shm is None else open_pipes(shm[0], self.rank, shm[1], self.mailbox)

    def check_run(
        self,
        precision: Precision,
        max_iterations: int,
        values: tuple[str, np.ndarray] | None = None,
        order: str = "blocks",
    ) -> dict[str, Any]:
        """Check every property of the job on every worker at once; the values at this worker's initial states.

        Returns ``checks``: per property, ``value``, ``lower`` and ``upper`` at the own initial states (``gids``).
        ``values``: (directory, first global id of every level): also write this worker's part of the values
        table of the (one) property there, and return its states most at risk (``at_risk``). ``order``: the update
        order of sound value iteration (:data:`distmc.check.distributed.ORDERS`).
        """
        from distmc.check.distributed import WorkerEngine
        from distmc.check.native import values_of

        t = time.perf_counter()
        engine = WorkerEngine(
            self.part, self.peers, self.mailbox, self.check, self._set_status, self.channels, self.pipes, order
        )
        init = self.part.initial
        checks = []
        try:
            for spec in self.prism.props.specs:
                t_spec = time.perf_counter()
                values_, lower, upper = values_of(engine, self.part, spec, precision, max_iterations)
                checks.append(
                    {
                        "value": values_[init],
                        "lower": lower[init],
                        "upper": upper[init],
                        "check_s": time.perf_counter() - t_spec,
                    }
                )
        finally:
            self._unlink_channels()
            self.stats.update(engine.stats)
            self.stats["check_s"] = time.perf_counter() - t
            self._lap("check")  # from check_plan on: the part, the exchange plan and the check
        self.stats["peak_rss"] = peak_rss_bytes()
        self.stats["rss"] = rss_bytes()
        out = {"gids": self.part.gids[init], "checks": checks, "stats": dict(self.stats)}
        if values is not None:
            out["at_risk"] = self._write_values(values_, *values)
        return out

    def _write_values(self, vec: np.ndarray, directory: str, level_starts: np.ndarray) -> list[dict[str, Any]]:
        """This worker's part of the values table, and its candidates for the states most at risk."""
        from distmc.check.forms import reachability, unsupported
        from distmc.explain.values import RISKIEST, depth_from_levels, riskiest, value_columns, write_values_part

        t = time.perf_counter()
        part, parts = self.part, self.prism
        states = parts.codec.unpack(part.keys)
        depth = depth_from_levels(part.gids, level_starts)
        write_values_part(directory, self.rank, value_columns(parts.model, states, {"value": vec}, depth))
        eligible = np.ones(part.n_states, dtype=bool)
        if not parts.spec.is_reward and unsupported(parts.spec, "dtmc") is None:
            eligible = ~reachability(parts.spec, part)[1]  # the target states have reached it already
        ids = riskiest(vec, eligible, RISKIEST)
        self.stats["values_s"] = time.perf_counter() - t
        return [
            {
                "state": {
                    v.name: (bool(x) if v.is_bool else int(x))
                    for v, x in zip(parts.model.variables, states[i].tolist(), strict=True)
                },
                "value": float(vec[i]),
                "depth": int(depth[i]),
                "gid": int(part.gids[i]),
            }
            for i in ids.tolist()
        ]

    def _lap(self, phase: str) -> None:
        """This run's wall and CPU seconds (every thread of the process) since the last lap, or since :meth:`setup`.

        Stored as ``{phase}_wall_s`` and ``{phase}_cpu_s``: the exploration's (until the rows are handed over or the
        check starts) and the distributed check's; the worker's thread budget holds when CPU stays within about
        ``threads`` x wall.
        """
        if f"{phase}_wall_s" in self.stats:
            return
        wall, cpu = time.perf_counter(), time.process_time()
        self.stats[f"{phase}_wall_s"] = wall - self.clock0[0]
        self.stats[f"{phase}_cpu_s"] = cpu - self.clock0[1]
        self.stats["threads"] = thread_settings()
        self.clock0 = (wall, cpu)

    def _set_status(self, what: str) -> None:
        self.status = what

    # Called in the "mail" concurrency group: taken while this worker's check runs in the default group.

    def deliver(self, key: tuple[str, int, int], payload: Any) -> None:
        """A peer's message for the running check."""
        self.mailbox.put(key, payload)

    def check_status(self) -> str:
        """What the running check is doing (for the live line)."""
        return self.status

    def _unlink_channels(self) -> None:
        if self.channels is not None:
            self.channels.unlink()
        pipes = self.__dict__.get("pipes")
        if pipes is not None:
            pipes.unlink()

    def _close_pipes(self) -> None:
        pipes = self.__dict__.get("pipes")
        if pipes is not None:
            pipes.close()
        self.pipes = None

    def check_abort(self, why: str) -> None:
        """Stop a running check that waits for a peer (the run failed elsewhere); the check's files on this node go."""
        self._unlink_channels()
        if self.channels is not None:  # also those of a peer on this node killed before it removed them
            remove_segments(self.channels.prefix)
        self._close_pipes()
        mailbox = self.__dict__.get("mailbox")
        if mailbox is not None:
            mailbox.close(why)
