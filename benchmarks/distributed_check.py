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
thread budget of every process (``--threads-per-worker``: the in-process run's pools, every worker's), so that W
workers with one thread each use W cores.

**Speed from workers** (issue 23). With ``--threads 1``, every worker's CPU time is printed beside its wall time,
exploring and checking apart (a worker within its budget keeps CPU <= about 1 x wall), and every Ray run is
compared with the first 1-worker run: the speed-up of the levels (the exploration without Ray's and the actors'
start-up) and of the check (the workers' parts and the check). ``--limit`` first measures this machine's own limit
for two workers: the same random-gather pattern (the checker's sweeps and the hash sets' probes gather at random)
in one process alone, then in two processes at once; a run's speed-up is then also given as a fraction of the
limit ``2 x alone / two at once``. Give ``--const`` several times for several model sizes. The command of the
measurement in ``benchmarks/RESULTS.md`` (issue 23)::

    python benchmarks/distributed_check.py --const xMax=10,yMax=10,slickness=0.1 \
        --const xMax=12,yMax=12,slickness=0.1 --runs ray1:distributed,ray2:distributed,ray1:distributed,ray2:distributed \
        --threads 1 --limit --no-bandwidth --json benchmarks/distributed_check_w2.json
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


def _gather(n_values: int, n_reads: int, seed: int) -> float:
    """Seconds of one random gather: ``n_reads`` float64 at random places of an array of ``n_values`` (best of 3)."""
    rng = np.random.default_rng(seed)
    a = rng.random(n_values)
    idx = rng.integers(0, n_values, n_reads)
    best = np.inf
    for _ in range(3):
        t = time.perf_counter()
        a.take(idx).sum()
        best = min(best, time.perf_counter() - t)
    return float(best)


def _gather_child(barrier: object, out: object, n_values: int, n_reads: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.random(n_values)
    idx = rng.integers(0, n_values, n_reads)
    times = []
    for _ in range(3):
        barrier.wait()  # type: ignore[attr-defined]
        t = time.perf_counter()
        a.take(idx).sum()
        times.append(time.perf_counter() - t)
    out.put(min(times))  # type: ignore[attr-defined]


def two_process_limit(n_values: int = 50_000_000, n_reads: int = 20_000_000) -> dict[str, float]:
    """The machine's own limit for two workers: one random gather alone, then two processes gathering at once.

    A 400 MB array (50 M float64) and 20 M random reads, the pattern of the checker's sweeps and the hash sets'
    probes. ``limit`` = 2 x alone / two at once: the speed-up two workers can get on work of this kind.
    """
    import multiprocessing as mp

    alone = _gather(n_values, n_reads, 0)
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_gather_child, args=(barrier, out, n_values, n_reads, s)) for s in (1, 2)]
    for p in procs:
        p.start()
    both = [out.get() for _ in procs]
    for p in procs:
        p.join()
    two = float(np.mean(both))
    return {"alone_s": alone, "two_s": two, "limit": 2 * alone / two}


def run(model: str, const: str, prop: str, spec: str, threads: int | None) -> dict[str, object]:
    driver, checker = spec.split(":")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [
            sys.executable,
            "-m",
            "distmc.cli",
            "run",
            model,
            "--const",
            const,
            "--prop",
            prop,
            "--checker",
            checker,
            "--quiet",
            "--json",
            str(out),
        ]
        env = dict(os.environ)
        if driver == "local":
            cmd += ["--driver", "local"]
        else:
            cmd += ["--driver", "ray", "--workers", driver[len("ray") :]]
        if threads:
            cmd += ["--threads-per-worker", str(threads)]
        load0 = os.getloadavg()[0]
        t = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t
        if p.returncode != 0:
            raise SystemExit(f"{spec}: exit {p.returncode}: {p.stderr.strip()[-800:]}")
        rep = json.loads(out.read_text())
    rep["wall_s"] = wall
    rep["spec"] = spec
    rep["load"] = (load0, os.getloadavg()[0])  # the machine's load average before and after the run
    return rep


def speed_table(reports: list[dict[str, object]], limit: dict[str, float] | None) -> list[str]:
    """Each Ray run against the first 1-worker run: levels and check, speed-up, and its fraction of the limit."""
    base = next((r for r in reports if r["spec"].startswith("ray1:")), None)  # type: ignore[union-attr]
    if base is None:
        return []
    lines = [
        "",
        "| run | levels s | speed-up (levels) | parts + check s | speed-up (check) | explore + check s | "
        "speed-up (both) | limit (2 procs) | speed-up / limit |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def parts(r: dict[str, object]) -> tuple[float, float]:
        t = r["timings"]  # type: ignore[index]
        return float(t.get("levels_s", t["explore_s"])), float(t["assemble_s"] + t["check_s"])  # type: ignore[union-attr]

    b_lv, b_ck = parts(base)
    for r in reports:
        if not str(r["spec"]).startswith("ray"):
            continue
        lv, ck = parts(r)
        both = (b_lv + b_ck) / (lv + ck)
        lim = f"{limit['limit']:.2f}" if limit else "-"
        frac = f"{both / limit['limit']:.2f}" if limit else "-"
        lines.append(
            f"| {r['spec']} | {lv:.1f} | {b_lv / lv:.2f} | {ck:.1f} | {b_ck / ck:.2f} | {lv + ck:.1f} | "
            f"{both:.2f} | {lim} | {frac} |"
        )
    return lines


def cpu_table(reports: list[dict[str, object]]) -> list[str]:
    """Each worker's CPU seconds beside its wall seconds, exploring and checking (its thread budget)."""
    lines = [
        "",
        "| run | worker | threads | explore CPU s | explore wall s | CPU/wall | check CPU s | check wall s | "
        "CPU/wall | load before, after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        for i, w in enumerate(r["worker_stats"]):  # type: ignore[arg-type]
            if "explore_cpu_s" not in w:
                continue
            ec, ew = w["explore_cpu_s"], w["explore_wall_s"]
            cc, cw = w.get("check_cpu_s", 0.0), w.get("check_wall_s", 0.0)
            th = ", ".join(f"{k} {v}" for k, v in w.get("threads", {}).items())
            lines.append(
                f"| {r['spec']} | {i} | {th} | {ec:.1f} | {ew:.1f} | {ec / max(ew, 1e-9):.2f} | {cc:.1f} | "
                f"{cw:.1f} | {cc / max(cw, 1e-9):.2f} | {r['load'][0]:.1f}, {r['load'][1]:.1f} |"
            )  # type: ignore[index]
    return lines


def steps_of(prop: str) -> int | None:
    m = re.search(r"F\s*<=\s*(\d+)", prop)
    return int(m.group(1)) if m else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument(
        "--const",
        action="append",
        default=None,
        help="the model's constants (give it several times for several sizes; default avoid 8x8)",
    )
    ap.add_argument("--prop", default="P=? [F<=100 COLLISION=true]")
    ap.add_argument("--runs", default="local:native,ray1:distributed,ray2:distributed")
    ap.add_argument("--threads", type=int, default=None, help="kernel threads per process (default: as distmc sets)")
    ap.add_argument("--json", default=None, help="also write every report here")
    ap.add_argument("--limit", action="store_true", help="measure the machine's two-process limit first")
    ap.add_argument("--no-bandwidth", action="store_true", help="skip the one-core bandwidth (a 2 GiB array)")
    a = ap.parse_args(argv)
    k = steps_of(a.prop)
    limit = two_process_limit() if a.limit else None
    if limit:
        print(
            f"# two-process limit: a random gather (20 M reads of 400 MB) {limit['alone_s']:.3f} s alone, "
            f"{limit['two_s']:.3f} s each when two processes gather at once: two workers can be at most "
            f"{limit['limit']:.2f}x as fast as one on such work (load average {os.getloadavg()[0]:.1f})"
        )
    everything = []
    for const in a.const or ["xMax=8,yMax=8,slickness=0.1"]:
        reports = [run(a.model, const, a.prop, s, a.threads) for s in a.runs.split(",")]
        everything += reports
        table(a, const, k, reports, limit)
    if a.json:
        Path(a.json).write_text(json.dumps({"limit": limit, "runs": everything}, indent=2))
    return 0


def table(
    a: argparse.Namespace, const: str, k: int | None, reports: list[dict[str, object]], limit: dict[str, float] | None
) -> None:
    """Print one model size's tables."""
    bw = float("nan") if a.no_bandwidth else bandwidth_gbs()  # after the runs: its 2 GiB are not in their memory
    first = reports[0]
    values = {repr(r["result"]) for r in reports}
    print(
        f"\n# {Path(a.model).name} {const}  {a.prop}: {first['states']} states, {first['transitions']} "
        f"transitions; {'the same value in every run' if len(values) == 1 else 'DIFFERENT VALUES: ' + str(values)}"
    )
    print(
        f"# machine: {platform.node()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d %H:%M')}; one core reads "
        f"{bw:.1f} GB/s; threads per process: {a.threads or 'default'}"
    )
    print(
        "| run | value | wall s | explore s | parts s | check s | driver peak GB | worker peaks GB | "
        "B/transition held | ns/transition/step (check) | ns (kernel) |"
    )
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
        print(
            f"| {r['spec']} | {r['result']!r} | {r['wall_s']:.1f} | {t['explore_s']:.1f} | {t['assemble_s']:.1f} | "
            f"{t['check_s']:.1f} | {mem.get('driver_peak_bytes', 0) / 1e9:.2f} | "
            f"{', '.join(f'{b / 1e9:.2f}' for b in mem.get('worker_peak_bytes', []))} | {held} | {per} | {kernel} |"
        )
        for i, w in enumerate(ws):
            if "check_compute_s" in w:
                print(
                    f"|   worker {i} | expand {w.get('expand_s', 0):.1f} s, exchange {w.get('exchange_s', 0):.1f} s, "
                    f"idle {w.get('idle_s', 0):.1f} s (levels); check: compute {w['check_compute_s']:.1f} s, "
                    f"exchange {w['check_exchange_s']:.1f} s, wait {w['check_wait_s']:.1f} s, "
                    f"{w['check_bytes_sent'] / 1e6:.0f} MB sent | | | | | | | | | | |"
                )
    print("\n".join(cpu_table(reports) + speed_table(reports, limit)))


if __name__ == "__main__":
    sys.exit(main())
