"""When the Ray driver's level loop stops, or goes on without waiting: a mixin of its run (``_RayRun``).

After every level the driver judges the limits (``--max-states``, ``--max-memory``, ``--timeout``) and stops before
a level that would pass them, so that the explored part stays whole; and it asks the workers to expand the next
level together with this level's store when nothing can stop the run before it (:meth:`LevelStops.goes_on`).
"""

from __future__ import annotations

import time
from typing import Any

from distmc.explore.limits import Limits

__all__ = ["LevelStops"]


class LevelStops:
    """The level loop's decisions, on the run's counts (set by the run: see ``_RayRun``)."""

    limits: Limits
    horizon: int | None
    depth: int  # levels done
    n: int  # states found
    frontier: int  # states of the last level, to expand next
    workers: int
    start: float  # time.time() at the run's start
    level_rss: list[int]  # each worker's memory after the last level
    level_t: float  # when the last level ended (time.time())

    def goes_on(self, new: int) -> bool:
        """Whether the level after this one (which found ``new`` states) surely runs, before this one is stored.

        Surely: it has states to expand, is within the horizon, and no limit waits on the store's counts (memory
        and time are judged from them; a state limit is judged here). Only Ctrl-C can then stop the run before it,
        and :meth:`run` takes that expansion back (:meth:`PartitionActor.unexpand`).
        """
        lim = self.limits
        return (
            new > 0
            and (self.horizon is None or self.depth + 1 < self.horizon)
            and lim.max_memory is None
            and lim.timeout is None
            and (lim.max_states is None or self.n + new <= lim.max_states)
        )

    def next_level_too_big(self, stored: list[dict[str, Any]], expanded: int) -> str | None:
        """Why the next level would pass ``--max-memory`` or ``--timeout`` (None: it should not).

        The next level expands ``frontier`` states where this one expanded ``expanded``: its growth in each
        worker's memory and in time is predicted as this level's, scaled by that ratio. Stopping before it keeps
        the run's explored part whole (a worker that passes its share inside a level ends the run, unchecked).
        """
        now = time.time()
        rss = [int(x["rss"]) for x in stored]
        prev_rss, prev_t = self.level_rss, self.level_t
        self.level_rss, self.level_t = rss, now
        if not prev_rss:  # the first level (of this start): nothing to scale yet
            return None
        ratio = self.frontier / max(expanded, 1)
        lim = self.limits
        if lim.max_memory is not None and len(prev_rss) == len(rss):
            share = lim.max_memory / self.workers
            worst = max(r + max(r - p, 0) * ratio for r, p in zip(rss, prev_rss, strict=True))
            if worst > share:
                return (
                    f"passed --max-memory: the next level would need about {worst / 2**20:.0f} MiB in a worker "
                    f"(its share {share / 2**20:.0f} MiB)"
                )
        if lim.timeout is not None and now - self.start + (now - prev_t) * ratio > lim.timeout:
            return f"passed --timeout {lim.timeout:g} s: the next level would end after it"
        return None
