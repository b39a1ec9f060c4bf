"""A Ray run's entry point (:func:`explore_ray`) and its rows left on the actors (:class:`RayRows`).

The level loop itself is :class:`distmc.distributed.coordinator._RayRun`'s; see :mod:`distmc.distributed` for the
protocol of one level.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Literal, overload

import numpy as np

from distmc.check.checker import MAX_ITERATIONS
from distmc.check.result import Precision
from distmc.distributed.checkpoint import Checkpoint
from distmc.distributed.coordinator import _RayRun
from distmc.explore.contracts import KeyCodec, WorkerJob
from distmc.explore.limits import Limits
from distmc.explore.partition import Explored
from distmc.options import RaySettings

__all__ = ["RayRows", "explore_ray"]


class RayRows:
    """An explored model whose rows stay on the Ray actors: check it there, or gather it; then close it.

    Attributes:
        n_states, n_transitions, n_initial, depth: what the exploration found (``n_transitions`` counts a row's
            duplicate targets separately until :meth:`check` has merged rows' counts).
        stats: the run's counters and time split (as :attr:`Explored.stats`).
        worker_stats: per actor (as :attr:`Explored.worker_stats`), after :meth:`check` or :meth:`gather`.
    """

    def __init__(self, run: _RayRun, keep_workers: bool) -> None:
        self.run = run
        self.keep_workers = keep_workers
        self.n_states, self.n_transitions, self.n_initial, self.depth = run.n, run.transitions, run.n_initial, run.depth
        self.stats: dict[str, float] = {
            "depth": run.depth,
            "policy_states": run.policy_states,
            "policy_calls": run.policy_calls,
            "restarts": run.restarts,
            "startup_s": run.startup_s,
            "levels_s": run.levels_s,
            **run.frontier_stats(),
        }
        self.worker_stats: list[dict[str, Any]] = []
        self.closed = False

    def gather(self) -> Explored:
        """Every row to this process (the reducer's input), as :func:`explore_ray` returns without ``rows_stay``."""
        out = self.run.finish()
        self.worker_stats = out.worker_stats
        return out

    def check(
        self,
        precision: Precision | float,
        max_iterations: int = MAX_ITERATIONS,
        progress: Callable[[dict[str, Any]], None] | None = None,
        values_dir: str | None = None,
        partial: bool = False,
    ) -> dict[str, Any]:
        """Check the job's properties on the actors (:mod:`distmc.check.distributed`), on the one exploration.

        Returns ``checks``: per property, ``value``, ``lower``, ``upper`` (``[I]`` at the initial states, by
        global id); and the time split
        ``build_s`` (the workers' parts and the exchange plan) and ``check_s``. ``values_dir``: every worker also
        writes the value of each of its states there (``part-R.parquet``, :mod:`distmc.explain.values`), and
        ``at_risk`` lists the states most at risk over all workers. ``partial``: the exploration stopped before the
        fixpoint; the frontier's states get self-loops and both sides of each property's bounds are checked
        (``checks`` then hold :func:`distmc.check.partial.partial_values`'s ``lo_value``, ..., ``hi_upper``,
        ``reach`` and ``note``).
        """
        first = self.n_states - self.run.frontier if self.run.frontier else None  # stopped early, or a horizon cut
        out = self.run.check_on_workers(precision, max_iterations, progress, values_dir, first, partial)
        self.worker_stats = out.pop("worker_stats")
        # the transitions of the merged rows (the levels count them before duplicates are added up)
        self.n_transitions = int(sum(ws["check_transitions"] for ws in self.worker_stats))
        return out

    def close(self, ok: bool) -> None:
        """End the run: keep its actors for a next run (``ok`` and kept workers), else end them."""
        if self.closed:
            return
        self.closed = True
        if ok and self.keep_workers:
            self.run.keep()
        else:
            self.run.kill()


@overload
def explore_ray(
    job: WorkerJob,
    codec: KeyCodec,
    initial_keys: np.ndarray,
    where: RaySettings,
    *,
    batch_states: int = ...,
    limits: Limits | None = ...,
    checkpoint: Checkpoint | None = ...,
    progress: Callable[[dict[str, float]], None] | None = ...,
    max_restarts: int = ...,
    keep_workers: bool = ...,
    rows_stay: Literal[False] = ...,
    horizon: int | None = ...,
) -> Explored: ...


@overload
def explore_ray(
    job: WorkerJob,
    codec: KeyCodec,
    initial_keys: np.ndarray,
    where: RaySettings,
    *,
    batch_states: int = ...,
    limits: Limits | None = ...,
    checkpoint: Checkpoint | None = ...,
    progress: Callable[[dict[str, float]], None] | None = ...,
    max_restarts: int = ...,
    keep_workers: bool = ...,
    rows_stay: bool,
    horizon: int | None = ...,
) -> Explored | RayRows: ...


def explore_ray(
    job: WorkerJob,
    codec: KeyCodec,
    initial_keys: np.ndarray,
    where: RaySettings,
    *,
    batch_states: int = 20_000,
    limits: Limits | None = None,
    checkpoint: Checkpoint | None = None,
    progress: Callable[[dict[str, float]], None] | None = None,
    max_restarts: int = 3,
    keep_workers: bool = True,
    rows_stay: bool = False,
    horizon: int | None = None,
) -> Explored | RayRows:
    """Explore ``job`` on ``where.workers`` Ray actors; the same :class:`Explored` as the in-process driver gives.

    Args:
        job: what to explore; every actor builds its own parts from it.
        codec: the state packing (the driver's, for routing the initial states).
        initial_keys: ``[I]`` packed initial states.
        where: the actors (``workers``: how many, the partitions), the cluster and their resources:
            ``address``, a running Ray cluster (``auto`` or ``HOST:PORT``; None: the cluster in ``RAY_ADDRESS`` if
            set, else a new local Ray, unless this process is connected to one already); ``gpus_per_worker``, the
            GPU share each actor asks Ray for (:func:`gpu_share`; None: automatic); ``threads_per_worker``, the
            threads each actor keeps busy (None: the cluster's CPUs divided by the workers, at least one; so a lone
            actor on this machine uses every core, and W actors one core each when W >= cores);
            ``policy_servers``, 0: every actor loads its own policy replica; S > 0: S policy-server actors each
            load one (a GPU each where the cluster has them) and serve the workers' batches
            (:mod:`distmc.distributed.policy_server`).
        batch_states: states per expansion batch inside an actor.
        limits: once a limit is passed at the end of a level (or Ctrl-C), stop: the last level's new states are
            the frontier (``stats["expanded"]``, ``stats["stopped"]``, as :func:`~distmc.explore.local.explore_local`
            gives them); a worker that passes its share of ``--max-memory`` or the timeout inside a level stops the
            run with :class:`ResourceLimitError` (and a partial report).
        horizon: expand the levels ``0 .. horizon - 1`` only (the horizon cut; None: to the fixpoint).
        checkpoint: write every level to this checkpoint and, if it already holds levels, continue from the last
            one; a lost worker is then replaced (up to ``max_restarts`` times) and the run goes on.
        progress: called after every level (depth, states, frontier, transitions, policy states, memory, ...).
        max_restarts: how many worker losses a checkpointed run survives.
        keep_workers: after a successful run, keep the actors (emptied) for the next run of the same shape in
            this process, which then skips their start-up (:func:`release_workers` ends them); a failed run's
            actors always end.
        rows_stay: keep the rows on the actors (no row comes to this process during the run) and return a
            :class:`RayRows` instead of an :class:`Explored`: the caller then checks on the actors
            (:meth:`RayRows.check`) or gathers the rows (:meth:`RayRows.gather`), and closes it.
    """
    # A lost worker is handled here (recovery, or one clear error): Ray need not also print it as unhandled.
    os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    import ray

    if not ray.is_initialized():
        # No address: a Ray of our own (or RAY_ADDRESS's), never whichever cluster this machine started last, which
        # ray.init() would otherwise join (and which its owner may shut down in the middle of our run).
        address = where.address or os.environ.get("RAY_ADDRESS") or "local"
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    run = _RayRun(ray, job, codec, where, batch_states, limits or Limits(), checkpoint, progress, rows_stay)
    run.horizon = horizon
    try:
        if rows_stay:
            run.run(initial_keys, max_restarts, gather=False)
            return RayRows(run, keep_workers)
        out = run.run(initial_keys, max_restarts)
        assert out is not None  # gathered
    except BaseException:
        run.kill()
        raise
    if keep_workers:
        run.keep()
    else:
        run.kill()
    return out
