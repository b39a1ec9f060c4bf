"""Storm's check against distmc's native checker on the same induced DTMC: value, time, peak memory.

Each checker runs the whole pipeline (``verify(..., checker=...)``) in a fresh process, so the peak resident set is
its own; the value, states and transitions of the two runs are compared. Usage (from the repository root)::

    python benchmarks/native_check.py --const xMax=8,yMax=8,slickness=0.1 --prop 'P=? [F<=100 COLLISION=true]'
    python benchmarks/native_check.py --checkers native --const xMax=12,yMax=12,slickness=0.1   # Storm: ~28 GiB
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "coolmc" / "avoid.prism"


def child(checker: str, model: str, constants: str, prop: str) -> dict[str, object]:
    from distmc.api import verify

    r = verify(model, prop, constants=constants, checker=checker)
    assert not isinstance(r, tuple)
    return {
        "checker": r.checker,
        "value": r.result,
        "states": r.states,
        "transitions": r.transitions,
        "timings": r.timings,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--const", default="xMax=8,yMax=8,slickness=0.1")
    ap.add_argument("--prop", default="P=? [F<=100 COLLISION=true]")
    ap.add_argument("--checkers", default="storm,native", help="comma-separated: storm, native")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(*a.child)))
        return 0
    res = {}
    for checker in a.checkers.split(","):
        p = subprocess.run(
            [sys.executable, __file__, "--child", checker, a.model, a.const, a.prop], capture_output=True, text=True
        )
        if p.returncode != 0:
            print(f"{checker}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            continue
        res[checker] = json.loads(p.stdout.strip().splitlines()[-1])
    if not res:
        return 1
    first = next(iter(res.values()))
    if len(res) == 2:
        s, n = res["storm"], res["native"]
        assert (s["states"], s["transitions"]) == (n["states"], n["transitions"]), res
    print(f"# {Path(a.model).name} {a.const}  {a.prop}; {first['states']} states, {first['transitions']} transitions")
    print(f"# machine: {platform.node()}, {platform.machine()}; {time.strftime('%Y-%m-%d %H:%M')}")
    print("| checker | value | explore s | assemble s (incl. Storm import) | check s | total s | peak RSS (MB) |")
    print("|---|---|---|---|---|---|---|")
    for c, r in res.items():
        t = r["timings"]
        print(
            f"| {c} | {r['value']!r} | {t['explore_s']:.2f} | {t['assemble_s'] + t.get('handoff_s', 0.0):.2f} | {t['check_s']:.2f} | "
            f"{t['total_s']:.2f} | {r['peak_mb']:.0f} |"
        )
    if len(res) == 2:
        sv, nv = res["storm"]["value"], res["native"]["value"]
        print(f"\n|storm - native| = {abs(sv - nv):.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
