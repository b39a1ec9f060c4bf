"""Long-run averages on an ergodic chain: state elimination against Storm's long-run value iteration.

The chain is a tandem of two bounded queues (one bottom SCC of (C+1)^2 states, whose states' values differ), so
Storm's interval iteration cannot solve its long-run equations and distmc falls back
(:func:`distmc.check.checker.long_run_fallback`): state elimination up to
:data:`~distmc.check.checker.LRA_ELIMINATION_MAX_STATES` states, Storm's long-run value iteration above. Both are
run at every size, side by side in one process, and compared with Storm's exact engine where it finishes.
Usage (from the repository root)::

    python benchmarks/long_run.py --sizes 12,30,45,60
"""

from __future__ import annotations

import argparse
import tempfile
from fractions import Fraction
from pathlib import Path

import stormpy

TANDEM = """dtmc
const int C;
module t
  a : [0..C] init 0;
  b : [0..C] init 0;
  [] true -> 0.3 : (a'=min(a+1,C)) + 0.35 : (a'=max(a-1,0)) & (b'=a>0?min(b+1,C):b) + 0.35 : (b'=max(b-1,0));
endmodule
label "full" = a=C | b=C;
rewards "len"
  true : a + b;
endrewards
"""
PROP = 'R{"len"}=? [S]'


def exact(path: Path, constants: str) -> Fraction:
    prog = stormpy.parse_prism_program(str(path))
    prog, _ = stormpy.instantiate_constants(prog, constants)
    (p,) = stormpy.parse_properties(PROP, prog)
    model = stormpy.build_model[stormpy.Rational](prog, [p])
    r = stormpy.model_checking(
        model, p.get_raw_formula(), only_initial_states=True, environment=stormpy.environments.exact()
    )
    return Fraction(str(r.get_value(model.initial_states[0])))


def main() -> None:
    from distmc.api import verify
    from distmc.check import checker

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="12,30,45,60", help="queue capacities C ((C+1)^2 states)")
    ap.add_argument("--exact-up-to", type=int, default=12, help="Storm's exact engine for C up to this")
    args = ap.parse_args()
    path = Path(tempfile.mkdtemp()) / "tandem.prism"
    path.write_text(TANDEM)
    limit = checker.LRA_ELIMINATION_MAX_STATES
    print("| C | states | elimination s | value | long-run value iteration s | value | relative difference | exact |")
    print("|---|---|---|---|---|---|---|---|")
    for c in (int(x) for x in args.sizes.split(",")):
        constants = f"C={c}"
        row = []
        for threshold in (10**9, 0):  # elimination, then Storm's long-run value iteration
            checker.LRA_ELIMINATION_MAX_STATES = threshold
            report = verify(path, PROP, constants=constants)
            row.append((report.timings["check_s"], report.result, report.states))  # type: ignore[union-attr]
        checker.LRA_ELIMINATION_MAX_STATES = limit
        (te, ve, n), (tv, vv, _) = row
        q = f"{float(exact(path, constants)):.17g}" if c <= args.exact_up_to else ""
        print(f"| {c} | {n} | {te:.3f} | {ve!r} | {tv:.3f} | {vv!r} | {abs(vv - ve) / abs(ve):.2g} | {q} |", flush=True)


if __name__ == "__main__":
    main()
