"""The in-process driver (one partition, the embedded default): level-synchronous breadth-first search."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np

from distmc.explore.contracts import SuccessorGenerator
from distmc.explore.expander import policy_counters
from distmc.explore.limits import Interrupt, LimitCheck, Limits, rss_bytes
from distmc.explore.partition import Explored, Partition

__all__ = ["explore_local"]

log = logging.getLogger("distmc.local")

#: States per expansion batch (large enough to amortise numpy call overhead, small enough to bound memory).
BATCH_STATES = 20_000


def explore_local(
    expander: SuccessorGenerator,
    initial_keys: np.ndarray,
    *,
    batch_states: int = BATCH_STATES,
    limits: Limits | None = None,
    progress: Callable[[dict[str, float]], None] | None = None,
    before_level: Callable[[int], None] | None = None,
    horizon: int | None = None,
) -> Explored:
    """Explore from ``initial_keys`` ``[I]`` to the fixpoint; states are numbered in BFS discovery order.

    A passed limit stops the exploration: ``--max-states`` (and Ctrl-C) at the end of the level it was passed in,
    as the Ray driver does (so the explored part is the same for any worker count), time and memory after the
    batch. The states not expanded then are the ids from ``stats["expanded"]`` on (the frontier), and
    ``stats["stopped"]`` says why. The states
    at depth ``horizon`` are not expanded (the horizon cut of step-bounded properties; ``stats["horizon"]``).

    Args:
        expander: the expansion step.
        initial_keys: ``[I]`` packed initial states.
        batch_states: states per expansion batch.
        limits: checked after every batch (:class:`~distmc.errors.ResourceLimitError` with a partial report).
        progress: called after every level with depth, states, frontier, transitions, policy states, elapsed.
        before_level: called with the depth (0 for the initial states) before each level is expanded, so that an
            expander can change what it does per level (the box abstraction's horizon cut-off).
        horizon: expand the levels ``0 .. horizon - 1`` only (None: to the fixpoint).
    """
    check = LimitCheck(limits or Limits())
    part = Partition(expander, expander.codec.dtype)
    initial = part.resolve(initial_keys)
    depth = expanded = 0
    stopped: str | None = None
    t0 = time.perf_counter()
    with Interrupt() as interrupt:
        while part.frontier_size and stopped is None and (horizon is None or depth < horizon):
            ids, keys = part.take_level()
            if before_level is not None:
                before_level(depth)
            for start in range(0, ids.shape[0], batch_states):
                bids, bkeys = ids[start : start + batch_states], keys[start : start + batch_states]
                rows = part.expand(bkeys)
                part.store(bids, rows, part.resolve(rows.target_keys))
                expanded = int(bids[-1]) + 1
                # time and memory stop now; a state count (or Ctrl-C) at the level's end, as the Ray driver does,
                # so that the explored set does not depend on the batch size or the number of workers
                stopped = check.exceeded(memory=None)
                if stopped is not None:
                    break
            depth += 1
            stopped = stopped or check.exceeded(states=part.visited.size) or interrupt.why
            info = {
                "depth": depth,
                "states": part.visited.size,
                "frontier": part.frontier_size,
                "transitions": part.transitions,
                "policy_states": part.policy_states,
                "policy_calls": policy_counters(expander)[0],
                "memory": rss_bytes(),
                "elapsed_s": time.perf_counter() - t0,
            }
            log.info(
                "level depth=%d states=%d frontier=%d transitions=%d memory=%d",
                depth,
                info["states"],
                info["frontier"],
                info["transitions"],
                info["memory"],
            )
            if progress is not None:
                progress(info)
    out = part.result(np.unique(initial))
    calls, seconds = policy_counters(expander)
    out.stats.update({"depth": depth, "policy_states": part.policy_states, "policy_calls": calls, "policy_s": seconds})
    if expanded < out.n_states:  # stopped by a limit, or cut at the horizon: the frontier is the ids from here on
        out.stats["expanded"] = expanded
        if stopped is not None:
            out.stats["stopped"] = stopped
        if horizon is not None:
            out.stats["horizon"] = horizon
    return out
