"""Live progress of a run on the terminal (rich), and the logging set-up of the command line.

The drivers call a progress function after every breadth-first level with a dict (``depth``, ``states``,
``frontier``, ``transitions``, ``policy_states``, ``memory``, ``elapsed_s``, and under the Ray driver
``restarts``); :class:`LiveProgress` shows it as one line on standard error that is redrawn in place and removed
at the end. After the exploration the line names the phase that runs (``assembling``, ``handing to Storm``,
``checking (Storm)``) and counts its seconds, so a long hand-off or check does not look like a hung run. It shows only on a terminal and never with ``--quiet``; scripts get the same figures as log records
with ``--log-level info`` (``distmc.local`` / ``distmc.ray`` loggers, ``key=value`` fields).
"""

from __future__ import annotations

import logging
import sys
import time
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.text import Text

__all__ = ["LiveProgress", "setup_logging"]


#: Loggers of Ray's own notices (the token-authentication notice of every new local Ray, start-up messages):
#: shown with ``--log-level debug`` only, as Storm's log is. Ray resets the level of its ``ray`` logger when it is
#: imported, not of these.
RAY_NOTICES = ("ray._private", "ray.worker", "ray.util")


def setup_logging(level: str) -> None:
    """Log records of distmc at ``level`` and above to standard error, one line each; Ray's notices only at debug."""
    logging.basicConfig(stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("distmc").setLevel(level.upper())
    for name in RAY_NOTICES:
        logging.getLogger(name).setLevel(logging.NOTSET if level == "debug" else logging.ERROR)


def _si(x: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.2f}{unit}"
    return f"{x:.0f}"


class LiveProgress:
    """A one-line live display of a run's progress; a no-op unless ``enabled`` and standard error is a terminal."""

    def __init__(self, enabled: bool = True, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.live: Live | None = None
        self.last: dict[str, float] | None = None  # the last level's figures
        self.line: _PhaseLine | None = None  # the phase shown, once the exploration is over

    def __enter__(self) -> LiveProgress:
        if self.enabled:
            self.live = Live(Text("exploring ..."), console=self.console, transient=True, refresh_per_second=4)
            self.live.__enter__()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self.live is not None:
            self.live.__exit__(et, ev, tb)
            self.live = None

    @staticmethod
    def render(info: dict[str, float]) -> str:
        """The line shown for one progress report."""
        if "phase" in info:  # after the exploration: what is being done (e.g. "checking: step 41/100")
            return f"{info['phase']} | {info.get('elapsed_s', 0.0):.0f} s"
        rate = info["transitions"] / info["elapsed_s"] if info.get("elapsed_s") else 0.0
        line = (
            f"depth {info['depth']:.0f} | states {_si(info['states'])} | frontier {_si(info['frontier'])} | "
            f"transitions {_si(info['transitions'])} ({_si(rate)}/s) | policy {_si(info.get('policy_states', 0))}"
            f" states in {_si(info.get('policy_calls', 0))} calls"
        )
        if "memory" in info:
            line += f" | memory {info['memory'] / 2**20:,.0f} MiB"
        if info.get("restarts"):
            line += f" | workers replaced {info['restarts']:.0f}"
        return line

    def __call__(self, info: dict[str, float]) -> None:
        if "depth" in info:
            self.last = info
        if self.live is not None:
            self.line = None
            self.live.update(Text(self.render(info)))

    def phase(self, name: str, detail: str = "") -> None:
        """Show the phase that runs now (after exploration: assembling, handing to Storm, checking).

        Called again for the same phase (a checker's step or gap), it changes the detail and keeps the seconds.
        """
        if self.live is None or name == "exploring":
            return
        if self.line is not None and self.line.name == name:
            self.line.set(detail)  # drawn at the next refresh
        else:
            self.line = _PhaseLine(name, detail, self.last)
            self.live.update(self.line)


class _PhaseLine:
    """The live line during a phase after exploration: its name, the model's size, and the seconds it has run.

    Rendered anew at each refresh (rich calls ``__rich__``), so the seconds count while the phase runs.
    """

    def __init__(self, name: str, detail: str, last: dict[str, float] | None) -> None:
        self.name = name
        self.size = "" if last is None else f" | {_si(last['states'])} states, {_si(last['transitions'])} transitions"
        self.since = time.perf_counter()
        self.set(detail)

    def set(self, detail: str) -> None:
        """Show ``detail`` (``"sound value iteration: gap 3.1e-07"``; one that starts with the phase's name alone)."""
        self.text = (detail if detail.startswith(self.name) else f"{self.name} ({detail})") if detail else self.name

    def __rich__(self) -> Text:
        return Text(f"{self.text}{self.size} | {time.perf_counter() - self.since:.1f} s")
