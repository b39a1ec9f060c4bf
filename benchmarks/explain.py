"""What --traces K and --values add to a run: avoid 8x8 (COOL-MC's model), in-process and on Ray workers.

    python benchmarks/explain.py --const xMax=8,yMax=8,slickness=0.1 --traces 10 --workers 1,2

Each run checks ``P=? [F<=100 COLLISION=true]`` with the uniform policy, finds the K most probable traces and
writes the per-state values (Parquet, to a temporary directory); the table gives the run's own split of its time
(``traces_s``: search and annotation, ``values_s``: BFS depths, the states most at risk and the Parquet file),
beside the check's time. Every run starts in a fresh process, so numba's compiled code is loaded from its cache
as in a fresh ``distmc run``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AVOID = REPO.parent / "shared" / "models" / "coolmc" / "avoid.prism"

_CHILD = """
import json, sys, resource
from distmc.api import verify
a = json.loads(sys.argv[1])
r = verify(a["model"], a["prop"], constants=a["const"], traces=a["traces"], values=a["values"], workers=a["workers"],
           driver="ray" if a["workers"] > 1 else None, checker=a["checker"])
print(json.dumps({"result": r.result, "states": r.states, "transitions": r.transitions, "timings": r.timings,
                  "mass": r.traces_mass, "first": r.traces[0]["probability"] if r.traces else None,
                  "steps": len(r.traces[0]["path"]) - 1 if r.traces else None, "checker": r.checker,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(AVOID))
    ap.add_argument("--const", default="xMax=8,yMax=8,slickness=0.1")
    ap.add_argument("--prop", default="P=? [F<=100 COLLISION=true]")
    ap.add_argument("--traces", type=int, default=10)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--checker", default="auto")
    args = ap.parse_args()
    print(
        f"{Path(args.model).name} {args.const}  {args.prop}; uniform policy, --traces {args.traces} --values; "
        f"--checker {args.checker}"
    )
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}; load average "
        f"{os.getloadavg()[0]:.1f}\n"
    )
    print(
        "| workers | states | transitions | explore s | check s (checker) | traces s | values s | traces / check | "
        "most probable trace | traces' mass / value | peak RSS GB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for w in [int(x) for x in args.workers.split(",")]:
            job = {
                "model": args.model,
                "prop": args.prop,
                "const": args.const,
                "traces": args.traces,
                "values": str(Path(tmp) / f"values-{w}.parquet"),
                "workers": w,
                "checker": args.checker,
            }
            out = subprocess.run(
                [sys.executable, "-c", _CHILD, json.dumps(job)], capture_output=True, text=True, check=True
            )
            d = json.loads(out.stdout.strip().splitlines()[-1])
            t = d["timings"]
            print(
                f"| {w} | {d['states']} | {d['transitions']} | {t['explore_s']:.2f} | {t['check_s']:.2f} "
                f"({d['checker']}) | {t['traces_s']:.2f} | {t['values_s']:.2f} | "
                f"{t['traces_s'] / t['check_s']:.2f} | {d['first']:.4g} ({d['steps']} steps) | "
                f"{d['mass']:.4g} / {d['result']:.6g} | {d['peak_rss'] / 1e9:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
