"""Every property kind on one large induced model, by each checker: supported, value, bounds and check time.

All the properties are explored for once (``verify(props=...)``); each is then checked by Storm and by the native
checker (where it supports the kind) on the same assembled model, and the markdown table printed. Usage (from the
repository root)::

    python benchmarks/property_kinds.py --const N=20
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from distmc.api import verify
from distmc.assemble.storm import to_storm
from distmc.check.dispatch import check_properties
from distmc.check.forms import unsupported
from distmc.check.properties import PropertySet, parse_properties
from distmc.check.result import Precision
from distmc.model.program import load_model

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO / "distmc" / "examples" / "gridworld.prism"
KINDS = [
    ("next", 'P=? [X X "crash"]'),
    ("reachability", 'P=? [F "crash"]'),
    ("until", 'P=? [!"crash" U "goal"]'),
    ("globally", 'P=? [G !"crash"]'),
    ("step-bounded", 'P=? [F<=20 "crash"]'),
    ("interval-bounded", 'P=? [F[5,20] "crash"]'),
    ("threshold", 'P>=0.5 [F "goal"]'),
    ("nested", 'P=? [F P>=0.5 [X "crash"]]'),
    ("steady state", 'S=? ["crash"]'),
    ("reward: reachability", 'R{"steps"}=? [F "crash" | "goal"]'),
    ("reward: cumulative", 'R{"steps"}=? [C<=20]'),
    ("reward: total", 'R{"steps"}=? [C]'),
    ("reward: long-run", 'R{"steps"}=? [S]'),
]


def _fmt(v: object) -> str:
    return f"{v:.10g}" if isinstance(v, float) else str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--const", default="N=20")
    ap.add_argument("--kinds", default=None, help="comma-separated subset of the kinds (default: all that parse)")
    a = ap.parse_args(argv)
    model = load_model(Path(a.model), a.const)
    kinds = []
    for name, prop in KINDS:
        if a.kinds and name not in a.kinds.split(","):
            continue
        try:
            parse_properties(prop, model)
        except Exception as exc:  # noqa: BLE001 - a kind the model cannot express is reported, not fatal
            print(f"skipped {name}: {exc}")
            continue
        kinds.append((name, prop))
    # warm-up: the native checker's compiled loops load (or compile) once per process, not in the timed checks
    warm = verify(DEFAULT_MODEL, 'P=? [F "crash"]', constants="N=3", checker="native")
    assert not isinstance(warm, tuple)
    t = time.perf_counter()
    got = verify(a.model, None, props=[p for _, p in kinds], constants=a.const, keep_model=True)
    assert isinstance(got, tuple)
    report, induced = got
    print(
        f"{a.model} {a.const}: {report.states} states, {report.transitions} transitions; one exploration for "
        f"{len(kinds)} properties in {time.perf_counter() - t:.1f} s (largest single-property model: "
        f"{max(report.single_states)} states)\n"
    )
    storm_model = to_storm(induced)
    props = PropertySet([parse_properties(p, model).specs[0] for _, p in kinds])
    storm = check_properties(props, induced, ["storm"] * len(kinds), Precision(), lambda: storm_model)
    print("| kind | property | Storm: value (+-bound) | Storm check s | native: value | native check s |")
    print("|---|---|---|---|---|---|")
    for (name, prop), spec, res in zip(kinds, props.specs, storm, strict=True):
        why = unsupported(spec, induced.kind)
        if why is None:
            (nat,) = check_properties(PropertySet([spec]), induced, ["native"], Precision(), lambda: storm_model)
            native = (_fmt(nat.value if nat.truth is None else nat.truth), f"{nat.check_s:.3f}")
        else:
            native = ("not supported", "")
        value = _fmt(res.value if res.truth is None else res.truth)
        lo, hi = res.bounds if isinstance(res.bounds, tuple) else (None, None)
        bounds = "" if lo is None or hi is None else f" (+-{max(hi - res.value, res.value - lo):.1g})"  # type: ignore[operator]
        print(f"| {name} | `{prop}` | {value}{bounds} | {res.check_s:.3f} | {native[0]} | {native[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
