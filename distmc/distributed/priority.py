"""``--width`` and ``--order`` on Ray: the actors explore in priority order, a batch at a time, in step.

The driver's side of :mod:`distmc.distributed.priority_worker`. :class:`RayPriorityExplorer` has the interface of
the in-process :class:`~distmc.explore.priority.PriorityExplorer` (``grow``, ``snapshot``, ``save``), so
:func:`distmc.rounds.explore_in_rounds` runs either. Each batch takes the global top ``k`` frontier states (the
same ``k``, spread cut and tie-break as in-process) from the workers' own top ``k``: every state of the global top
``k`` is in its owner's top ``k``, and the spread cut's count is exact where it matters (it only lowers ``k``, and
a state within the spread missing from its owner's list means that owner alone has ``k`` of them). The batch is
then expanded by the level protocol of :mod:`distmc.distributed`, whose numbering by first occurrence is the
in-process one, and the mass is added by each owner in the in-process order. So the explored set, the ids, the
model and the bounds are those of the in-process run, for any number of workers (``tests/test_partial_ray.py``).

Each round's check gathers the explored part into the driver (the checks of :mod:`distmc.check.partial`, by Storm
or the native checker): a round's explored part is what the width needs, not the whole model. The workers keep
everything between rounds; a checkpoint (``--checkpoint-dir``) is the in-process one's file, written from here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from distmc.assemble.reducer import merge_csr_rows
from distmc.distributed.coordinator import _RayRun
from distmc.distributed.exchange import compact_rows, gather, owner_of
from distmc.distributed.pool import _WorkerLost
from distmc.errors import WorkerError
from distmc.explore.contracts import KeyCodec, WorkerJob
from distmc.explore.limits import LimitCheck, Limits, rss_bytes
from distmc.explore.partition import Explored
from distmc.explore.priority import GROWTH, MASS_RANK, SPREAD, load_arrays, save_arrays, saved_settings
from distmc.options import RaySettings

__all__ = ["RayPriorityExplorer"]


class _PriorityRun(_RayRun):
    """A run's actors for the priority explorer: a lost worker ends the run with one clear error."""

    def get(self, refs: Any) -> Any:
        try:
            return super().get(refs)
        except _WorkerLost as exc:
            raise WorkerError(
                f"a worker was lost ({exc}) in a --width/--order run; its states are lost with it. With "
                "--checkpoint-dir DIR every finished round is saved there: continue with --resume DIR"
            ) from None


class RayPriorityExplorer:
    """The explored part of one run on Ray actors, grown a budget at a time in ``order`` (``mass`` or ``bfs``)."""

    def __init__(
        self,
        job: WorkerJob,
        codec: KeyCodec,
        initial_keys: np.ndarray,
        where: RaySettings,
        order: str = "mass",
        batch_states: int = 20_000,
        rank: str | None = None,
        spread: float | None = None,
        saved: str | Path | None = None,
    ) -> None:
        os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
        import ray

        if not ray.is_initialized():
            address = where.address or os.environ.get("RAY_ADDRESS") or "local"
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        self.order, self.batch_states = order, batch_states
        self.rank = MASS_RANK if rank is None else rank
        self.spread = SPREAD if spread is None else float(spread)
        self.codec = codec
        # no limits inside the workers: the driver checks after every batch (a batch is small), so a limit stops
        # the run between batches, with its explored part whole
        self.run = _PriorityRun(ray, job, codec, where, batch_states, Limits(), None, None)
        t0 = time.perf_counter()
        self.run.spawn()
        self.startup_s = time.perf_counter() - t0
        self.n_expanded = self.transitions = self.policy_states = self.policy_calls = 0
        self.budget = 0
        self.rss: list[int] = []
        self.pushes: list[list[Any]] = []  # per source, per owner: the last batch's branches not added yet
        self.gathered: tuple[int, list[dict[str, Any]]] | None = None  # (n_expanded, the workers' results)
        if saved is not None:
            self._load(saved)
        else:
            uniq, first = np.unique(initial_keys, return_index=True)
            keys = uniq[np.argsort(first, kind="stable")]  # ids by first occurrence, as the visited set gives them
            self.n_initial = self.run.n = int(keys.shape[0])
            self._hand_out(keys, np.arange(keys.shape[0], dtype=np.int64), np.ones(keys.shape[0], dtype=bool))
            self.run.get([a.prio_start.remote(self.rank) for a in self.run.actors])

    @property
    def n_states(self) -> int:
        return int(self.run.n)

    @property
    def actors(self) -> list[Any]:
        return self.run.actors

    def _hand_out(self, keys: np.ndarray, gids: np.ndarray, frontier: np.ndarray) -> np.ndarray:
        owner = owner_of(self.codec.to_words(keys), self.run.workers)
        self.run.get(
            [
                a.restore.remote(keys[owner == o], gids[owner == o], frontier[owner == o])
                for o, a in enumerate(self.actors)
            ]
        )
        return owner

    # -- a batch ------------------------------------------------------------------------------------------------

    def _pick(self, k: int, horizon: int | None) -> list[np.ndarray] | None:
        """Per worker, the global ids of its states in the next batch (None: nothing left to expand)."""
        w = self.run.workers
        pushes, self.pushes = self.pushes, []  # the last batch's mass, added by each owner before it picks
        picks = self.run.get(
            [a.prio_pick.remote(k, self.order, self.spread, *[p[o] for p in pushes]) for o, a in enumerate(self.actors)]
        )
        total = sum(p["frontier"] for p in picks)
        score = np.concatenate([p["score"] for p in picks])
        gid = np.concatenate([p["gid"] for p in picks])
        depth = np.concatenate([p["depth"] for p in picks])
        tag = np.concatenate([np.full(p["gid"].shape[0], o, dtype=np.int64) for o, p in enumerate(picks)])
        if self.order == "mass" and total > 64:  # PriorityExplorer._pick: within spread of the top (at least 64)
            m = -score
            k = min(k, max(64, int(np.count_nonzero(m >= m.max() * self.spread))))
        top = np.lexsort((gid, score))[:k] if total > k else np.arange(gid.shape[0])
        gid, depth, tag = gid[top], depth[top], tag[top]
        if horizon is not None:
            keep = depth < horizon
            gid, tag = gid[keep], tag[keep]
        if gid.shape[0] == 0:
            return None
        self.n_expanded += int(gid.shape[0])
        return [np.sort(gid[tag == o]) for o in range(w)]

    def _settle(self) -> None:
        """Let the owners add the last batch's mass now (it is otherwise taken with the next pick)."""
        if self.pushes:
            pushes, self.pushes = self.pushes, []
            self.run.get([a.prio_absorb.remote(*[p[o] for p in pushes]) for o, a in enumerate(self.actors)])

    def _batch(self, picked: list[np.ndarray]) -> None:
        """Expand the picked states (the level protocol); the owners add the mass with the next pick."""
        run = self.run
        new, stored, self.pushes = run.exchange(picked)
        run.n += new
        self.transitions += sum(x["transitions"] for x in stored)
        self.policy_states += sum(x["policy_states"] for x in stored)
        self.policy_calls += sum(x["policy_calls"] for x in stored)
        self.rss = [int(x["rss"]) for x in stored]

    def grow(
        self,
        budget: int,
        check: LimitCheck | None = None,
        interrupted: Callable[[], str | None] | None = None,
        horizon: int | None = None,
    ) -> str | None:
        """Expand until more than ``budget`` states are found (or none is left); why it stopped early (as in-process)."""
        try:
            while self.n_states <= budget:
                picked = self._pick(min(self.batch_states, max(64, self.n_expanded // GROWTH)), horizon)
                if picked is None:
                    return None
                self._batch(picked)
                why = None if check is None else check.exceeded(states=0, memory=rss_bytes() + sum(self.rss))
                why = why or (interrupted() if interrupted is not None else None)
                if why is not None:
                    return why
            return None
        finally:
            self._settle()

    # -- out ----------------------------------------------------------------------------------------------------

    def snapshot(self) -> Explored:
        """The explored part gathered here, each frontier state one self-loop (``Explored.frontier``: their ids)."""
        results = self._results()
        self.gathered = None  # the check takes it from here: nothing of it stays in this explorer
        fronts = self.run.get([a.prio_frontier.remote() for a in self.actors])
        fids = np.sort(np.concatenate([f["gids"] for f in fronts]))  # [F]
        f = int(fids.shape[0])
        names = next((list(r["rewards"]) for r in results if r["counts"].shape[0]), [])
        loops = {
            "gids": fids[:0],
            "keys": results[0]["keys"][:0],
            "flag_gids": fids[:0],
            "loop": np.zeros(0, bool),
            "deadlock": np.zeros(0, bool),
            "row_state": fids,
            "row_action": np.full(f, -1, dtype=np.int64),
            "counts": np.ones(f, dtype=np.int64),
            "targets": [fids],
            "prob": [np.ones(f)],
            "chunk_rows": [f],
            "rewards": {k: np.zeros(f) for k in names},
        }  # each frontier state's self-loop
        out = gather([*results, loops], self.n_initial, merged=True)
        out.frontier = fids
        out.stats.update(
            {
                "depth": max(f["depth"] for f in fronts),
                "policy_states": self.policy_states,
                "policy_calls": self.policy_calls,
                "expanded": self.n_expanded,
                "startup_s": self.startup_s,
            }
        )
        out.worker_stats = [dict(r["stats"], pid=i["pid"]) for r, i in zip(results, self.run.info, strict=True)]
        return out

    def _results(self) -> list[dict[str, Any]]:
        """Every worker's states and rows (``result``), fetched once per round: ``save`` and ``snapshot`` share it."""
        if self.gathered is None or self.gathered[0] != self.n_expanded:
            self.gathered = (self.n_expanded, self.run.get([a.result.remote() for a in self.actors]))
        return self.gathered[1]

    def save(self, path: str | Path) -> None:
        """Write what was explored to ``path``: the in-process explorer's file (either driver resumes from it)."""
        ex = gather(self._results(), self.n_initial, merged=True)
        n = self.n_states
        mass, depth, expanded = np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
        for st in self.run.get([a.prio_state.remote() for a in self.actors]):
            mass[st["gids"]], depth[st["gids"]], expanded[st["gids"]] = st["mass"], st["depth"], st["expanded"]
        save_arrays(
            path,
            {
                "keys": ex.keys,
                "mass": mass,
                "depth": depth,
                "expanded": expanded,
                "loop": ex.loop,
                "deadlock": ex.deadlock,
                "initial": ex.initial,
                "src": ex.row_state,
                "action": ex.row_action,
                "counts": np.diff(ex.branch_offsets),
                "targets": np.concatenate(ex.target_chunks) if ex.target_chunks else np.zeros(0),
                "prob": np.concatenate(ex.prob_chunks) if ex.prob_chunks else np.zeros(0),
                **{f"reward:{k}": v for k, v in ex.rewards.items()},
                "counters": np.array(
                    [self.n_expanded, self.transitions, self.policy_states, self.budget], dtype=np.int64
                ),
                "order": np.array(self.order),
                "rank": np.array(self.rank),
                "spread": np.array(self.spread),
            },
        )

    def _load(self, path: str | Path) -> None:
        """Go on from a saved explorer (:meth:`save`, or the in-process one's): each worker takes its states."""
        d = load_arrays(path)
        self.order, self.rank, self.spread = saved_settings(d)
        keys = d["keys"]
        n = keys.shape[0]
        gids = np.arange(n, dtype=np.int64)
        self.n_initial = int(d["initial"].shape[0])
        self.run.n = n
        owner = self._hand_out(keys, gids, ~d["expanded"])
        src, counts = d["src"].astype(np.int64), d["counts"].astype(np.int64)
        row_owner = owner[src]
        rewards = {k.split(":", 1)[1]: v for k, v in d.items() if k.startswith("reward:")}
        loads = []
        for o, a in enumerate(self.actors):
            rows = row_owner == o
            branch = np.repeat(rows, counts)  # the branches of its rows
            mine = np.flatnonzero(owner == o)
            done = mine[d["expanded"][mine]]
            offsets = np.zeros(int(rows.sum()) + 1, dtype=np.int64)
            np.cumsum(counts[rows], out=offsets[1:])
            # merged as the workers keep their rows (the in-process explorer's file holds them unmerged)
            offsets, target, prob = merge_csr_rows(offsets, d["targets"][branch].astype(np.int64), d["prob"][branch])
            loads.append(
                a.prio_load.remote(
                    d["mass"][mine],
                    d["depth"][mine],
                    d["expanded"][mine],
                    self.rank,
                    (src[rows], d["action"][rows].astype(np.int64), np.diff(offsets), *compact_rows(target, prob)),
                    {k: v[rows] for k, v in rewards.items()},
                    (done, d["loop"][done], d["deadlock"][done]),
                )
            )
        self.run.get(loads)
        self.n_expanded, self.transitions, self.policy_states, self.budget = (int(x) for x in d["counters"])

    def close(self, ok: bool) -> None:
        """End the run: keep the actors for a next run when it went well, else end them."""
        if ok:
            self.run.keep()
        else:
            self.run.kill()
