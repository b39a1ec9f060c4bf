"""Issue 23: what the Ray workers spend their time on while exploring, sampled with py-spy.

Runs ``verify`` twice on Ray with ``--workers W --threads-per-worker 1`` (the second run on the kept actors), samples
every ``PartitionActor`` process with ``py-spy record`` during the second one, and sorts each worker's samples by what
it was doing: the expander (kernel and policy), the exchange protocol (a level's distinct successor keys, their
first occurrences, the owners' look-ups and answers, the id mapping), keeping rows (merge, compact), Ray itself,
or idle between a level's calls.

Usage (needs ``pip install py-spy`` and root or ptrace rights)::

    python benchmarks/profile_workers.py --const xMax=9,yMax=9,slickness=0.1 --workers 2 --seconds 25
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import threading
import time
from pathlib import Path

MODEL = str(Path(__file__).resolve().parents[2] / "shared" / "models" / "coolmc" / "avoid.prism")
PROP = "P=? [F<=100 COLLISION=true]"


def category(stack: str) -> str:
    if "Expander.expand" in stack:
        return "expander"
    if "_keep" in stack:
        return "keep rows"
    if "actor.py" in stack:
        return "exchange protocol"
    if "Worker.main_loop" in stack and "actor_method_executor" not in stack:
        return "idle"
    return "Ray, serialization"


def main() -> None:
    from distmc.api import verify
    from distmc.options import VerifyOptions

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--const", default="xMax=9,yMax=9,slickness=0.1")
    ap.add_argument("--prop", default=PROP)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=25)
    args = ap.parse_args()
    o = VerifyOptions(constants=args.const, driver="ray", workers=args.workers, threads_per_worker=1, checker="native")
    verify(args.model, args.prop, o)  # start-up and compilation; the actors are kept
    pids = subprocess.run(["pgrep", "-f", "ray::PartitionActor"], capture_output=True, text=True).stdout.split()
    out = {p: Path(f"/tmp/distmc-spy-{p}.txt") for p in pids}
    procs: list[subprocess.Popen[bytes]] = []

    def sample() -> None:
        for p, f in out.items():
            procs.append(
                subprocess.Popen(
                    [
                        "py-spy",
                        "record",
                        "--pid",
                        p,
                        "--duration",
                        str(args.seconds),
                        "--rate",
                        "50",
                        "--format",
                        "raw",
                        "--nonblocking",
                        "-o",
                        str(f),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

    threading.Thread(target=sample).start()
    time.sleep(1)
    r = verify(args.model, args.prop, o)
    print(f"{r.states} states, explore {r.timings['explore_s']:.2f} s", flush=True)
    for pr in procs:
        pr.wait()
    for p, f in out.items():
        if not f.exists():
            continue
        counts: collections.Counter[str] = collections.Counter()
        for line in f.read_text().splitlines():
            if line.strip():
                stack, n = line.rsplit(" ", 1)
                counts[category(stack)] += int(n)
        total = sum(counts.values())
        if total:
            shares = ", ".join(f"{k} {v / total:.1%}" for k, v in counts.most_common())
            print(f"actor pid {p}: {total} samples: {shares}")


if __name__ == "__main__":
    main()
