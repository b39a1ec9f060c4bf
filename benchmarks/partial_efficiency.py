"""Issue 22's "efficient" target: width against states explored, mass first against breadth first, on millions.

The environment is the delivery truck of ``benchmarks/envs/delivery.prism`` on a 48 x 48 grid with a tank of
``--fuel`` (480: ``N=48,FUEL=480,slip=0.1``, 2,037,153 states in the induced model; 240: 930,993), with a PPO
policy trained on that size by ``benchmarks/train.py`` (seed 0, 150,000 steps, episodes of 232 steps,
observations scaled by the variables' ranges; shipped in ``benchmarks/policies/delivery_n48_f<fuel>/``, trained
again with ``--train`` or when missing). Property: ``P=? [F "delivered"]``. With a tank of 480 the trained policy
picks the parcel up (probability 0.99 within 232 steps) but mostly does not deliver it (0.007; the tank runs
empty with 0.993: it collects the shaping reward for moves instead); with 240 it delivers (0.9995). The target
asks for a policy trained on the size: both sizes are run.

1. The full model once: states, transitions, the exact value, time.
2. For each order (the default mass-first rank, the ranks it is compared with, and breadth first), a partial run
   per budget of states (``--max-states``, fractions of the full model's states): found and explored states,
   ``[lo, hi]``, width, time. Every interval must hold the exact value (to 1e-9) and lie inside the interval of
   the budget before (nesting); the default is run a second time at one budget and must give the same states,
   transitions and bounds (reproducible).
3. ``--width 1e-6`` as a user runs it (rounds of doubling budgets, each checked) for both orders.
4. The targets: width <= 1e-3 with at most 20% of the full model's states, <= 1e-6 with at most 50% (states found,
   frontier included: the partial model holds them all).

Writes a JSON (``--json``), the Markdown table of ``benchmarks/RESULTS.md`` (``--table``) and a PNG of width
against states explored, log scales (``--plot``). The mass-first ranks other than the default are chosen through
:mod:`distmc.explore.priority`'s module defaults (``MASS_RANK``, ``SPREAD``), which this script sets per run.

Run (the commands of ``benchmarks/RESULTS.md``; 20 to 40 minutes each on a loaded 2-core machine, peak memory
under 3 GB)::

    nice -n 5 python benchmarks/partial_efficiency.py --fuel 480 --json benchmarks/partial_efficiency_f480.json \
        --table partial_efficiency_f480.md --plot benchmarks/partial_efficiency_f480.png
    nice -n 5 python benchmarks/partial_efficiency.py --fuel 240 --json benchmarks/partial_efficiency_f240.json \
        --table partial_efficiency_f240.md --plot benchmarks/partial_efficiency_f240.png
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import distmc.explore.priority as priority  # noqa: E402
from benchmarks.suite import BenchEnv  # noqa: E402
from distmc.api import Report, verify  # noqa: E402

MODEL = REPO / "benchmarks" / "envs" / "delivery.prism"
N = 48
PROP = 'P=? [F "delivered"]'
POLICIES = REPO / "benchmarks" / "policies"
TRAIN_STEPS, SEED = 150_000, 0
FRACTIONS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
TARGETS = ((1e-3, 0.2), (1e-6, 0.5))  # (width, most states as a fraction of the full model's)
TOL = 1e-9


@dataclass(frozen=True)
class Case:
    """The grid (:data:`N`) with a tank of ``fuel``, and where its policy lives."""

    fuel: int

    @property
    def constants(self) -> str:
        return f"N={N},FUEL={self.fuel},slip=0.1"

    @property
    def policy_dir(self) -> Path:
        return POLICIES / f"delivery_n{N}_f{self.fuel}"


#: name -> (order, rank, spread); the first is distmc's default (``--order mass``).
VARIANTS: dict[str, tuple[str, str, float]] = {
    "mass": ("mass", priority.MASS_RANK, priority.SPREAD),
    "mass, path rank": ("mass", "path", priority.SPREAD),
    "mass, no spread": ("mass", priority.MASS_RANK, 0.0),
    "mass, path rank, no spread (before)": ("mass", "path", 0.0),
    "bfs": ("bfs", priority.MASS_RANK, priority.SPREAD),
}


def bench_env(case: Case) -> BenchEnv:
    """The environment as ``benchmarks/train.py`` trains it (episode limit: four trips' worth of moves)."""
    return BenchEnv(
        "delivery",
        MODEL,
        case.constants,
        "delivery",
        "done",
        4 * N + 40,
        64,
        TRAIN_STEPS,
        (PROP,),
        'P=? [F<=200 "delivered"]',
    )


def ensure_policy(case: Case, retrain: bool) -> dict[str, Any]:
    """Train the policy into ``case.policy_dir`` if asked or missing; its metadata."""
    if retrain or not (case.policy_dir / "policy.pt").is_file():
        import torch

        from benchmarks.train import train

        torch.set_num_threads(1)
        print(f"training {case.constants} for {TRAIN_STEPS} steps (seed {SEED}) ...", flush=True)
        train(bench_env(case), TRAIN_STEPS, SEED, 100, case.policy_dir, normalize=True)
    meta: dict[str, Any] = json.loads((case.policy_dir / "meta.json").read_text())
    return meta


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def _run(case: Case, variant: str, **kw: Any) -> tuple[Report, float]:
    order, rank, spread = VARIANTS[variant]
    old = priority.MASS_RANK, priority.SPREAD
    priority.MASS_RANK, priority.SPREAD = rank, spread
    try:
        t = time.perf_counter()
        r = verify(MODEL, PROP, constants=case.constants, policy=str(case.policy_dir / "policy.pt"), order=order, **kw)
        assert isinstance(r, Report)
        return r, time.perf_counter() - t
    finally:
        priority.MASS_RANK, priority.SPREAD = old


def interval(r: Report) -> tuple[float, float]:
    """``[lo, hi]`` of a one-property report (the value twice when the model was explored whole)."""
    if not r.partial:
        return float(r.result), float(r.result)  # type: ignore[arg-type]
    b = r.bounds
    assert isinstance(b, list)
    return float(b[0]), float(b[1])


def budgets(
    case: Case, args: argparse.Namespace, full: dict[str, Any]
) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Every variant at every budget: the rows, and what failed (soundness, nesting)."""
    out: dict[str, list[dict[str, Any]]] = {}
    failures: list[str] = []
    for variant in args.variants:
        rows: list[dict[str, Any]] = []
        last = (-float("inf"), float("inf"))
        for frac in FRACTIONS:
            r, seconds = _run(case, variant, max_states=int(frac * full["states"]))
            lo, hi = interval(r)
            explored = r.frontier["explored_states"] if r.frontier else r.states
            inside = lo - TOL <= full["value"] <= hi + TOL
            nested = last[0] - TOL <= lo and hi <= last[1] + TOL
            last = (lo, hi)
            row = {
                "fraction": frac,
                "budget": int(frac * full["states"]),
                "states": r.states,
                "explored_states": explored,
                "states_fraction": r.states / full["states"],
                "lo": lo,
                "hi": hi,
                "width": hi - lo,
                "inside": inside,
                "nested": nested,
                "time_s": round(seconds, 2),
                "explore_s": round(r.timings.get("explore_s", 0.0), 2),
                "check_s": round(r.timings.get("check_s", 0.0), 2),
                "peak_gb": round(peak_gb(), 2),
            }
            rows.append(row)
            if not (inside and nested):
                failures.append(f"{variant} at {frac}: {row}")
            print(
                f"{variant:36s} {100 * frac:5.1f}%: {r.states:>9d} states ({explored} explored), "
                f"[{lo:.12g}, {hi:.12g}] width {hi - lo:.3g}, {seconds:.1f} s {'ok' if inside and nested else 'FAIL'}",
                flush=True,
            )
        out[variant] = rows
    return out, failures


def reproducible(case: Case, rows: list[dict[str, Any]], full: dict[str, Any]) -> dict[str, Any]:
    """The default order once more at the 20% budget: the same states, transitions and bounds."""
    frac = 0.2
    first = next(x for x in rows if x["fraction"] == frac)
    r, _ = _run(case, "mass", max_states=int(frac * full["states"]))
    again = {"states": r.states, "transitions": r.transitions, "bounds": list(interval(r))}
    same = again["states"] == first["states"] and again["bounds"] == [first["lo"], first["hi"]]
    print(f"reproducible at {frac:.0%}: {same} ({again})", flush=True)
    return {"fraction": frac, "again": again, "same": same}


def width_runs(case: Case, full: dict[str, Any], eps: float) -> dict[str, Any]:
    """``--width eps`` as a user runs it (capped at the full model's states), both orders."""
    out = {}
    for variant in ("mass", "bfs"):
        r, seconds = _run(case, variant, width=eps, max_states=full["states"])
        assert r.rounds is not None
        rounds = [
            {k: x[k] for k in ("round", "budget", "states", "explored_states", "width", "elapsed_s")} for x in r.rounds
        ]
        out[variant] = {
            "rounds": rounds,
            "time_s": round(seconds, 2),
            "bounds": list(interval(r)),
            "timings": r.timings,
        }
        print(
            f"--width {eps:g} --order {variant}: {len(rounds)} rounds, {r.states} states, width "
            f"{rounds[-1]['width']:.3g}, {seconds:.1f} s",
            flush=True,
        )
    return out


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per target: the smallest budget that reached the width, and whether it is within the allowed fraction."""
    out = []
    for eps, most in TARGETS:
        hit = next((x for x in rows if x["width"] <= eps), None)
        out.append(
            {
                "width": eps,
                "most_fraction": most,
                "first_budget_fraction": None if hit is None else hit["fraction"],
                "states_fraction": None if hit is None else hit["states_fraction"],
                "met": hit is not None and hit["states_fraction"] <= most,
            }
        )
    return out


def table(result: dict[str, Any]) -> str:
    names = list(result["budgets"])
    head = "| budget (% of full) | " + " | ".join(f"{v}: states (% of full), width" for v in names) + " |"
    lines = [head, "|---|" + "---|" * len(names)]
    for i, frac in enumerate(FRACTIONS):
        cells = []
        for v in names:
            x = result["budgets"][v][i]
            cells.append(f"{x['states']:,} ({100 * x['states_fraction']:.1f}%), {x['width']:.3g}")
        lines.append(f"| {result['budgets'][names[0]][i]['budget']:,} ({100 * frac:g}%) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(case: Case, result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for v, rows in result["budgets"].items():
        ax.loglog(
            [x["explored_states"] for x in rows],
            [max(x["width"], 1e-16) for x in rows],
            "o-",
            label=f"--order {v}" if v in ("mass", "bfs") else v,
            lw=2 if v in ("mass", "bfs") else 1,
        )
    n = result["full"]["states"]
    for eps, most in TARGETS:
        ax.plot([most * n], [eps], "k*", ms=10)
    ax.axvline(n, color="grey", ls=":", label="full model")
    ax.set_xlabel("states explored")
    ax.set_ylabel("width hi - lo (1e-16 for 0)")
    ax.set_title(
        f"{MODEL.name} {case.constants}, {PROP}\n(stars: the targets, width at most fraction of the states)", fontsize=9
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--fuel", type=int, default=480, help="the tank (default %(default)s; 240: 0.9 M states)")
    ap.add_argument("--train", action="store_true", help="train the policy again (else only when missing)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--width", type=float, default=1e-6, help="the --width runs' EPS (default %(default)s)")
    ap.add_argument("--no-width-runs", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--table")
    ap.add_argument("--plot")
    args = ap.parse_args(argv)
    if "mass" not in args.variants:
        ap.error("the variants must include 'mass' (the default order)")
    case = Case(args.fuel)
    meta = ensure_policy(case, args.train)
    t = time.perf_counter()
    r = verify(MODEL, PROP, constants=case.constants, policy=str(case.policy_dir / "policy.pt"))
    assert isinstance(r, Report)
    full = {
        "states": r.states,
        "transitions": r.transitions,
        "value": float(r.result),  # type: ignore[arg-type]
        "time_s": round(time.perf_counter() - t, 2),
        "timings": r.timings,
        "peak_gb": round(peak_gb(), 2),
    }
    print(
        f"full model: {r.states} states, {r.transitions} transitions, value {r.result}, {full['time_s']} s", flush=True
    )
    rows, failures = budgets(case, args, full)
    result: dict[str, Any] = {
        "model": str(MODEL.relative_to(REPO)),
        "constants": case.constants,
        "property": PROP,
        "policy": str(case.policy_dir.relative_to(REPO)),
        "policy_meta": meta,
        "full": full,
        "variants": {v: dict(zip(("order", "rank", "spread"), VARIANTS[v], strict=True)) for v in args.variants},
        "budgets": rows,
        "targets": targets(rows["mass"]),
    }
    if "bfs" in rows:
        result["targets_bfs"] = targets(rows["bfs"])
    result["reproducible"] = reproducible(case, rows["mass"], full)
    if not result["reproducible"]["same"]:
        failures.append("the default order's second run differs")
    if not args.no_width_runs:
        result["width_runs"] = width_runs(case, full, args.width)
    result["failures"] = failures
    result["peak_gb"] = round(peak_gb(), 2)
    for t_ in result["targets"]:
        print(
            f"target width <= {t_['width']:g} with <= {100 * t_['most_fraction']:g}% of the states: "
            f"{'met' if t_['met'] else 'NOT met'} (first at {t_['states_fraction']})",
            flush=True,
        )
    print(f"{len(failures)} failures; peak memory {result['peak_gb']} GB", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str) + "\n")
    if args.table:
        Path(args.table).write_text(table(result))
    if args.plot:
        plot(case, result, args.plot)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
