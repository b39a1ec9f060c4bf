"""What bounds that hold cost: the default rule (1e-12 absolute and 1e-6 relative) against 1e-12 absolute alone.

For each case the model is explored once (``verify(..., keep_model=True)``), then Storm's check and the native
checker's check run on the same induced model under both rules, side by side in one process (the median of
``--repeat`` runs each): seconds, the value, the width of the reported bounds (absolute and relative), and, for
small models, whether Storm's exact engine's value (the rationals of the induced doubles) lies in the bounds.

Usage (from the repository root)::

    python benchmarks/bounds_cost.py                 # the cases below
    python benchmarks/bounds_cost.py --repeat 3 --json bounds_cost.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any

from benchmarks.sound_check import _time
from distmc.api import verify
from distmc.assemble.storm import to_storm
from distmc.check.checker import check
from distmc.check.dispatch import check_native_result
from distmc.check.properties import parse_properties
from distmc.check.result import Precision
from distmc.model.program import load_model
from tests.conftest import SHARED_MODELS, STORM_FILES
from tests.test_bounds import RARE

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "distmc" / "examples"
POLICY = {"policy": str(EXAMPLES / "gridworld_policy.pt"), "interface": str(EXAMPLES / "gridworld_policy.json")}

#: (name, model path or "rare", constants, property, verify keywords)
CASES: list[tuple[str, str, str | None, str, dict[str, str]]] = [
    ("brp-16-2", str(STORM_FILES / "dtmc/brp-16-2.pm"), None, "P=? [F s=5]", {}),
    ("brp-16-2", str(STORM_FILES / "dtmc/brp-16-2.pm"), None, "P=? [F srep=2]", {}),
    ("crowds-5-5", str(STORM_FILES / "dtmc/crowds-5-5.pm"), None, "P=? [F observe0>1]", {}),
    ("rare chain (tests/test_bounds.py)", "rare", None, 'P=? [F "fail"]', {}),
    ("gridworld N=6, trained policy", str(EXAMPLES / "gridworld.prism"), "N=6", 'P=? [F "crash"]', POLICY),
    ("gridworld N=12, uniform", str(EXAMPLES / "gridworld.prism"), "N=12", 'P=? [F "crash"]', {}),
    ("gridworld N=12, uniform", str(EXAMPLES / "gridworld.prism"), "N=12", 'R{"steps"}=? [F "goal" | "crash"]', {}),
    (
        "coolmc avoid 4x4",
        str(SHARED_MODELS / "avoid.prism"),
        "xMax=4,yMax=4,slickness=0.1",
        "P=? [F COLLISION=true]",
        {},
    ),
]

RULES = {"1e-12 abs": Precision(1e-12, rel=None), "default": Precision()}


def run_case(path: str, constants: str | None, prop: str, kw: dict[str, str], repeat: int) -> dict[str, Any]:
    report, induced = verify(path, prop, constants=constants, keep_model=True, **kw)  # type: ignore[misc]
    spec = parse_properties(prop, load_model(path, constants)).specs[0]
    storm_model = to_storm(induced)
    q = None
    if induced.n_transitions <= 20_000 and not kw:  # the exact engine is quick on short decimals only
        res = check(to_storm(induced, exact=True), spec, induced.kind, induced.initial, Precision(exact=True))
        q = Fraction(str(res.exact))
    out: dict[str, Any] = {"states": induced.n_states, "transitions": induced.n_transitions, "checks": {}}
    for checker in ("storm", "native"):
        for rule, prec in RULES.items():
            if checker == "storm":
                fn = lambda p=prec: check(storm_model, spec, induced.kind, induced.initial, p)  # noqa: E731
            else:
                fn = lambda p=prec: check_native_result(induced, spec, p)  # noqa: E731
            seconds, res = _time(fn, repeat)
            lo, hi = res.bounds
            row = {
                "check_s": round(seconds, 4),
                "value": res.value,
                "width": hi - lo,
                "rel_width": (hi - lo) / abs(res.value) if res.value else None,
            }
            if q is not None:
                row["exact_inside"] = Fraction(lo) <= q <= Fraction(hi)
            out["checks"][f"{checker}, {rule}"] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rare = Path(tmp) / "rare.prism"
        rare.write_text(RARE)
        for name, path, constants, prop, kw in CASES:
            path = str(rare) if path == "rare" else path
            if not Path(path).exists():
                continue
            got = run_case(path, constants, prop, kw, a.repeat)
            rows.append({"case": name, "property": prop, **got})
            print(f"\n{name} `{prop}`: {got['states']} states, {got['transitions']} transitions")
            print("| checker, rule | check s | value | width | relative width | exact inside |")
            print("|---|---|---|---|---|---|")
            for k, r in got["checks"].items():
                rel = "" if r["rel_width"] is None else f"{r['rel_width']:.2g}"
                print(
                    f"| {k} | {r['check_s']} | {r['value']!r} | {r['width']:.2g} | {rel} | "
                    f"{r.get('exact_inside', '')} |",
                    flush=True,
                )
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
