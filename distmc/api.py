"""The public entry point: :func:`verify` a policy against a PRISM model and a PCTL property."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from distmc._internal.jit import thread_budget
from distmc._internal.phases import PHASES, PhaseClock
from distmc.assemble.reducer import InducedModel, assemble
from distmc.assemble.storm import export, to_storm
from distmc.check.checker import EXACT_MAX_TRANSITIONS, check_values
from distmc.check.dispatch import (
    EXACT_TIMEOUT_S,
    check_properties,
    single_property_states,
    slow_chain_sentence,
    vector_result,
)
from distmc.check.native import LocalEngine, at_initial, matrix_of, unsupported, values_of
from distmc.check.partial import check_partial, close_frontier, frontier_probability, horizon_of, partial_entry
from distmc.check.properties import PropertySpec
from distmc.check.result import TRUTH_FILTERS, CheckResult, Precision, result_entry, result_line
from distmc.distributed.checkpoint import Checkpoint
from distmc.errors import CheckpointError, PropertyError, ResourceLimitError, SlowConvergenceError, UsageError
from distmc.explain.report import Explain, summary_lines
from distmc.explore.limits import Limits, available_bytes, peak_rss_bytes, rss_bytes
from distmc.explore.local import explore_local
from distmc.explore.partition import Explored
from distmc.options import VerifyOptions, merged
from distmc.pipeline import Job, Parts
from distmc.policy.base import policy_precision

if TYPE_CHECKING:
    from distmc.distributed.coordinator import RayRows

__all__ = ["Report", "Session", "VerifyOptions", "sweep", "verify"]

log = logging.getLogger(__name__)


#: Parts of the exploration time a driver reports: Ray actors' start-up, the levels (of which ``place_s``: placing
#: each level's rows in global order while the next level runs), gathering the partitions' states and last rows
#: into the reducer (Ray driver); seconds inside the policy's forward passes (in-process driver).
_EXPLORE_SPLIT = ("startup_s", "levels_s", "place_s", "gather_s", "policy_s")


#: The summary's line for a policy that ran in float32.
FLOAT32_NOTE = ("the policy ran in float32 (asked with --policy-dtype float32, or a network that cannot run in float64: "
                "a warning said why): its probabilities depend on the batch, the BLAS kernel and the CPU in their "
                "last digits (about 1e-7), so the bounds cover the checker's error only, not the policy's rounding")

#: Memory the hand-off to Storm and Storm's check need beyond what the process holds after exploration, per
#: transition, when the reducer keeps its copy (Storm's matrix, the UMB import's buffers, the check's submatrix).
#: Measured on avoid 8x8 (36.9 M transitions): 58 B with the reducer's copy released (74 B without); rounded up.
#: On avoid 12x12 (354 M transitions) an estimate of 40 B let a run under --max-memory 21G be killed for memory.
STORM_BYTES_PER_TRANSITION = 80

#: What gathering a Ray run's rows into the driver costs per transition: the rows themselves (int64 target and
#: float64 probability), and with several workers a second copy while they are placed in global order.
GATHER_BYTES_PER_TRANSITION = 16


def _distributed_why(spec: PropertySpec, kind: str) -> str | None:
    """Why the distributed checker cannot check ``spec`` (None: it can).

    The native checker's reasons, and filters over truth values (it states no truth value per initial state).
    """
    if spec.filter in TRUTH_FILTERS:
        return f"filter({spec.filter}, ...) is answered by Storm (use --checker storm or auto)"
    return unsupported(spec, kind)


def _choose_ray_checker(checker: str, limits: Limits, rows: RayRows, specs: list[PropertySpec], kind: str,
                        workers: int, worker_rss: int) -> str:
    """``storm`` (gather the rows into this process) or ``distributed`` for a Ray run with the rows on the actors.

    ``auto``: Storm when gathering the rows and Storm's import and check fit in this process (under
    ``--max-memory``, less what the workers hold, else this machine's available memory), else the distributed
    check when it can check every property, else Storm as :func:`_choose_checker` decides.
    """
    why = next((f"'{s.text}': {w}" for s in specs if (w := _distributed_why(s, kind)) is not None), None)
    if checker == "distributed":
        if why is not None:
            raise PropertyError(f"--checker distributed cannot check {why}")
        return "distributed"
    transitions = rows.n_transitions
    per = STORM_BYTES_PER_TRANSITION + GATHER_BYTES_PER_TRANSITION * (2 if workers > 1 else 1) - 16
    rss = rss_bytes()
    need = rss + per * transitions
    budget = limits.max_memory - worker_rss if limits.max_memory is not None else rss + available_bytes()
    if need <= budget or why is not None:
        return "storm"
    log.warning("gathering the rows and Storm's check would need about %.1f GiB in this process for %d transitions "
                "(%.1f GiB available): checking on the workers (distributed)", need / 2**30, transitions,
                budget / 2**30)
    return "distributed"


def _choose_checker(checker: str, limits: Limits, induced: InducedModel, spec: PropertySpec, depth: int,
                    release: bool) -> str:
    """``storm`` or ``native`` for ``--checker auto|storm|native``; stop rather than be killed for memory.

    ``auto`` keeps Storm unless its import and check would not fit (the memory under ``--max-memory``, else
    the machine's available memory) and the native checker can check the property. ``storm`` (or ``auto``
    without that way out) with ``--max-memory`` stops before the hand-off when Storm would need more.
    """
    if checker == "native":
        why = unsupported(spec, induced.kind)
        if why is not None:
            raise PropertyError(f"--checker native cannot check '{spec.text}': {why}")
        return "native"
    per = STORM_BYTES_PER_TRANSITION - (16 if release else 0)  # released: our 16 B copy is gone before Storm reads
    rss = rss_bytes()
    need = rss + per * induced.n_transitions
    budget = limits.max_memory if limits.max_memory is not None else rss + available_bytes()
    if need <= budget:
        return "storm"
    why = unsupported(spec, induced.kind)
    if checker == "auto" and why is None:
        log.warning("Storm would need about %.1f GiB for %d transitions (%.1f GiB available): checking with "
                    "distmc's native checker", need / 2**30, induced.n_transitions, budget / 2**30)
        return "native"
    if limits.max_memory is None:
        log.warning("Storm may need about %.1f GiB, more than the %.1f GiB available%s", need / 2**30,
                    budget / 2**30, "" if checker == "storm" else f" (the native checker cannot help: {why})")
        return "storm"
    raise ResourceLimitError(
        f"the induced model ({induced.n_states} states, {induced.n_transitions} transitions) is explored, but "
        f"handing it to Storm needs about {need / 2**30:.1f} GiB, more than --max-memory "
        f"{limits.max_memory / 2**30:.1f} GiB; nothing was checked"
        + ("" if checker == "storm" else f" (the native checker cannot check it: {why})"),
        {"states": induced.n_states, "transitions": induced.n_transitions, "frontier": 0, "depth": depth},
    )


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


def _time_line(t: dict[str, float]) -> str:
    """The summary's ``time:`` line: every phase that took time, in order, then the total they add up to."""
    parts = [(PHASES[name], t.get(f"{PHASES[name]}_s")) for name in PHASES]
    shown = ", ".join(f"{'hand-off' if k == 'handoff' else k} {v:.3f} s" for k, v in parts
                      if v is not None and (v > 0 or k in ("explore", "check")))
    return f"{shown}, total {t['total_s']:.3f} s"


@dataclass
class Report:
    """What a run found (``--json`` writes it)."""

    result: float | dict[str, float]
    states: int
    transitions: int
    mode: str
    workers: int
    model: str
    property: str
    policy: str
    induced: str  # "dtmc" or "mdp"
    choices: int
    initial_states: int
    depth: int
    policy_states: int
    policy_calls: int = 0  # network calls (fixed-shape batches) that evaluated those states
    timings: dict[str, float] = field(default_factory=dict)
    driver: str = "local"
    worker_stats: list[dict[str, float]] = field(default_factory=list)  # per Ray actor: states, batches, bytes sent, ...
    restarts: int = 0  # workers lost and replaced from the checkpoint
    checker: str = "storm"  # "storm", "native" (distmc's value iteration, :mod:`distmc.check.native`) or "distributed"
    bounds: list[float] | dict[str, list[float]] | None = None  # guaranteed to contain the exact value (see result.py)
    truth: bool | None = None  # a threshold property's truth value at the initial states
    precision: str = "1e-12 absolute"  # what the sound methods were asked for
    results: list[dict[str, object]] = field(default_factory=list)  # one per property, see :func:`result_entry`
    single_states: list[int] = field(default_factory=list)  # several properties: each one's own model's states
    # resident-set peaks in bytes: this process, and each Ray worker (none in-process)
    memory: dict[str, object] = field(default_factory=lambda: {"driver_peak_bytes": 0, "worker_peak_bytes": []})
    # --traces K: the K most probable paths to the target, [{"probability", "path": [{"state", "action", "pi",
    # "p"}, ...]}], and their summed probability; --values/--plot: the states most at risk (None: not asked)
    traces: list[dict] | None = None
    traces_mass: float | None = None
    riskiest_states: list[dict] | None = None
    options: dict[str, object] = field(default_factory=dict)  # the run's VerifyOptions (``to_dict``)
    # the arithmetic the policy ran in ("float64", or "float32": asked, or a network that cannot run in float64);
    # None without a policy (a dtmc, monolithic mode)
    policy_dtype: str | None = None
    # a run stopped before the fixpoint: every result is bounds from the explored part (distmc.check.partial)
    partial: bool = False
    # the frontier: why exploration stopped, explored and frontier states, the probability of reaching the
    # frontier; also for a horizon cut (then exact: partial is False); None: explored to the fixpoint
    frontier: dict[str, object] | None = None
    # --width / --order: each round's budget, states, explored states, width, bounds and elapsed seconds
    rounds: list[dict[str, Any]] | None = None

    def to_json(self) -> str:
        d = asdict(self)
        for name in ("traces", "traces_mass", "riskiest_states", "rounds"):
            if d[name] is None:
                del d[name]
        return json.dumps(d, indent=2)

    def summary(self) -> str:
        t = self.timings
        lines = "\n".join(result_line(r) for r in self.results) if self.results else f"{self.property}  =  {self.result}"
        cost = ""
        if len(self.single_states) > 1:
            largest = max(self.single_states)
            cost = (f"\n  one exploration for {len(self.single_states)} properties: {self.states - largest} states "
                    f"more than the largest single-property model ({largest} states)")
        return (
            f"{lines}\n"
            f"  model {self.model} ({self.mode}, policy {self.policy}"
            f"{'' if self.policy_dtype is None else ' in ' + self.policy_dtype}); induced {self.induced}: "
            f"{self.states} states, {self.transitions} transitions, {self.choices} rows, depth {self.depth}\n"
            f"  time: {_time_line(t)}"
            + ("" if self.checker == "storm" else f"\n  checked by distmc's {self.checker} checker, not Storm")
            + ("" if self.policy_dtype != "float32" else f"\n  {FLOAT32_NOTE}")
            + _frontier_line(self.frontier, self.partial)
            + ("" if not self.rounds else "\n  rounds: " + ", ".join(
                f"{r['explored_states']} states -> width {r['width']:.3g}" for r in self.rounds))
            + cost
            + "".join(f"\n{line}" for line in summary_lines(self.traces, self.traces_mass, self.riskiest_states,
                                                               self.result))
        )


def _frontier_line(frontier: dict[str, object] | None, partial: bool) -> str:
    """The summary's line on a model explored in part (a limit) or cut at a horizon; empty for a full one."""
    if frontier is None:
        return ""
    reach = frontier.get("frontier_probability")
    within = frontier.get("frontier_probability_within")
    reached = "" if reach is None else (f", reached with probability {result_line_value(reach)}"
                                        + ("" if within is None else f" within {within} steps"))
    if not partial:
        return (f"\n  horizon cut at depth {frontier['horizon']}: {frontier['frontier_states']} states at the horizon "
                "not expanded (exact for the step bound)")
    return (f"\n  partial model: exploration stopped ({frontier['reason']}) with {frontier['explored_states']} states "
            f"expanded and {frontier['frontier_states']} found but not expanded{reached}; each result is bounds "
            "[lo, hi] that contain the value of the whole model")


def result_line_value(v: object) -> str:
    if isinstance(v, dict):
        return "[" + ", ".join(f"{x:.3g}" for x in v.values()) + "] (min, max)"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


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
        """Explore in rounds in a priority order (:mod:`distmc.explore.priority`), checking after each round.

        Each round's budget of states is twice the last one's (the first: :data:`FIRST_ROUND_STATES`, at most
        ``max_states``), and it goes on from what the last round explored. It stops once every property's bounds
        are at most ``width`` wide (or the model is explored whole, or a limit is passed, or ``max_states`` is
        reached); without ``width``, after one round of ``max_states`` states.
        """
        from distmc.explore.limits import Interrupt, LimitCheck
        from distmc.explore.priority import PRIORITY_CHECKPOINT, PriorityExplorer

        o, parts, clock = self.opts, self.parts, self.clock
        horizon = horizon_of(parts.props.specs) if o.horizon_cut else None
        order = o.order or ("bfs" if horizon is not None else "mass")
        assert parts.expander is not None
        clock.start("exploring", f"in-process, {order} first")
        saved = None if self.ckpt is None else self.ckpt.directory / PRIORITY_CHECKPOINT
        if saved is not None and saved.is_file():  # --resume: go on from what the last run explored
            explorer = PriorityExplorer.load(saved, parts.expander)
            if o.order is not None and explorer.order != o.order:
                raise CheckpointError(f"--resume: the checkpointed run explored in {explorer.order} order, not {o.order}")
            order = explorer.order
        else:
            explorer = PriorityExplorer(parts.expander, parts.codec.pack(parts.model.initial_states), order)
        cap = o.max_states if o.max_states is not None else (None if o.width is not None else 2**62)
        budget = FIRST_ROUND_STATES if o.width is not None else int(cap)  # type: ignore[arg-type]
        if cap is not None:
            budget = min(budget, cap)
        budget = max(budget, explorer.budget)  # resumed: the last round's budget again (checks what is there)
        check = LimitCheck(Limits(None, self.limits.max_memory, self.limits.timeout))
        rounds: list[dict[str, Any]] = []
        while True:
            with Interrupt() as interrupt:
                why = explorer.grow(budget, check, lambda: interrupt.why, horizon)
            explorer.budget = budget
            if saved is not None:
                explorer.save(saved)
            explored = explorer.snapshot()
            capped = cap is not None and budget >= cap and explorer.n_states > budget
            if why is None and explorer.n_states > budget:
                why = f"passed --max-states {cap}" if capped else f"round budget of {budget} states"
            if why is not None:
                explored.stats["stopped"] = why  # type: ignore[assignment]
            if horizon is not None:
                explored.stats["horizon"] = horizon
            report, induced = self.check_gathered(explored)
            width = _width(report)
            rounds.append({"round": len(rounds) + 1, "budget": budget, "states": report.states,
                           "explored_states": explored.n_states - int(explored.frontier.shape[0])
                           if explored.frontier is not None else report.states,
                           "width": width, "bounds": report.bounds, "elapsed_s": round(clock.elapsed(), 3)})
            log.info("round %d: %d states, width %.3g", len(rounds), report.states, width)
            if o.progress is not None:
                o.progress({"phase": f"round {len(rounds)}: width {width:.3g} at {report.states} states",  # type: ignore[dict-item]
                            "elapsed_s": clock.elapsed()})
            done = (not report.partial or o.width is None or width <= o.width or capped
                    or (why is not None and not why.startswith("round budget")))
            if done:
                break
            budget = budget * 2 if cap is None else min(budget * 2, cap)
            clock.start("exploring", f"in-process, {order} first, round {len(rounds) + 1}")
        report.rounds = rounds
        if o.width is not None and o.plot is not None:
            _plot_rounds(rounds, o.plot, order)
        return report, induced

    def on_workers(self, rows: RayRows) -> Report | Explored:
        """Rows on the Ray workers: check them there (the report), or gather them here (for Storm)."""
        ok = False
        try:
            kind = "mdp" if self.parts.force_mdp else "dtmc"  # a policy-induced model with several rows fails later
            used = _choose_ray_checker(self.checker, self.limits, rows, self.parts.props.specs, kind,
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
            result=checked[0].value, bounds=entries[0]["bounds"],  # type: ignore[arg-type]
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
            result=checked[0].value, bounds=entries[0]["bounds"], truth=checked[0].truth,  # type: ignore[arg-type]
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
        checkers = ["storm" if o.exact else _choose_checker(asked, self.limits, induced, s, depth,
                                                            release=not o.keep_model) for s in specs]
        used = checkers[0] if len(set(checkers)) == 1 else "+".join(dict.fromkeys(checkers))
        if o.export_path is not None:
            clock.start("exporting", o.export_path)
            export(induced, o.export_path)
        single = single_property_states(induced, parts.props, parts.codec) if len(specs) > 1 else []
        if explain.wants_values:  # one property: its value in every state, from the same solver run as the result
            checked = [_check_explained(induced, parts.spec, used, explain, o.keep_model, clock)]
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
            result=checked[0].value, bounds=entries[0]["bounds"],  # type: ignore[arg-type]
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
        checkers = [_choose_checker(asked, self.limits, induced, s, depth, release=False) for s in specs]
        used = checkers[0] if len(set(checkers)) == 1 else "+".join(dict.fromkeys(checkers))
        clock.start("checking", "bounds from the explored part")
        within = horizon_of(specs)
        reach = (frontier_probability(induced, frontier, precision=self.prec, within=within)
                 if induced.kind == "dtmc" else None)
        storm_box: list[object] = []

        def storm_model() -> object:
            if not storm_box:
                clock.start("handing to Storm")
                storm_box.append(to_storm(induced, release=True))
                clock.start("checking", "Storm, bounds from the explored part")
            return storm_box[0]

        checked, notes = check_partial(parts.props, induced, checkers, self.prec, storm_model, frontier,
                                       parts.model, len(parts.model.variables), progress=clock.detail)
        if induced.kind != "dtmc":  # an MDP: Storm's min and max
            reach = frontier_probability(induced, frontier, storm_model(), self.prec, within)
        timings = clock.stop()
        entries = [partial_entry(sp, r, note) for sp, r, note in zip(specs, checked, notes, strict=True)]
        report = Report(
            result=checked[0].value, bounds=entries[0]["bounds"],  # type: ignore[arg-type]
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

    def common(self, stats: dict[str, float], worker_stats: list[dict[str, Any]],
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
            timings={"handoff_s": 0.0, **timings, **{k: float(v) for k, v in stats.items() if k in _EXPLORE_SPLIT}},
            options=self.opts.to_dict())


def _policy_dtype(parts: Parts, worker_stats: list[dict[str, Any]]) -> str | None:
    """What the policy ran in: the in-process replica's precision, else the Ray workers' (float32 if any was)."""
    if not parts.uses_policy:
        return None
    if parts.policy is not None:
        return policy_precision(parts.policy)
    ran = {str(w["policy_dtype"]) for w in worker_stats if w.get("policy_dtype")}
    return "float32" if "float32" in ran else ran.pop() if ran else None


#: The first round's budget of states under ``--width``.
FIRST_ROUND_STATES = 1000


def _width(report: Report) -> float:
    """The widest of the report's bounds (0 for a model explored whole; inf where one is not bounded)."""
    if not report.partial:
        return 0.0
    widest = 0.0
    for r in report.results:
        b = r["bounds"]
        pairs = list(b.values()) if isinstance(b, dict) else [b]
        for lo, hi in pairs:  # type: ignore[misc]
            widest = max(widest, float(hi) - float(lo))
    return widest


def _plot_rounds(rounds: list[dict[str, Any]], path: str, order: str) -> None:
    """Width against states explored, one point per round (``--width --plot``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    xs = [r["explored_states"] for r in rounds]
    ys = [max(r["width"], 1e-17) for r in rounds]
    ax.loglog(xs, ys, "o-", label=order)
    ax.set_xlabel("states explored")
    ax.set_ylabel("width hi - lo")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _policy_name(parts: Parts, policy: str | None) -> str:
    return parts.policy.name if parts.policy else (Path(str(policy)).name if parts.uses_policy else "none")


def _check_explained(induced: InducedModel, spec: PropertySpec, used: str, explain: Explain, keep_model: bool,
                     clock: PhaseClock) -> CheckResult:
    """One property's check that also gives its value in every state (``explain.vectors``), for --values/--plot.

    The per-state vector comes from the same solver run as the result; the result states no bounds.
    """
    if used == "native":
        clock.start("checking", "distmc's native value iteration")
        explain.vectors = {"value": values_of(LocalEngine(matrix_of(induced), clock.detail), induced, spec)[0]}
        value = at_initial(explain.vectors["value"], induced.initial)
    else:
        clock.start("handing to Storm")
        storm_model = to_storm(induced, release=not keep_model)
        clock.start("checking", "Storm")
        value, explain.vectors = check_values(storm_model, spec, induced.kind, induced.initial)
    return CheckResult(value, None, method="other", checker=used)


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
