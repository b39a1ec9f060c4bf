"""Storm's check of one induced model under several solver settings: the cost of a stated error bound.

The model is explored and handed to Storm once; then each setting checks it (the median of ``--repeat`` runs):

* ``before``: distmc's settings before this change (DTMCs: sound value iteration at 1e-12 absolute; MDPs:
  Storm's default topological min-max value iteration at 1e-12, relative criterion, no bound stated; still
  the default for MDPs);
* ``sound-abs``: sound value iteration (DTMCs) and interval iteration (MDPs, ``--sound-mdp``) at 1e-12 absolute
  (``--precision-abs 1e-12``, the default before issue 25);
* ``sound-default``: the same under today's default rule, 1e-12 absolute and 1e-6 relative;
* ``sound-rel``: the same at ``--rel`` relative (``--precision``);
* ``exact``: Storm's exact engine on the rationals of the induced floats (small models only).

Usage (from the repository root)::

    python benchmarks/sound_check.py --model benchmarks/envs/avoid.prism --const N=5,slickness=0.1 \\
        --mode monolithic --prop 'Pmax=? [F "crash"]'
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import stormpy

from distmc.api import verify
from distmc.assemble.storm import to_storm
from distmc.check.checker import check
from distmc.check.properties import parse_properties
from distmc.check.result import Precision
from distmc.model.program import load_model


def before_environment() -> Any:
    """The solver settings distmc used before this change (``environment()`` of commit cc21df9)."""
    env = stormpy.Environment()
    solver = env.solver()
    solver.set_linear_equation_solver_type(stormpy.environments.EquationSolverType.NATIVE)
    native = solver.native()
    native.method = stormpy.environments.NativeLinearEquationSolverMethod.SOUND_VALUE_ITERATION
    native.precision = stormpy.Rational(1e-12)
    native.relative_termination_criterion = False
    solver.min_max().precision = stormpy.Rational(1e-12)
    return env


def _time(fn: Any, repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--const", default=None)
    ap.add_argument("--prop", required=True)
    ap.add_argument("--mode", default="stochastic")
    ap.add_argument("--policy", default="uniform")
    ap.add_argument("--rel", type=float, default=1e-6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--exact", action="store_true", help="also time the exact engine")
    a = ap.parse_args(argv)
    got = verify(a.model, a.prop, constants=a.const, mode=a.mode, policy=a.policy, keep_model=True)
    assert isinstance(got, tuple)
    report, induced = got
    spec = parse_properties(a.prop, load_model(a.model, a.const)).specs[0]
    storm_model = to_storm(induced)
    rows: dict[str, Any] = {}
    settings = {
        "before": lambda: check(storm_model, spec, induced.kind, induced.initial, None, env=before_environment()),
        "sound-abs": lambda: check(
            storm_model, spec, induced.kind, induced.initial, Precision(1e-12, sound_mdp=True, rel=None)
        ),
        "sound-default": lambda: check(storm_model, spec, induced.kind, induced.initial, Precision(sound_mdp=True)),
        "sound-rel": lambda: check(
            storm_model, spec, induced.kind, induced.initial, Precision(a.rel, relative=True, sound_mdp=True, rel=None)
        ),
    }
    for name, fn in settings.items():
        seconds, res = _time(fn, a.repeat)
        rows[name] = {"check_s": round(seconds, 4), "value": res.value, "bounds": res.bounds}
    if a.exact:
        exact_model = to_storm(induced, exact=True)
        seconds, res = _time(lambda: check(exact_model, spec, induced.kind, induced.initial, Precision(exact=True)), 1)
        rows["exact"] = {"check_s": round(seconds, 4), "value": res.value, "exact_digits": len(str(res.exact))}
    print(
        json.dumps(
            {
                "model": a.model,
                "constants": a.const,
                "prop": a.prop,
                "mode": a.mode,
                "induced": report.induced,
                "states": report.states,
                "transitions": report.transitions,
                "settings": rows,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
