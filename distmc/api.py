"""The public entry point: :func:`verify` a policy against a PRISM model and a PCTL property."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from distmc.assemble.reducer import InducedModel, assemble
from distmc.assemble.storm import export, to_storm
from distmc.check.checker import check
from distmc.check.properties import parse_property
from distmc.errors import DistmcError
from distmc.explore.expander import MODES, Expander
from distmc.explore.local import explore_local
from distmc.model.kernel import Kernel
from distmc.model.packing import StateCodec
from distmc.model.program import load_model
from distmc.policy import load_policy

__all__ = ["Report", "verify"]


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
    timings: dict[str, float] = field(default_factory=dict)

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
    max_states: int | None = None,
    export_path: str | Path | None = None,
    keep_model: bool = False,
) -> Report | tuple[Report, InducedModel]:
    """Explore the states the policy reaches, build the induced model and check ``prop`` with Storm.

    Args:
        model_path: PRISM file (dtmc or mdp).
        prop: PCTL property, ``P=? [...]`` or ``R{"r"}=? [...]`` (``min``/``max`` optional).
        constants: undefined constants, ``"N=3,p=0.1"``.
        policy: ``"uniform"`` or a TorchScript file.
        interface: interface file of the network (features, actions, output).
        mode: ``stochastic``, ``deterministic`` or ``monolithic``.
        threshold: in stochastic mode, keep actions with pi(a|s) > threshold.
        resolve: ``none`` (same-label choices stay nondeterministic) or ``uniform``.
        workers: number of partitions; only 1 (the in-process driver) is available in this version.
        max_states: stop with :class:`~distmc.errors.ResourceLimitError` beyond this many states.
        export_path: also write the induced model (``.umb`` or ``.drn``).
        keep_model: also return the :class:`InducedModel`.

    Example:
        >>> r = verify("gridworld.prism", 'P=? [F "crash"]', constants="N=6")  # doctest: +SKIP
        >>> r.result
        0.0625
    """
    if mode not in MODES:
        raise DistmcError(f"mode must be one of {', '.join(MODES)}, not '{mode}'")
    if workers != 1:
        raise DistmcError("only --workers 1 (the in-process driver) is available in this version")
    t0 = time.perf_counter()
    model = load_model(model_path, constants)
    spec = parse_property(prop, model)
    pol = load_policy(policy, model, interface) if mode != "monolithic" and model.model_type == "mdp" else None
    reward_names = []
    if spec.is_reward:
        reward_names = [model.reward(spec.reward_name).name]
    codec = StateCodec(model.lo, model.hi)
    kernel = Kernel(model, codec)
    expander = Expander(
        model, kernel, codec, pol, mode, terminal=spec.terminal_mask, threshold=threshold, resolve=resolve,
        reward_names=reward_names,
    )
    t1 = time.perf_counter()
    explored = explore_local(expander, codec.pack(model.initial_states), max_states=max_states)
    t2 = time.perf_counter()
    induced = assemble(
        explored, model, codec, spec.atoms, reward_names,
        force_mdp=(model.model_type == "mdp" and pol is None),
    )
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
        model=str(model_path),
        property=prop,
        policy="none" if pol is None else pol.name,
        induced=induced.kind,
        choices=induced.n_rows,
        initial_states=int(induced.initial.shape[0]),
        depth=int(explored.stats.get("depth", 0)),
        policy_states=int(explored.stats.get("policy_states", 0)),
        timings={
            "parse_s": t1 - t0,
            "explore_s": t2 - t1,
            "assemble_s": t3 - t2,
            "check_s": t4 - t3,
            "total_s": time.perf_counter() - t0,
        },
    )
    return (report, induced) if keep_model else report
