"""CPU time of processes and of their threads, from ``/proc`` (Linux): which threads of a worker keep a core busy.

A thread budget (``--threads-per-worker N``) holds when a worker's CPU time stays within about N times its wall
time; when it does not, :class:`ThreadSampler` finds the threads that use the time (their names come from
``/proc/PID/task/TID/comm``: numba's and OpenMP's pool threads, torch's, Arrow's, Ray's own). The CPU times are the
kernel's (``utime + stime``), so they do not depend on how loaded the machine is: a busy thread on a shared core
runs longer, not more. ``benchmarks/threads.py`` samples a whole run with it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ProcessTimes", "ThreadSampler", "descendants", "process_times", "thread_times"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(text: str) -> list[str]:
    # the name (field 2) is in parentheses and may hold spaces: fields 3.. follow the last ')'
    return text[text.rindex(")") + 2 :].split()


@dataclass(frozen=True)
class ProcessTimes:
    """One reading of a process: CPU seconds of all its threads (ended ones included) and seconds since it started."""

    pid: int
    cpu_s: float
    age_s: float


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def process_times(pid: int) -> ProcessTimes | None:
    """CPU time (user + system, every thread, also threads that ended) and age of ``pid``; None if it is gone."""
    try:
        f = _stat_fields(Path(f"/proc/{pid}/stat").read_text())
        up = _uptime()
    except (OSError, ValueError):
        return None
    return ProcessTimes(pid, (int(f[11]) + int(f[12])) / _TICK, up - int(f[19]) / _TICK)


def thread_times(pid: int) -> dict[int, tuple[str, float]]:
    """Every live thread of ``pid``: thread id -> (name, CPU seconds so far); empty if the process is gone."""
    out: dict[int, tuple[str, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            f = _stat_fields(Path(f"/proc/{pid}/task/{tid}/stat").read_text())
        except (OSError, ValueError):  # the thread ended meanwhile
            continue
        out[int(tid)] = (name, (int(f[11]) + int(f[12])) / _TICK)
    return out


def descendants(root: int, match: str | None = None) -> list[int]:
    """The processes below ``root`` (children, their children, ...) whose command line contains ``match``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(_stat_fields(Path(f"/proc/{entry}/stat").read_text())[1])
            except (OSError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        if match is not None:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if match not in cmd:
                continue
        out.append(pid)
    return sorted(out)


@dataclass
class _Seen:
    name: str
    first: float  # CPU seconds at the first reading
    last: float
    t_first: float  # wall-clock time of the first and last readings
    t_last: float


@dataclass
class ThreadSampler:
    """Samples the threads of the processes ``find()`` returns, every ``interval`` seconds, in a background thread.

    Use as a context manager; :meth:`report` then gives, per process, each thread's CPU seconds while it was
    watched, busiest first. A thread that started before the first reading is charged only from that reading on;
    one that ended between readings keeps its last reading (the process's own total, :func:`process_times`,
    misses nothing).
    """

    find: Callable[[], list[int]]  # the processes to watch now (called every interval)
    interval: float = 0.2
    seen: dict[tuple[int, int], _Seen] = field(default_factory=dict)
    procs: dict[int, tuple[ProcessTimes, ProcessTimes]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        """One reading of every watched process and thread."""
        now = time.monotonic()
        for pid in self.find():
            p = process_times(pid)
            if p is None:
                continue
            self.procs[pid] = (self.procs.get(pid, (p, p))[0], p)
            for tid, (name, cpu) in thread_times(pid).items():
                s = self.seen.get((pid, tid))
                if s is None:
                    self.seen[pid, tid] = _Seen(name, cpu, cpu, now, now)
                else:
                    s.name, s.last, s.t_last = name, cpu, now

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> ThreadSampler:
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="thread-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def report(self) -> dict[int, dict[str, object]]:
        """Per process: ``cpu_s`` and ``wall_s`` while watched, and ``threads``: (tid, name, CPU s), busiest first."""
        out: dict[int, dict[str, object]] = {}
        for pid, (a, b) in self.procs.items():
            threads = sorted(
                ((tid, s.name, s.last - s.first) for (p, tid), s in self.seen.items() if p == pid), key=lambda x: -x[2]
            )
            out[pid] = {"cpu_s": b.cpu_s - a.cpu_s, "wall_s": b.age_s - a.age_s, "threads": threads}
        return out
