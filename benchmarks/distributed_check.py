"""The distributed check against the in-process drivers: time per phase, memory peaks, bytes and ns per transition.

Every run is a one-shot ``distmc run`` in a fresh process (``--json``), so its actors start with it and the
peaks are its own. For each configuration it prints the value, the time split (explore, the workers' parts,
check), the driver's and the workers' resident-set peaks, the bytes each worker holds per transition for the
check, and the check's nanoseconds per transition per step (bounded properties: ``check_s / (k * T)``), beside
this machine's memory bandwidth (one core reading a 2 GiB array). Usage (from the repository root)::

    python benchmarks/distributed_check.py --const xMax=10,yMax=10,slickness=0.1 \\
        --runs local:native,ray1:distributed,ray2:distributed --threads 1
    python benchmarks/distributed_check.py --const xMax=14,yMax=14,slickness=0.1 --runs ray2:distributed

``local:CHECKER`` is the in-process driver, ``rayW:CHECKER`` the Ray driver with W workers; ``--threads`` sets the
compiled kernels' threads of every process (``NUMBA_NUM_THREADS`` for the in-process run,
``--threads-per-worker`` for the workers), so that W workers with one thread each use W cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "coolmc" / "avoid.prism"


def bandwidth_gbs(size: int = 1 << 28) -> float:
    """One core's read bandwidth: a 2 GiB float64 array summed, best of 3 (GB/s)."""
    a = np.ones(size)
    best = np.inf
    for _ in range(3):
        t = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - t)
    return a.nbytes / best / 1e9


def run(model: str, const: str, prop: str, spec: str, threads: int | None) -> dict[str, object]:
    driver, checker = spec.split(":")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [sys.executable, "-m", "distmc.cli", "run", model, "--const", const, "--prop", prop, "--checker",
               checker, "--quiet", "--json", str(out)]
        env = dict(os.environ)
        if driver == "local":
            cmd += ["--driver", "local"]
            if threads:
                env["NUMBA_NUM_THREADS"] = str(threads)
        else:
            cmd += ["--driver", "ray", "--workers", driver[len("ray"):]]
            if threads:
                cmd += ["--threads-per-worker", str(threads)]
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t
        if p.returncode != 0:
            raise SystemExit(f"{spec}: exit {p.returncode}: {p.stderr.strip()[-800:]}")
        rep = json.loads(out.read_text())
    rep["wall_s"] = wall
    rep["spec"] = spec
    return rep


def steps_of(prop: str) -> int | None:
    m = re.search(r"F\s*<=\s*(\d+)", prop)
    return int(m.group(1)) if m else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--const", default="xMax=8,yMax=8,slickness=0.1")
    ap.add_argument("--prop", default="P=? [F<=100 COLLISION=true]")
    ap.add_argument("--runs", default="local:native,ray1:distributed,ray2:distributed")
    ap.add_argument("--threads", type=int, default=None, help="kernel threads per process (default: as distmc sets)")
    ap.add_argument("--json", default=None, help="also write every report here")
    a = ap.parse_args(argv)
    k = steps_of(a.prop)
    reports = [run(a.model, a.const, a.prop, s, a.threads) for s in a.runs.split(",")]
    bw = bandwidth_gbs()  # after the runs: its 2 GiB array is not in their memory
    first = reports[0]
    print(f"# {Path(a.model).name} {a.const}  {a.prop}: {first['states']} states, {first['transitions']} transitions")
    print(f"# machine: {platform.node()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d %H:%M')}; one core reads "
          f"{bw:.1f} GB/s; threads per process: {a.threads or 'default'}")
    print("| run | value | wall s | explore s | parts s | check s | driver peak GB | worker peaks GB | "
          "B/transition held | ns/transition/step (check) | ns (kernel) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in reports:
        t = r["timings"]
        ws = r["worker_stats"]
        mem = r.get("memory", {})
        held = "-"
        kernel = "-"
        if ws and "check_bytes" in ws[0]:
            rows = sum(w["check_bytes"]["rows"] for w in ws)
            held = f"{rows / r['transitions']:.2f}"
            if k:
                kernel = f"{max(w['check_compute_s'] for w in ws) / (k * r['transitions'] / len(ws)) * 1e9:.2f}"
        per = f"{t['check_s'] / (k * r['transitions']) * 1e9:.2f}" if k else "-"
        print(f"| {r['spec']} | {r['result']!r} | {r['wall_s']:.1f} | {t['explore_s']:.1f} | {t['assemble_s']:.1f} | "
              f"{t['check_s']:.1f} | {mem.get('driver_peak_bytes', 0) / 1e9:.2f} | "
              f"{', '.join(f'{b / 1e9:.2f}' for b in mem.get('worker_peak_bytes', []))} | {held} | {per} | {kernel} |")
        for i, w in enumerate(ws):
            if "check_compute_s" in w:
                print(f"|   worker {i} | expand {w.get('expand_s', 0):.1f} s, exchange {w.get('exchange_s', 0):.1f} s, "
                      f"idle {w.get('idle_s', 0):.1f} s (levels); check: compute {w['check_compute_s']:.1f} s, "
                      f"exchange {w['check_exchange_s']:.1f} s, wait {w['check_wait_s']:.1f} s, "
                      f"{w['check_bytes_sent'] / 1e6:.0f} MB sent | | | | | | | | | | |")
    if a.json:
        Path(a.json).write_text(json.dumps(reports, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
