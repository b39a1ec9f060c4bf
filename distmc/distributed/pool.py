"""The actors of a Ray run: started with their share of the cluster, or taken from the last run; policy servers.

A finished run's actors are kept, emptied, for the next run of the same shape in this process (same Ray job, worker
count, resources and threads): a new actor costs its process, its imports and numba's start, a kept one only its
parts (:func:`release_workers` ends them). Calls to the actors go through :meth:`WorkerPool.get`, which turns a
lost worker into :class:`_WorkerLost` (recovery) and a worker's own error into itself.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from distmc._internal.jit import budget_env
from distmc.distributed.actor import PartitionActor
from distmc.distributed.checkpoint import Checkpoint
from distmc.distributed.setup import WorkerSetup, job_stamp
from distmc.errors import DistmcError, ResourceLimitError, UsageError, WorkerError
from distmc.explore.contracts import WorkerJob
from distmc.explore.limits import LimitCheck, Limits
from distmc.options import RaySettings, check_gpu_share
from distmc.pipeline import Job

__all__ = ["START_TIMEOUT_S", "WorkerPool", "gpu_share", "release_workers"]

log = logging.getLogger("distmc.ray")

#: How long the workers may take to start (build their model, kernel and policy) before the run gives up.
START_TIMEOUT_S = 300


def gpu_share(gpus: float, workers: int, requested: float | None = None) -> float:
    """The GPU share each worker asks Ray for, so that its policy replica runs on a GPU where the cluster has one.

    Automatic (``requested`` None): no GPU, 0; else the cluster's GPUs split evenly over the workers, at most one
    each (fractional ``num_gpus``: several workers, each with its own replica, share a GPU, and Ray places them on
    the GPU nodes). ``requested`` overrides it (0 keeps every replica on the CPU).
    """
    if requested is not None:
        check_gpu_share(requested)
        return float(requested)
    if gpus <= 0:
        return 0.0
    return min(1.0, gpus / workers)


#: The actors of the last finished run, kept idle for the next run of the same shape (same Ray job, worker count,
#: resources and threads): a new actor costs its process, its imports and numba's start, a kept one only its parts.
#: Its policy servers (``"servers"``) are kept for a next run of the same job with files of the same content.
_kept: dict[str, tuple[tuple[Any, ...], list[Any]]] = {}


def release_workers() -> None:
    """End the actors kept from the last run (they also end with this process, or with ``ray.shutdown()``)."""
    for what in ("run", "servers"):
        kept = _kept.pop(what, None)
        if kept is not None:
            _kill(kept[1])


def _kill(actors: list[Any]) -> None:
    import ray

    for a in actors:
        try:
            ray.kill(a)
        except Exception:  # noqa: BLE001 - already gone, or its Ray session has ended
            pass


class _WorkerLost(Exception):
    """A worker's process or node is gone (Ray lost the actor or an object it held)."""


class WorkerPool:
    """The actors (and policy servers) of one run, and how far the run got (for the errors :meth:`get` raises)."""

    def __init__(
        self,
        ray: Any,
        job: WorkerJob,
        where: RaySettings,
        batch_states: int,
        limits: Limits,
        checkpoint: Checkpoint | None,
    ) -> None:
        self.ray, self.job, self.workers = ray, job, where.workers
        self.policy_servers = where.policy_servers
        self.servers: list[Any] = []
        self.servers_key: tuple[Any, ...] = ()
        self.gpus_per_worker, self.threads_per_worker = where.gpus_per_worker, where.threads_per_worker
        self.batch_states, self.limits, self.ckpt = batch_states, limits, checkpoint
        self.start = time.time()
        self.check = LimitCheck(limits, self.start)
        self.actors: list[Any] = []
        self.info: list[dict[str, Any]] = []
        self.key: tuple[Any, ...] = ()  # what a kept actor must match to be reused
        self.n = self.depth = self.transitions = self.frontier = 0  # states, levels, transitions, frontier so far
        self.checking = False  # the distributed check runs (errors say so)

    # -- actors ------------------------------------------------------------------------------------------------

    def spawn(self) -> None:
        # One CPU per actor when the cluster has them (so Ray spreads the actors over its nodes); none when there
        # are more actors than CPUs, which is allowed (the scaling experiment oversubscribes on purpose).
        ray, w = self.ray, self.workers
        # CPUs of the nodes alive now (after a lost node, the cluster's totals may still count it for a while)
        alive = [n for n in ray.nodes() if n.get("Alive")]
        cpus = int(sum(n["Resources"].get("CPU", 0) for n in alive) or 1)
        gpus = float(sum(n["Resources"].get("GPU", 0) for n in alive))
        threads = self.threads_per_worker or max(1, cpus // w)
        opts: dict[str, Any] = {"num_cpus": 1 if cpus >= w else 0, "scheduling_strategy": "SPREAD"}
        served = self.start_servers(gpus)
        share = 0.0 if served else gpu_share(gpus, w, self.gpus_per_worker)  # served workers load no network
        if share:
            opts["num_gpus"] = share
        ckdir = None if self.ckpt is None else str(self.ckpt.directory)
        self.key = (ray.get_runtime_context().get_job_id(), w, threads, repr(sorted(opts.items())), len(served))
        if self.reuse(ckdir, served):
            return
        # "mail": the peers' messages of a distributed check, taken while the check runs in the default group.
        # The thread budget: the worker's process starts with its compute pools sized to it (budget_env).
        actor_cls = ray.remote(concurrency_groups={"mail": 1}, runtime_env={"env_vars": budget_env(threads)}, **opts)(
            PartitionActor
        )
        self.actors = [actor_cls.remote(self.job, self.setup_of(r, ckdir, served), threads) for r in range(w)]
        self.info = self.started([a.ready.remote() for a in self.actors], f"the {w} workers", "a worker")

    def setup_of(self, rank: int, ckdir: str | None, served: list[tuple[Any, dict[str, Any]]]) -> WorkerSetup:
        """Worker ``rank``'s place and settings (its policy server: the servers taken in turn)."""
        return WorkerSetup(
            rank,
            self.workers,
            self.batch_states,
            ckdir,
            self.limits,
            self.start,
            served[rank % len(served)] if served else None,
        )

    def start_servers(self, gpus: float) -> list[tuple[Any, dict[str, Any]]]:
        """Start this run's policy servers (none unless ``policy_servers``); (handle, description) of each."""
        from distmc.distributed.policy_server import PolicyServer

        self.kill_servers()
        s = self.policy_servers
        kept = _kept.pop("servers", None)
        if not s:
            if kept is not None:
                _kill(kept[1])
            return []
        opts: dict[str, Any] = {"num_cpus": 0, "scheduling_strategy": "SPREAD"}  # mostly waiting, or on the GPU
        share = gpu_share(gpus, s, self.gpus_per_worker)
        if share:
            opts["num_gpus"] = share
        stamp = job_stamp(self.job)
        self.servers_key = (self.ray.get_runtime_context().get_job_id(), s, repr(sorted(opts.items())), stamp)
        if kept is not None and stamp is not None and kept[0] == self.servers_key:
            try:  # the last run's servers, with the same policy loaded
                infos = self.ray.get([x.describe.remote() for x in kept[1]], timeout=START_TIMEOUT_S)
                self.servers = kept[1]
                return list(zip(self.servers, infos, strict=True))
            except Exception:  # noqa: BLE001 - lost: new ones say why if they cannot start
                log.info("kept policy servers not reusable; starting new ones")
        if kept is not None:
            _kill(kept[1])
        if not isinstance(self.job, Job):
            raise UsageError("policy servers run a PRISM model's policy: the box abstraction has none")
        self.servers = [self.ray.remote(**opts)(PolicyServer).remote(self.job) for _ in range(s)]
        infos = self.started([x.describe.remote() for x in self.servers], f"the {s} policy servers", "a policy server")
        return list(zip(self.servers, infos, strict=True))

    def started(self, refs: list[Any], all_of: str, one: str) -> list[Any]:
        """The answers of newly started actors, or one clear error (resources missing, or the actor's own)."""
        ray = self.ray
        try:
            return list(ray.get(refs, timeout=START_TIMEOUT_S))
        except ray.exceptions.GetTimeoutError:
            raise WorkerError(
                f"{all_of} did not all start within {START_TIMEOUT_S} s: the cluster lacks the "
                f"resources for them (see `ray status`)"
            ) from None
        except Exception as exc:  # an actor failed to build its parts: report the cause, not Ray's wrapper
            cause = getattr(exc, "cause", None) or exc
            if isinstance(cause, DistmcError):
                raise cause from None
            raise WorkerError(f"{one} could not start: {type(cause).__name__}: {cause}") from exc

    def kill_servers(self) -> None:
        _kill(self.servers)
        self.servers = []

    def reuse(self, ckdir: str | None, served: list[tuple[Any, dict[str, Any]]]) -> bool:
        """Take the kept actors if they have this run's shape and answer (else end them); True if taken."""
        kept = _kept.pop("run", None)
        if kept is None:
            return False
        key, actors = kept
        if key == self.key:
            ray = self.ray
            try:
                ray.get(
                    [a.setup.remote(self.job, self.setup_of(r, ckdir, served)) for r, a in enumerate(actors)],
                    timeout=START_TIMEOUT_S,
                )
                self.info = ray.get([a.ready.remote() for a in actors], timeout=START_TIMEOUT_S)
                self.actors = actors
                return True
            except Exception:  # noqa: BLE001 - lost, or its parts fail to build: new actors say why
                log.info("kept workers not reusable; starting new ones")
        _kill(actors)
        return False

    def keep(self) -> None:
        """Empty the actors and keep them for the next run (:func:`release_workers`)."""
        for a in self.actors:
            a.release.remote()
        _kept["run"] = (self.key, self.actors)
        self.actors = []
        if self.servers:  # for a next run of the same job (another job starts its own)
            _kept["servers"] = (self.servers_key, self.servers)
            self.servers = []

    def kill(self) -> None:
        _kill(self.actors)
        self.actors = []
        self.kill_servers()

    def get(self, refs: Any) -> Any:
        """``ray.get``, with a lost worker as :class:`_WorkerLost` and a worker's own error as itself."""
        ray = self.ray
        try:
            return ray.get(refs)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, ResourceLimitError) and self.checking:
                raise ResourceLimitError(
                    f"{cause}; the model ({self.n} states, {self.transitions} transitions) was explored but not "
                    "checked",
                    {
                        "states": self.n,
                        "transitions": self.transitions,
                        "frontier": 0,
                        "depth": self.depth,
                        "elapsed_s": round(time.time() - self.start, 3),
                    },
                ) from None
            if isinstance(cause, ResourceLimitError):  # a worker's time or memory: report the global counts
                raise self.check.stop(
                    str(cause), states=self.n, transitions=self.transitions, frontier=self.frontier, depth=self.depth
                ) from None
            if isinstance(cause, DistmcError):
                raise cause from None
            if isinstance(cause, ray.exceptions.RayError):
                raise _WorkerLost(str(cause).splitlines()[0]) from exc
            where = "during the check" if self.checking else f"at depth {self.depth}"
            raise WorkerError(f"a worker failed {where}: {type(cause).__name__}: {cause}") from exc
        except ray.exceptions.RayError as exc:
            raise _WorkerLost(str(exc).splitlines()[0]) from exc
