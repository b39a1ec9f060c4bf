"""Storm's solvers and distmc's checkers side by side on the same induced DTMCs, in one run.

Each case is explored once (``verify(..., keep_model=True)``) and handed to Storm (:func:`~distmc.assemble.storm.to_storm`,
the model distmc's Storm checks see); then, one after the other in this process, Storm's native solvers check it at
the default precision (1e-12 absolute and 1e-6 relative; Storm's forced soundness for the sound methods), and
distmc's native checker (:func:`~distmc.check.native.values_of`) checks it; with ``--workers`` the case is also run
whole with ``--checker distributed`` on that many Ray workers (its check time as the report gives it). The cases
are shapes no policy was trained for, besides the trained delivery truck: a deep chain, a chain with large cycles
back to its start, Haddad and Monmege's slow chain, and the induced chains of the CoolMC avoid grid under the
uniform policy. Usage (from the repository root, nothing else running)::

    python benchmarks/check_speed.py --workers 2 --json benchmarks/check_speed.json
    python benchmarks/check_speed.py --cases deep,cycles --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import stormpy

REPO = Path(__file__).resolve().parents[1]
STORM_DTMC = Path(stormpy.__file__).parent / "examples" / "files" / "dtmc"
sys.path.insert(0, str(REPO / "benchmarks"))

from slow_chain import chain_text  # noqa: E402

from distmc.api import verify  # noqa: E402
from distmc.assemble.storm import to_storm  # noqa: E402
from distmc.check.checker import MAX_ITERATIONS, check  # noqa: E402
from distmc.check.native import LocalEngine, matrix_of, values_of  # noqa: E402
from distmc.check.properties import parse_properties  # noqa: E402
from distmc.check.result import Precision  # noqa: E402
from distmc.model.program import load_model  # noqa: E402

#: A chain ``D`` levels deep and ``W`` wide: forward with 0.9 (a lane to a side at random), else stays or drifts two
#: lanes up; the goal is the lower half of the lanes at the end (drift and walk make it about an even chance).
DEEP = """dtmc
const int D = {d};
const int W = {w};
module walk
  x : [0..D] init 0;
  y : [0..W] init 0;
  [] x<D -> 0.45 : (x'=x+1) & (y'=min(y+1, W)) + 0.45 : (x'=x+1) & (y'=max(y-1, 0)) + 0.05 : true
            + 0.05 : (y'=min(y+2, W));
  [] x=D -> true;
endmodule
label "goal" = x=D & y<W/2;
"""

#: The same with a large cycle: every step returns to the start with 0.05 and falls off with 0.01.
CYCLES = """dtmc
const int D = {d};
const int W = {w};
module walk
  x : [0..D] init 0;
  y : [0..W] init 0;
  f : bool init false;
  [] x<D & !f -> 0.42 : (x'=x+1) & (y'=min(y+1, W)) + 0.42 : (x'=x+1) & (y'=max(y-1, 0)) + 0.1 : true
            + 0.05 : (x'=0) & (y'=0) + 0.01 : (f'=true);
  [] x=D | f -> true;
endmodule
label "goal" = x=D & y<W/2;
"""


def cases(tmp: Path) -> dict[str, dict[str, Any]]:
    def write(name: str, text: str) -> str:
        path = tmp / f"{name}.prism"
        path.write_text(text)
        return str(path)

    return {
        "delivery": {
            "model": str(REPO / "benchmarks/envs/delivery.prism"),
            "constants": "N=48,FUEL=480,slip=0.1",
            "policy": str(REPO / "benchmarks/policies/delivery_n48_f480/policy.pt"),
            "prop": 'P=? [F "delivered"]',
        },
        "deep": {"model": write("deep", DEEP.format(d=2000, w=400)), "prop": 'P=? [F "goal"]'},
        "cycles": {"model": write("cycles", CYCLES.format(d=1000, w=400)), "prop": 'P=? [F "goal"]'},
        "cycles-reward": {
            "model": write("cycles", CYCLES.format(d=1000, w=400)),
            "prop": "R=? [F x=D | f]",
            "note": "the expected steps (a reward of 1 a step: the structure below)",
        },
        "slow-chain": {"model": write("slow", chain_text(10)), "prop": 'P=? [F "left"]'},
        "avoid": {
            "model": str(REPO / "benchmarks/envs/avoid.prism"),
            "constants": "N=7,slickness=0.1",
            "prop": 'P=? [F "crash"]',
        },
        # the QVBS's DTMCs that Storm's examples carry, at sizes this machine checks in seconds
        "nand": {
            "model": write(
                "nand",
                (STORM_DTMC / "nand-5-2.pm")
                .read_text()
                .replace("const int N = 5;", "const int N = 20;")
                .replace("const int K = 2;", "const int K = 4;"),
            ),
            "prop": 'P=? [F "target"]',
        },
        "brp": {"model": str(STORM_DTMC / "brp.pm"), "constants": "N=8192,MAX=10", "prop": "P=? [F srep=3]"},
        "crowds": {
            "model": write(
                "crowds",
                (STORM_DTMC / "crowds5_5.pm")
                .read_text()
                .replace("const int TotalRuns = 5;", "const int TotalRuns = 9;"),
            ),
            "prop": 'P=? [F "observe0Greater1"]',
        },
    }


def storm_env(method: str) -> Any:
    """Storm's native solver with ``method`` (or the topological solver) at the default precision."""
    p = Precision()
    env = stormpy.Environment()
    solver = env.solver()
    E = stormpy.environments
    if method == "topological":
        solver.set_linear_equation_solver_type(E.EquationSolverType.TOPOLOGICAL)
        solver.force_soundness = True
    else:
        solver.set_linear_equation_solver_type(E.EquationSolverType.NATIVE)
        solver.force_soundness = method in ("SOUND_VALUE_ITERATION", "INTERVAL_ITERATION", "OPTIMISTIC_VALUE_ITERATION")
    native = solver.native()
    if method != "topological":
        native.method = getattr(E.NativeLinearEquationSolverMethod, method)
    native.precision = stormpy.Rational(p.eps)
    native.relative_termination_criterion = False
    native.maximal_number_of_iterations = MAX_ITERATIONS
    return env


STORM = ["SOUND_VALUE_ITERATION", "INTERVAL_ITERATION", "OPTIMISTIC_VALUE_ITERATION", "topological", "GAUSS_SEIDEL"]


def timed(fn: Any, repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        try:
            out = fn()
        except Exception as exc:  # a solver that gives up: its line says so
            out = exc
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


@contextmanager
def check_order(order: str) -> Iterator[None]:
    """The distributed check's update order for the runs inside (``DISTMC_CHECK_ORDER`` on the driver)."""
    os.environ["DISTMC_CHECK_ORDER"] = order
    try:
        yield
    finally:
        del os.environ["DISTMC_CHECK_ORDER"]


def run_case(
    name: str, c: dict[str, Any], repeat: int, workers: int | None, slow_levels: tuple[str, ...] = ()
) -> dict[str, Any]:
    kw = {"constants": c.get("constants"), "policy": c.get("policy", "uniform")}
    prop = c["prop"]
    if prop.startswith("R="):  # a reward of 1 a step, written into a copy of the model
        text = Path(c["model"]).read_text() + '\nrewards "steps"\n  true : 1;\nendrewards\n'
        c = {**c, "model": str(Path(c["model"]).with_name(f"{name}.prism"))}
        Path(c["model"]).write_text(text)
    t = time.perf_counter()
    got = verify(c["model"], prop, keep_model=True, checker="native", **kw)
    assert isinstance(got, tuple)
    report, induced = got
    explore_s = time.perf_counter() - t
    spec = parse_properties(prop, load_model(c["model"], c.get("constants"))).specs[0]
    storm_model = to_storm(induced)
    row: dict[str, Any] = {
        "case": name,
        "prop": prop,
        "states": report.states,
        "transitions": report.transitions,
        "run_s": round(explore_s, 2),
        "checkers": {},
    }
    for m in STORM:
        s, res = timed(
            lambda m=m: check(storm_model, spec, induced.kind, induced.initial, Precision(), env=storm_env(m)), repeat
        )
        row["checkers"][f"storm {m.lower()}"] = (
            {"check_s": round(s, 3), "value": res.value, "bounds": res.bounds}
            if not isinstance(res, Exception)
            else {"check_s": round(s, 3), "error": str(res)[:200]}
        )
    for order, label in (
        ("components", "distmc native"),
        ("levels", "distmc native, levels"),
        ("blocks", "distmc native, blocks"),
    ):
        cnt = [0]

        def native(order: str = order, cnt: list[int] = cnt) -> Any:
            e = LocalEngine(matrix_of(induced), None, induced.initial, order=order)
            f = e.sweep3

            def counted(*a: Any) -> None:
                cnt[0] += 1
                f(*a)

            e.sweep3 = counted  # type: ignore[method-assign]
            v, lo, hi = values_of(e, induced, spec)
            i = int(induced.initial[0])
            return float(v[i]), (float(lo[i]), float(hi[i]))

        s, res = timed(native, repeat)
        row["checkers"][label] = (
            {"check_s": round(s, 3), "value": res[0], "bounds": res[1], "passes": cnt[0] // repeat}
            if not isinstance(res, Exception)
            else {"check_s": round(s, 3), "error": str(res)[:200]}
        )
    for order in ("blocks", "levels") if workers else ():
        if order == "levels" and name in slow_levels:
            continue
        with check_order(order):
            r = verify(c["model"], prop, checker="distributed", workers=workers, **kw)
        assert not isinstance(r, tuple)
        stats = r.worker_stats or [{}]
        row["checkers"][f"distmc distributed w{workers}, {order}"] = {
            "check_s": round(r.timings["check_s"], 3),
            "value": r.result,
            "bounds": r.bounds,
            "messages": max(int(s.get("check_messages", 0)) for s in stats),
        }
    return row


def _inside(value: Any, bounds: Any) -> str:
    if not isinstance(value, float) or not isinstance(bounds, (list, tuple)):
        return "-"
    return "yes" if bounds[0] <= value <= bounds[1] else "**no**"


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table: each checker's time, its ratio to Storm's sound VI, its value, and for Storm's values
    whether they lie within distmc native's bounds (for distmc's checkers: the width of their bounds)."""
    out = [
        "| case | states | transitions | checker | check s | x Storm SVI | value | in native's bounds / width |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        svi = r["checkers"]["storm sound_value_iteration"]["check_s"]
        ours = r["checkers"]["distmc native"].get("bounds")
        for name, c in r["checkers"].items():
            head = f"| {r['case']} | {r['states']:,} | {r['transitions']:,} |"
            ratio = f"{c['check_s'] / svi:.2f}" if svi > 0 else "-"
            if "error" in c:
                out.append(f"{head} {name} | {c['check_s']} | {ratio} | {c['error'][:60]} | |")
                continue
            extra = f" ({c['passes']} passes)" if "passes" in c else ""
            extra += f" ({c['messages']:,} messages)" if "messages" in c else ""
            b = c.get("bounds")
            last = (
                f"{b[1] - b[0]:.1e}"
                if name.startswith("distmc") and isinstance(b, (list, tuple))
                else _inside(c["value"], ours)
            )
            out.append(f"{head} {name}{extra} | {c['check_s']} | {ratio} | {c['value']!r} | {last} |")
    return "\n".join(out)


def warm_up(workers: int | None = None) -> None:
    """Compile (or load from numba's cache) the native checker's kernels on a tiny chain, outside the timings."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tiny.prism"
        path.write_text(DEEP.format(d=5, w=2))
        verify(str(path), 'P=? [F "goal"]', checker="native")
        _, induced = verify(str(path), 'P=? [F "goal"]', checker="native", keep_model=True)  # type: ignore[misc]
        spec = parse_properties('P=? [F "goal"]', load_model(str(path), None)).specs[0]
        for order in ("levels", "blocks"):
            values_of(LocalEngine(matrix_of(induced), None, induced.initial, order=order), induced, spec)
        if workers:  # the workers' kernels too (numba's cache then serves every later worker)
            for order in ("blocks", "levels"):
                with check_order(order):
                    verify(str(path), 'P=? [F "goal"]', checker="distributed", workers=workers)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="delivery,deep,cycles,cycles-reward,slow-chain,avoid,nand,brp,crowds")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workers", type=int, default=None, help="also the distributed check on this many Ray workers")
    ap.add_argument(
        "--skip-levels",
        default="deep,brp,cycles,cycles-reward,slow-chain",
        help="cases whose distributed check is not run in the levels order (hundreds of passes of every level)",
    )
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    rows = []
    warm_up(a.workers)
    with tempfile.TemporaryDirectory() as tmp:
        all_cases = cases(Path(tmp))
        for name in a.cases.split(","):
            rows.append(run_case(name, all_cases[name], a.repeat, a.workers, tuple(a.skip_levels.split(","))))
            print(table(rows[-1:]), flush=True)
    print(
        f"\n# {' '.join(sys.argv)}\n# machine: {platform.node()}, {platform.machine()}; "
        f"{time.strftime('%Y-%m-%d %H:%M')}\n"
    )
    print(table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
