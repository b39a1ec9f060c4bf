"""The priority side of a partition actor: its frontier's mass and depth, for ``--width`` / ``--order`` on Ray.

:class:`PriorityWorker` is a mixin of :class:`~distmc.distributed.actor.PartitionActor`. With it the actors explore
in the order of :mod:`distmc.explore.priority` (mass first, or breadth first a batch at a time) instead of level by
level, and explore the same states as the in-process :class:`~distmc.explore.priority.PriorityExplorer`, with the
same ids, for any number of workers (:mod:`distmc.distributed.priority`, the driver's side, says how). One batch:

1. ``prio_pick``: each worker's own frontier states of highest rank, at most ``k`` (rank, global id, depth);
   the driver merges them into the global top ``k`` (with the spread cut), exactly the in-process pick;
2. ``prio_select``: each worker takes its own picked states as the states to expand;
3. the level protocol (``expand``, ``lookup``, ``answer``, ``store``): successors numbered by first occurrence;
   ``store`` also notes, per branch, what the source hands on: its owner, the target's global id, the branch's
   first-occurrence code (source global id, branch index), the mass and the depth;
4. ``prio_push`` / ``prio_absorb``: each owner adds the mass its states got in the order of the branches' codes,
   which is the order in which the in-process explorer adds them (``np.add.at`` over a batch's branches: sources
   by id, then branches): the same bits. Depth (a minimum) and the most likely path (a maximum) need no order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from distmc.distributed.exchange import OCC_SHIFT
from distmc.explore.contracts import Rows
from distmc.explore.visited import VisitedSet

__all__ = ["PriorityWorker"]

_UNSEEN_DEPTH = np.iinfo(np.int64).max


class PriorityWorker:
    """The priority methods of a partition actor; the attributes are the actor's (set by its ``setup``)."""

    visited: VisitedSet
    gids: np.ndarray
    workers: int
    rank: int
    codec: Any
    frontier: tuple[np.ndarray, np.ndarray]
    flags: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    stats: dict[str, Any]
    prio_rank: str | None  # this run's rank (None: a level-by-level run)
    rows: list[tuple[np.ndarray, ...]]
    rewards: list[dict[str, np.ndarray]]
    expand: Callable[[], Any]  # the level protocol (PartitionActor)
    store: Callable[..., dict[str, int]]

    def prio_start(self, rank_kind: str) -> None:
        """Start the priority arrays: every state held now is an initial state (mass 1, depth 0)."""
        n = self.visited.size
        self.prio_rank = rank_kind
        self.mass = np.ones(n)  # [N_local] the rank's mass (distmc.explore.priority)
        self.depth = np.zeros(n, dtype=np.int64)  # [N_local] least depth found so far
        self.expanded = np.zeros(n, dtype=bool)  # [N_local]
        self.sel = (np.zeros(0), np.zeros(0, dtype=np.int64))  # the picked states' mass and depth, by gid
        self.pushes: list[tuple[np.ndarray, ...]] = []  # per batch: (owner, target gid, occ, mass, depth) a branch

    def _prio_size(self) -> None:
        n = self.visited.size
        if n > self.mass.shape[0]:
            cap = max(n, 2 * self.mass.shape[0])
            for name, fill in (("mass", 0.0), ("depth", _UNSEEN_DEPTH), ("expanded", False)):
                old = getattr(self, name)
                grown = np.full(cap, fill, dtype=old.dtype)
                grown[: old.shape[0]] = old
                setattr(self, name, grown)

    def _local(self, gids: np.ndarray) -> np.ndarray:
        """Local ids of own states given by global id (an owner numbers its states in increasing global id)."""
        own = self.gids[: self.visited.size]
        local = np.searchsorted(own, gids)
        if gids.shape[0] and (local.max() >= own.shape[0] or not np.array_equal(own[local], gids)):
            raise AssertionError("a global id that this worker does not own, or its ids are out of order")
        return local

    def prio_pick(self, k: int, order: str, spread: float, *pushes: tuple[np.ndarray, ...]) -> dict[str, Any]:
        """This worker's ``k`` frontier states of highest rank: ``score`` (lower first), ``gid``, ``depth``.

        Mass first, no more than the states within ``spread`` of this worker's highest mass (but 64): the
        frontier's highest is at least as high, so the driver's spread cut drops the others anyway, unless fewer
        than 64 pass it, and those 64 are each in their owner's 64. ``pushes``: the last batch's branches into
        this worker's states, from every source (:meth:`prio_absorb` takes them first).

        Mass first the score is minus the mass, breadth first the depth; ties go to the smaller global id, as
        in :meth:`~distmc.explore.priority.PriorityExplorer._pick`. Also ``frontier``: this worker's number of
        states not expanded.
        """
        if pushes:
            self.prio_absorb(*pushes)
        self._prio_size()
        n = self.visited.size
        f = np.flatnonzero(~self.expanded[:n])
        frontier = int(f.shape[0])
        score = -self.mass[f] if order == "mass" else self.depth[f].astype(np.float64)
        gid = self.gids[f]
        if order == "mass" and f.shape[0] > 64:
            k = min(k, max(64, int(np.count_nonzero(score <= score.min() * spread))))  # mass >= top * spread
        if f.shape[0] > k:
            cut = np.partition(score, k - 1)[k - 1]
            keep = score <= cut
            f, score, gid = f[keep], score[keep], gid[keep]
        top = np.lexsort((gid, score))[:k]
        return {"score": score[top], "gid": gid[top], "depth": self.depth[f[top]], "frontier": frontier}

    def prio_select(self, gids: np.ndarray) -> None:
        """Expand the own states ``gids`` (increasing) in the next batch."""
        local = self._local(gids)
        self.frontier = (gids, self.visited.keys_by_id()[local])
        self.sel = (self.mass[local].copy(), self.depth[local].copy())
        self.expanded[local] = True
        self.pushes = []

    def prio_expand(self, gids: np.ndarray) -> Any:
        """:meth:`prio_select`, then the level protocol's ``expand``."""
        self.prio_select(gids)
        return self.expand()

    def prio_store(self, *answers: tuple[int, np.ndarray]) -> list[Any]:
        """The level protocol's ``store`` (its counts first), then :meth:`prio_push`'s ``W`` parts."""
        stored = self.store(*answers)
        push = self.prio_push()
        return [stored, *(push if self.workers > 1 else [push])]

    def prio_note(self, start: int, rows: Rows, bg: np.ndarray, target: np.ndarray, towner: np.ndarray) -> None:
        """``store``'s hook: what each branch of a batch (the selected states ``start ..``) hands on to its target.

        ``bg``: the batch's sources (global ids), ``target``: each branch's target (global id), ``towner``: its owner.
        """
        counts = np.diff(rows.branch_offsets)  # [R]
        m, d = self.sel[0][start : start + bg.shape[0]], self.sel[1][start : start + bg.shape[0]]
        if self.prio_rank == "path":
            value = np.repeat(m[rows.row_state], counts) * rows.prob
        else:  # as PriorityExplorer._expand: the mass split over the source's rows, then by branch probability
            per_row = 1.0 / np.bincount(rows.row_state)[rows.row_state]  # [R]
            value = np.repeat(m[rows.row_state] * per_row, counts) * rows.prob
        branch_src = np.repeat(rows.row_state, counts)  # [T] the batch's state of each branch
        # each source's first branch (its rows are contiguous, sources in batch order): the branch's index in it
        first = (rows.branch_offsets - rows.branch_offsets[0])[np.searchsorted(rows.row_state, np.arange(bg.shape[0]))]
        occ = (bg[branch_src] << OCC_SHIFT) + (np.arange(target.shape[0], dtype=np.int64) - first[branch_src])
        depth = d[branch_src] + 1
        self.pushes.append((towner, target.copy(), occ, value, depth))  # store's _keep then sorts it in place

    def prio_push(self) -> Any:
        """Per owner: the batch's branches into its states (target gid, occurrence code, mass, depth)."""
        cat = np.concatenate
        parts = self.pushes
        self.pushes = []
        if parts:
            towner, target, occ, value, depth = (cat([p[i] for p in parts]) for i in range(5))
        else:
            towner = target = occ = depth = np.zeros(0, dtype=np.int64)
            value = np.zeros(0)
        out = []
        for o in range(self.workers):
            sel = np.flatnonzero(towner == o)
            out.append((target[sel], occ[sel], value[sel], depth[sel]))
            if o != self.rank:
                self.stats["bytes_push"] = self.stats.get("bytes_push", 0) + int(sel.shape[0]) * 32
        return out if self.workers > 1 else out[0]

    def prio_absorb(self, *pushes: tuple[np.ndarray, ...]) -> None:
        """Owner side: add the mass of every source's branches into own states, in the branches' order."""
        self._prio_size()
        target = np.concatenate([p[0] for p in pushes])
        occ = np.concatenate([p[1] for p in pushes])
        value = np.concatenate([p[2] for p in pushes])
        depth = np.concatenate([p[3] for p in pushes])
        order = np.argsort(occ, kind="stable")  # the in-process order of the branches (codes are distinct)
        local = self._local(target[order]) if target.shape[0] else target
        if self.prio_rank == "path":
            np.maximum.at(self.mass, local, value[order])
        else:
            np.add.at(self.mass, local, value[order])
        np.minimum.at(self.depth, local, depth[order])

    def prio_load(
        self,
        mass: np.ndarray,
        depth: np.ndarray,
        expanded: np.ndarray,
        rank_kind: str,
        rows: tuple[Any, ...],
        rewards: dict[str, np.ndarray],
        flags: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> None:
        """After ``restore`` of a saved priority run: the own states' priority arrays, rows and flags.

        ``mass``, ``depth``, ``expanded``: in the order ``restore`` took the states (increasing global id); the
        rows and flags are those of the own expanded states.
        """
        self.prio_start(rank_kind)
        n = self.visited.size
        self.mass[:n], self.depth[:n], self.expanded[:n] = mass, depth, expanded
        if rows[0].shape[0]:
            self.rows.append(rows)
            self.rewards.append(rewards)
        if flags[0].shape[0]:
            self.flags.append(flags)

    def prio_frontier(self) -> dict[str, Any]:
        """The global ids of the own states not expanded (increasing), and the deepest depth reached here."""
        n = self.visited.size
        self._prio_size()
        d = self.depth[:n]
        return {"gids": self.gids[:n][~self.expanded[:n]], "depth": int(d[d != _UNSEEN_DEPTH].max(initial=0))}

    def prio_state(self) -> dict[str, Any]:
        """Everything a checkpoint of the priority run holds of this worker (by global id)."""
        n = self.visited.size
        self._prio_size()
        return {"gids": self.gids[:n], "mass": self.mass[:n], "depth": self.depth[:n], "expanded": self.expanded[:n]}
