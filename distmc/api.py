"""The public entry point: :func:`verify` a policy against a PRISM model and a PCTL property."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distmc._internal.jit import thread_budget
from distmc.assemble.reducer import InducedModel
from distmc.explore.partition import Explored
from distmc.options import VerifyOptions, merged
from distmc.report import Report
from distmc.run import Run

if TYPE_CHECKING:
    pass

__all__ = ["Report", "Session", "VerifyOptions", "sweep", "verify"]

log = logging.getLogger(__name__)


def verify(
    model_path: str | Path | None, prop: str | None, options: VerifyOptions | None = None, **kw: Any
) -> Report | tuple[Report, InducedModel]:
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
        run = Run.start(model_path, prop, opts)
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

    def verify(
        self,
        model_path: str | Path | None,
        prop: str | None,
        changes: VerifyOptions | Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> Report | tuple[Report, InducedModel]:
        """:func:`verify` with the session's options; ``changes``: a mapping of changes to them, or whole options."""
        return verify(model_path, prop, merged(changes, self.options), **kw)

    def sweep(
        self, model_path: str | Path | None, prop: str | None, variants: Iterable[VerifyOptions | Mapping[str, Any]]
    ) -> list[Report | tuple[Report, InducedModel]]:
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


def sweep(
    model_path: str | Path | None,
    prop: str | None,
    variants: Iterable[VerifyOptions | Mapping[str, Any]],
    options: VerifyOptions | None = None,
    **kw: Any,
) -> list[Report | tuple[Report, InducedModel]]:
    """Verify ``prop`` once per variant in one :class:`Session` (``options`` and ``kw``: the base of every run).

    Example:
        >>> reports = sweep("gridworld.prism", 'P=? [F "crash"]', [{"constants": f"N={n}"} for n in (4, 5, 6)],
        ...                 workers=2)  # doctest: +SKIP
    """
    with Session(options, **kw) as s:
        return s.sweep(model_path, prop, variants)
