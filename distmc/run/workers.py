"""The checks on the Ray workers that hold the rows: every property from the one exploration, or its bounds."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from distmc.check.dispatch import (
    slow_chain_sentence,
    vector_result,
)
from distmc.check.partial import horizon_of, partial_entry
from distmc.check.result import result_entry
from distmc.errors import SlowConvergenceError
from distmc.report import Report
from distmc.run.state import RunState, answer_fields

if TYPE_CHECKING:
    from distmc.distributed.rows import RayRows


def _rows_fields(rows: RayRows) -> dict[str, Any]:
    """The report's counts of a model whose rows stay on the workers (an induced DTMC, checked there)."""
    return dict(
        states=rows.n_states,
        transitions=rows.n_transitions,
        induced="dtmc",
        choices=rows.n_states,
        initial_states=rows.n_initial,
        checker="distributed",
    )


class WorkerChecks(RunState):
    """The report of a check on the workers (:meth:`RayRows.check`): no process gathers the model."""

    def check_distributed(self, rows: RayRows) -> Report:
        """Check every property on the workers that hold the rows (:meth:`RayRows.check`), on the one exploration."""
        specs = self.parts.props.specs
        self.clock.start("checking", "distributed, on the Ray workers")
        try:
            out = rows.check(
                self.prec, progress=self.opts.progress, values_dir=self.opts.values if self.values_on_workers else None
            )
        except SlowConvergenceError as exc:
            raise SlowConvergenceError(slow_chain_sentence(str(exc), rows.n_transitions, False)) from None
        if self.values_on_workers:
            self.explain.at_risk = out["at_risk"]
        timings = self.clock.stop()
        # the workers build their parts of the model (and the exchange plan) first: that is assembly
        timings["assemble_s"] += float(out["build_s"])
        timings["check_s"] -= float(out["build_s"])
        # each property's seconds: the slowest worker's (they check the properties one after the other)
        checked = [
            dataclasses.replace(
                vector_result(spec, c["value"], c["lower"], c["upper"], "distributed"), check_s=c["check_s"]
            )
            for spec, c in zip(specs, out["checks"], strict=True)
        ]
        entries = [result_entry(sp.text, sp.name, r) for sp, r in zip(specs, checked, strict=True)]
        return Report(
            **answer_fields(checked, entries),
            **_rows_fields(rows),
            frontier=None
            if not rows.run.frontier
            else {
                "reason": f"horizon cut at depth {rows.stats.get('horizon')}",
                "horizon": rows.stats.get("horizon"),
                "explored_states": rows.n_states - rows.run.frontier,
                "frontier_states": rows.run.frontier,
            },
            riskiest_states=self.explain.at_risk,
            **self.common(rows.stats, rows.worker_stats, timings),
        )

    def check_distributed_partial(self, rows: RayRows) -> Report:
        """Bounds of every property from a partial model on the workers that hold its rows (no process holds it)."""
        from distmc.check.partial import combine_sides

        specs = self.parts.props.specs
        self.clock.start("checking", "distributed, on the Ray workers: bounds from the explored part")
        out = rows.check(self.prec, progress=self.opts.progress, partial=True)
        timings = self.clock.stop()
        timings["assemble_s"] += float(out["build_s"])
        timings["check_s"] -= float(out["build_s"])
        checked = [
            dataclasses.replace(combine_sides(spec, c, "distributed", c["note"]), check_s=c["check_s"])
            for spec, c in zip(specs, out["checks"], strict=True)
        ]
        entries = [
            partial_entry(spec, res, c["note"]) for spec, res, c in zip(specs, checked, out["checks"], strict=True)
        ]
        reach = out["checks"][0]["reach"]
        first = rows.n_states - rows.run.frontier
        return Report(
            **answer_fields(checked, entries),
            **_rows_fields(rows),
            partial=True,
            frontier={
                "reason": str(rows.stats["stopped"]),
                "explored_states": first,
                "frontier_states": rows.n_states - first,
                "frontier_probability": None
                if np.isnan(reach).any()
                else float(reach[0])
                if reach.shape[0] == 1
                else {"min": float(reach.min()), "max": float(reach.max())},
                "frontier_probability_within": horizon_of(specs[:1]),  # reach: the first property's
                "horizon": rows.stats.get("horizon"),
            },
            **self.common(rows.stats, rows.worker_stats, timings),
        )
