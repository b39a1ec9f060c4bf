"""Bounds from a partial model (issue 22): soundness over many cases, and width against states for both orders.

``soundness``: for every (model, property) case, the full run's value (Storm, whole model) and partial runs at
budgets of 1/8, 1/4 and 1/2 of the full model's states, in-process (breadth-first levels, ``--max-states``), on
2 Ray workers, and in-process in the mass-first order (``--order mass``): the value must lie in every
``[lo, hi]`` (to 1e-9), the intervals must nest as the budget doubles, and the two breadth-first drivers must give
the same bounds. ``efficiency``: ``--order mass`` and ``--order bfs`` side by side,
the same budgets (doubling), width against states explored; a table, a JSON and a PNG.

Run (the exact commands of ``benchmarks/RESULTS.md``)::

    python benchmarks/partial_bounds.py soundness --json benchmarks/partial_soundness.json
    python benchmarks/partial_bounds.py efficiency --model benchmarks/envs/avoid.prism --const N=8,slickness=0.1 \\
        --policy benchmarks/policies/avoid/policy.pt --prop 'P=? [F<=30 "crash"]' \\
        --json benchmarks/partial_width.json --plot benchmarks/partial_width.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import stormpy  # noqa: E402

from distmc.api import Report, verify  # noqa: E402

STORM = Path(os.path.dirname(stormpy.__file__)) / "examples" / "files"
ENVS = REPO / "benchmarks" / "envs"
POLICIES = REPO / "benchmarks" / "policies"
COOLMC = REPO.parent / "shared" / "models" / "coolmc"
TOL = 1e-9


def _policy(env: str) -> dict[str, str]:
    return {"policy": str(POLICIES / env / "policy.pt"), "interface": str(POLICIES / env / "policy.json")}


#: (name, model, constants, property, verify keywords): stormpy's bundled models under the uniform policy, the
#: project's environments with their trained policies, and the avoid grid.
CASES: list[tuple[str, Path, str | None, str, dict[str, str]]] = [
    ("die", STORM / "dtmc" / "die.pm", None, 'P=? [F "one"]', {}),
    ("die", STORM / "dtmc" / "die.pm", None, 'R{"coin_flips"}=? [C<=4]', {}),
    ("crowds-5-5", STORM / "dtmc" / "crowds-5-5.pm", None, 'P=? [F "observe0Greater1"]', {}),
    ("crowds-5-5", STORM / "dtmc" / "crowds-5-5.pm", None, 'P=? [F<=20 "observe0Greater1"]', {}),
    ("brp-16-2", STORM / "dtmc" / "brp-16-2.pm", None, 'P=? [F "target"]', {}),
    ("leader-3-5", STORM / "dtmc" / "leader-3-5.pm", None, 'P=? [F<=4 "elected"]', {}),
    ("nand-5-2", STORM / "dtmc" / "nand-5-2.pm", None, 'P=? [F "target"]', {}),
    ("coin2-2 (uniform)", STORM / "mdp" / "coin2-2.nm", None, 'P=? [F "finished"]', {}),
    ("two_dice (uniform)", STORM / "mdp" / "two_dice.nm", None, 'P=? [F "seven"]', {}),
    ("csma2-2 (uniform)", STORM / "mdp" / "csma2-2.nm", None, 'P=? [F "all_delivered"]', {}),
    ("freeway", ENVS / "freeway.prism", "W=6", 'P=? [F "crash"]', _policy("freeway")),
    ("freeway", ENVS / "freeway.prism", "W=6", 'P=? [!"crash" U "goal"]', _policy("freeway")),
    ("avoid", ENVS / "avoid.prism", "N=5,slickness=0.1", 'P=? [F<=10 "crash"]', _policy("avoid")),
    ("lake", ENVS / "lake.prism", "slip=0.1", 'P=? [F "goal"]', _policy("lake")),
    ("lake", ENVS / "lake.prism", "slip=0.1", 'P=? [G !"hole"]', _policy("lake")),
    ("coolmc avoid 4x4", COOLMC / "avoid.prism", "xMax=4,yMax=4,slickness=0.1", "P=? [F<=10 COLLISION=true]", {}),
]


def _ends(r: Report) -> list[tuple[float, float]]:
    b = r.bounds
    if isinstance(b, dict):
        return [(float(b[k][0]), float(b[k][1])) for k in ("min", "max")]
    assert b is not None
    return [(float(b[0]), float(b[1]))]


def _values(r: Report) -> list[float]:
    v = r.result
    return [float(v["min"]), float(v["max"])] if isinstance(v, dict) else [float(v)]


def soundness(args: argparse.Namespace) -> int:
    rows, failures = [], []
    for name, model, consts, prop, kw in CASES:
        if not model.is_file():
            print(f"skip {name}: {model} missing")
            continue
        full = verify(model, prop, constants=consts, **kw)
        assert isinstance(full, Report)
        last: dict[str, list[tuple[float, float]]] = {}
        for frac in (8, 4, 2):
            budget = max(2, full.states // frac)
            got = {}
            for driver, extra in (
                ("in-process", {}),
                ("2 workers", {"workers": 2, "driver": "ray"}),
                ("in-process mass", {"order": "mass"}),
            ):
                t = time.perf_counter()
                r = verify(model, prop, constants=consts, max_states=budget, **kw, **extra)  # type: ignore[arg-type]
                assert isinstance(r, Report)
                ends = _ends(r) if r.partial else [(v, v) for v in _values(r)]
                inside = all(lo - TOL <= v <= hi + TOL for v, (lo, hi) in zip(_values(full), ends, strict=True))
                nested = driver not in last or all(
                    a[0] - TOL <= b[0] and b[1] <= a[1] + TOL for a, b in zip(last[driver], ends, strict=True)
                )
                got[driver] = ends
                last[driver] = ends
                row = {
                    "model": name,
                    "property": prop,
                    "full_states": full.states,
                    "budget": budget,
                    "driver": driver,
                    "states": r.states,
                    "partial": r.partial,
                    "bounds": ends,
                    "value": _values(full),
                    "inside": inside,
                    "nested": nested,
                    "time_s": round(time.perf_counter() - t, 3),
                }
                rows.append(row)
                if not (inside and nested):
                    failures.append(row)
                print(
                    f"{name:22s} {prop:38s} budget {budget:>7d} {driver:10s} states {r.states:>7d} "
                    f"bounds {ends} value {_values(full)} {'ok' if inside and nested else 'FAIL'}",
                    flush=True,
                )
            same = all(
                abs(a[0] - b[0]) <= 1e-12 and abs(a[1] - b[1]) <= 1e-12
                for a, b in zip(got["in-process"], got["2 workers"], strict=True)
            )
            rows[-1]["same_as_in_process"] = same
            if not same:
                failures.append({"model": name, "property": prop, "budget": budget, "differ": got})
    cases = len({(r["model"], r["property"], r["budget"]) for r in rows})
    summary = {"cases": cases, "runs": len(rows), "failures": failures, "rows": rows}
    print(f"{cases} (model, property, budget) cases, {len(rows)} runs, {len(failures)} failures")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 1 if failures else 0


def efficiency(args: argparse.Namespace) -> int:
    kw: dict[str, object] = {"constants": args.const}
    if args.policy:
        kw["policy"] = args.policy
        kw["interface"] = str(Path(args.policy).with_suffix(".json"))
    t = time.perf_counter()
    full = verify(args.model, args.prop, **kw)  # type: ignore[arg-type]
    assert isinstance(full, Report)
    full_s = time.perf_counter() - t
    print(f"full model: {full.states} states, value {full.result}, {full_s:.1f} s", flush=True)
    out: dict[str, object] = {
        "model": args.model,
        "constants": args.const,
        "property": args.prop,
        "policy": args.policy,
        "full_states": full.states,
        "full_value": full.result,
        "full_s": round(full_s, 2),
        "orders": {},
    }
    for order in ("mass", "bfs"):
        t = time.perf_counter()
        r = verify(
            args.model,
            args.prop,
            **kw,
            width=args.width,
            order=order,  # type: ignore[arg-type]
            max_states=full.states,
        )
        assert isinstance(r, Report) and r.rounds is not None
        rounds = [dict(x, bounds=x["bounds"]) for x in r.rounds]
        for x in rounds:
            x["fraction"] = x["explored_states"] / full.states
            print(
                f"{order:4s} round {x['round']:2d}: {x['explored_states']:>9d} states explored "
                f"({100 * x['fraction']:.1f}%), width {x['width']:.3g}",
                flush=True,
            )
        out["orders"][order] = {"rounds": rounds, "time_s": round(time.perf_counter() - t, 2)}  # type: ignore[index]
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for order, data in out["orders"].items():  # type: ignore[union-attr]
            xs = [x["explored_states"] for x in data["rounds"]]
            ys = [max(x["width"], 1e-16) for x in data["rounds"]]
            ax.loglog(xs, ys, "o-", label=f"--order {order}")
        ax.axvline(full.states, color="grey", ls=":", label="full model")
        ax.set_xlabel("states explored")
        ax.set_ylabel("width hi - lo")
        ax.set_title(f"{Path(args.model).name} {args.const}\n{args.prop}", fontsize=9)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("soundness")
    s.add_argument("--json")
    e = sub.add_parser("efficiency")
    e.add_argument("--model", required=True)
    e.add_argument("--const")
    e.add_argument("--policy")
    e.add_argument("--prop", required=True)
    e.add_argument("--width", type=float, default=1e-9)
    e.add_argument("--json")
    e.add_argument("--plot")
    args = p.parse_args()
    return soundness(args) if args.what == "soundness" else efficiency(args)


if __name__ == "__main__":
    sys.exit(main())
