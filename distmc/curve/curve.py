"""``distmc curve``: value against training step for a run's checkpoints (:func:`curve`), table and picture."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from distmc._internal.atomic import save_figure
from distmc.curve.engine import CurvePoint, SharedModel, checkpoint_step
from distmc.errors import UsageError
from distmc.options import VerifyOptions

__all__ = ["CurveReport", "curve", "plot_curve"]


@dataclass
class CurveReport:
    """What :func:`curve` found (``distmc curve --json`` writes it)."""

    model: str
    property: str
    method: str  # "shared" (one exploration) or "separate" (one run per policy)
    points: list[CurvePoint] = field(default_factory=list)
    explore_s: float = 0.0  # the shared exploration (0 for separate runs)
    total_s: float = 0.0
    mdp_states: int = 0  # the shared MDP's states and transitions (0 for separate runs)
    mdp_transitions: int = 0
    note: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def table(self) -> str:
        head = f"{self.property} on {Path(self.model).name}, {len(self.points)} policies ({self.method}"
        head += (
            f": one exploration, {self.mdp_states} states, {self.mdp_transitions} MDP transitions, "
            f"{self.explore_s:.2f} s)"
            if self.method == "shared"
            else ": a full run each)"
        )
        lines = [head, f"{'step':>10}  {'value':>16}  {'seconds':>8}  {'states':>9}  policy"]
        for p in self.points:
            lines.append(f"{p.step:>10}  {p.value:>16.12g}  {p.seconds:>8.3f}  {p.states:>9}  {p.policy}")
        lines.append(f"total {self.total_s:.2f} s" + (f"; {self.note}" if self.note else ""))
        return "\n".join(lines)


def curve(
    model_path: str | Path,
    prop: str,
    policies: list[str],
    options: VerifyOptions | None = None,
    *,
    steps: list[int] | None = None,
    separate: bool = False,
    **kw: Any,
) -> CurveReport:
    """Verify each policy of ``policies`` (a training run's checkpoints) for ``prop``.

    Args:
        model_path: the PRISM mdp.
        prop: one property.
        policies: policy files (any format ``distmc run --policy`` reads), in training order.
        options: the runs' options (constants, interface, mode, threshold, checker, precision).
        steps: each policy's training step (default: the last number of its file name, else its position).
        separate: one full :func:`~distmc.api.verify` per policy instead of one shared exploration (the
            comparison; also what a model with same-label choices gets, see :mod:`distmc.curve.engine`).
        kw: changes to ``options`` by name.

    Example:
        >>> r = curve("avoid.prism", 'P=? [F<=30 "crash"]', ["ckpt_1000.pt2", "ckpt_2000.pt2"],
        ...           constants="N=5,slickness=0.1")  # doctest: +SKIP
        >>> [p.value for p in r.points]
    """
    opts = VerifyOptions.build(options, **kw)
    if not policies:
        raise UsageError("distmc curve needs at least one policy (--policies CKPT ...)")
    if steps is not None and len(steps) != len(policies):
        raise UsageError(f"--steps gives {len(steps)} steps for {len(policies)} policies")
    if opts.mode == "monolithic":
        raise UsageError("distmc curve verifies policies: use --mode stochastic or deterministic")
    at = steps or [checkpoint_step(p, i) for i, p in enumerate(policies)]
    t0 = time.perf_counter()
    report = CurveReport(str(model_path), prop, "separate" if separate else "shared")
    shared = None
    if not separate:
        shared = SharedModel(model_path, prop, opts)
        if shared.same_label:
            report.note = (
                "a state enables several choices of one action label: each policy is explored again (separate runs)"
            )
            report.method, shared = "separate", None
        else:
            report.explore_s = shared.explore_s
            report.mdp_states, report.mdp_transitions = shared.n_states, shared.mdp.n_transitions
    if shared is not None:
        report.points = shared.check_many(list(zip(policies, at, strict=True)))
    else:
        report.points = [_separate(model_path, prop, opts, p, s) for p, s in zip(policies, at, strict=True)]
    report.total_s = time.perf_counter() - t0
    return report


def _separate(model_path: str | Path, prop: str, opts: VerifyOptions, policy: str, step: int) -> CurvePoint:
    from distmc.api import Report, verify

    t0 = time.perf_counter()
    r = verify(model_path, prop, VerifyOptions.build(opts, policy=policy))
    assert isinstance(r, Report)
    if isinstance(r.result, dict):
        raise UsageError(
            f"{policy}: the induced model is an MDP (same-label choices the policy does not resolve), "
            "its value a min and a max: use --resolve uniform for a curve"
        )
    bounds = r.bounds if isinstance(r.bounds, list) else None
    return CurvePoint(
        policy, step, float(r.result), time.perf_counter() - t0, r.states, r.transitions, False, bounds, r.truth
    )


def plot_curve(report: CurveReport, path: str | Path) -> Path:
    """Value against training step (line), and each checkpoint's verification time (bars), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [p.step for p in report.points]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, [p.value for p in report.points], "o-", color="tab:red", label="value")
    ax.set_xlabel("training step")
    ax.set_ylabel(report.property)
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    width = (max(steps) - min(steps)) / max(1, len(steps)) * 0.5 if len(steps) > 1 else 1.0
    ax2.bar(
        steps,
        [p.seconds for p in report.points],
        width=width,
        alpha=0.25,
        color="tab:blue",
        label="seconds per checkpoint",
    )
    ax2.set_ylabel("verification wall-clock per checkpoint (s)")
    ax.set_zorder(ax2.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.set_title(f"{Path(report.model).name}: {report.method} verification of {len(steps)} checkpoints")
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)
