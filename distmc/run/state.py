"""What one :func:`distmc.verify` call carries from phase to phase, and the report fields every run has alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distmc._internal.phases import PhaseClock
from distmc.check.result import CheckResult, Precision, json_bounds
from distmc.distributed.checkpoint import Checkpoint
from distmc.explain.report import Explain
from distmc.explore.limits import Limits, peak_rss_bytes
from distmc.options import VerifyOptions
from distmc.pipeline import Job, Parts
from distmc.policy.base import policy_precision
from distmc.report import EXPLORE_SPLIT


@dataclass
class RunState:
    """One :func:`distmc.verify` call: its options, what they resolve to, and what one phase hands the next."""

    opts: VerifyOptions
    job: Job
    checker: str  # after --resume with ``auto``: the one the checkpointed run asked for
    ckpt: Checkpoint | None
    parts: Parts
    explain: Explain
    prec: Precision
    limits: Limits
    clock: PhaseClock
    rows_stay: bool = False  # the Ray workers keep the rows (a distributed check may run on them)
    values_on_workers: bool = False  # --values alone with the distributed checker: each worker writes its part

    @property
    def driver(self) -> str:
        return self.opts.run_driver

    def common(
        self, stats: Mapping[str, float | str], worker_stats: list[dict[str, Any]], timings: dict[str, float]
    ) -> dict[str, Any]:
        """The report's fields every run has alike: what was run, the exploration's counters, memory, times."""
        job = self.job
        return dict(
            precision=self.prec.describe(),
            mode=job.mode,  # after --resume: the checkpoint's, not this call's defaults
            workers=self.opts.workers,
            driver=self.driver,
            worker_stats=list(worker_stats),
            model=job.model_path,
            property=job.prop,
            policy=policy_name(self.parts, job.policy),  # after --resume: the checkpoint's
            policy_dtype=policy_dtype(self.parts, worker_stats),
            depth=int(stats.get("depth", 0)),
            policy_states=int(stats.get("policy_states", 0)),
            policy_calls=int(stats.get("policy_calls", 0)),
            restarts=int(stats.get("restarts", 0)),
            memory={
                "driver_peak_bytes": peak_rss_bytes(),
                "worker_peak_bytes": [int(w.get("peak_rss", 0)) for w in worker_stats],
            },
            timings={"handoff_s": 0.0, **timings, **{k: float(v) for k, v in stats.items() if k in EXPLORE_SPLIT}},
            options=self.opts.to_dict(),
        )


def answer_fields(checked: Sequence[CheckResult], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's answer: the first property's value, bounds and truth, and every property's entry."""
    first = checked[0]
    return dict(result=first.value, bounds=json_bounds(first.bounds), truth=first.truth, results=entries)


def policy_dtype(parts: Parts, worker_stats: list[dict[str, Any]]) -> str | None:
    """What the policy ran in: the in-process replica's precision, else the Ray workers' (float32 if any was)."""
    if not parts.uses_policy:
        return None
    if parts.policy is not None:
        return policy_precision(parts.policy)
    ran = {str(w["policy_dtype"]) for w in worker_stats if w.get("policy_dtype")}
    return "float32" if "float32" in ran else ran.pop() if ran else None


def policy_name(parts: Parts, policy: str | None) -> str:
    return parts.policy.name if parts.policy else (Path(str(policy)).name if parts.uses_policy else "none")
