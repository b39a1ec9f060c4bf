"""The hand-off to Storm: a UMB archive written from the numpy arrays against ``SparseMatrixBuilder.add_next_values``.

Both turn the same assembled :class:`~distmc.assemble.reducer.InducedModel` into a Storm model; each runs in a
fresh process (so peak memory is its own) and the model Storm ends up with is checked to be the same (states,
transitions, value of the property). Usage (from the repository root)::

    python benchmarks/handoff.py --const xMax=6,yMax=6,slickness=0.1
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "coolmc" / "avoid.prism"


def child(way: str, model: str, constants: str, prop: str) -> dict[str, float]:
    from distmc.api import verify
    from distmc.assemble.storm import to_storm_builder, to_storm_umb
    from distmc.check.checker import check
    from distmc.check.properties import parse_property
    from distmc.model.program import load_model

    out = verify(model, prop, constants=constants, keep_model=True)
    assert isinstance(out, tuple)
    _, induced = out
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    t0 = time.perf_counter()
    storm_model = (to_storm_umb if way == "umb" else to_storm_builder)(induced)
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    spec = parse_property(prop, load_model(model, constants))
    value = check(storm_model, spec, induced.kind, induced.initial).value
    return {
        "seconds": dt,
        "peak_before_mb": before,
        "peak_mb": peak,
        "states": storm_model.nr_states,
        "transitions": storm_model.nr_transitions,
        "value": value,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--const", default="xMax=6,yMax=6,slickness=0.1")
    ap.add_argument("--prop", default="P=? [F<=100 COLLISION=true]")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(*a.child)))
        return 0
    res = {}
    for way in ("umb", "builder"):
        p = subprocess.run(
            [sys.executable, __file__, "--child", way, a.model, a.const, a.prop],
            capture_output=True,
            text=True,
            check=True,
        )
        res[way] = json.loads(p.stdout.strip().splitlines()[-1])
    u, b = res["umb"], res["builder"]
    assert (u["states"], u["transitions"]) == (b["states"], b["transitions"]), res
    print(
        f"# {Path(a.model).name} {a.const}: {u['states']} states, {u['transitions']} transitions; "
        f"value umb {u['value']} builder {b['value']}"
    )
    print("| hand-off | seconds | peak RSS before (MB) | peak RSS after (MB) |")
    print("|---|---|---|---|")
    for way, r in res.items():
        print(f"| {way} | {r['seconds']:.2f} | {r['peak_before_mb']:.0f} | {r['peak_mb']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
