"""One :func:`distmc.verify` call from its options to its report: resolve, explore, then check where the rows are.

:class:`Run` is the call; :mod:`~distmc.run.state` what it carries, :mod:`~distmc.run.workers` the checks on the
Ray workers, :mod:`~distmc.run.gathered` the checks on the model assembled in this process.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from distmc._internal.phases import PhaseClock
from distmc.assemble.reducer import InducedModel
from distmc.check.choice import choose_ray_checker
from distmc.check.partial import horizon_of
from distmc.distributed.checkpoint import Checkpoint
from distmc.errors import CheckpointError, UsageError
from distmc.explain.report import Explain
from distmc.explore.local import explore_local
from distmc.explore.partition import Explored
from distmc.options import VerifyOptions
from distmc.pipeline import Job
from distmc.report import Report
from distmc.rounds import explore_in_rounds

if TYPE_CHECKING:
    from distmc.distributed.rows import RayRows

from distmc.run.gathered import GatheredChecks
from distmc.run.workers import WorkerChecks

__all__ = ["Run"]


def _resumed_job(saved: Job, given: Job, model_path: object, prop: object) -> Job:
    """The checkpoint's job; what the caller gave as well must agree with it."""
    if model_path is None and prop is None:
        return saved
    if model_path is not None and Path(str(model_path)).resolve() != Path(saved.model_path).resolve():
        raise CheckpointError(f"--resume: the checkpoint is of {saved.model_path}, not {model_path}")
    if prop is not None and given.prop != saved.prop:
        raise CheckpointError(f"--resume: the checkpointed run checks {saved.prop!r}, not {given.prop!r}")
    if given.constants is not None and given.constants != saved.constants:
        raise CheckpointError(
            f"--resume: the checkpointed run has constants {saved.constants!r}, not {given.constants!r}"
        )
    return saved


@dataclass
class Run(GatheredChecks, WorkerChecks):
    """One :func:`distmc.verify` call: start (resolve and parse), explore, then check on the workers or here."""

    @classmethod
    def start(cls, model_path: str | Path | None, prop: str | None, o: VerifyOptions) -> Run:
        """Parse the model and the properties, open (or create) the checkpoint; fail on what cannot be done."""
        texts = ([prop] if prop is not None else []) + list(o.props)
        prop = "; ".join(texts) if texts else None
        if o.resume is None and (model_path is None or prop is None):
            raise UsageError("a model and a property are needed (or --resume DIR to continue a checkpointed run)")
        prec = o.check_precision
        o.check_rounds()
        limits = o.limits
        clock = PhaseClock(o.phases)
        clock.start("parsing")
        job = Job.of(str(model_path), str(prop), o)
        ckpt: Checkpoint | None = None
        checker = o.checker
        if o.resume is not None:
            ckpt = Checkpoint.open(o.resume)
            job = _resumed_job(ckpt.job, job, model_path, prop)
            checker = ckpt.meta.get("checker", "auto") if checker == "auto" else checker  # the one the run asked for
            o.check_distributed(checker)
        parts = job.build(explorer=o.run_driver == "local")
        specs = parts.props.specs
        explain = Explain(o.traces, o.values, None if o.width is not None else o.plot, o.plot_vars)  # --width: its own
        if explain.active and len(specs) > 1:
            raise UsageError("--traces, --values and --plot explain one property: give one --prop with them")
        explain.validate(parts)
        if o.checkpoint_dir is not None and ckpt is None:
            ckpt = Checkpoint.create(o.checkpoint_dir, job, parts.codec.dtype, parts.reward_names, checker=checker)
        run = cls(o, job, checker, ckpt, parts, explain, prec, limits, clock)
        # --values alone works on the workers (each writes its part); traces and the picture need the whole model
        run.values_on_workers = checker == "distributed" and explain.wants_values and not o.traces and o.plot is None
        if checker == "distributed" and explain.active and not run.values_on_workers:
            raise UsageError(
                "--traces and --plot work on the model gathered to this process: use --checker auto, "
                "storm or native with them (--values alone works with --checker distributed: each "
                "worker writes its part of the table)"
            )
        run.rows_stay = (
            run.driver == "ray"
            and checker in ("auto", "distributed")
            and o.export_path is None
            and not o.keep_model
            and (not explain.active or run.values_on_workers)
            and not o.exact
        )
        return run

    def explore(self) -> Explored | RayRows:
        """The states the policy reaches: in this process, or on the Ray workers (rows there with ``rows_stay``)."""
        o, parts = self.opts, self.parts
        self.clock.start("exploring", self.driver)
        initial = parts.codec.pack(parts.model.initial_states)
        horizon = horizon_of(parts.props.specs) if o.horizon_cut else None
        if parts.expander is not None:
            return explore_local(parts.expander, initial, limits=self.limits, progress=o.progress, horizon=horizon)
        from distmc.distributed import explore_ray

        where = o.ray if parts.uses_policy else dataclasses.replace(o.ray, policy_servers=0)  # no policy to serve
        return explore_ray(
            self.job,
            parts.codec,
            initial,
            where,
            limits=self.limits,
            checkpoint=self.ckpt,
            progress=o.progress,
            rows_stay=self.rows_stay,
            horizon=horizon,
        )

    def rounds(self) -> tuple[Report, InducedModel]:
        """Explore in rounds, checking after each (:func:`distmc.rounds.explore_in_rounds`)."""
        directory = None if self.ckpt is None else self.ckpt.directory
        o, parts = self.opts, self.parts
        if parts.expander is not None:
            return explore_in_rounds(o, parts, directory, self.limits, self.clock, self.check_gathered)
        from distmc.distributed.priority import RayPriorityExplorer

        where = o.ray if parts.uses_policy else dataclasses.replace(o.ray, policy_servers=0)  # no policy to serve

        def on_ray(order: str, saved: Path | None) -> RayPriorityExplorer:
            return RayPriorityExplorer(
                self.job, parts.codec, parts.codec.pack(parts.model.initial_states), where, order, saved=saved
            )

        return explore_in_rounds(o, parts, directory, self.limits, self.clock, self.check_gathered, on_ray)

    def on_workers(self, rows: RayRows) -> Report | Explored:
        """Rows on the Ray workers: check them there (the report), or gather them here (for Storm)."""
        ok = False
        try:
            kind = "mdp" if self.parts.force_mdp else "dtmc"  # a policy-induced model with several rows fails later
            used = choose_ray_checker(
                self.checker,
                self.limits,
                rows.n_transitions,
                self.parts.props.specs,
                kind,
                self.opts.workers,
                sum(int(w.get("rss", 0)) for w in rows.worker_stats),
            )
            if "stopped" in rows.stats and used == "distributed":  # a partial model: bounds on the workers
                report = self.check_distributed_partial(rows)
                ok = True
                return report
            if used == "distributed":
                report = self.check_distributed(rows)
                ok = True
                return report
            explored = rows.gather()
            ok = True
            return explored
        finally:
            rows.close(ok)
