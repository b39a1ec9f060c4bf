"""The public entry point: :func:`verify` a policy against a PRISM model and a PCTL property."""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from distmc._internal.jit import thread_budget
from distmc._internal.phases import PhaseClock
from distmc.assemble.reducer import InducedModel, assemble
from distmc.assemble.storm import export, to_storm
from distmc.check.checker import EXACT_MAX_TRANSITIONS
from distmc.check.choice import choose_checker, choose_ray_checker
from distmc.check.dispatch import (
    EXACT_TIMEOUT_S,
    check_properties,
    single_property_states,
    slow_chain_sentence,
    vector_result,
)
from distmc.check.partial import check_partial, close_frontier, frontier_probability, horizon_of, partial_entry
from distmc.check.result import CheckResult, Precision, json_bounds, result_entry
from distmc.distributed.checkpoint import Checkpoint
from distmc.errors import CheckpointError, ResourceLimitError, SlowConvergenceError, UsageError
from distmc.explain.report import Explain
from distmc.explore.limits import Limits, peak_rss_bytes
from distmc.explore.local import explore_local
from distmc.explore.partition import Explored
from distmc.options import VerifyOptions, merged
from distmc.pipeline import Job, Parts
from distmc.policy.base import policy_precision
from distmc.report import EXPLORE_SPLIT, Report
from distmc.rounds import explore_in_rounds

if TYPE_CHECKING:
    from distmc.distributed.coordinator import RayRows

__all__ = ["Report", "Session", "VerifyOptions", "sweep", "verify"]

log = logging.getLogger(__name__)


def _resumed_job(saved: Job, given: Job, model_path: object, prop: object) -> Job:
    """The checkpoint's job; what the caller gave as well must agree with it."""
    if model_path is None and prop is None:
        return saved
    if model_path is not None and Path(str(model_path)).resolve() != Path(saved.model_path).resolve():
        raise CheckpointError(f"--resume: the checkpoint is of {saved.model_path}, not {model_path}")
    if prop is not None and given.prop != saved.prop:
        raise CheckpointError(f"--resume: the checkpointed run checks {saved.prop!r}, not {given.prop!r}")
    if given.constants is not None and given.constants != saved.constants:
        raise CheckpointError(f"--resume: the checkpointed run has constants {saved.constants!r}, not {given.constants!r}")
    return saved


def verify(model_path: str | Path | None, prop: str | None, options: VerifyOptions | None = None,
           **kw: Any) -> Report | tuple[Report, InducedModel]:
    """Explore the states the policy reaches, build the induced model and check ``prop`` with Storm.

    Args:
        model_path: PRISM file (dtmc or mdp); None with ``resume`` (the checkpoint names it).
        prop: PCTL property, ``P=? [...]`` or ``R{"r"}=? [...]`` (``min``/``max`` optional); None with ``resume``
            (or with ``props``).
        options: the run's :class:`~distmc.options.VerifyOptions` (default: its defaults).
        kw: options by name (``constants="N=6"``, ``workers=2``, ...: the fields of
            :class:`~distmc.options.VerifyOptions`), over those of ``options``; an unknown name is a TypeError.

    Returns the :class:`Report` (its ``options`` are the run's, saved), and with ``keep_model`` the induced model
    too. Several calls in one process reuse the Ray actors the last one kept (:class:`Session`).

    Example:
        >>> r = verify("gridworld.prism", 'P=? [F "crash"]', constants="N=6")  # doctest: +SKIP
        >>> r.result
        0.0625
    """
    opts = VerifyOptions.build(options, **kw)
    # in-process, --threads-per-worker bounds this thread's compute pools for the run (the one worker is this one)
    with thread_budget(opts.threads_per_worker if opts.run_driver == "local" else None):
        run = _Run.start(model_path, prop, opts)
        if run.opts.width is not None or run.opts.order is not None:
            report, induced = run.rounds()
            return (report, induced) if run.opts.keep_model else report
        explored = run.explore()
        run.clock.start("assembling")
        if not isinstance(explored, Explored):  # the rows are on the Ray workers
            checked = run.on_workers(explored)
            if isinstance(checked, Report):
                return checked
            explored = checked
        report, induced = run.check_gathered(explored)
    return (report, induced) if run.opts.keep_model else report


@dataclass
class _Run:
    """One :func:`verify` call: its options, what they resolve to, and what one phase hands the next."""

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

    @classmethod
    def start(cls, model_path: str | Path | None, prop: str | None, o: VerifyOptions) -> _Run:
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
            raise UsageError("--traces and --plot work on the model gathered to this process: use --checker auto, "
                              "storm or native with them (--values alone works with --checker distributed: each "
                              "worker writes its part of the table)")
        run.rows_stay = (run.driver == "ray" and checker in ("auto", "distributed") and o.export_path is None
                         and not o.keep_model and (not explain.active or run.values_on_workers) and not o.exact)
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
        return explore_ray(self.job, parts.codec, initial, where, limits=self.limits, checkpoint=self.ckpt,
                           progress=o.progress, rows_stay=self.rows_stay, horizon=horizon)

    def rounds(self) -> tuple[Report, InducedModel]:
        """Explore in rounds, checking after each (:func:`distmc.rounds.explore_in_rounds`)."""
        directory = None if self.ckpt is None else self.ckpt.directory
        o, parts = self.opts, self.parts
        if parts.expander is not None:
            return explore_in_rounds(o, parts, directory, self.limits, self.clock, self.check_gathered)
        from distmc.distributed.priority import RayPriorityExplorer

        where = o.ray if parts.uses_policy else dataclasses.replace(o.ray, policy_servers=0)  # no policy to serve

        def on_ray(order: str, saved: Path | None) -> RayPriorityExplorer:
            return RayPriorityExplorer(self.job, parts.codec, parts.codec.pack(parts.model.initial_states), where,
                                       order, saved=saved)

        return explore_in_rounds(o, parts, directory, self.limits, self.clock, self.check_gathered, on_ray)

    def on_workers(self, rows: RayRows) -> Report | Explored:
        """Rows on the Ray workers: check them there (the report), or gather them here (for Storm)."""
        ok = False
        try:
            kind = "mdp" if self.parts.force_mdp else "dtmc"  # a policy-induced model with several rows fails later
            used = choose_ray_checker(self.checker, self.limits, rows.n_transitions, self.parts.props.specs, kind,
                                       self.opts.workers, sum(int(w.get("rss", 0)) for w in rows.worker_stats))
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

    def check_distributed(self, rows: RayRows) -> Report:
        """Check every property on the workers that hold the rows (:meth:`RayRows.check`), on the one exploration."""
        specs = self.parts.props.specs
        self.clock.start("checking", "distributed, on the Ray workers")
        try:
            out = rows.check(self.prec, progress=self.opts.progress,
                             values_dir=self.opts.values if self.values_on_workers else None)
        except SlowConvergenceError as exc:
            raise SlowConvergenceError(slow_chain_sentence(str(exc), rows.n_transitions, False)) from None
        if self.values_on_workers:
            self.explain.at_risk = out["at_risk"]
        timings = self.clock.stop()
        # the workers build their parts of the model (and the exchange plan) first: that is assembly
        timings["assemble_s"] += float(out["build_s"])
        timings["check_s"] -= float(out["build_s"])
        # each property's seconds: the slowest worker's (they check the properties one after the other)
        checked = [dataclasses.replace(vector_result(spec, c["value"], c["lower"], c["upper"], "distributed"),
                                       check_s=c["check_s"]) for spec, c in zip(specs, out["checks"], strict=True)]
        entries = [result_entry(sp.text, sp.name, r) for sp, r in zip(specs, checked, strict=True)]
        return Report(
            result=checked[0].value, bounds=json_bounds(checked[0].bounds),
            truth=checked[0].truth, results=entries, states=rows.n_states,
            transitions=rows.n_transitions, induced="dtmc", choices=rows.n_states, initial_states=rows.n_initial,
            checker="distributed",
            frontier=None if not rows.run.frontier else {
                "reason": f"horizon cut at depth {rows.stats.get('horizon')}", "horizon": rows.stats.get("horizon"),
                "explored_states": rows.n_states - rows.run.frontier, "frontier_states": rows.run.frontier},
            riskiest_states=self.explain.at_risk, **self.common(rows.stats, rows.worker_stats, timings))

    def check_distributed_partial(self, rows: RayRows) -> Report:
        """Bounds of every property from a partial model on the workers that hold its rows (no process holds it)."""
        from distmc.check.partial import combine_sides

        specs = self.parts.props.specs
        self.clock.start("checking", "distributed, on the Ray workers: bounds from the explored part")
        out = rows.check(self.prec, progress=self.opts.progress, partial=True)
        timings = self.clock.stop()
        timings["assemble_s"] += float(out["build_s"])
        timings["check_s"] -= float(out["build_s"])
        checked = [dataclasses.replace(combine_sides(spec, c, "distributed", c["note"]), check_s=c["check_s"])
                   for spec, c in zip(specs, out["checks"], strict=True)]
        entries = [partial_entry(spec, res, c["note"]) for spec, res, c in zip(specs, checked, out["checks"],
                                                                                 strict=True)]
        reach = out["checks"][0]["reach"]
        first = rows.n_states - rows.run.frontier
        return Report(
            result=checked[0].value, bounds=json_bounds(checked[0].bounds), truth=checked[0].truth,
            results=entries, states=rows.n_states, transitions=rows.n_transitions, induced="dtmc",
            choices=rows.n_states, initial_states=rows.n_initial, checker="distributed", partial=True,
            frontier={"reason": str(rows.stats["stopped"]), "explored_states": first,
                      "frontier_states": rows.n_states - first,
                      "frontier_probability": None if np.isnan(reach).any() else float(reach[0])
                      if reach.shape[0] == 1 else {"min": float(reach.min()), "max": float(reach.max())},
                      "frontier_probability_within": horizon_of(specs[:1]),  # reach: the first property's
                      "horizon": rows.stats.get("horizon")},
            **self.common(rows.stats, rows.worker_stats, timings))

    def check_gathered(self, explored: Explored) -> tuple[Report, InducedModel]:
        """Assemble the induced model in this process and check every property (Storm, native or exact)."""
        o, parts, explain, clock = self.opts, self.parts, self.explain, self.clock
        specs = parts.props.specs
        if explored.frontier is None:  # the drivers' frontier is the tail of the ids
            close_frontier(explored, int(explored.stats.get("expanded", explored.n_states)))
        fids = explored.frontier if explored.frontier is not None else np.zeros(0, dtype=np.int64)
        n_frontier = int(fids.shape[0])
        first = explored.n_states - n_frontier  # states expanded
        stopped = explored.stats.get("stopped") if n_frontier else None
        induced = assemble(explored, parts.model, parts.codec, parts.props.atoms, parts.reward_names,
                           force_mdp=parts.force_mdp)
        explored.target_chunks, explored.prob_chunks = [], []  # the induced model holds them now (merged in place)
        if stopped is not None:
            return self.check_partial_model(explored, induced, fids, str(stopped))
        if explain.active:  # traces and depths need the transitions, which the hand-off to Storm may release
            explain.before_check(induced, parts, self.job, phase=clock.start)
        if o.exact and induced.n_transitions > EXACT_MAX_TRANSITIONS:
            raise UsageError(f"--exact: the induced model has {induced.n_transitions} transitions, more than the "
                              f"exact engine's limit of {EXACT_MAX_TRANSITIONS}; run without --exact for a sound "
                              "bound")
        asked = self.checker if self.checker != "auto" or self.driver == "local" else "storm"  # Ray's auto: fits
        depth = int(explored.stats.get("depth", 0))
        checkers = ["storm" if o.exact else choose_checker(asked, self.limits, induced, s, depth,
                                                            release=not o.keep_model) for s in specs]
        used = checkers[0] if len(set(checkers)) == 1 else "+".join(dict.fromkeys(checkers))
        if o.export_path is not None:
            clock.start("exporting", o.export_path)
            export(induced, o.export_path)
        single = single_property_states(induced, parts.props, parts.codec) if len(specs) > 1 else []
        if explain.wants_values:  # one property: its value in every state, from the same solver run as the result
            checked = [explain.check(induced, parts.spec, used, o.keep_model, clock)]
            explain.after_check(induced, parts, explain.vectors, f"{self.job.prop} on {Path(self.job.model_path).name}"
                                f", policy {_policy_name(parts, self.job.policy)}", phase=clock.start)
        else:
            checked = self.check_here(induced, checkers)
        timings = clock.stop()
        entries = [result_entry(sp.text, sp.name, r) for sp, r in zip(specs, checked, strict=True)]
        horizon = explored.stats.get("horizon") if n_frontier else None
        report = Report(
            frontier=None if horizon is None else {"reason": f"horizon cut at depth {horizon}", "horizon": horizon,
                                                   "explored_states": first, "frontier_states": n_frontier},
            result=checked[0].value, bounds=json_bounds(checked[0].bounds),
            truth=checked[0].truth, results=entries, single_states=single, states=induced.n_states,
            transitions=induced.n_transitions, induced=induced.kind, choices=induced.n_rows,
            initial_states=int(induced.initial.shape[0]), checker=used, traces=explain.found,
            traces_mass=explain.mass, riskiest_states=explain.at_risk,
            **self.common(explored.stats, explored.worker_stats, timings))
        return report, induced

    def check_partial_model(self, explored: Explored, induced: InducedModel, fids: np.ndarray,
                            reason: str) -> tuple[Report, InducedModel]:
        """Bounds of every property from a model explored in part (:mod:`distmc.check.partial`): two checks each."""
        o, parts, clock = self.opts, self.parts, self.clock
        specs = parts.props.specs
        first = induced.n_states - int(fids.shape[0])  # states expanded
        if o.exact:
            raise ResourceLimitError(
                f"exploration stopped ({reason}) with {first} of {induced.n_states} states expanded: --exact checks "
                "complete models only, so nothing was checked (run without --exact for bounds)",
                {"states": induced.n_states, "transitions": induced.n_transitions,
                 "frontier": induced.n_states - first, "depth": int(explored.stats.get("depth", 0))})
        frontier = np.zeros(induced.n_states, dtype=bool)
        frontier[fids] = True
        asked = self.checker if self.checker != "auto" or self.driver == "local" else "storm"
        if asked == "distributed":
            asked = "auto"  # the rows were gathered: the model's part is checked here
        depth = int(explored.stats.get("depth", 0))
        checkers = [choose_checker(asked, self.limits, induced, s, depth, release=False) for s in specs]
        used = checkers[0] if len(set(checkers)) == 1 else "+".join(dict.fromkeys(checkers))
        clock.start("checking", "bounds from the explored part")
        within = horizon_of(specs)
        # Storm, where it checks the bounds anyway (its sound iteration is the faster), else the native checker
        reach = (frontier_probability(induced, frontier, precision=self.prec, within=within)
                 if induced.kind == "dtmc" and "storm" not in checkers else None)
        storm_box: list[object] = []

        def storm_model() -> object:
            if not storm_box:
                clock.start("handing to Storm")
                storm_box.append(to_storm(induced, release=True))
                clock.start("checking", "Storm, bounds from the explored part")
            return storm_box[0]

        checked, notes = check_partial(parts.props, induced, checkers, self.prec, storm_model, frontier,
                                       parts.model, len(parts.model.variables), progress=clock.detail)
        if induced.kind != "dtmc" or "storm" in checkers:  # an MDP: Storm's min and max
            reach = frontier_probability(induced, frontier, storm_model(), self.prec, within)
        timings = clock.stop()
        entries = [partial_entry(sp, r, note) for sp, r, note in zip(specs, checked, notes, strict=True)]
        report = Report(
            result=checked[0].value, bounds=json_bounds(checked[0].bounds),
            truth=checked[0].truth, results=entries, states=induced.n_states,
            transitions=induced.n_transitions, induced=induced.kind, choices=induced.n_rows,
            initial_states=int(induced.initial.shape[0]), checker=used, partial=True,
            frontier={"reason": reason, "explored_states": first, "frontier_states": induced.n_states - first,
                      "frontier_probability": reach, "frontier_probability_within": within,
                      "horizon": explored.stats.get("horizon")},
            **self.common(explored.stats, explored.worker_stats, timings))
        return report, induced

    def check_here(self, induced: InducedModel, checkers: list[str]) -> list[CheckResult]:
        """Every property, each by its checker; Storm gets the model once, when the first of its checks needs it."""
        o, clock = self.opts, self.clock
        if "native" in checkers or o.exact:  # natives run first; Storm's hand-off starts its own phases below
            clock.start("checking", "Storm's exact engine" if o.exact else "distmc's native value iteration")
        left = None if self.limits.timeout is None else self.limits.timeout - clock.elapsed()
        storm_box: list[object] = []

        def storm_model() -> object:
            if not storm_box:
                clock.start("handing to Storm")
                # a model the exact engine takes keeps its rows: it answers where value iteration is too slow
                release = not o.keep_model and induced.n_transitions > EXACT_MAX_TRANSITIONS
                storm_box.append(to_storm(induced, release=release, exact=o.exact))
                clock.start("checking", "Storm")
            return storm_box[0]

        return check_properties(self.parts.props, induced, checkers, self.prec, storm_model,
                                EXACT_TIMEOUT_S if left is None else max(1.0, min(EXACT_TIMEOUT_S, left)),
                                progress=clock.detail, codec=self.parts.codec)

    def common(self, stats: Mapping[str, float | str], worker_stats: list[dict[str, Any]],
               timings: dict[str, float]) -> dict[str, Any]:
        """The report's fields every run has alike: what was run, the exploration's counters, memory, times."""
        job = self.job
        return dict(
            precision=self.prec.describe(),
            mode=job.mode,  # after --resume: the checkpoint's, not this call's defaults
            workers=self.opts.workers, driver=self.driver, worker_stats=list(worker_stats), model=job.model_path,
            property=job.prop, policy=_policy_name(self.parts, job.policy),  # after --resume: the checkpoint's
            policy_dtype=_policy_dtype(self.parts, worker_stats),
            depth=int(stats.get("depth", 0)), policy_states=int(stats.get("policy_states", 0)),
            policy_calls=int(stats.get("policy_calls", 0)), restarts=int(stats.get("restarts", 0)),
            memory={"driver_peak_bytes": peak_rss_bytes(),
                    "worker_peak_bytes": [int(w.get("peak_rss", 0)) for w in worker_stats]},
            timings={"handoff_s": 0.0, **timings, **{k: float(v) for k, v in stats.items() if k in EXPLORE_SPLIT}},
            options=self.opts.to_dict())


def _policy_dtype(parts: Parts, worker_stats: list[dict[str, Any]]) -> str | None:
    """What the policy ran in: the in-process replica's precision, else the Ray workers' (float32 if any was)."""
    if not parts.uses_policy:
        return None
    if parts.policy is not None:
        return policy_precision(parts.policy)
    ran = {str(w["policy_dtype"]) for w in worker_stats if w.get("policy_dtype")}
    return "float32" if "float32" in ran else ran.pop() if ran else None


def _policy_name(parts: Parts, policy: str | None) -> str:
    return parts.policy.name if parts.policy else (Path(str(policy)).name if parts.uses_policy else "none")


class Session:
    """Several :func:`verify` runs in one process that share its Ray and the actors each run keeps for the next.

    Every run is ``options`` (the session's) with its own changes. A Ray run's actors are kept after it ends and
    taken by the next run with the same worker count, resources and threads (any model, constants or policy),
    which then skips their start-up (``timings["startup_s"]``); the session ends them when it closes, and stops
    the local Ray it started (a Ray this process was already connected to stays up)::

        with Session(constants="N=6", workers=2) as s:
            a = s.verify("gridworld.prism", 'P=? [F "crash"]', policy="a.pt")
            b = s.verify("gridworld.prism", 'P=? [F "crash"]', {"policy": "b.pt"})
    """

    def __init__(self, options: VerifyOptions | None = None, **kw: Any) -> None:
        self.options = VerifyOptions.build(options, **kw)
        self._ray_was_up = False

    def verify(self, model_path: str | Path | None, prop: str | None,
               changes: VerifyOptions | Mapping[str, Any] | None = None, **kw: Any) -> Report | tuple[Report, InducedModel]:
        """:func:`verify` with the session's options; ``changes``: a mapping of changes to them, or whole options."""
        return verify(model_path, prop, merged(changes, self.options), **kw)

    def sweep(self, model_path: str | Path | None, prop: str | None,
              variants: Iterable[VerifyOptions | Mapping[str, Any]]) -> list[Report | tuple[Report, InducedModel]]:
        """One run per variant (changes to the session's options, or whole options), in order."""
        return [self.verify(model_path, prop, v) for v in variants]

    def __enter__(self) -> Session:
        ray = sys.modules.get("ray")
        self._ray_was_up = ray is not None and ray.is_initialized()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the kept actors, and the local Ray the session's runs started."""
        if "distmc.distributed.coordinator" in sys.modules:
            from distmc.distributed import release_workers

            release_workers()
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized() and not self._ray_was_up:
            ray.shutdown()


def sweep(model_path: str | Path | None, prop: str | None, variants: Iterable[VerifyOptions | Mapping[str, Any]],
          options: VerifyOptions | None = None, **kw: Any) -> list[Report | tuple[Report, InducedModel]]:
    """Verify ``prop`` once per variant in one :class:`Session` (``options`` and ``kw``: the base of every run).

    Example:
        >>> reports = sweep("gridworld.prism", 'P=? [F "crash"]', [{"constants": f"N={n}"} for n in (4, 5, 6)],
        ...                 workers=2)  # doctest: +SKIP
    """
    with Session(options, **kw) as s:
        return s.sweep(model_path, prop, variants)
