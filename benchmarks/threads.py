"""Which threads of a run's workers keep a core busy: per-thread CPU time from ``/proc``, sampled during a run.

Runs one ``distmc`` command (everything after ``--``) in a child process and samples, every ``--interval``
seconds, the threads of its Ray workers (the processes below it whose command line holds ``--match``, by default
``ray::PartitionActor``), or of the command's own process with ``--driver``. At the end it prints, per process,
its CPU time beside the wall time it was watched, and its busiest threads with their names
(``/proc/PID/task/TID/comm``). ``--py-spy S`` also dumps every watched process's Python stacks (``py-spy dump``,
if installed) S seconds into the run, to tell which code a busy thread runs. CPU times are the kernel's, so they
hold on a loaded machine too. Usage (from the repository root)::

    python benchmarks/threads.py -- distmc run ../shared/models/coolmc/avoid.prism \\
        --const xMax=8,yMax=8,slickness=0.1 --prop 'P=? [F<=100 COLLISION=true]' --driver ray --workers 1 \\
        --threads-per-worker 1 --checker distributed --quiet
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distmc._internal.threads import ThreadSampler, descendants  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between readings")
    ap.add_argument("--match", default="ray::PartitionActor", help="watch the descendants whose command line has this")
    ap.add_argument("--driver", action="store_true", help="watch the command's own process instead")
    ap.add_argument("--top", type=int, default=6, help="threads listed per process")
    ap.add_argument("--py-spy", type=float, default=None, metavar="S", help="dump the Python stacks S s into the run")
    ap.add_argument("--native", action="store_true", help="py-spy: native stacks too (names a pool thread's library)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- distmc ...")
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("give the command to run after --")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd)
    find = (lambda: [proc.pid]) if a.driver else (lambda: descendants(proc.pid, a.match))
    dumps: list[str] = []

    def spy() -> None:
        time.sleep(a.py_spy)
        exe = shutil.which("py-spy")
        if exe is None:
            dumps.append("py-spy is not installed (pip install py-spy)")
            return
        for pid in find():
            p = subprocess.run(
                [exe, "dump", "--pid", str(pid), *(["--native"] if a.native else [])], capture_output=True, text=True
            )
            dumps.append(f"--- py-spy dump of {pid} at {time.monotonic() - t0:.1f} s\n{p.stdout}{p.stderr}")

    spy_thread = threading.Thread(target=spy, daemon=True) if a.py_spy is not None else None
    if spy_thread is not None:
        spy_thread.start()
    with ThreadSampler(find, a.interval) as sampler:
        rc = proc.wait()
    if spy_thread is not None:
        spy_thread.join(timeout=30)
    wall = time.monotonic() - t0
    print(f"# {' '.join(cmd)}\n# exit {rc}, {wall:.1f} s; watched {'the driver' if a.driver else a.match}")
    print("| process | CPU s | wall s | CPU / wall | busiest threads (name: CPU s) |")
    print("|---|---|---|---|---|")
    for pid, r in sorted(sampler.report().items()):
        cpu, w = float(r["cpu_s"]), float(r["wall_s"])  # type: ignore[arg-type]
        threads = r["threads"][: a.top]  # type: ignore[index]
        busy = ", ".join(f"{name} [{tid}]: {c:.1f}" for tid, name, c in threads)
        print(f"| {pid} | {cpu:.1f} | {w:.1f} | {cpu / max(w, 1e-9):.2f} | {busy} |")
    for d in dumps:
        print(d)
    return rc


if __name__ == "__main__":
    sys.exit(main())
