"""The public entry point: :func:`verify` a policy against a PRISM model and a PCTL property."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from distmc.assemble.reducer import InducedModel, assemble
from distmc.assemble.storm import export, to_storm
from distmc.check.checker import check
from distmc.errors import DistmcError
from distmc.explore.local import explore_local
from distmc.pipeline import Job

__all__ = ["Report", "verify"]


def _const_text(constants: str | dict[str, str] | None) -> str | None:
    if constants is None or isinstance(constants, str):
        return constants
    return ",".join(f"{k}={v}" for k, v in constants.items())


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

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def summary(self) -> str:
        r = self.result
        res = f"{r:.12g}" if isinstance(r, float) else f"[{r['min']:.12g}, {r['max']:.12g}] (min, max)"
        t = self.timings
        return (
            f"{self.property}  =  {res}\n"
            f"  model {self.model} ({self.mode}, policy {self.policy}); induced {self.induced}: "
            f"{self.states} states, {self.transitions} transitions, {self.choices} rows, depth {self.depth}\n"
            f"  time: explore {t['explore_s']:.3f} s, assemble {t['assemble_s']:.3f} s, "
            f"check {t['check_s']:.3f} s, total {t['total_s']:.3f} s"
        )


def verify(
    model_path: str | Path,
    prop: str,
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
    export_path: str | Path | None = None,
    keep_model: bool = False,
    trust_policy: bool = False,
) -> Report | tuple[Report, InducedModel]:
    """Explore the states the policy reaches, build the induced model and check ``prop`` with Storm.

    Args:
        model_path: PRISM file (dtmc or mdp).
        prop: PCTL property, ``P=? [...]`` or ``R{"r"}=? [...]`` (``min``/``max`` optional).
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
        max_states: stop with :class:`~distmc.errors.ResourceLimitError` beyond this many states.
        export_path: also write the induced model (``.umb`` or ``.drn``).
        keep_model: also return the :class:`InducedModel`.
        trust_policy: allow policy formats whose loading runs code stored in the file (SB3 ``.zip``).

    Example:
        >>> r = verify("gridworld.prism", 'P=? [F "crash"]', constants="N=6")  # doctest: +SKIP
        >>> r.result
        0.0625
    """
    if workers < 1:
        raise DistmcError(f"--workers must be at least 1, not {workers}")
    if driver is None:
        driver = "local" if workers == 1 and address is None else "ray"
    if driver not in ("local", "ray"):
        raise DistmcError(f"--driver must be 'local' or 'ray', not '{driver}'")
    if driver == "local" and workers != 1:
        raise DistmcError("the local driver runs one partition: use --driver ray for --workers > 1")
    t0 = time.perf_counter()
    job = Job(str(model_path), prop, _const_text(constants), policy, None if interface is None else str(interface), mode,
              threshold, resolve, trust_policy)
    parts = job.build(explorer=driver == "local")
    model, spec, codec, reward_names = parts.model, parts.spec, parts.codec, parts.reward_names
    t1 = time.perf_counter()
    if parts.expander is not None:
        explored = explore_local(parts.expander, codec.pack(model.initial_states), max_states=max_states)
    else:
        from distmc.explore.ray_driver import explore_ray

        explored = explore_ray(job, codec, codec.pack(model.initial_states), workers, address=address,
                               max_states=max_states)
    t2 = time.perf_counter()
    induced = assemble(explored, model, codec, spec.atoms, reward_names, force_mdp=parts.force_mdp)
    storm_model = to_storm(induced)
    t3 = time.perf_counter()
    result = check(storm_model, spec, induced.kind, induced.initial)
    t4 = time.perf_counter()
    if export_path is not None:
        export(induced, export_path)
    report = Report(
        result=result,
        states=induced.n_states,
        transitions=induced.n_transitions,
        mode=mode,
        workers=workers,
        driver=driver,
        worker_stats=list(explored.worker_stats),
        model=str(model_path),
        property=prop,
        policy=parts.policy.name if parts.policy else (Path(str(policy)).name if parts.uses_policy else "none"),
        induced=induced.kind,
        choices=induced.n_rows,
        initial_states=int(induced.initial.shape[0]),
        depth=int(explored.stats.get("depth", 0)),
        policy_states=int(explored.stats.get("policy_states", 0)),
        policy_calls=int(explored.stats.get("policy_calls", 0)),
        timings={
            "parse_s": t1 - t0,
            "explore_s": t2 - t1,
            "assemble_s": t3 - t2,
            "check_s": t4 - t3,
            "total_s": time.perf_counter() - t0,
        },
    )
    return (report, induced) if keep_model else report
