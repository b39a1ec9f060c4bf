"""The checks in this process: assemble the induced model, then Storm, the native checker or the exact engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from distmc.assemble.reducer import InducedModel, assemble
from distmc.assemble.storm import export, to_storm
from distmc.check.checker import EXACT_MAX_TRANSITIONS
from distmc.check.choice import choose_checker
from distmc.check.dispatch import (
    EXACT_TIMEOUT_S,
    check_properties,
    single_property_states,
)
from distmc.check.partial import check_partial, close_frontier, frontier_probability, horizon_of, partial_entry
from distmc.check.result import CheckResult, result_entry
from distmc.errors import ResourceLimitError, UsageError
from distmc.explore.partition import Explored
from distmc.report import Report
from distmc.run.state import RunState, answer_fields, policy_name


def _model_fields(induced: InducedModel, used: str) -> dict[str, Any]:
    """The report's counts of the induced model assembled here, and the checker(s) ``used`` on it."""
    return dict(
        states=induced.n_states,
        transitions=induced.n_transitions,
        induced=induced.kind,
        choices=induced.n_rows,
        initial_states=int(induced.initial.shape[0]),
        checker=used,
    )


class GatheredChecks(RunState):
    """The report of a check on the model assembled in this process (a complete model, or bounds from a part)."""

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
        induced = assemble(
            explored, parts.model, parts.codec, parts.props.atoms, parts.reward_names, force_mdp=parts.force_mdp
        )
        explored.target_chunks, explored.prob_chunks = [], []  # the induced model holds them now (merged in place)
        if stopped is not None:
            return self.check_partial_model(explored, induced, fids, str(stopped))
        if explain.active:  # traces and depths need the transitions, which the hand-off to Storm may release
            explain.before_check(induced, parts, self.job, phase=clock.start)
        if o.exact and induced.n_transitions > EXACT_MAX_TRANSITIONS:
            raise UsageError(
                f"--exact: the induced model has {induced.n_transitions} transitions, more than the "
                f"exact engine's limit of {EXACT_MAX_TRANSITIONS}; run without --exact for a sound "
                "bound"
            )
        asked = self.checker if self.checker != "auto" or self.driver == "local" else "storm"  # Ray's auto: fits
        depth = int(explored.stats.get("depth", 0))
        checkers = [
            "storm" if o.exact else choose_checker(asked, self.limits, induced, s, depth, release=not o.keep_model)
            for s in specs
        ]
        used = checkers[0] if len(set(checkers)) == 1 else "+".join(dict.fromkeys(checkers))
        if o.export_path is not None:
            clock.start("exporting", o.export_path)
            export(induced, o.export_path)
        single = single_property_states(induced, parts.props, parts.codec) if len(specs) > 1 else []
        if explain.wants_values:  # one property: its value in every state, from the same solver run as the result
            checked = [explain.check(induced, parts.spec, used, o.keep_model, clock)]
            explain.after_check(
                induced,
                parts,
                explain.vectors,
                f"{self.job.prop} on {Path(self.job.model_path).name}, policy {policy_name(parts, self.job.policy)}",
                phase=clock.start,
            )
        else:
            checked = self.check_here(induced, checkers)
        timings = clock.stop()
        entries = [result_entry(sp.text, sp.name, r) for sp, r in zip(specs, checked, strict=True)]
        horizon = explored.stats.get("horizon") if n_frontier else None
        report = Report(
            frontier=None
            if horizon is None
            else {
                "reason": f"horizon cut at depth {horizon}",
                "horizon": horizon,
                "explored_states": first,
                "frontier_states": n_frontier,
            },
            **answer_fields(checked, entries),
            single_states=single,
            **_model_fields(induced, used),
            traces=explain.found,
            traces_mass=explain.mass,
            riskiest_states=explain.at_risk,
            **self.common(explored.stats, explored.worker_stats, timings),
        )
        return report, induced

    def check_partial_model(
        self, explored: Explored, induced: InducedModel, fids: np.ndarray, reason: str
    ) -> tuple[Report, InducedModel]:
        """Bounds of every property from a model explored in part (:mod:`distmc.check.partial`): two checks each."""
        o, parts, clock = self.opts, self.parts, self.clock
        specs = parts.props.specs
        first = induced.n_states - int(fids.shape[0])  # states expanded
        if o.exact:
            raise ResourceLimitError(
                f"exploration stopped ({reason}) with {first} of {induced.n_states} states expanded: --exact checks "
                "complete models only, so nothing was checked (run without --exact for bounds)",
                {
                    "states": induced.n_states,
                    "transitions": induced.n_transitions,
                    "frontier": induced.n_states - first,
                    "depth": int(explored.stats.get("depth", 0)),
                },
            )
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
        reach = (
            frontier_probability(induced, frontier, precision=self.prec, within=within)
            if induced.kind == "dtmc" and "storm" not in checkers
            else None
        )
        storm_box: list[object] = []

        def storm_model() -> object:
            if not storm_box:
                clock.start("handing to Storm")
                storm_box.append(to_storm(induced, release=True))
                clock.start("checking", "Storm, bounds from the explored part")
            return storm_box[0]

        checked, notes = check_partial(
            parts.props,
            induced,
            checkers,
            self.prec,
            storm_model,
            frontier,
            parts.model,
            len(parts.model.variables),
            progress=clock.detail,
        )
        if induced.kind != "dtmc" or "storm" in checkers:  # an MDP: Storm's min and max
            reach = frontier_probability(induced, frontier, storm_model(), self.prec, within)
        timings = clock.stop()
        entries = [partial_entry(sp, r, note) for sp, r, note in zip(specs, checked, notes, strict=True)]
        report = Report(
            **answer_fields(checked, entries),
            **_model_fields(induced, used),
            partial=True,
            frontier={
                "reason": reason,
                "explored_states": first,
                "frontier_states": induced.n_states - first,
                "frontier_probability": reach,
                "frontier_probability_within": within,
                "horizon": explored.stats.get("horizon"),
            },
            **self.common(explored.stats, explored.worker_stats, timings),
        )
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

        return check_properties(
            self.parts.props,
            induced,
            checkers,
            self.prec,
            storm_model,
            EXACT_TIMEOUT_S if left is None else max(1.0, min(EXACT_TIMEOUT_S, left)),
            progress=clock.detail,
            codec=self.parts.codec,
        )
