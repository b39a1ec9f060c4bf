"""What one actor of a Ray run is told besides its job, and what makes a kept actor's parts reusable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distmc.distributed.checkpoint import file_digest
from distmc.explore.contracts import WorkerJob
from distmc.explore.limits import Limits
from distmc.pipeline import Job

__all__ = ["WorkerSetup", "job_stamp"]


def job_stamp(job: WorkerJob) -> tuple[Any, ...] | None:
    """What makes a job's parts reusable: the job and its files' contents (SHA-256; None: never reuse)."""
    if not isinstance(job, Job):
        return None
    return (job, *(file_digest(path) for path in (job.model_path, job.policy, job.interface)))


@dataclass(frozen=True)
class WorkerSetup:
    """What one actor of a run is told besides its job: its place among the workers and the run's settings.

    Attributes:
        rank: this worker's number, ``0 .. workers - 1`` (it owns the states ``owner_of`` maps to it).
        workers: the run's number of workers.
        batch_states: states per expansion batch.
        checkpoint_dir: where each level's files go (None: no checkpoint).
        limits: the run's limits; a worker checks time and its share of the memory after every batch.
        start: when the run started (``time.time()``), for the timeout.
        server: a policy server (handle, description) that evaluates the policy for this worker (None: its own).
    """

    rank: int
    workers: int
    batch_states: int
    checkpoint_dir: str | None = None
    limits: Limits | None = None
    start: float | None = None
    server: tuple[Any, dict[str, Any]] | None = None
