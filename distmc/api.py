"""The public entry point: :func:`verify` a policy against a PRISM model and a PCTL property."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from distmc.assemble.reducer import InducedModel, assemble
from distmc.assemble.storm import export, to_storm
from distmc.check.checker import EXACT_MAX_TRANSITIONS
from distmc.check.dispatch import EXACT_TIMEOUT_S, check_properties, single_property_states
from distmc.check.native import unsupported
from distmc.check.properties import PropertySpec
from distmc.check.result import Precision, result_entry, result_line
from distmc.errors import DistmcError, PropertyError, ResourceLimitError
from distmc.explore.checkpoint import Checkpoint
from distmc.explore.limits import Limits, available_bytes, parse_duration, parse_memory, rss_bytes
from distmc.explore.local import explore_local
from distmc.pipeline import Job

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
    checker: str = "storm"  # "storm", or "native" (distmc's value iteration, :mod:`distmc.check.native`)
    bounds: list[float] | dict[str, list[float]] | None = None  # guaranteed to contain the exact value (see result.py)
    truth: bool | None = None  # a threshold property's truth value at the initial states
    precision: str = "1e-12 absolute"  # what the sound methods were asked for
    results: list[dict[str, object]] = field(default_factory=list)  # one per property, see :func:`result_entry`
    single_states: list[int] = field(default_factory=list)  # several properties: each one's own model's states

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

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
            f"  time: explore {t['explore_s']:.3f} s, assemble {t['assemble_s']:.3f} s, "
            f"check {t['check_s']:.3f} s, total {t['total_s']:.3f} s"
            + ("" if self.checker == "storm" else f"\n  checked by distmc's {self.checker} checker, not Storm")
            + cost
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
    gpus_per_worker: float | None = None,
    threads_per_worker: int | None = None,
    policy_servers: int = 0,
    export_path: str | Path | None = None,
    keep_model: bool = False,
    trust_policy: bool = False,
    checker: str = "auto",
    props: list[str] | None = None,
    precision: float | None = None,
    precision_abs: float | None = None,
    exact: bool = False,
    sound_mdp: bool = False,
) -> Report | tuple[Report, InducedModel]:
    """Explore the states the policy reaches, build the induced model and check ``prop`` with Storm.

    Args:
        model_path: PRISM file (dtmc or mdp); None with ``resume`` (the checkpoint names it).
        prop: PCTL property, ``P=? [...]``, ``P>=0.5 [...]``, ``R{"r"}=? [...]``, ``S=? [...]`` (``min``/``max``
            optional), or several separated by ``;``; None with ``props`` or ``resume``.
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
    if checker not in ("auto", "storm", "native"):
        raise DistmcError(f"--checker must be auto, storm or native, not '{checker}'")
    if not 0.0 <= threshold < 1.0:
        raise DistmcError(f"--threshold must be in [0, 1), not {threshold}")
    texts = ([prop] if prop is not None else []) + list(props or [])
    prop = "; ".join(texts) if texts else None
    if resume is None and (model_path is None or prop is None):
        raise DistmcError("a model and a property are needed (or --resume DIR to continue a checkpointed run)")
    prec = Precision.from_options(precision, precision_abs, exact, sound_mdp)
    if exact and checker == "native":
        raise DistmcError("--exact checks with Storm's exact engine: not with --checker native")
    if prec.relative and checker == "native":
        raise DistmcError("the native checker checks to an absolute precision only (--precision-abs): use "
                          "--checker storm for --precision")
    limits = Limits(max_states, parse_memory(max_memory), parse_duration(timeout))
    t0 = time.perf_counter()
    job = Job(str(model_path), str(prop), _const_text(constants), policy, None if interface is None else str(interface),
              mode, threshold, resolve, trust_policy)
    ckpt: Checkpoint | None = None
    if resume is not None:
        if checkpoint_dir is not None and Path(checkpoint_dir).resolve() != Path(resume).resolve():
            raise DistmcError("--resume DIR goes on writing to DIR: do not give another --checkpoint-dir")
        ckpt = Checkpoint.open(resume)
        job = _resumed_job(ckpt.job, job, model_path, prop)
    if driver is None:
        driver = ("local" if workers == 1 and address is None and resume is None and checkpoint_dir is None
                  and not policy_servers else "ray")
    if driver not in ("local", "ray"):
        raise DistmcError(f"--driver must be 'local' or 'ray', not '{driver}'")
    if driver == "local" and workers != 1:
        raise DistmcError("the local driver runs one partition: use --driver ray for --workers > 1")
    if driver == "local" and policy_servers:
        raise DistmcError("policy servers serve Ray workers: use --driver ray (or leave --driver out)")
    if driver == "local" and (checkpoint_dir is not None or resume is not None):
        raise DistmcError("checkpoints are written by the Ray driver: use --driver ray (or leave --driver out)")
    parts = job.build(explorer=driver == "local")
    model, codec, reward_names = parts.model, parts.codec, parts.reward_names
    if checkpoint_dir is not None and ckpt is None:
        ckpt = Checkpoint.create(checkpoint_dir, job, codec.dtype, reward_names)
    t1 = time.perf_counter()
    if parts.expander is not None:
        explored = explore_local(parts.expander, codec.pack(model.initial_states), limits=limits, progress=progress)
    else:
        from distmc.explore.ray_driver import explore_ray

        explored = explore_ray(job, codec, codec.pack(model.initial_states), workers, address=address,
                               limits=limits, checkpoint=ckpt, progress=progress, gpus_per_worker=gpus_per_worker,
                               threads_per_worker=threads_per_worker,
                               policy_servers=policy_servers if parts.uses_policy else 0)
    t2 = time.perf_counter()
    induced = assemble(explored, model, codec, parts.props.atoms, reward_names, force_mdp=parts.force_mdp)
    explored.target_chunks, explored.prob_chunks = [], []  # the induced model holds them now (merged in place)
    specs = parts.props.specs
    if exact and induced.n_transitions > EXACT_MAX_TRANSITIONS:
        raise DistmcError(f"--exact: the induced model has {induced.n_transitions} transitions, more than the exact "
                          f"engine's limit of {EXACT_MAX_TRANSITIONS}; run without --exact for a sound bound")
    checkers = ["storm" if exact else _choose_checker(checker, limits, induced, s, int(explored.stats.get("depth", 0)),
                                                      release=not keep_model) for s in specs]
    used = checkers[0] if len(set(checkers)) == 1 else "+".join(dict.fromkeys(checkers))
    if export_path is not None:
        export(induced, export_path)
    single = single_property_states(induced, parts.props, codec) if len(specs) > 1 else []
    left = None if limits.timeout is None else limits.timeout - (time.perf_counter() - t0)
    checked = check_properties(parts.props, induced, checkers, prec,
                               lambda: to_storm(induced, release=not keep_model, exact=exact),
                               EXACT_TIMEOUT_S if left is None else max(1.0, min(EXACT_TIMEOUT_S, left)))
    t4 = time.perf_counter()
    t3 = t4 - sum(r.check_s for r in checked)  # the hand-off to Storm counts as assembly, as before
    entries = [result_entry(s.text, s.name, r) for s, r in zip(specs, checked, strict=True)]
    first = entries[0]
    report = Report(
        result=checked[0].value,
        bounds=first["bounds"],  # type: ignore[arg-type]
        truth=checked[0].truth,
        precision=prec.describe(),
        results=entries,
        single_states=single,
        states=induced.n_states,
        transitions=induced.n_transitions,
        mode=mode,
        workers=workers,
        driver=driver,
        worker_stats=list(explored.worker_stats),
        model=job.model_path,
        property=job.prop,
        policy=parts.policy.name if parts.policy else (Path(str(policy)).name if parts.uses_policy else "none"),
        induced=induced.kind,
        choices=induced.n_rows,
        initial_states=int(induced.initial.shape[0]),
        depth=int(explored.stats.get("depth", 0)),
        policy_states=int(explored.stats.get("policy_states", 0)),
        policy_calls=int(explored.stats.get("policy_calls", 0)),
        restarts=int(explored.stats.get("restarts", 0)),
        checker=used,
        timings={
            "parse_s": t1 - t0,
            "explore_s": t2 - t1,
            **{k: float(v) for k, v in explored.stats.items() if k in _EXPLORE_SPLIT},
            "assemble_s": t3 - t2,
            "check_s": t4 - t3,
            "total_s": time.perf_counter() - t0,
        },
    )
    return (report, induced) if keep_model else report
