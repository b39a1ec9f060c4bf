"""The phases of a run, timed end to end: each phase ends where the next begins, so the parts add up to the total.

:class:`PhaseClock` is what :func:`distmc.api.verify` marks its phases with: it logs each phase's start and end
(``distmc.phase`` logger, ``--log-level info``), tells a listener (the live line) which phase is running, and
gives the report's ``timings``: one ``<key>_s`` per phase that ran, and ``total_s``, their sum.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["PHASES", "PhaseClock"]

log = logging.getLogger("distmc.phase")

#: Phase name (as shown and logged) -> its key in the report's timings (``<key>_s``).
PHASES = {
    "parsing": "parse",  # the model, the property and (in-process) the policy
    "exploring": "explore",
    "assembling": "assemble",
    "finding traces": "traces",  # --traces K (distmc.explain)
    "ranking states": "values",  # --values/--plot: depths, the states most at risk, the Parquet file
    "exporting": "export",
    "handing to Storm": "handoff",
    "checking": "check",
    "plotting": "plot",  # --plot
}


class PhaseClock:
    """Marks the phases of one run (see the module docstring).

    Args:
        listener: called with the phase name and a detail (``"with Storm"``) when a phase starts.
    """

    def __init__(self, listener: Callable[[str, str], None] | None = None) -> None:
        self.listener = listener
        self.seconds: dict[str, float] = {}
        self._name: str | None = None
        self._t0: float | None = None  # the first phase's start
        self._since = 0.0

    def start(self, name: str, detail: str = "") -> None:
        """End the running phase (if any) and start ``name`` at the same instant."""
        if name not in PHASES:
            raise ValueError(f"unknown phase '{name}'")
        now = time.perf_counter()
        self._end(now)
        if self._t0 is None:
            self._t0 = now
        self._name, self._since = name, now
        log.info("phase=%s event=start%s", name.replace(" ", "_"), f" detail={detail!r}" if detail else "")
        if self.listener is not None:
            self.listener(name, detail)

    def elapsed(self) -> float:
        """Seconds since the first phase started."""
        return 0.0 if self._t0 is None else time.perf_counter() - self._t0

    def detail(self, text: str) -> None:
        """Tell the listener how the running phase is getting on (a checker's step or gap); not logged, not timed."""
        if self.listener is not None and self._name is not None:
            self.listener(self._name, text)

    def _end(self, now: float) -> None:
        if self._name is not None:
            took = now - self._since
            key = PHASES[self._name]
            self.seconds[key] = self.seconds.get(key, 0.0) + took
            log.info("phase=%s event=end seconds=%.3f", self._name.replace(" ", "_"), took)
            self._name = None

    def stop(self) -> dict[str, float]:
        """End the running phase; the timings: ``<key>_s`` per phase that ran, and ``total_s``, their sum."""
        now = time.perf_counter()
        self._end(now)
        out = {f"{k}_s": v for k, v in self.seconds.items()}
        out["total_s"] = now - (now if self._t0 is None else self._t0)
        return out
