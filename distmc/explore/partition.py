"""A partition: the states it owns (visited set), its frontier, and its transition buffer.

This is the seam between the explorer and its drivers. The in-process driver (:mod:`distmc.explore.local`)
runs one partition that owns every state; a distributed driver runs one partition per worker and routes every
successor key to the partition that owns it (``owner = hash(key) mod W``), which answers with its local id, so
that the reducer can number states globally with prefix offsets over the partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from distmc.explore.contracts import Rows, SuccessorGenerator
from distmc.explore.visited import VisitedSet

__all__ = ["Explored", "Partition"]

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class Explored:
    """What a partition hands to the reducer (ids are the partition's local ids).

    Attributes:
        keys: ``[N]`` packed keys in id order.
        loop: ``[N]`` bool, terminal or deadlock (self-loop, zero rewards, as in Storm).
        deadlock: ``[N]`` bool.
        row_state: ``[R]`` int64 source id of each row, non-decreasing.
        row_action: ``[R]`` int64.
        branch_offsets: ``[R + 1]`` int64.
        target_chunks: the ``[T]`` int64 target ids, in chunks as the batches produced them (no row crosses a
            chunk; concatenating them would cost a copy of every transition).
        prob_chunks: the ``[T]`` float64 probabilities, chunked like ``target_chunks``.
        chunk_rows: ``[n_chunks]`` int64, rows per chunk.
        rewards: name -> ``[R]`` float64 action rewards.
        initial: ``[I]`` int64 ids of the initial states.
        merged: every row's branches are sorted by target with duplicates added up already (the Ray actors do it
            as they keep a batch, :func:`distmc._internal.jit.merge_rows`); else the reducer does it.
    """

    keys: np.ndarray
    loop: np.ndarray
    deadlock: np.ndarray
    row_state: np.ndarray
    row_action: np.ndarray
    branch_offsets: np.ndarray
    target_chunks: list[np.ndarray]
    prob_chunks: list[np.ndarray]
    chunk_rows: np.ndarray
    rewards: dict[str, np.ndarray]
    initial: np.ndarray
    stats: dict[str, float | str] = field(default_factory=dict)  # seconds and counts; "stopped": why (a sentence)
    worker_stats: list[dict[str, float]] = field(default_factory=list)  # per Ray actor (empty in-process)
    merged: bool = False
    frontier: np.ndarray | None = None  # [F] ids found but not expanded, each with one self-loop row (a partial run)

    @property
    def n_states(self) -> int:
        return int(self.keys.shape[0])


class Partition:
    """Owned states, frontier and transition buffer of one worker."""

    def __init__(self, expander: SuccessorGenerator, key_dtype: np.dtype) -> None:
        self.expander = expander
        self.visited = VisitedSet(key_dtype)
        self._frontier: list[np.ndarray] = []  # new keys not yet expanded, in id order
        self._frontier_start = 0  # id of the first frontier state
        self._expanded = 0  # states expanded so far (ids 0.._expanded-1)
        self._rows: list[tuple[np.ndarray, ...]] = []
        self._rewards: list[dict[str, np.ndarray]] = []
        self._loop: list[np.ndarray] = []
        self._deadlock: list[np.ndarray] = []
        self.transitions = 0
        self.policy_states = 0

    # -- owned states ------------------------------------------------------------------------------------------

    def resolve(self, keys: np.ndarray) -> np.ndarray:
        """Local ids of ``keys`` ``[K]`` (all owned by this partition); unseen ones join the frontier."""
        ids, new = self.visited.insert(keys)
        if new.shape[0]:
            self._frontier.append(new)
        return ids

    @property
    def frontier_size(self) -> int:
        return self.visited.size - self._expanded

    def take_level(self) -> tuple[np.ndarray, np.ndarray]:
        """Ids ``[F]`` and keys ``[F]`` of the whole current frontier (one BFS level)."""
        keys = np.concatenate(self._frontier) if self._frontier else np.zeros(0, dtype=self.visited.dtype)
        self._frontier = []
        ids = self._expanded + np.arange(keys.shape[0], dtype=np.int64)
        self._expanded += keys.shape[0]
        return ids, keys

    # -- expansion ---------------------------------------------------------------------------------------------

    def expand(self, keys: np.ndarray) -> Rows:
        """Rows for owned states ``keys`` (their successors' keys still to be resolved by their owners)."""
        rows = self.expander.expand(keys)
        self.policy_states += rows.policy_states
        return rows

    def store(self, ids: np.ndarray, rows: Rows, target_ids: np.ndarray) -> None:
        """Buffer the rows of owned states ``ids`` with resolved ``target_ids`` ``[T]``."""
        self._rows.append((ids[rows.row_state], rows.row_action, np.diff(rows.branch_offsets), target_ids, rows.prob))
        self._rewards.append(rows.rewards)
        self._loop.append(rows.terminal | rows.deadlock)
        self._deadlock.append(rows.deadlock)
        self.transitions += int(target_ids.shape[0])

    def result(self, initial: np.ndarray) -> Explored:
        """Hand the buffered rows over (the buffers are emptied: each chunk is freed as soon as it is copied)."""

        def cat(i: int, dtype: type) -> np.ndarray:
            total = sum(r[i].shape[0] for r in self._rows)
            out = np.empty(total, dtype=dtype)
            at = 0
            for j, r in enumerate(self._rows):
                out[at : at + r[i].shape[0]] = r[i]
                at += r[i].shape[0]
                self._rows[j] = (*r[:i], _EMPTY, *r[i + 1 :])  # free the chunk (no view of it may stay)
            return out

        names = list(self._rewards[0]) if self._rewards else []
        chunk_rows = np.array([r[1].shape[0] for r in self._rows], dtype=np.int64)
        row_state, row_action, counts = cat(0, np.int64), cat(1, np.int64), cat(2, np.int64)
        offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        del counts
        target_chunks = [r[3] for r in self._rows]
        prob_chunks = [r[4] for r in self._rows]
        self._rows = []
        return Explored(
            keys=self.visited.keys_by_id(),
            loop=np.concatenate(self._loop) if self._loop else np.zeros(0, dtype=bool),
            deadlock=np.concatenate(self._deadlock) if self._deadlock else np.zeros(0, dtype=bool),
            row_state=row_state,
            row_action=row_action,
            branch_offsets=offsets,
            target_chunks=target_chunks,
            prob_chunks=prob_chunks,
            chunk_rows=chunk_rows,
            rewards={n: np.concatenate([r[n] for r in self._rewards]) for n in names},
            initial=initial,
        )
