"""What ``--traces``, ``--values`` and ``--plot`` add to a run (between :func:`distmc.api.verify` and the rest).

:class:`Explain` holds the options and is checked before anything is explored (a property traces cannot explain,
a missing matplotlib, unknown plot variables fail at once); :meth:`Explain.before_check` runs on the assembled
model (traces, BFS depths: both need the transitions, which the hand-off to Storm may release);
:meth:`Explain.after_check` takes the per-state values and writes the table, the states most at risk and the
picture.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from distmc._internal.phases import PhaseClock
from distmc.assemble.reducer import InducedModel
from distmc.assemble.storm import to_storm
from distmc.check.checker import check_values
from distmc.check.forms import reachability, unsupported
from distmc.check.native import LocalEngine, at_initial, matrix_of, values_of
from distmc.check.properties import PropertySpec
from distmc.check.result import CheckResult
from distmc.explain.plot import plot_values, plot_variables, require_matplotlib
from distmc.explain.traces import annotate, check_traceable, format_trace, most_probable_paths, state_text
from distmc.explain.values import bfs_depth, riskiest, value_columns, write_values
from distmc.pipeline import Job, Parts

__all__ = ["Explain", "summary_lines"]


@dataclass
class Explain:
    """The explanation options of a run (see :func:`distmc.api.verify`) and what they found.

    Attributes:
        traces: K, the number of most probable traces (0: none).
        values_path: the Parquet file of per-state values (None: not written).
        plot_path: the heatmap image (None: none).
        plot_vars: ``"x,y"`` (None: the first two int variables).
    """

    traces: int = 0
    values_path: str | Path | None = None
    plot_path: str | Path | None = None
    plot_vars: str | None = None
    found: list[dict[str, Any]] | None = None
    mass: float | None = None
    at_risk: list[dict[str, Any]] | None = None
    vectors: dict[str, np.ndarray] = field(default_factory=dict)  # the checked property's value in every state
    _depth: np.ndarray | None = None
    _axes: tuple[int, int] | None = None

    @property
    def wants_values(self) -> bool:
        """Whether the check must return every state's value."""
        return self.values_path is not None or self.plot_path is not None

    @property
    def active(self) -> bool:
        return bool(self.traces) or self.wants_values

    def check(
        self, induced: InducedModel, spec: PropertySpec, used: str, keep_model: bool, clock: PhaseClock
    ) -> CheckResult:
        """One property's check that also gives its value in every state (:attr:`vectors`), for --values/--plot.

        ``used``: ``native`` or ``storm``. The per-state vector comes from the same solver run as the result; the
        result states no bounds.
        """
        if used == "native":
            clock.start("checking", "distmc's native value iteration")
            self.vectors = {
                "value": values_of(LocalEngine(matrix_of(induced), clock.detail, induced.initial), induced, spec)[0]
            }
            value = at_initial(self.vectors["value"], induced.initial)
        else:
            clock.start("handing to Storm")
            storm_model = to_storm(induced, release=not keep_model)
            clock.start("checking", "Storm")
            value, self.vectors = check_values(storm_model, spec, induced.kind, induced.initial)
        return CheckResult(value, None, method="other", checker=used)

    def validate(self, parts: Parts) -> None:
        """Fail before exploring on what the options cannot do for this model and property."""
        if self.traces:  # the options themselves are checked by :class:`~distmc.options.VerifyOptions`
            check_traceable(parts.spec)
        if self.plot_path is not None:
            require_matplotlib()
            self._axes = plot_variables(parts.model, self.plot_vars)

    def before_check(
        self, induced: InducedModel, parts: Parts, job: Job, phase: Callable[[str], None] | None = None
    ) -> None:
        """Traces and depths, on the assembled model while it still holds its transitions.

        ``phase``: the run's :meth:`~distmc._internal.phases.PhaseClock.start` (times ``traces_s``, ``values_s``);
        the ``assembling`` phase is resumed at the end.
        """
        mark = phase or (lambda name: None)
        if self.traces:
            mark("finding traces")
            traces = most_probable_paths(induced, parts.spec, self.traces)
            expander = parts.expander if parts.expander is not None else job.build().expander
            assert expander is not None
            self.found = annotate(traces, induced, parts.model, parts.codec, expander)
            self.mass = float(sum(tr.probability for tr in traces))
        if self.wants_values:
            mark("ranking states")
            self._depth = bfs_depth(induced)
        mark("assembling")

    def after_check(
        self,
        induced: InducedModel,
        parts: Parts,
        vectors: dict[str, np.ndarray],
        title: str,
        phase: Callable[[str], None] | None = None,
    ) -> None:
        """Write the values table and the picture; find the states most at risk (``phase``: as above)."""
        mark = phase or (lambda name: None)
        mark("ranking states")
        assert self._depth is not None
        states = parts.codec.unpack(induced.keys)
        spec = parts.spec
        eligible = np.ones(induced.n_states, dtype=bool)
        if not spec.is_reward and unsupported(spec, "dtmc") is None:
            eligible = ~reachability(spec, induced)[1]  # the target states have reached it already
        rank = vectors["value"] if "value" in vectors else vectors["value_max"]
        ids = riskiest(rank, eligible)
        self.at_risk = [
            {
                "state": {
                    v.name: (bool(x) if v.is_bool else int(x))
                    for v, x in zip(parts.model.variables, states[i].tolist(), strict=True)
                },
                **{k: float(vec[i]) for k, vec in vectors.items()},
                "depth": int(self._depth[i]),
            }
            for i in ids.tolist()
        ]
        if self.values_path is not None:
            write_values(self.values_path, value_columns(parts.model, states, vectors, self._depth))
        if self.plot_path is not None:
            mark("plotting")
            assert self._axes is not None
            plot_values(
                self.plot_path,
                parts.model,
                states,
                rank,
                title,
                variables=self._axes,
                trace=self.found[0]["path"] if self.found else None,
                include=eligible,
            )


def summary_lines(
    traces: list[dict[str, Any]] | None,
    mass: float | None,
    at_risk: list[dict[str, Any]] | None,
    result: float | dict[str, float],
) -> list[str]:
    """The summary's lines for the traces (the most probable one, step by step) and the states most at risk."""
    out: list[str] = []
    if traces is not None:
        if not traces:
            out.append("  traces: no path reaches the target")
        else:
            of = f" of {result:.6g}" if isinstance(result, float) else ""
            out.append(
                f"  most probable path (1 of {len(traces)} traces, holding {mass:.6g}{of}): "
                f"probability {traces[0]['probability']:.6g}, {len(traces[0]['path']) - 1} steps"
            )
            out.extend(f"    {line}" for line in format_trace(traces[0]))
    if at_risk:
        out.append("  states most at risk (value, BFS depth):")
        for s in at_risk:
            val = s["value"] if "value" in s else s["value_max"]
            out.append(f"    {val:.6g}  {state_text(s['state'])}  (depth {s['depth']})")
    return out
