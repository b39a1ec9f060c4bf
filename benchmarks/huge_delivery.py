"""Issue 22's "huge" target: a sound answer of width <= 1e-3 from a model too big to explore, on 2 workers.

The model is the delivery truck of ``benchmarks/envs/delivery.prism`` on a 256 x 256 grid with a tank of 1280
(``N=256,FUEL=1280,slip=0.1``; ``--n`` and ``--fuel`` choose others): at most 256 * 256 * 1281 * 2 = 168 M
states under a stochastic policy (each action has a probability > 0, so the truck may be anywhere with almost any
fuel). The 160 x 160 grid with a tank of 800 has 34,236,321 of its 41.0 M (explored whole on 2 workers in 104 s,
9.4 GB); this one, about 140 M by the same share, needs about 4 times that: more than the machine has. The policy is the PPO network trained on
the 48 x 48 grid with a tank of 240 (``benchmarks/policies/delivery_n48_f240``, delivering with 0.9995 there),
given the bigger grid through its interface: the observations are scaled by the new ranges (x / 255, y / 255,
fuel / 1280), so the network sees the same fractions of the way as in training. On the big grid it delivers with
probability about 0.999.

Two runs, one after the other (each alone on the machine), with the commands of ``benchmarks/RESULTS.md``:

* ``--part width``: ``--width 1e-3 --workers 2 --max-memory 20G --timeout 30m``, mass first (the default);
* ``--part full``: the same model explored whole, breadth first, on 2 workers with ``--max-memory 20G`` and the
  distributed checker: the limit stops it (the model does not fit), and the bounds of what it explored are
  reported.

Each writes the run's JSON report into ``--out`` (``width_n256_f1280.json``, ...) and prints a summary: states,
width, time, and the memory of every process (the driver's and each worker's peak RSS).

Run::

    python benchmarks/huge_delivery.py --part width --out benchmarks/huge
    python benchmarks/huge_delivery.py --part full --out benchmarks/huge
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "benchmarks" / "envs" / "delivery.prism"
TRAINED = REPO / "benchmarks" / "policies" / "delivery_n48_f240"
PROP = 'P=? [F "delivered"]'
PARTS = {
    "width": ["--width", "1e-3", "--max-memory", "20G", "--timeout", "30m"],
    "full": ["--max-memory", "20G", "--checker", "distributed"],
}


def interface(out: Path, n: int, fuel: int) -> Path:
    """The trained policy's interface with the observations scaled by the big grid's ranges."""
    spec = json.loads((TRAINED / "policy.json").read_text())
    spec["scale"].update({"x": 1 / (n - 1), "y": 1 / (n - 1), "fuel": 1 / fuel})
    path = out / f"policy_n{n}_f{fuel}.json"
    path.write_text(json.dumps(spec, indent=2) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=sorted(PARTS), required=True)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "huge")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--fuel", type=int, default=1280)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"{args.part}_n{args.n}_f{args.fuel}"
    report = args.out / f"{name}.json"
    cmd = [
        sys.executable,
        "-c",
        "from distmc.cli import main; main()",
        "run",
        str(MODEL),
        "--prop",
        PROP,
        "--const",
        f"N={args.n},FUEL={args.fuel},slip=0.1",
        "--policy",
        str(TRAINED / "policy.pt"),
        "--interface",
        str(interface(args.out, args.n, args.fuel)),
        "--workers",
        str(args.workers),
        "--threads-per-worker",
        "1",
        *PARTS[args.part],
        "--quiet",
        "--json",
        str(report),
    ]
    print("$", " ".join(cmd), flush=True)
    t = time.perf_counter()
    proc = subprocess.run(cmd, check=False)
    wall = time.perf_counter() - t
    r = json.loads(report.read_text())
    mem = r.get("memory", {})
    peaks = [mem.get("driver_peak_bytes", 0), *mem.get("worker_peak_bytes", [])]
    lo, hi = r["bounds"] if r.get("bounds") else (r["result"], r["result"])
    summary = {
        "part": args.part,
        "n": args.n,
        "fuel": args.fuel,
        "command": " ".join(cmd),
        "exit": proc.returncode,
        "wall_s": round(wall, 1),
        "states": r["states"],
        "transitions": r["transitions"],
        "bounds": [lo, hi],
        "width": hi - lo,
        "frontier": r.get("frontier"),
        "peak_bytes": peaks,
        "peak_total_gb": round(sum(peaks) / 1e9, 2),
        "timings": r.get("timings"),
        "rounds": [(x["states"], x["width"]) for x in r.get("rounds") or []],
    }
    (args.out / f"{name}_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
