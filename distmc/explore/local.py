"""The in-process driver (one partition, the embedded default): level-synchronous breadth-first search."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from distmc.errors import ResourceLimitError
from distmc.explore.expander import Expander
from distmc.explore.partition import Explored, Partition

__all__ = ["explore_local"]

#: States per expansion batch (large enough to amortise numpy call overhead, small enough to bound memory).
BATCH_STATES = 20_000


def explore_local(
    expander: Expander,
    initial_keys: np.ndarray,
    *,
    batch_states: int = BATCH_STATES,
    max_states: int | None = None,
    progress: Callable[[dict[str, float]], None] | None = None,
) -> Explored:
    """Explore from ``initial_keys`` ``[I]`` to the fixpoint; states are numbered in BFS discovery order."""
    part = Partition(expander, expander.codec.dtype)
    initial = part.resolve(initial_keys)
    depth = 0
    t0 = time.perf_counter()
    while part.frontier_size:
        ids, keys = part.take_level()
        for start in range(0, ids.shape[0], batch_states):
            bids, bkeys = ids[start : start + batch_states], keys[start : start + batch_states]
            rows = part.expand(bkeys)
            part.store(bids, rows, part.resolve(rows.target_keys))
            if max_states is not None and part.visited.size > max_states:
                raise ResourceLimitError(
                    f"exploration passed --max-states {max_states} at depth {depth} "
                    f"({part.visited.size} states, {part.transitions} transitions, frontier {part.frontier_size})"
                )
        depth += 1
        if progress is not None:
            progress({"depth": depth, "states": part.visited.size, "frontier": part.frontier_size,
                      "transitions": part.transitions, "elapsed_s": time.perf_counter() - t0})
    out = part.result(np.unique(initial))
    out.stats.update({"depth": depth, "policy_states": part.policy_states,
                      "policy_calls": int(getattr(expander.policy, "forward_passes", 0))})
    return out
