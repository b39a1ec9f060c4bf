"""Scaling experiment: ``distmc scale`` (:mod:`distmc.scale`) against the in-process driver.

The Ray runs are :func:`distmc.scale.scale`'s (stochastic mode, uniform policy unless ``--policy``; the fastest of
``--repeat`` runs per worker count; speed-up and efficiency of the exploration without start-up, bytes exchanged
per state, partition balance). Before every Ray run this script runs the in-process driver too (the fastest of all
is the reference), so that both drivers are measured under the same load, and adds: explore + assemble (+ the
hand-off) against the in-process driver's (the sum, because Ray actors merge their rows while exploring where the
in-process reducer merges them in assemble), for the fastest and for the first run of each worker count (the
first starts its actors, later runs get the ones the previous run kept), bytes per state against the packed key
size, and the workers' time split (the busiest's expand, lookup, store, exchange, and the most a worker sat idle
in the levels). It writes a Markdown table to stdout and, with ``--plot``, :func:`distmc.scale.plot`'s PNG.

Usage (from the repository root)::

    python benchmarks/scaling.py --const xMax=6,yMax=6,slickness=0.1 --workers 1,2,4,8 --plot benchmarks/scaling.png
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "coolmc" / "avoid.prism"


def _driver_s(t: dict[str, float]) -> float:
    """What the driver's side of a run costs before the check: exploring, assembling and handing the model over.

    The two drivers split this work differently (Ray actors merge each row's branches as they keep them, the
    in-process driver's reducer merges them in place), so they are compared on the sum.
    """
    return float(t["explore_s"] + t["assemble_s"] + t.get("handoff_s", 0.0))


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
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="compiled-kernel threads per Ray worker, and of the in-process reference run (default: "
        "the in-process run uses every core, a worker the cores divided by the workers)",
    )
    ap.add_argument(
        "--policy-servers",
        type=int,
        default=0,
        help="0: a policy replica in every worker; N: N policy-server actors (one GPU each where there "
        "are GPUs) serve the workers; compare the two on a GPU machine",
    )
    ap.add_argument(
        "--checker",
        default="native",
        help="checker of every run (the exploration is what is timed; native is the quicker check)",
    )
    ap.add_argument("--plot", default=None, help="write a PNG here")
    a = ap.parse_args(argv)

    import numba

    from distmc.api import verify
    from distmc.model.packing import StateCodec
    from distmc.model.program import load_model
    from distmc.options import VerifyOptions
    from distmc.scale import explore_time, plot, scale, startup_time, table

    counts = [int(w) for w in a.workers.split(",")]
    if a.threads is not None:  # the in-process reference with the same threads as one worker
        numba.set_num_threads(a.threads)
    m = load_model(a.model, a.const)
    key_bytes = StateCodec(m.lo, m.hi).key_bytes
    opts = VerifyOptions(
        constants=a.const, policy=a.policy, interface=a.interface, mode="stochastic", checker=a.checker
    )
    verify(a.model, a.prop, opts)  # warm the compiled routines' cache
    local: list[Any] = []

    def reference() -> None:  # the in-process driver, before every Ray run: the fastest is kept
        lr = verify(a.model, a.prop, opts)
        if not local or _driver_s(lr.timings) < _driver_s(local[0].timings):
            local[:] = [lr]

    s = scale(
        a.model,
        a.prop,
        counts,
        repeat=a.repeat,
        before_run=reference,
        options=replace(opts, address=a.address, threads_per_worker=a.threads, policy_servers=a.policy_servers),
    )
    ref = local[0]
    if not s.same_value or s.states != ref.states or any(r["result"] != ref.result for r in s.runs):
        print(f"the drivers disagree: in-process {ref.result} ({ref.states} states)", file=sys.stderr)
        print(table(s), file=sys.stderr)
        return 1
    print(
        f"{Path(a.model).name} {a.const}  {a.prop}; {ref.states} states, {ref.transitions} transitions; "
        f"packed key {key_bytes} bytes"
    )
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}; "
        f"in-process driver: explore {ref.timings['explore_s']:.2f} s, + assemble {_driver_s(ref.timings):.2f} s; "
        f"threads per worker: {a.threads or 'cores / workers'}; "
        f"policy servers: {a.policy_servers or 'none (a replica per worker)'}"
    )
    print()
    print(
        "| workers | explore s | levels + gather s | states/s | speedup | efficiency | explore + assemble s "
        "| vs in-process | first run s | first vs in-process | bytes/state | bytes/key | balance (max/mean) "
        "| expand s | lookup s | store s | exchange s | idle s | start-up s | levels s | gather s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for run in s.runs:
        t, t1, ws = run["timings"], run["first_timings"], run["worker_stats"]
        print(
            f"| {run['workers']} | {t['explore_s']:.2f} | {explore_time(t):.2f} | "
            f"{run['states'] / explore_time(t):,.0f} | {run['speedup']:.2f} | {run['efficiency']:.2f} | "
            f"{_driver_s(t):.2f} | {_driver_s(t) / _driver_s(ref.timings):.2f}x | {_driver_s(t1):.2f} | "
            f"{_driver_s(t1) / _driver_s(ref.timings):.2f}x | {run['bytes_per_state']:.1f} | "
            f"{run['bytes_per_state'] / key_bytes:.2f} | {run['balance']:.3f} | "
            f"{max(w['expand_s'] for w in ws):.2f} | {max(w['lookup_s'] for w in ws):.2f} | "
            f"{max(w['store_s'] for w in ws):.2f} | {max(w['exchange_s'] for w in ws):.2f} | "
            f"{max(w['idle_s'] for w in ws):.2f} | {startup_time(t):.2f} | {t.get('levels_s', float('nan')):.2f} | "
            f"{t.get('gather_s', float('nan')):.2f} |"
        )
    if a.plot:
        plot(s, a.plot)
        print(f"\nplot: {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
