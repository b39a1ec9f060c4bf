"""The memory model of a distributed run, measured: bytes per state and per transition in the partitions, in the
reducer and in Storm.

For each model size it runs, in a fresh process, the Ray driver's pipeline step by step (explore on W workers,
gather into the driver, assemble, hand to Storm, check) and records

* per partition: the bytes of its visited set and global ids (per state it owns) and of its buffered rows (per
  transition it built), counted from the arrays, and each actor's resident memory growth;
* in the driver (the reducer): resident and peak memory after gathering, assembling and handing over to Storm,
  per transition of the induced model.

Usage (from the repository root)::

    python benchmarks/memory_model.py --sizes 5,6,7 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "coolmc" / "avoid.prism"
PROP = "P=? [F<=100 COLLISION=true]"


def _rss() -> tuple[int, int]:
    with open("/proc/self/statm") as f:
        cur = int(f.read().split()[1]) * resource.getpagesize()
    return cur, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def one(model: str, const: str, workers: int) -> dict[str, object]:
    import ray

    from distmc.assemble.reducer import assemble
    from distmc.assemble.storm import to_storm
    from distmc.check.checker import check
    from distmc.distributed import explore_ray
    from distmc.options import RaySettings
    from distmc.pipeline import Job

    ray.init(address="local", include_dashboard=False, log_to_driver=False, configure_logging=False)
    job = Job(model, PROP, const)
    parts = job.build(explorer=False)
    out: dict[str, object] = {"const": const, "rss_parsed": _rss()}
    explored = explore_ray(job, parts.codec, parts.codec.pack(parts.model.initial_states), RaySettings(workers))
    out["rss_gathered"] = _rss()
    ws = explored.worker_stats
    induced = assemble(explored, parts.model, parts.codec, parts.spec.atoms, parts.reward_names)
    del explored
    out["rss_assembled"] = _rss()
    sm = to_storm(induced)
    out["rss_storm"] = _rss()
    out["result"] = check(sm, parts.spec, induced.kind, induced.initial).value
    out.update(states=induced.n_states, transitions=induced.n_transitions, workers=ws)
    ray.shutdown()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--sizes", default="5,6,7", help="avoid grid sizes (xMax = yMax)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one is not None:
        print(json.dumps(one(a.model, a.one, a.workers)))
        return 0
    print(f"{Path(a.model).name}  {PROP}; stochastic, uniform policy; {a.workers} Ray workers")
    print(f"machine: {platform.node()}, {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}")
    print()
    print(
        "| size | states | transitions | partition B/state | partition B/transition | actor RSS growth B/transition "
        "| reducer B/transition (gathered) | (assembled) | + Storm, peak B/transition |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for size in a.sizes.split(","):
        const = f"xMax={size},yMax={size},slickness=0.1"
        proc = subprocess.run(
            [sys.executable, __file__, "--model", a.model, "--workers", str(a.workers), "--one", const],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        n, t, ws = r["states"], r["transitions"], r["workers"]
        sb = sum(w["state_bytes"] for w in ws) / n
        tb = sum(w["row_bytes"] for w in ws) / t
        growth = sum(w["peak_rss"] - w["start_rss"] for w in ws) / t
        base = r["rss_parsed"][0]
        print(
            f"| {size} | {n:,} | {t:,} | {sb:.1f} | {tb:.1f} | {growth:.1f} | "
            f"{(r['rss_gathered'][1] - base) / t:.1f} | {(r['rss_assembled'][1] - base) / t:.1f} | "
            f"{(r['rss_storm'][1] - base) / t:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
