"""Scaling experiment: the same exploration with 1, 2, 4, ... Ray workers, against the in-process driver.

For each worker count it runs ``distmc.api.verify`` (stochastic mode, uniform policy unless ``--policy``) with the
Ray driver on a local Ray (or ``--address``), and records: exploration time and states/s, speedup and efficiency
against one Ray worker, explore + assemble against the in-process driver's (the Ray driver's overhead at one worker;
the sum, because Ray actors merge their rows while exploring where the in-process reducer merges them in assemble), bytes exchanged per
state against the packed key size, partition balance (largest partition / mean), and the time split of the
workers (the busiest's expand, lookup, store, exchange, and the most a worker sat idle in the levels) and the
driver's split of the exploration time (actor start-up, the levels, gathering the rows into the reducer). It
writes a Markdown table to stdout and, with ``--plot``, a PNG (matplotlib).

Each Ray run is preceded by an in-process run (the fastest of all is the reference), so that both drivers are
measured under the same load. The fastest of ``--repeat`` Ray runs is reported; the first run of each worker count
also has its own columns: it starts its actors, while later runs get the actors the previous run kept.

Usage (from the repository root)::

    python benchmarks/scaling.py --const xMax=6,yMax=6,slickness=0.1 --workers 1,2,4,8 --plot benchmarks/scaling.png
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "coolmc" / "avoid.prism"


def _driver_s(r: Any) -> float:
    """What the driver's side of a run costs before the check: exploring and assembling the induced model.

    The two drivers split this work differently (Ray actors merge each row's branches as they keep them, the
    in-process driver's reducer merges them in place), so they are compared on the sum.
    """
    return float(r.timings["explore_s"] + r.timings["assemble_s"] + r.timings.get("handoff_s", 0.0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--const", default="xMax=6,yMax=6,slickness=0.1")
    ap.add_argument("--prop", default="P=? [F<=100 COLLISION=true]")
    ap.add_argument("--policy", default="uniform")
    ap.add_argument("--interface", default=None)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--address", default=None)
    ap.add_argument("--repeat", type=int, default=1, help="runs per worker count (the fastest is kept)")
    ap.add_argument("--threads", type=int, default=None,
                    help="compiled-kernel threads per Ray worker, and of the in-process reference run (default: "
                         "the in-process run uses every core, a worker the cores divided by the workers)")
    ap.add_argument("--policy-servers", type=int, default=0,
                    help="0: a policy replica in every worker; N: N policy-server actors (one GPU each where there "
                         "are GPUs) serve the workers; compare the two on a GPU machine")
    ap.add_argument("--checker", default="native",
                    help="checker of every run (the exploration is what is timed; native is the quicker check)")
    ap.add_argument("--plot", default=None, help="write a PNG here")
    a = ap.parse_args(argv)

    import ray

    from distmc.api import verify
    from distmc.model.packing import StateCodec
    from distmc.model.program import load_model

    counts = [int(w) for w in a.workers.split(",")]
    if a.threads is not None:  # the in-process reference with the same threads as one worker
        import numba

        numba.set_num_threads(a.threads)
    if not ray.is_initialized():
        ray.init(address=a.address or "local", include_dashboard=False, log_to_driver=False, configure_logging=False)
    m = load_model(a.model, a.const)
    key_bytes = StateCodec(m.lo, m.hi).key_bytes
    kw = dict(constants=a.const, policy=a.policy, interface=a.interface, mode="stochastic",
              checker=a.checker)
    verify(a.model, a.prop, **kw)  # warm the compiled routines' cache
    # The in-process runs alternate with the Ray runs, so that both see the same machine load; the fastest of each
    # is kept. The first Ray run of a worker count starts its actors (cold); later ones get the kept actors.
    local = None
    rows = []
    for w in counts:
        best = first = None
        for _ in range(a.repeat):
            lr = verify(a.model, a.prop, **kw)
            if local is None or _driver_s(lr) < _driver_s(local):
                local = lr
            t0 = time.perf_counter()
            r = verify(a.model, a.prop, workers=w, driver="ray", threads_per_worker=a.threads,
                       policy_servers=a.policy_servers, **kw)
            r.timings["wall_s"] = time.perf_counter() - t0
            first = first or r
            if best is None or r.timings["explore_s"] < best.timings["explore_s"]:
                best = r
        assert best is not None and first is not None and local is not None
        assert best.states == local.states and best.result == local.result
        rows.append((w, best, first))
    assert local is not None
    base = rows[0][1].timings["explore_s"] if rows[0][0] == 1 else None
    print(f"{Path(a.model).name} {a.const}  {a.prop}; {local.states} states, {local.transitions} transitions; "
          f"packed key {key_bytes} bytes")
    print(f"machine: {platform.node()}, {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}; "
          f"in-process driver: explore {local.timings['explore_s']:.2f} s, + assemble {_driver_s(local):.2f} s; "
          f"threads per worker: {a.threads or 'cores / workers'}; "
          f"policy servers: {a.policy_servers or 'none (a replica per worker)'}")
    print()
    print("| workers | explore s | states/s | speedup | efficiency | explore + assemble s | vs in-process | first run s | first vs in-process "
          "| bytes/state | bytes/key | balance (max/mean) | expand s | lookup s | store s | exchange s | idle s | start-up s "
          "| levels s | gather s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    plot = []
    for w, r, r1 in rows:
        t = r.timings["explore_s"]
        ws = r.worker_stats
        states = [s["states"] for s in ws]
        sent = sum(s["bytes_sent"] for s in ws)
        speed = base / t if base else float("nan")
        plot.append((w, r.states / t, speed))
        print(f"| {w} | {t:.2f} | {r.states / t:,.0f} | {speed:.2f} | {speed / w:.2f} | "
              f"{_driver_s(r):.2f} | {_driver_s(r) / _driver_s(local):.2f}x | {_driver_s(r1):.2f} | "
              f"{_driver_s(r1) / _driver_s(local):.2f}x | {sent / r.states:.1f} | {sent / r.states / key_bytes:.2f} | "
              f"{max(states) / (sum(states) / len(states)):.3f} | {max(s['expand_s'] for s in ws):.2f} | "
              f"{max(s['lookup_s'] for s in ws):.2f} | {max(s['store_s'] for s in ws):.2f} | "
              f"{max(s['exchange_s'] for s in ws):.2f} | {max(s['idle_s'] for s in ws):.2f} | "
              f"{r.timings.get('startup_s', float('nan')):.2f} | {r.timings.get('levels_s', float('nan')):.2f} | "
              f"{r.timings.get('gather_s', float('nan')):.2f} |")
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        ax[0].plot([p[0] for p in plot], [p[1] for p in plot], "o-")
        ax[0].set_xlabel("workers")
        ax[0].set_ylabel("states / s (exploration)")
        ax[0].set_xscale("log", base=2)
        ax[1].plot([p[0] for p in plot], [p[2] for p in plot], "o-", label="measured")
        ax[1].plot([p[0] for p in plot], [p[0] for p in plot], "--", label="linear")
        ax[1].set_xlabel("workers")
        ax[1].set_ylabel("speedup over 1 worker")
        ax[1].set_xscale("log", base=2)
        ax[1].legend()
        fig.suptitle(f"{Path(a.model).name} {a.const}, {os.cpu_count()} cores")
        fig.tight_layout()
        fig.savefig(a.plot, dpi=100)
        print(f"\nplot: {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
