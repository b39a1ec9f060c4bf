"""The public entry point: :func:`verify` a policy against a PRISM model and a PCTL property."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from distmc._internal.phases import PHASES, PhaseClock
from distmc.assemble.reducer import InducedModel, assemble
from distmc.assemble.storm import export, to_storm
from distmc.check.checker import EXACT_MAX_TRANSITIONS, check_values
from distmc.check.dispatch import EXACT_TIMEOUT_S, check_properties, single_property_states
from distmc.check.native import LocalEngine, at_initial, matrix_of, unsupported, values_of
from distmc.check.properties import PropertySpec
from distmc.check.result import CheckResult, Precision, result_entry, result_line, summarise
from distmc.errors import DistmcError, PropertyError, ResourceLimitError
from distmc.explain.report import Explain, summary_lines
from distmc.explore.checkpoint import Checkpoint
from distmc.explore.limits import Limits, available_bytes, parse_duration, parse_memory, peak_rss_bytes, rss_bytes
from distmc.explore.local import explore_local
from distmc.explore.partition import Explored
from distmc.pipeline import Job, Parts

if TYPE_CHECKING:
    from distmc.explore.ray.coordinator import RayRows

__all__ = ["Report", "verify"]

log = logging.getLogger(__name__)


def _const_text(constants: str | dict[str, str] | None) -> str | None:
    if constants is None or isinstance(constants, str):
        return constants
    return ",".join(f"{k}={v}" for k, v in constants.items())


#: Parts of the exploration time a driver reports: Ray actors' start-up, the levels (of which ``place_s``: placing
#: each level's rows in global order while the next level runs), gathering the partitions' states and last rows
#: into the reducer (Ray driver); seconds inside the policy's forward passes (in-process driver).
_EXPLORE_SPLIT = ("startup_s", "levels_s", "place_s", "gather_s", "policy_s")


#: Memory the hand-off to Storm and Storm's check need beyond what the process holds after exploration, per
#: transition, when the reducer keeps its copy (Storm's matrix, the UMB import's buffers, the check's submatrix).
#: Measured on avoid 8x8 (36.9 M transitions): 58 B with the reducer's copy released (74 B without); rounded up.
#: On avoid 12x12 (354 M transitions) an estimate of 40 B let a run under --max-memory 21G be killed for memory.
STORM_BYTES_PER_TRANSITION = 80

#: What gathering a Ray run's rows into the driver costs per transition: the rows themselves (int64 target and
#: float64 probability), and with several workers a second copy while they are placed in global order.
GATHER_BYTES_PER_TRANSITION = 16


def _choose_ray_checker(checker: str, limits: Limits, rows: RayRows, spec: PropertySpec, kind: str, workers: int,
                        worker_rss: int) -> str:
    """``storm`` (gather the rows into this process) or ``distributed`` for a Ray run with the rows on the actors.

    ``auto``: Storm when gathering the rows and Storm's import and check fit in this process (under
    ``--max-memory``, less what the workers hold, else this machine's available memory), else the distributed
    check when it can check the property, else Storm as :func:`_choose_checker` decides.
    """
    if checker == "distributed":
        why = unsupported(spec, kind)
        if why is not None:
            raise PropertyError(f"--checker distributed cannot check '{spec.text}': {why}")
        return "distributed"
    transitions = rows.n_transitions
    per = STORM_BYTES_PER_TRANSITION + GATHER_BYTES_PER_TRANSITION * (2 if workers > 1 else 1) - 16
    rss = rss_bytes()
    need = rss + per * transitions
    budget = limits.max_memory - worker_rss if limits.max_memory is not None else rss + available_bytes()
    if need <= budget or unsupported(spec, kind) is not None:
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
        raise DistmcError(f"--resume: the checkpoint is of {saved.model_path}, not {model_path}")
    if prop is not None and given.prop != saved.prop:
        raise DistmcError(f"--resume: the checkpointed run checks {saved.prop!r}, not {given.prop!r}")
    if given.constants is not None and given.constants != saved.constants:
        raise DistmcError(f"--resume: the checkpointed run has constants {saved.constants!r}, not {given.constants!r}")
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

    def to_json(self) -> str:
        d = asdict(self)
        for name in ("traces", "traces_mass", "riskiest_states"):
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
            f"  model {self.model} ({self.mode}, policy {self.policy}); induced {self.induced}: "
            f"{self.states} states, {self.transitions} transitions, {self.choices} rows, depth {self.depth}\n"
            f"  time: {_time_line(t)}"
            + ("" if self.checker == "storm" else f"\n  checked by distmc's {self.checker} checker, not Storm")
            + cost
            + "".join(f"\n{line}" for line in summary_lines(self.traces, self.traces_mass, self.riskiest_states,
                                                               self.result))
        )


def verify(
    model_path: str | Path | None,
    prop: str | None,
    *,
    constants: str | dict[str, str] | None = None,
    policy: str | None = "uniform",
    interface: str | Path | None = None,
    mode: str = "stochastic",
    threshold: float = 0.0,
    resolve: str = "none",
    workers: int = 1,
    driver: str | None = None,
    address: str | None = None,
    max_states: int | None = None,
    max_memory: str | int | None = None,
    timeout: str | float | None = None,
    checkpoint_dir: str | Path | None = None,
    resume: str | Path | None = None,
    progress: Callable[[dict[str, float]], None] | None = None,
    phases: Callable[[str, str], None] | None = None,
    gpus_per_worker: float | None = None,
    threads_per_worker: int | None = None,
    policy_servers: int = 0,
    export_path: str | Path | None = None,
    keep_model: bool = False,
    trust_policy: bool = False,
    checker: str = "auto",
    traces: int = 0,
    values: str | Path | None = None,
    plot: str | Path | None = None,
    plot_vars: str | None = None,
    props: list[str] | None = None,
    precision: float | None = None,
    precision_abs: float | None = None,
    exact: bool = False,
    sound_mdp: bool = False,
) -> Report | tuple[Report, InducedModel]:
    """Explore the states the policy reaches, build the induced model and check ``prop`` with Storm.

    Args:
        model_path: PRISM file (dtmc or mdp); None with ``resume`` (the checkpoint names it).
        prop: PCTL property, ``P=? [...]`` or ``R{"r"}=? [...]`` (``min``/``max`` optional); None with ``resume``.
        constants: undefined constants, ``"N=3,p=0.1"``.
        policy: ``"uniform"``, a policy file (TorchScript, state_dict, SB3 ``.zip``) or ``module:function``
            (see :func:`distmc.policy.load_policy`).
        interface: interface file of the network (features, actions, output); default: the one saved beside the
            policy file (``trained.pt`` -> ``trained.json``), else every variable and action label.
        mode: ``stochastic``, ``deterministic`` or ``monolithic``.
        threshold: in stochastic mode, keep actions with pi(a|s) > threshold.
        resolve: ``none`` (same-label choices stay nondeterministic) or ``uniform``.
        workers: number of partitions (Ray actors with the ray driver).
        driver: ``local`` (in-process, one partition) or ``ray``; default: local for one worker and no address.
        address: a Ray cluster to join (``auto`` or ``HOST:PORT``); None starts a local Ray when needed.
        max_states: stop with :class:`~distmc.errors.ResourceLimitError` (and its partial report) beyond this
            many states.
        max_memory: the same beyond this much memory (bytes, or a size such as ``"8G"``).
        timeout: the same after this long (seconds, or ``"15m"``).
        checkpoint_dir: write every explored level there (Arrow IPC, :mod:`distmc.explore.checkpoint`); a lost
            worker is then replaced and the run goes on. Uses the Ray driver.
        resume: continue the run checkpointed in this directory (model, property, policy and mode come from it;
            arguments that are given must agree). Uses the Ray driver; ``workers`` may differ from the first run.
        progress: called after every explored level with a dict (depth, states, frontier, transitions, ...).
        phases: called with a phase's name (``parsing``, ``exploring``, ``assembling``, ``exporting``,
            ``handing to Storm``, ``checking``) and a detail when it starts (:mod:`distmc._internal.phases`; the
            live line shows it, ``--log-level info`` logs each phase's start and end).
        gpus_per_worker: Ray driver: the GPU share each worker asks for (None: the cluster's GPUs split evenly
            over the workers, at most one each; 0: policies on the CPU).
        threads_per_worker: Ray driver: the compiled kernels' threads in each worker (None: the cluster's CPUs
            divided by the workers, at least one).
        policy_servers: Ray driver: 0, every worker loads its own policy replica; S > 0, S policy-server actors
            (one GPU each where the cluster has them) evaluate the policy for the workers.
        export_path: also write the induced model (``.umb`` or ``.drn``).
        keep_model: also return the :class:`InducedModel`.
        trust_policy: allow policy formats whose loading runs code stored in the file (SB3 ``.zip``).
        checker: ``storm`` (the reference), ``native`` (distmc's own check of reachability probabilities on
            DTMCs, :mod:`distmc.check.native`) or ``auto``: Storm unless it would not fit in memory
            (``max_memory``, else the machine's available memory) and the native checker can check the property.
        traces: also find the K most probable paths to the target of a reachability property
            (:mod:`distmc.explain.traces`; ``Report.traces``, ``Report.traces_mass``).
        values: also write the property's value in every state to this Parquet file
            (:mod:`distmc.explain.values`); ``Report.riskiest_states`` lists the 5 states most at risk.
        plot: also draw the values as a heatmap over two variables into this image (:mod:`distmc.explain.plot`).
        plot_vars: the heatmap's variables, ``"x,y"`` (default: the first two int variables).
        props: more properties (each may hold several, ``;``-separated, and ``const`` definitions), all checked on
            one exploration; ``report.results`` has one entry each.
        precision: relative precision of the sound methods (``--precision``); at most one of it and
            ``precision_abs``.
        precision_abs: absolute precision of the sound methods (``--precision-abs``; default 1e-12).
        exact: check with Storm's exact rational engine (models up to
            :data:`~distmc.check.checker.EXACT_MAX_TRANSITIONS` transitions; a check that takes longer than
            :data:`~distmc.check.dispatch.EXACT_TIMEOUT_S`, or than ``timeout`` leaves, stops with
            :class:`~distmc.errors.ResourceLimitError`).
        sound_mdp: check induced MDPs by Storm's interval iteration, with bounds (``--sound-mdp``); else by
            Storm's default min-max method, which states none.


    Example:
        >>> r = verify("gridworld.prism", 'P=? [F "crash"]', constants="N=6")  # doctest: +SKIP
        >>> r.result
        0.0625
    """
    if workers < 1:
        raise DistmcError(f"--workers must be at least 1, not {workers}")
    if policy_servers < 0:
        raise DistmcError(f"--policy-servers must be 0 or more, not {policy_servers}")
    if threads_per_worker is not None and threads_per_worker < 1:
        raise DistmcError(f"--threads-per-worker must be at least 1, not {threads_per_worker}")
    if checker not in ("auto", "storm", "native", "distributed"):
        raise DistmcError(f"--checker must be auto, storm, native or distributed, not '{checker}'")
    if not 0.0 <= threshold < 1.0:
        raise DistmcError(f"--threshold must be in [0, 1), not {threshold}")
    texts = ([prop] if prop is not None else []) + list(props or [])
    prop = "; ".join(texts) if texts else None
    if resume is None and (model_path is None or prop is None):
        raise DistmcError("a model and a property are needed (or --resume DIR to continue a checkpointed run)")
    prec = Precision.from_options(precision, precision_abs, exact, sound_mdp)
    if exact and checker in ("native", "distributed"):
        raise DistmcError(f"--exact checks with Storm's exact engine: not with --checker {checker}")
    if prec.relative and checker in ("native", "distributed"):
        raise DistmcError(f"the {checker} checker checks to an absolute precision only (--precision-abs): use "
                          "--checker storm for --precision")
    limits = Limits(max_states, parse_memory(max_memory), parse_duration(timeout))
    clock = PhaseClock(phases)
    clock.start("parsing")
    job = Job(str(model_path), str(prop), _const_text(constants), policy, None if interface is None else str(interface),
              mode, threshold, resolve, trust_policy)
    ckpt: Checkpoint | None = None
    if resume is not None:
        if checkpoint_dir is not None and Path(checkpoint_dir).resolve() != Path(resume).resolve():
            raise DistmcError("--resume DIR goes on writing to DIR: do not give another --checkpoint-dir")
        ckpt = Checkpoint.open(resume)
        job = _resumed_job(ckpt.job, job, model_path, prop)
        checker = ckpt.meta.get("checker", "auto") if checker == "auto" else checker  # the one the run asked for
    if driver is None:
        driver = ("local" if workers == 1 and address is None and resume is None and checkpoint_dir is None
                  and not policy_servers and checker != "distributed" else "ray")
    if driver not in ("local", "ray"):
        raise DistmcError(f"--driver must be 'local' or 'ray', not '{driver}'")
    if driver == "local" and workers != 1:
        raise DistmcError("the local driver runs one partition: use --driver ray for --workers > 1")
    if driver == "local" and policy_servers:
        raise DistmcError("policy servers serve Ray workers: use --driver ray (or leave --driver out)")
    if driver == "local" and (checkpoint_dir is not None or resume is not None):
        raise DistmcError("checkpoints are written by the Ray driver: use --driver ray (or leave --driver out)")
    if driver == "local" and checker == "distributed":
        raise DistmcError("--checker distributed checks on the Ray workers: use --driver ray (or leave --driver out)")
    if checker == "distributed" and (keep_model or export_path is not None):
        raise DistmcError("--checker distributed leaves the model on the workers: to export it (or keep it), use "
                          "--checker storm or native, which gather it into this process")
    parts = job.build(explorer=driver == "local")
    model, spec, codec, reward_names = parts.model, parts.spec, parts.codec, parts.reward_names
    specs = parts.props.specs
    explain = Explain(traces, values, plot, plot_vars)
    if explain.active and len(specs) > 1:
        raise DistmcError("--traces, --values and --plot explain one property: give one --prop with them")
    explain.validate(parts)
    if checker == "distributed" and len(specs) > 1:
        raise DistmcError("--checker distributed checks one property a run (give one --prop), or use --checker auto")
    if checkpoint_dir is not None and ckpt is None:
        ckpt = Checkpoint.create(checkpoint_dir, job, codec.dtype, reward_names, checker=checker)
    clock.start("exploring", driver)
    # --values alone works on the workers (each writes its part); traces and the picture need the whole model
    values_on_workers = checker == "distributed" and explain.wants_values and not traces and plot is None
    if checker == "distributed" and explain.active and not values_on_workers:
        raise DistmcError("--traces and --plot work on the model gathered to this process: use --checker auto, "
                          "storm or native with them (--values alone works with --checker distributed: each "
                          "worker writes its part of the table)")
    rows_stay = (driver == "ray" and checker in ("auto", "distributed") and export_path is None and not keep_model
                 and (not explain.active or values_on_workers) and len(specs) == 1 and not exact
                 and not prec.relative)
    if parts.expander is not None:
        explored = explore_local(parts.expander, codec.pack(model.initial_states), limits=limits, progress=progress)
    else:
        from distmc.explore.ray import explore_ray

        explored = explore_ray(job, codec, codec.pack(model.initial_states), workers, address=address,
                               limits=limits, checkpoint=ckpt, progress=progress, gpus_per_worker=gpus_per_worker,
                               threads_per_worker=threads_per_worker,
                               policy_servers=policy_servers if parts.uses_policy else 0, rows_stay=rows_stay)
    clock.start("assembling")
    if not isinstance(explored, Explored):  # the rows are on the Ray workers
        ray_rows = explored
        ok = False
        try:
            kind = "mdp" if parts.force_mdp else "dtmc"  # a policy-induced model with several rows fails in the check
            used = _choose_ray_checker(checker, limits, ray_rows, spec, kind, workers,
                                       sum(int(w.get("rss", 0)) for w in ray_rows.worker_stats))
            if used == "distributed":
                clock.start("checking", "distributed, on the Ray workers")
                out = ray_rows.check(prec.eps, progress=progress,
                                     values_dir=str(values) if values_on_workers else None)
                if values_on_workers:
                    explain.at_risk = out["at_risk"]
                timings = clock.stop()
                # the workers build their parts of the model (and the exchange plan) first: that is assembly
                timings["assemble_s"] += float(out["build_s"])
                timings["check_s"] -= float(out["build_s"])
                sound = spec.solution == "sound"
                value, bounds = summarise(out["value"], out["lower"] if sound else None,
                                          out["upper"] if sound else None)
                res = CheckResult(value, bounds, method="sound" if sound else "steps", checker="distributed",
                                  check_s=timings["check_s"])
                ok = True
                report = _distributed_report(job, parts, workers, driver, ray_rows, res, timings, prec)
                report.riskiest_states = explain.at_risk
                return report
            explored = ray_rows.gather()
            ok = True
        finally:
            ray_rows.close(ok)
    induced = assemble(explored, model, codec, parts.props.atoms, reward_names, force_mdp=parts.force_mdp)
    explored.target_chunks, explored.prob_chunks = [], []  # the induced model holds them now (merged in place)
    if explain.active:  # traces and depths need the transitions, which the hand-off to Storm may release
        explain.before_check(induced, parts, job, phase=clock.start)
    if exact and induced.n_transitions > EXACT_MAX_TRANSITIONS:
        raise DistmcError(f"--exact: the induced model has {induced.n_transitions} transitions, more than the exact "
                          f"engine's limit of {EXACT_MAX_TRANSITIONS}; run without --exact for a sound bound")
    asked = checker if checker != "auto" or driver == "local" else "storm"  # Ray's auto chose Storm: it fits
    checkers = ["storm" if exact else _choose_checker(asked, limits, induced, s, int(explored.stats.get("depth", 0)),
                                                      release=not keep_model) for s in specs]
    used = checkers[0] if len(set(checkers)) == 1 else "+".join(dict.fromkeys(checkers))
    if export_path is not None:
        clock.start("exporting", str(export_path))
        export(induced, export_path)
    single = single_property_states(induced, parts.props, codec) if len(specs) > 1 else []
    if explain.wants_values:  # one property: its value in every state, from the same solver run as the result
        checked = [_check_explained(induced, spec, used, explain, keep_model, clock)]
        explain.after_check(induced, parts, explain.vectors,
                            f"{job.prop} on {Path(job.model_path).name}, policy {_policy_name(parts, job.policy)}",
                            phase=clock.start)
    else:
        if "native" in checkers or exact:  # natives run first; Storm's hand-off starts its own phases below
            clock.start("checking", "Storm's exact engine" if exact else "distmc's native value iteration")
        left = None if limits.timeout is None else limits.timeout - clock.elapsed()
        storm_box: list[object] = []

        def storm_model() -> object:  # handed over once, when the first property Storm checks needs it
            if not storm_box:
                clock.start("handing to Storm")
                storm_box.append(to_storm(induced, release=not keep_model, exact=exact))
                clock.start("checking", "Storm")
            return storm_box[0]

        checked = check_properties(parts.props, induced, checkers, prec, storm_model,
                                   EXACT_TIMEOUT_S if left is None else max(1.0, min(EXACT_TIMEOUT_S, left)),
                                   progress=clock.detail)
    timings = clock.stop()
    entries = [result_entry(sp.text, sp.name, r) for sp, r in zip(specs, checked, strict=True)]
    report = Report(
        result=checked[0].value,
        bounds=entries[0]["bounds"],  # type: ignore[arg-type]
        truth=checked[0].truth,
        precision=prec.describe(),
        results=entries,
        single_states=single,
        states=induced.n_states,
        transitions=induced.n_transitions,
        mode=job.mode,  # after --resume: the checkpoint's, not this call's defaults
        workers=workers,
        driver=driver,
        worker_stats=list(explored.worker_stats),
        model=job.model_path,
        property=job.prop,
        policy=_policy_name(parts, job.policy),  # after --resume: the checkpoint's policy
        induced=induced.kind,
        choices=induced.n_rows,
        initial_states=int(induced.initial.shape[0]),
        depth=int(explored.stats.get("depth", 0)),
        policy_states=int(explored.stats.get("policy_states", 0)),
        policy_calls=int(explored.stats.get("policy_calls", 0)),
        restarts=int(explored.stats.get("restarts", 0)),
        checker=used,
        memory={"driver_peak_bytes": peak_rss_bytes(),
                "worker_peak_bytes": [int(w.get("peak_rss", 0)) for w in explored.worker_stats]},
        traces=explain.found,
        traces_mass=explain.mass,
        riskiest_states=explain.at_risk,
        timings={"handoff_s": 0.0, **timings,
                 **{k: float(v) for k, v in explored.stats.items() if k in _EXPLORE_SPLIT}},
    )
    return (report, induced) if keep_model else report


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


def _distributed_report(job: Job, parts: Parts, workers: int, driver: str, rows: RayRows, res: CheckResult,
                        timings: dict[str, float], prec: Precision) -> Report:
    """The report of a run checked on the Ray workers (no induced model in this process)."""
    stats = rows.stats
    entry = result_entry(parts.spec.text, parts.spec.name, res)
    return Report(
        result=res.value,
        bounds=entry["bounds"],  # type: ignore[arg-type]
        precision=prec.describe(),
        results=[entry],
        states=rows.n_states,
        transitions=rows.n_transitions,
        mode=job.mode,
        workers=workers,
        driver=driver,
        worker_stats=list(rows.worker_stats),
        model=job.model_path,
        property=job.prop,
        policy=_policy_name(parts, job.policy),
        induced="dtmc",
        choices=rows.n_states,
        initial_states=rows.n_initial,
        depth=int(stats.get("depth", 0)),
        policy_states=int(stats.get("policy_states", 0)),
        policy_calls=int(stats.get("policy_calls", 0)),
        restarts=int(stats.get("restarts", 0)),
        checker="distributed",
        memory={"driver_peak_bytes": peak_rss_bytes(),
                "worker_peak_bytes": [int(w.get("peak_rss", 0)) for w in rows.worker_stats]},
        timings={"handoff_s": 0.0, **timings, **{k: float(v) for k, v in stats.items() if k in _EXPLORE_SPLIT}},
    )
