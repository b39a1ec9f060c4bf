"""A chain on which value iteration converges very slowly, and what each checker does on it.

Haddad and Monmege's adversarial family ("Interval iteration algorithm for MDPs and IMDPs", TCS 2018; QVBS's
``haddad-monmege``): states ``0 .. 2N``, start in ``N``; from ``N`` go left with probability ``p``, else right; on
either side each step goes further out with probability 1/2 and back to ``N`` otherwise; ``0`` and ``2N`` absorb.
The probability of reaching ``0`` is ``p``, but a path leaves ``1 .. 2N-1`` only after ``N`` steps outwards in a
row, so the probability of still being undecided after ``k`` steps shrinks like ``(1 - 2^-N)^k``: value iteration,
sound or not, needs about ``2^N`` steps (for ``N = 100``, 201 states: never).

:func:`chain_text` writes the model (the tests use it too). Run as a script, it times every checker of a default
``distmc run`` on it (a fresh process each, so none waits on another's compiled kernels) against Storm's own sound
value iteration, stopped after ``--storm-timeout`` seconds::

    python benchmarks/slow_chain.py --n 100 --workers 2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The property: the probability of reaching the left end.
PROPERTY = 'P=? [F "left"]'


def chain_text(n: int, p: float = 0.7) -> str:
    """The PRISM text of Haddad and Monmege's chain with ``2n + 1`` states (value of :data:`PROPERTY`: ``p``)."""
    return f"""// Haddad and Monmege's chain: value iteration converges very slowly on it (benchmarks/slow_chain.py)
dtmc

const int N = {n};
const double p = {p!r};

module walk
  x : [0..2*N] init N;
  [] x=N -> p : (x'=N-1) + (1-p) : (x'=N+1);
  [] x>0 & x<N -> 0.5 : (x'=x-1) + 0.5 : (x'=N);
  [] x>N & x<2*N -> 0.5 : (x'=x+1) + 0.5 : (x'=N);
  [] x=0 | x=2*N -> 1 : (x'=x);
endmodule

label "left" = x=0;
"""


def _storm_sound(path: str, timeout_s: float) -> dict[str, object]:
    """Storm's sound value iteration at 1e-12 (absolute) on the chain, in a child process stopped after the timeout."""
    code = f"""
import time, stormpy
prog = stormpy.parse_prism_program({path!r})
props = stormpy.parse_properties({PROPERTY!r}, prog)
model = stormpy.build_model(prog, props)
env = stormpy.Environment()
solver = env.solver()
solver.set_linear_equation_solver_type(stormpy.environments.EquationSolverType.NATIVE)
solver.native().method = stormpy.environments.NativeLinearEquationSolverMethod.SOUND_VALUE_ITERATION
solver.native().precision = stormpy.Rational(1e-12)
t = time.perf_counter()
r = stormpy.model_checking(model, props[0].get_raw_formula(), only_initial_states=True, environment=env)
print(time.perf_counter() - t, r.get_value(model.initial_states[0]))
"""
    t = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {
            "outcome": f"no answer within {timeout_s:.0f} s (stopped)",
            "seconds": round(time.perf_counter() - t, 2),
        }
    last = p.stdout.strip().splitlines()[-1:] or [p.stderr.strip()[-200:]]
    return {"outcome": last[0], "seconds": round(time.perf_counter() - t, 2)}


def _distmc(path: str, checker: str, workers: int, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    from distmc.api import verify
    from distmc.errors import DistmcError

    t = time.perf_counter()
    try:
        r = verify(path, PROPERTY, checker=checker, workers=workers)
        entry = r.results[0]  # type: ignore[union-attr]
        out = {
            "value": entry["value"],
            "bounds": entry["bounds"],
            "checker": entry["checker"],
            "note": entry.get("note"),
            "check_s": round(entry["check_s"], 3),
        }
    except DistmcError as exc:
        out = {"error": str(exc), "exit_code": exc.exit_code}
    out["seconds"] = round(time.perf_counter() - t, 2)
    queue.put(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100, help="the chain has 2N+1 states (default 100: 201 states)")
    ap.add_argument("--workers", type=int, default=2, help="workers of the distributed checker")
    ap.add_argument("--storm-timeout", type=float, default=120.0)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / f"haddad_monmege_{a.n}.prism")
        Path(path).write_text(chain_text(a.n))
        rows: dict[str, object] = {"storm sound value iteration (no cap)": _storm_sound(path, a.storm_timeout)}
        ctx = multiprocessing.get_context("spawn")
        for checker, workers in (("storm", 1), ("native", 1), ("distributed", a.workers)):
            queue = ctx.Queue()
            proc = ctx.Process(target=_distmc, args=(path, checker, workers, queue))
            proc.start()
            rows[f"distmc --checker {checker}" + (f" --workers {workers}" if workers > 1 else "")] = queue.get()
            proc.join()
    print(json.dumps({"n": a.n, "states": 2 * a.n + 1, "property": PROPERTY, "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
