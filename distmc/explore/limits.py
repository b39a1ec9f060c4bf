"""User-set limits of a run (``--max-states``, ``--max-memory``, ``--timeout``) and the check that enforces them.

A limit stops exploration cleanly. The drivers ask :meth:`LimitCheck.exceeded` and, once a limit is passed, stop
expanding and hand over what they explored with the frontier marked (``stats["expanded"]``, ``stats["stopped"]``):
the check then bounds every property on that partial model (:mod:`distmc.check.partial`). Ctrl-C does the same
through :class:`Interrupt` (a second Ctrl-C ends the run at once). Where a limit is passed inside a Ray worker in
the middle of a level, :class:`~distmc.errors.ResourceLimitError` carries a partial report (states and transitions
so far, frontier size, depth reached, elapsed time) and nothing is checked.
The drivers check after every expansion batch, so a run stops within one batch of passing a limit, never by a
hang or an out-of-memory kill (a batch is at most ``batch_states`` states, whose rows are bounded by the model's
branching; set ``--max-memory`` with that much headroom below the machine's memory).

Memory is the resident set size of the process that checks (read from ``/proc/self/statm``); under the Ray driver
each worker checks its own against an even share of ``--max-memory`` and the driver checks the sum of its own and
the workers' after every level. Before the hand-off to Storm, :func:`distmc.api.verify` checks an estimate of
what Storm will need (``STORM_BYTES_PER_TRANSITION``); Storm's own allocations are not otherwise watched.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from distmc.errors import ResourceLimitError, UsageError

__all__ = [
    "Interrupt",
    "LimitCheck",
    "Limits",
    "parse_duration",
    "parse_memory",
    "peak_rss_bytes",
    "reset_peak_rss",
    "rss_bytes",
]

_UNITS = {
    "": 1,
    "B": 1,
    "K": 1 << 10,
    "KB": 1 << 10,
    "KIB": 1 << 10,
    "M": 1 << 20,
    "MB": 1 << 20,
    "MIB": 1 << 20,
    "G": 1 << 30,
    "GB": 1 << 30,
    "GIB": 1 << 30,
    "T": 1 << 40,
    "TB": 1 << 40,
    "TIB": 1 << 40,
}


def parse_memory(text: str | int | None) -> int | None:
    """``"8G"``, ``"500M"``, ``"1.5GiB"`` or a number of bytes -> bytes (binary units)."""
    if text is None or isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    if m is None or m.group(2).upper() not in _UNITS:
        raise UsageError(f"--max-memory {text!r}: expected a size such as 8G, 512M or 1073741824")
    value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value <= 0:
        raise UsageError(f"--max-memory {text!r} must be positive")
    return value


def parse_duration(text: str | float | None) -> float | None:
    """``"90"``, ``"90s"``, ``"15m"``, ``"2h"`` -> seconds."""
    if text is None or isinstance(text, int | float):
        return None if text is None else float(text)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", text)
    if m is None:
        raise UsageError(f"--timeout {text!r}: expected seconds, or a number with s, m or h (e.g. 15m)")
    value = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    if value <= 0:
        raise UsageError(f"--timeout {text!r} must be positive")
    return value


def rss_bytes() -> int:
    """Resident set size of this process in bytes (peak RSS where ``/proc`` is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def peak_rss_bytes() -> int:
    """This process's resident-set peak in bytes (``VmHWM``; ``ru_maxrss`` where ``/proc`` is missing).

    Not ``ru_maxrss`` on Linux: it survives ``exec``, so a process started by a large one (a benchmark script,
    a notebook) would report its parent's peak.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def reset_peak_rss() -> None:
    """Start this process's resident-set peak afresh (Linux; a kept Ray worker, so its peak is its run's)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # pragma: no cover - not Linux, or not allowed: the peak then counts earlier runs too
        pass


def available_bytes() -> int:
    """Memory the machine can still give this process (``MemAvailable``; total memory where it is missing)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


@dataclass(frozen=True)
class Limits:
    """The limits of a run; None: unlimited."""

    max_states: int | None = None
    max_memory: int | None = None  # bytes
    timeout: float | None = None  # seconds

    def __post_init__(self) -> None:
        if self.max_states is not None and self.max_states < 1:
            raise UsageError(f"--max-states must be at least 1, not {self.max_states}")


class LimitCheck:
    """Raises :class:`ResourceLimitError` with a partial report once a limit is passed.

    Args:
        limits: the limits.
        start: ``time.time()`` when the run started (wall clock, comparable across processes).
        memory_share: fraction of ``max_memory`` this process may use (a Ray worker's share).
    """

    def __init__(self, limits: Limits, start: float | None = None, memory_share: float = 1.0) -> None:
        self.limits = limits
        self.start = time.time() if start is None else start
        self.memory = None if limits.max_memory is None else limits.max_memory * memory_share

    def exceeded(self, *, states: int = 0, memory: int | None = None) -> str | None:
        """Which limit has been passed (a phrase for the message), or None.

        Args:
            states: states found so far (ignored where this process does not count them: pass 0).
            memory: bytes in use; None: this process's RSS.
        """
        lim = self.limits
        if lim.max_states is not None and states > lim.max_states:
            return f"passed --max-states {lim.max_states}"
        if lim.timeout is not None and time.time() - self.start > lim.timeout:
            return f"passed --timeout {lim.timeout:g} s"
        if self.memory is not None:
            used = rss_bytes() if memory is None else memory
            if used > self.memory:
                return f"passed --max-memory ({used / 2**20:.0f} MiB in use, limit {self.memory / 2**20:.0f} MiB)"
        return None

    def stop(self, why: str, *, states: int, transitions: int, frontier: int, depth: int) -> ResourceLimitError:
        """The error that ends the run, with its partial report."""
        partial = {
            "states": states,
            "transitions": transitions,
            "frontier": frontier,
            "depth": depth,
            "elapsed_s": round(time.time() - self.start, 3),
        }
        return ResourceLimitError(
            f"exploration stopped: {why} at depth {depth} ({states} states, {transitions} transitions, "
            f"frontier {frontier}); nothing was checked",
            partial,
        )

    def check(self, *, states: int, transitions: int, frontier: int, depth: int, memory: int | None = None) -> None:
        """Raise :class:`ResourceLimitError` if a limit has been passed; ``memory`` as in :meth:`exceeded`."""
        why = self.exceeded(states=states, memory=memory)
        if why is not None:
            raise self.stop(why, states=states, transitions=transitions, frontier=frontier, depth=depth)


class Interrupt:
    """Ctrl-C during exploration as a stop like a limit's: the first SIGINT sets :attr:`why`, a second one raises.

    A context manager; it changes the handler only in the main thread and only where SIGINT is not ignored
    (elsewhere :attr:`why` stays None).
    """

    def __init__(self) -> None:
        self.why: str | None = None
        self._old: Callable[[int, FrameType | None], Any] | int | signal.Handlers | None = None
        self._installed = False

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.why is not None:
            raise KeyboardInterrupt
        self.why = "interrupted (Ctrl-C)"

    def __enter__(self) -> Interrupt:
        # An ignored SIGINT (a shell's background job) stays ignored, as Unix tools leave it.
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
            self._old = signal.signal(signal.SIGINT, self._handler)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:  # a handler installed outside Python reads back as None: Python's default then
            old = self._old if self._old is not None else signal.default_int_handler
            signal.signal(signal.SIGINT, old)
