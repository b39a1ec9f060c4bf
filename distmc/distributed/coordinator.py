"""The driver's side of a Ray run: the level loop, recovery, the distributed check, gathering the rows.

Its entry point, and the rows left on the actors, are :mod:`distmc.distributed.rows`'s.

The actors themselves (start-up, resources, kept actors, policy servers) are :mod:`distmc.distributed.pool`'s.

See :mod:`distmc.distributed` for the protocol of one level.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from distmc.check.channels import remove_segments
from distmc.check.distributed import check_order, combine_checks
from distmc.check.result import Precision
from distmc.distributed.checkpoint import Checkpoint
from distmc.distributed.exchange import RowBlock, gather, order_rows, owner_of, pack_increasing, unpack_increasing
from distmc.distributed.pool import WorkerPool, _WorkerLost, gpu_share, release_workers
from distmc.distributed.stops import LevelStops
from distmc.errors import CheckpointError, WorkerError
from distmc.explain.values import RISKIEST
from distmc.explore.contracts import KeyCodec, WorkerJob
from distmc.explore.limits import Interrupt, Limits, rss_bytes
from distmc.explore.partition import Explored
from distmc.options import RaySettings

__all__ = ["gpu_share", "release_workers"]

log = logging.getLogger("distmc.ray")


class _RayRun(WorkerPool, LevelStops):
    """The driver's side of one distributed exploration: the level loop, recovery, the check, gathering."""

    def __init__(
        self,
        ray: Any,
        job: WorkerJob,
        codec: KeyCodec,
        where: RaySettings,
        batch_states: int,
        limits: Limits,
        checkpoint: Checkpoint | None,
        progress: Callable[[dict[str, float]], None] | None,
        rows_stay: bool = False,
    ) -> None:
        super().__init__(ray, job, where, batch_states, limits, checkpoint)
        self.codec, self.progress = codec, progress
        self.n_initial = self.policy_states = self.policy_calls = 0
        self.restarts = 0
        self.horizon: int | None = None  # levels 0 .. horizon - 1 only
        self.stopped: str | None = None  # why exploration stopped before the fixpoint (a limit, Ctrl-C)
        self.level_rss: list[int] = []  # each worker's memory after the last level
        self.level_t = 0.0  # when the last level ended (time.time())
        # Without a checkpoint the rows come to the driver level by level: each level's are taken from the actors
        # (``taken``: their refs) and placed in global order while the actors run the next level (``blocks``).
        self.stream = checkpoint is None and not rows_stay
        self.rows_stay = rows_stay
        self.level_starts: list[int] = [0]  # the first global id of every level (level 0: the initial states)
        self.taken: list[Any] = []
        self.ahead: list[list[Any]] | None = None  # the next level's expansion, asked for with this level's store
        self.blocks: list[RowBlock] = []
        self.absorb_s = 0.0

    # -- the run -----------------------------------------------------------------------------------------------

    def spawn_keeping(self) -> None:
        """:meth:`spawn`, and the actors keep their rows when the check runs on them."""
        self.spawn()
        if self.rows_stay:
            self.get([a.keep_rows_here.remote() for a in self.actors])

    def run(self, initial_keys: np.ndarray, max_restarts: int, gather: bool = True) -> Explored | None:
        """Explore to the fixpoint; with ``gather``, the explored partitions (else the rows stay on the actors)."""
        t0 = time.perf_counter()
        self.spawn_keeping()
        self.startup_s = time.perf_counter() - t0
        if self.ckpt is not None and self.ckpt.level >= 0:
            self.restore()
        else:
            self.begin(initial_keys)
        with Interrupt() as interrupt:
            while self.horizon is None or self.depth < self.horizon:
                try:
                    done = self.level()
                except _WorkerLost as exc:
                    self.recover(exc, max_restarts)
                    continue
                self.stopped = self.stopped or (interrupt.why if self.frontier else None)
                if done or self.stopped is not None:
                    break
        if self.ahead is not None:  # stopped (Ctrl-C) with the next level expanded: its frontier back
            self.ahead = None
            self.get([a.unexpand.remote() for a in self.actors])
        self.levels_s = time.perf_counter() - t0 - self.startup_s
        if not gather:
            return None
        return self.finish()

    def split(self, out: Explored) -> None:
        """The run's time split into ``out``'s stats, and each worker's idle time in the levels."""
        out.stats.update(startup_s=self.startup_s, levels_s=self.levels_s)
        self.idle(out.worker_stats)

    def idle(self, worker_stats: list[dict[str, Any]]) -> None:
        """Each worker's level time it was not working (at the barriers, or in Ray's transfers), as ``idle_s``."""
        for ws in worker_stats:
            busy = sum(float(ws.get(k, 0.0)) for k in ("expand_s", "lookup_s", "store_s", "exchange_s", "checkpoint_s"))
            ws["idle_s"] = max(0.0, self.levels_s - busy)

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
        self.get(
            [
                a.restore.remote(keys[owner == o], gids[owner == o], frontier[owner == o])
                for o, a in enumerate(self.actors)
            ]
        )

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
            raise CheckpointError(
                f"checkpoint {ckpt.directory} is damaged: {gids.shape[0]} states in its files, {self.n} in meta.json"
            )
        self.n_initial = int((levels == 0).sum())
        self.level_starts = [
            int(gids[levels == lv].min()) for lv in range(int(levels.max(initial=0)) + 1) if (levels == lv).any()
        ]
        frontier = levels == ckpt.level
        self.frontier = int(frontier.sum())
        self.hand_out(keys, gids, frontier)
        if self.rows_stay:  # the rows of the committed levels are in the files: each actor reads its own back
            owners = owner_of(self.codec.to_words(keys), self.workers).astype(np.int16)
            by_gid = np.empty(gids.shape[0], dtype=np.int16)
            by_gid[gids] = owners
            del owners
            self.get([a.load_rows.remote(str(ckpt.directory), ckpt.level, by_gid) for a in self.actors])
        log.info("resumed depth=%d states=%d frontier=%d from=%s", self.depth, self.n, self.frontier, ckpt.directory)

    def recover(self, exc: _WorkerLost, max_restarts: int) -> None:
        self.ahead = None  # the lost run's actors' expansion
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
        log.warning(
            "worker lost at depth=%d (%s); restarting %d workers from checkpoint level %d",
            self.depth + 1,
            exc,
            self.workers,
            self.ckpt.level,
        )
        self.kill()
        self.spawn_keeping()
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
            new, stored, _ = self.exchange()
        if self.stream:  # this level's rows, placed during the next level (an actor runs its calls in order)
            self.taken = [a.take.remote() for a in actors]
        expanded = self.frontier  # this level expanded the last one's new states
        if new:
            self.level_starts.append(self.n)  # the level's new states are ids n, n + 1, ...
        self.depth += 1
        self.n += new
        self.frontier = new
        self.transitions += sum(x["transitions"] for x in stored)
        self.policy_states += sum(x["policy_states"] for x in stored)
        self.policy_calls += sum(x["policy_calls"] for x in stored)
        if self.ckpt is not None:
            self.ckpt.commit(self.depth, self.n, self.transitions, self.policy_states, self.policy_calls)
        memory = rss_bytes() + sum(x["rss"] for x in stored)
        info = {
            "depth": self.depth,
            "states": self.n,
            "frontier": self.frontier,
            "transitions": self.transitions,
            "policy_states": self.policy_states,
            "policy_calls": self.policy_calls,
            "memory": memory,
            "restarts": self.restarts,
            "elapsed_s": time.time() - self.start,
            "worker_pids": [i["pid"] for i in self.info],
            "worker_nodes": [i["node"] for i in self.info],
        }
        log.info(
            "level depth=%d states=%d frontier=%d transitions=%d memory=%d",
            self.depth,
            self.n,
            self.frontier,
            self.transitions,
            memory,
        )
        if self.progress is not None:
            self.progress(info)
        if self.frontier:
            self.stopped = self.check.exceeded(states=self.n, memory=memory) or self.next_level_too_big(
                stored, expanded
            )
        return self.frontier == 0

    def exchange(self, picked: list[np.ndarray] | None = None) -> tuple[int, list[dict[str, int]], list[Any]]:
        """Steps 1-4 of a level on the actors: the number of new states, what they stored, a priority batch's mass.

        ``picked``: each actor's own states to expand (:mod:`distmc.distributed.priority`); then per source ``W`` refs.
        """
        actors, w = self.actors, self.workers
        if self.ahead is not None and picked is None:  # expanded with the last level's store already
            sent, self.ahead = self.ahead, None
        else:
            sent = [
                a.expand.options(num_returns=w).remote()
                if picked is None
                else a.prio_expand.options(num_returns=w).remote(picked[o])
                for o, a in enumerate(actors)
            ]
            sent = [s if isinstance(s, list) else [s] for s in sent]
        self.absorb()  # the last level's rows, while the actors expand
        news = [
            unpack_increasing(x)
            for x in self.get([actors[o].lookup.remote(*[sent[s][o] for s in range(w)]) for o in range(w)])
        ]
        occ = np.concatenate(news)
        tag = np.concatenate([np.full(x.shape[0], o, dtype=np.int64) for o, x in enumerate(news)])
        order = np.argsort(occ, kind="stable")
        gids = np.empty(occ.shape[0], dtype=np.int64)
        gids[order] = self.n + np.arange(occ.shape[0], dtype=np.int64)
        # an owner's new states are in order of first occurrence, so their global ids increase
        answers = [actors[o].answer.options(num_returns=w).remote(pack_increasing(gids[tag == o])) for o in range(w)]
        answers = [x if isinstance(x, list) else [x] for x in answers]
        if picked is None and self.goes_on(int(occ.shape[0])):  # store, then expand the next level at once
            outs = [
                actors[s]
                .store_expand.options(num_returns=w + 1)
                .remote(*[answers[o][s] for o in range(w)], level=self.depth + 1)
                for s in range(w)
            ]
            self.ahead = [x[1:] for x in outs]
            return int(occ.shape[0]), self.get([x[0] for x in outs]), []
        if picked is None:
            stored = self.get(
                [actors[s].store.remote(*[answers[o][s] for o in range(w)], level=self.depth + 1) for s in range(w)]
            )
            return int(occ.shape[0]), stored, []
        outs = [
            actors[s].prio_store.options(num_returns=w + 1).remote(*[answers[o][s] for o in range(w)]) for s in range(w)
        ]
        stored = self.get([x[0] for x in outs])
        return int(occ.shape[0]), stored, [x[1:] for x in outs]

    def check_on_workers(
        self,
        precision: Precision | float,
        max_iterations: int,
        progress: Callable[[dict[str, Any]], None] | None,
        values_dir: str | None = None,
        frontier_first: int | None = None,
        partial: bool = False,
    ) -> dict[str, Any]:
        """The distributed check on the actors (see :meth:`RayRows.check`).

        ``frontier_first``: the first id not expanded (each of those states gets a self-loop); ``partial``: check
        both sides of the bounds of a partial model.
        """
        ray, actors, w = self.ray, self.actors, self.workers
        t0 = time.perf_counter()
        self.checking = True
        shm: tuple[str, list[Any]] | None = None
        try:
            if frontier_first is not None:
                self.get([a.close_frontier.remote(frontier_first) for a in actors])
            plans = [a.check_plan.options(num_returns=w).remote(self.n_initial, self.n) for a in actors]
            plans = [p if isinstance(p, list) else [p] for p in plans]
            # the workers on one node exchange values through shared memory (distmc.check.channels)
            shm = (
                None
                if os.environ.get("DISTMC_SHM") == "0"
                else (f"distmc-{os.getpid()}-{uuid.uuid4().hex[:12]}", [i["node"] for i in self.info])
            )
            self.get(
                [
                    a.check_connect.remote(actors, *[plans[s][o] for s in range(w)], shm=shm)
                    for o, a in enumerate(actors)
                ]
            )
            del plans
            t1 = time.perf_counter()
            order = check_order()
            values = None if values_dir is None else (values_dir, np.asarray(self.level_starts, dtype=np.int64))
            refs = (
                [a.check_run_partial.remote(precision, max_iterations, frontier_first, order) for a in actors]
                if partial
                else [a.check_run.remote(precision, max_iterations, values, order) for a in actors]
            )
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
                for ref in done:
                    self.get(ref)  # a worker's error now, not after the others time out waiting for it
                if pending and progress is not None:
                    try:
                        status = ray.get(actors[0].check_status.options(concurrency_group="mail").remote(), timeout=5)
                    except Exception:  # noqa: BLE001 - only the live line; the failure itself comes from get()
                        status = "checking"
                    progress({"phase": status, "elapsed_s": time.time() - self.start})
            results = self.get(refs)
        except BaseException as exc:
            for a in actors:  # wake the workers that wait for a peer that stopped; they remove the check's files
                a.check_abort.options(concurrency_group="mail").remote("another worker failed")
            if not isinstance(exc, _WorkerLost):
                raise
            raise WorkerError(
                f"a worker was lost during the distributed check ({exc}); "
                + (
                    f"the exploration is saved in {self.ckpt.directory}: continue with --resume {self.ckpt.directory}"
                    if self.ckpt is not None
                    else "the rows it held are lost with the run. Run again with --checkpoint-dir DIR: a run that loses a "
                    "worker during the check then continues with --resume DIR without exploring again"
                )
            ) from None
        finally:
            if shm is not None:  # the names a killed worker left on this node (distmc.check.channels)
                remove_segments(shm[0])
        t2 = time.perf_counter()
        out: dict[str, Any] = {"checks": combine_checks(results)}
        if values_dir is not None:  # the workers' candidates, ranked again: highest value, then smaller global id
            cands = sorted((c for r in results for c in r["at_risk"]), key=lambda c: (-c["value"], c["gid"]))
            out["at_risk"] = [{k: v for k, v in c.items() if k != "gid"} for c in cands[:RISKIEST]]
        out.update(
            build_s=t1 - t0,
            check_s=t2 - t1,
            worker_stats=[dict(r["stats"], pid=i["pid"]) for r, i in zip(results, self.info, strict=True)],
        )
        self.idle(out["worker_stats"])
        return out

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

    def frontier_stats(self) -> dict[str, Any]:
        """Where exploration stopped before the fixpoint (empty for a run explored to the fixpoint).

        The first id not expanded (the last level's new states are the tail of the ids), why, and the horizon.
        """
        if not self.frontier:
            return {}
        out: dict[str, Any] = {"expanded": self.n - self.frontier}
        if self.stopped is not None:
            out["stopped"] = self.stopped
        if self.horizon is not None:
            out["horizon"] = self.horizon
        return out

    def finish(self) -> Explored:
        """Gather the partitions' states and rows into one :class:`Explored` (the reducer's input)."""
        t1 = time.perf_counter()
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
        out.stats.update(
            {
                "depth": self.depth,
                "policy_states": self.policy_states,
                "policy_calls": self.policy_calls,
                "restarts": self.restarts,
                "place_s": self.absorb_s,
                **self.frontier_stats(),
            }
        )
        out.worker_stats = [dict(r["stats"], pid=i["pid"]) for r, i in zip(stats, self.info, strict=True)]
        self.split(out)
        out.stats["gather_s"] = time.perf_counter() - t1
        return out
