"""``--width`` and ``--order``: explore in rounds (in this process or on Ray), each round's budget twice the last one's."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distmc._internal.atomic import save_figure
from distmc._internal.phases import PhaseClock
from distmc.assemble.reducer import InducedModel
from distmc.check.partial import horizon_of
from distmc.errors import CheckpointError
from distmc.explore.limits import Interrupt, LimitCheck, Limits
from distmc.explore.partition import Explored
from distmc.explore.priority import PRIORITY_CHECKPOINT, PriorityExplorer
from distmc.options import VerifyOptions
from distmc.pipeline import Parts
from distmc.report import Report

if TYPE_CHECKING:
    from distmc.distributed.priority import RayPriorityExplorer

__all__ = ["FIRST_ROUND_STATES", "explore_in_rounds"]

log = logging.getLogger("distmc.api")


#: The first round's budget of states under ``--width``.
FIRST_ROUND_STATES = 1000


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
    save_figure(fig, path, dpi=120)


def explore_in_rounds(
    o: VerifyOptions,
    parts: Parts,
    directory: Path | None,
    limits: Limits,
    clock: PhaseClock,
    check: Callable[[Explored], tuple[Report, InducedModel]],
    on_ray: Callable[[str, Path | None], RayPriorityExplorer] | None = None,
) -> tuple[Report, InducedModel]:
    """Explore in rounds in a priority order (:mod:`distmc.explore.priority`), ``check`` after each round.

    Each round's budget of states is twice the last one's (the first: :data:`FIRST_ROUND_STATES`, at most
    ``max_states``), and it goes on from what the last round explored. It stops once every property's bounds
    are at most ``width`` wide (or the model is explored whole, or a limit is passed, or ``max_states`` is
    reached); without ``width``, after one round of ``max_states`` states. ``directory``: the run's checkpoint
    directory, where each round's explored part is saved (``--resume`` goes on from it). ``on_ray``: start the
    Ray workers' explorer (:class:`~distmc.distributed.priority.RayPriorityExplorer`) for an order and a saved
    file to go on from (None: explore in this process, with ``parts.expander``).
    """
    horizon = horizon_of(parts.props.specs) if o.horizon_cut else None
    order = o.order or ("bfs" if horizon is not None else "mass")
    where = "in-process" if on_ray is None else f"on {o.workers} Ray worker" + "s" * (o.workers > 1)
    clock.start("exploring", f"{where}, {order} first")
    saved = None if directory is None else directory / PRIORITY_CHECKPOINT
    resume = saved if saved is not None and saved.is_file() else None  # --resume: go on from the last run's part
    explorer: PriorityExplorer | RayPriorityExplorer
    if on_ray is not None:
        explorer = on_ray(order, resume)
    else:
        assert parts.expander is not None
        explorer = (
            PriorityExplorer.load(resume, parts.expander)
            if resume is not None
            else PriorityExplorer(parts.expander, parts.codec.pack(parts.model.initial_states), order)
        )
    ok = False
    try:
        if resume is not None and o.order is not None and explorer.order != o.order:
            raise CheckpointError(f"--resume: the checkpointed run explored in {explorer.order} order, not {o.order}")
        order = explorer.order
        out = _rounds(o, explorer, saved, limits, clock, check, horizon, order, where)
        ok = True
        return out
    finally:
        explorer.close(ok)


def _rounds(
    o: VerifyOptions,
    explorer: PriorityExplorer | RayPriorityExplorer,
    saved: Path | None,
    limits: Limits,
    clock: PhaseClock,
    check: Callable[[Explored], tuple[Report, InducedModel]],
    horizon: int | None,
    order: str,
    where: str,
) -> tuple[Report, InducedModel]:
    """The rounds of :func:`explore_in_rounds` on one explorer (in-process or Ray's: the same interface)."""
    cap = o.max_states if o.max_states is not None else (None if o.width is not None else 2**62)
    budget = FIRST_ROUND_STATES if o.width is not None or cap is None else cap  # cap is None only with a width
    if cap is not None:
        budget = min(budget, cap)
    budget = max(budget, explorer.budget)  # resumed: the last round's budget again (checks what is there)
    limit = LimitCheck(Limits(None, limits.max_memory, limits.timeout))
    rounds: list[dict[str, Any]] = []
    while True:
        with Interrupt() as interrupt:
            why = explorer.grow(budget, limit, lambda: interrupt.why, horizon)
        explorer.budget = budget
        if saved is not None:
            explorer.save(saved)
        explored = explorer.snapshot()
        capped = cap is not None and budget >= cap and explorer.n_states > budget
        if why is None and explorer.n_states > budget:
            why = f"passed --max-states {cap}" if capped else f"round budget of {budget} states"
        if why is not None:
            explored.stats["stopped"] = why
        if horizon is not None:
            explored.stats["horizon"] = horizon
        report, induced = check(explored)
        width = report.width()
        rounds.append(
            {
                "round": len(rounds) + 1,
                "budget": budget,
                "states": report.states,
                "explored_states": explored.n_states - int(explored.frontier.shape[0])
                if explored.frontier is not None
                else report.states,
                "width": width,
                "bounds": report.bounds,
                "elapsed_s": round(clock.elapsed(), 3),
            }
        )
        log.info("round %d: %d states, width %.3g", len(rounds), report.states, width)
        if o.progress is not None:
            o.progress(
                {
                    "phase": f"round {len(rounds)}: width {width:.3g} at {report.states} states",
                    "elapsed_s": clock.elapsed(),
                }
            )
        done = (
            not report.partial
            or o.width is None
            or width <= o.width
            or capped
            or (why is not None and not why.startswith("round budget"))
        )
        if done:
            break
        budget = budget * 2 if cap is None else min(budget * 2, cap)
        clock.start("exploring", f"{where}, {order} first, round {len(rounds) + 1}")
    report.rounds = rounds
    if o.width is not None and o.plot is not None:
        _plot_rounds(rounds, o.plot, order)
    return report, induced
