"""What a partition actor hands the driver: its rows level by level, its states and statistics at the end.

:meth:`~PartitionOutput.take` hands over the rows kept since the last call, :meth:`~PartitionOutput.result` the
partition's states, the rows not taken yet and its statistics.

:class:`PartitionOutput` is a mixin of :class:`~distmc.distributed.actor.PartitionActor`; the attributes it reads
are the actor's (declared below, set by its ``setup``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from distmc.check.kernels import prob_nbytes
from distmc.explore.contracts import SuccessorGenerator
from distmc.explore.expander import policy_counters
from distmc.explore.limits import peak_rss_bytes, rss_bytes
from distmc.explore.visited import VisitedSet

__all__ = ["PartitionOutput"]


class PartitionOutput:
    """The output methods of a partition actor; the attributes are the actor's."""

    visited: VisitedSet
    gids: np.ndarray
    cache: VisitedSet
    cache_gids: np.ndarray
    rows: list[tuple[np.ndarray, ...]]
    rewards: list[dict[str, np.ndarray]]
    flags: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    shipped_transitions: int
    shipped_bytes: int
    stats: dict[str, Any]
    expander: SuccessorGenerator
    policy_s0: float

    if TYPE_CHECKING:

        def _lap(self, phase: str) -> None: ...  # the WorkerCheck side's

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
        return sum(sum(int(a.nbytes) for a in r[:4]) + prob_nbytes(r[4]) for r in self.rows) + sum(
            sum(int(a.nbytes) for a in d.values()) for d in self.rewards
        )

    def _rows_out(self) -> dict[str, Any]:
        cat = np.concatenate
        return {
            "row_state": cat([r[0] for r in self.rows]) if self.rows else np.zeros(0, dtype=np.int64),
            "row_action": cat([r[1] for r in self.rows]) if self.rows else np.zeros(0, dtype=np.int64),
            "counts": cat([r[2] for r in self.rows]) if self.rows else np.zeros(0, dtype=np.int64),
            # the branches stay in the batches' chunks, compact (the driver widens them: exchange._chunks)
            "targets": [r[3] for r in self.rows],
            "prob": [r[4] for r in self.rows],
            "chunk_rows": [int(r[2].shape[0]) for r in self.rows],
            "rewards": {n: cat([r[n] for r in self.rewards]) for n in (self.rewards[0] if self.rewards else {})},
        }

    def result(self, rows: bool = True) -> dict[str, Any]:
        """The partition's states and the rows not taken yet (with ``rows=False``, its statistics only)."""
        self._lap("explore")
        self.stats.update(
            states=self.visited.size,
            transitions=self.shipped_transitions + sum(int(r[3].shape[0]) for r in self.rows),
            state_bytes=self.visited.nbytes + self.gids.nbytes,  # visited set + global ids, what a state costs
            cache_bytes=self.cache.nbytes + self.cache_gids.nbytes,
            # every row this partition built (also those handed over level by level), and its states' flags
            row_bytes=self.shipped_bytes + self._row_bytes() + sum(sum(int(a.nbytes) for a in f) for f in self.flags),
            rss=rss_bytes(),
            policy_s=policy_counters(self.expander)[1] - self.policy_s0,
            peak_rss=peak_rss_bytes(),
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
