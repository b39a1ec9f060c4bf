"""Every property kind against Storm's exact engine, on the models bundled with stormpy.

The reference is Storm's own property-driven builder over rationals (``build_model[Rational]``) and its exact
checker: a value distmc reports with bounds must lie within them, step-bounded values and long-run averages must
agree to floating point, threshold properties must have Storm's truth value, and the bounds must be as tight as
asked. Also: several properties on one exploration give each property's own value and state count, and
``--exact`` agrees with Storm's exact engine.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import stormpy

from distmc.api import verify
from distmc.check.forms import unsupported
from distmc.check.properties import parse_properties, split_statements
from distmc.errors import PropertyError
from distmc.model.program import load_model
from tests.conftest import STORM_FILES

MODELS = [
    ("dtmc/die.pm", None),
    ("dtmc/brp-16-2.pm", None),
    ("dtmc/leader-3-5.pm", None),
    ("mdp/two_dice.nm", None),
    ("mdp/coin2-2.nm", None),
    ("mdp/tiny_rewards.nm", None),
]


def kinds(path: Path, constants: str | None) -> list[str]:
    """One property of every kind over the model's first label (or a variable) and its first reward structure."""
    m = load_model(path, constants)
    labels = [name for name in m.labels if name not in ("init", "deadlock")]
    v = m.variables[0]
    a = f'"{labels[0]}"' if labels else f"{v.name}={v.hi}"
    b = f'"{labels[-1]}"' if labels else f"{v.name}={v.lo}"
    out = [
        f"P=? [X {a}]",
        f"P=? [X X {b}]",
        f"P=? [F {a}]",
        f"P=? [G !{a}]",
        f"P=? [!{b} U {a}]",
        f"P=? [F<=6 {a}]",
        f"P=? [F[2,6] {b}]",
        f"P=? [F P>0.3 [X {a}]]",
        f"P>=0.5 [F {a}]",
        f"P<0.25 [F<=8 {b}]",
        f"P>0 [X {b}]",
        f"S=? [{a}]",
        f"LRA>=0.5 [{b}]",
    ]
    if m.model_type == "mdp":
        out += [f"Pmin=? [F {a}]", f"Pmax=? [X {a}]", f"Pmax<=0.5 [F {a}]"]
    if m.rewards:
        r = m.rewards[0]
        head = f'R{{"{r.name}"}}' if r.name else "R"
        out += [f"{head}=? [F {a}]", f"{head}=? [C<=5]", f"{head}=? [C]", f"{head}<=4 [F {a}]", f"{head}=? [S]"]
        if r.state_items:
            out.append(f"{head}=? [I=3]")
    return out


def _exact(path: Path, constants: str | None, prop: str) -> tuple[Any, list[Any]] | None:
    """Storm's exact answer at the initial states: truth values or rationals (per direction), None if it cannot."""
    prog = stormpy.parse_prism_program(str(path), prism_compatibility=True)
    if constants:
        prog, _ = stormpy.instantiate_constants(prog, constants)
    (p,) = stormpy.parse_properties(prop, prog)
    model = stormpy.build_model[stormpy.Rational](prog, [p])
    f = p.get_raw_formula()
    env = stormpy.environments.exact()
    init = list(model.initial_states)
    out = []
    directions = [None]
    if model.is_nondeterministic_model and not f.has_optimality_type and not f.has_bound:
        directions = [stormpy.logic.OptimizationDirection.MINIMIZE, stormpy.logic.OptimizationDirection.MAXIMIZE]
    try:
        for d in directions:
            g = f.clone()
            if d is not None:
                g.set_optimality_type(d)
            r = stormpy.model_checking(model, g, only_initial_states=False, environment=env)
            if f.has_bound:
                truth = r.get_truth_values_vector()
                out.append([bool(truth.get(s)) for s in init])
            else:
                out.append([_q(r.get_value(s)) for s in init])
    except RuntimeError:
        return None
    return f.has_bound, out


def _q(v: Any) -> Fraction | float:
    text = str(v)
    return math.inf if "inf" in text else Fraction(text)


def _within(value: float, bounds: list[float] | None, q: Fraction | float, how: str) -> None:
    if isinstance(q, float):  # infinite
        assert value == q
        return
    slack = Fraction(1, 10**15) * max(1, abs(q))  # the induced floats (0.1) against the program's rationals (1/10)
    if how == "sound":
        assert bounds is not None
        assert Fraction(bounds[0]) - slack <= q <= Fraction(bounds[1]) + slack, (value, bounds, float(q))
    else:
        assert abs(Fraction(value) - q) <= Fraction(1, 10**9) * max(1, abs(q)), (value, float(q))


def _check_entry(entry: dict[str, Any], ref: tuple[Any, list[Any]]) -> None:
    has_bound, per_dir = ref
    if has_bound:
        assert entry["truth"] == all(per_dir[0]), entry
        return
    how = entry["method"]
    if len(per_dir) == 1 and len(per_dir[0]) == 1:
        _within(entry["value"], entry["bounds"], per_dir[0][0], how)
    else:  # a range: over directions (MDP without min/max) or over initial states
        lows = per_dir[0] if len(per_dir) == 1 else per_dir[0]
        highs = per_dir[0] if len(per_dir) == 1 else per_dir[1]
        b = entry["bounds"] or {}
        _within(entry["value"]["min"], b.get("min"), min(lows), how)
        _within(entry["value"]["max"], b.get("max"), max(highs), how)


@pytest.mark.parametrize(("name", "constants"), MODELS, ids=[m[0] for m in MODELS])
def test_every_kind_against_storm_exact(name: str, constants: str | None) -> None:
    path = STORM_FILES / name
    props = kinds(path, constants)
    checked = 0
    for prop in props:
        ref = _exact(path, constants, prop)
        if ref is None:  # Storm itself cannot check it (e.g. a total reward that is infinite somewhere)
            with pytest.raises(PropertyError):
                verify(path, prop, constants=constants, mode="monolithic")
            continue
        report = verify(path, prop, constants=constants, mode="monolithic")
        (entry,) = report.results  # type: ignore[union-attr]
        _check_entry(entry, ref)
        if entry["method"] == "sound" and entry["bounds"] is not None:
            for lo, hi in entry["bounds"].values() if isinstance(entry["bounds"], dict) else [entry["bounds"]]:
                # the asked (default) precision, 1e-12 each side, up to the rounding of lo and hi themselves
                assert lo == hi == math.inf or hi - lo <= 2e-12 + 4 * math.ulp(max(abs(lo), abs(hi)))
        checked += 1
    assert checked >= len(props) - 3


@pytest.mark.parametrize("name", ["dtmc/die.pm", "dtmc/brp-16-2.pm", "dtmc/leader-3-5.pm"])
def test_native_checker_against_storm_exact(name: str) -> None:
    path = STORM_FILES / name
    model = load_model(path, None)
    for prop in kinds(path, None):
        spec = parse_properties(prop, model).specs[0]
        if unsupported(spec, "dtmc") is not None:
            continue
        ref = _exact(path, None, prop)
        assert ref is not None
        (entry,) = verify(path, prop, checker="native").results  # type: ignore[union-attr]
        assert entry["checker"] == "native"
        _check_entry(entry, ref)


@pytest.mark.parametrize("name", ["dtmc/die.pm", "dtmc/brp-16-2.pm", "mdp/two_dice.nm"])
def test_exact_engine(name: str) -> None:
    path = STORM_FILES / name
    for prop in kinds(path, None)[:12]:
        ref = _exact(path, None, prop)
        if ref is None:
            continue
        (entry,) = verify(path, prop, mode="monolithic", exact=True).results  # type: ignore[union-attr]
        assert entry["checker"] == "storm-exact" and entry["method"] == "exact"
        if ref[0]:
            assert entry["truth"] == all(ref[1][0])
            continue
        exact = entry["exact"]
        if isinstance(exact, str) and "," not in exact and len(ref[1]) == 1:
            q = ref[1][0][0]
            got = _q(exact)
            assert got == q or abs(got - q) <= Fraction(1, 10**14) * max(1, abs(q))  # rationals of the floats
            lo, hi = entry["bounds"]
            assert Fraction(lo) <= got <= Fraction(hi) and hi - lo <= 2 * abs(hi) * 2.0**-52


def test_relative_precision_gives_bounds_relative_to_the_value() -> None:
    path = STORM_FILES / "dtmc" / "brp-16-2.pm"
    ref = _exact(path, None, 'P=? [F "target"]')
    assert ref is not None
    q = ref[1][0][0]
    for eps in (1e-4, 1e-8):
        (entry,) = verify(path, 'P=? [F "target"]', precision=eps).results  # type: ignore[union-attr]
        lo, hi = entry["bounds"]
        assert Fraction(lo) <= q <= Fraction(hi)
        assert hi - lo <= 2 * eps * entry["value"] * (1 + 1e-9)
    report = verify(path, 'P=? [F "target"]', precision_abs=1e-3)
    lo, hi = report.bounds  # type: ignore[misc, union-attr]
    assert hi - lo <= 2e-3 and Fraction(lo) <= q <= Fraction(hi)
    assert report.precision == "0.001 absolute"  # type: ignore[union-attr]


def test_monolithic_mdp_bounds_contain_the_exact_value() -> None:
    path = STORM_FILES / "mdp" / "coin2-2.nm"
    for prop in ('Pmin=? [F "finished" & "all_coins_equal_1"]', 'Rmax=? [F "finished"]'):
        m = load_model(path, None)
        if prop.startswith("R") and not m.rewards:
            continue
        ref = _exact(path, None, prop)
        assert ref is not None
        (entry,) = verify(path, prop, mode="monolithic", precision=1e-6, sound_mdp=True).results  # type: ignore[union-attr]
        assert entry["method"] == "sound"
        _check_entry(entry, ref)


def test_several_properties_one_exploration() -> None:
    path = STORM_FILES / "dtmc" / "leader-3-5.pm"
    props = ['P=? [F "elected"]', 'P=? [F<=4 "elected"]', 'R{"num_rounds"}=? [F "elected"]', "P=? [X s1=1]"]
    together = verify(path, props[0], props=props[1:])
    assert len(together.results) == len(props)  # type: ignore[union-attr]
    largest = 0
    for prop, entry, states in zip(props, together.results, together.single_states, strict=True):  # type: ignore[union-attr]
        alone = verify(path, prop)
        (single,) = alone.results  # type: ignore[union-attr]
        assert entry["property"] == prop
        assert abs(entry["value"] - single["value"]) <= 2e-12
        assert states == alone.states  # type: ignore[union-attr]
        largest = max(largest, alone.states)  # type: ignore[union-attr]
    assert together.states >= largest  # type: ignore[union-attr]
    assert "more than the largest single-property model" in together.summary()  # type: ignore[union-attr]


def test_properties_file(tmp_path: Path) -> None:
    path = STORM_FILES / "dtmc" / "die.pm"
    text = '// die\nconst double p = 1/6;\n"six": P>=p [F "six"]\nP=? [X s=1];  P=? [F "two"]\n'
    assert split_statements(text) == ["const double p = 1/6", '"six": P>=p [F "six"]', "P=? [X s=1]", 'P=? [F "two"]']
    report = verify(path, None, props=split_statements(text))
    six, nxt, two = report.results  # type: ignore[union-attr]
    assert six["name"] == "six" and six["truth"] is True and six["decided"] is False  # 1/6 >= 1/6: on the edge
    assert nxt["value"] == 0.5 and nxt["bounds"] is None and nxt["method"] == "steps"
    assert abs(two["value"] - 1 / 6) <= 1e-12
    with pytest.raises(PropertyError, match="without a value"):
        verify(path, None, props=["const double q", "P>=q [F s=7]"])


def test_lower_step_bound_keeps_the_target_expanded() -> None:
    # F[2,4] s=1: a path through s=1 at step 1 may leave it and not come back by step 2, so s=1 states must be
    # expanded (Storm's builder does not make them terminal); the value and the state count are Storm's.
    path = STORM_FILES / "dtmc" / "die.pm"
    ref = _exact(path, None, "P=? [F[2,4] s=1]")
    assert ref is not None
    report = verify(path, "P=? [F[2,4] s=1]")
    assert abs(Fraction(report.result) - ref[1][0][0]) <= Fraction(1, 10**12)  # type: ignore[arg-type, union-attr]
    prog = stormpy.parse_prism_program(str(path))
    storm_model = stormpy.build_model(prog, stormpy.parse_properties("P=? [F[2,4] s=1]", prog))
    assert report.states == storm_model.nr_states  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["dtmc/brp-16-2.pm", "dtmc/leader-3-5.pm", "mdp/coin2-2.nm"])
def test_relative_bounds_of_every_sound_kind_contain_the_exact_value(name: str) -> None:
    path = STORM_FILES / name
    model = load_model(path, None)
    for prop in kinds(path, None):
        if parse_properties(prop, model).specs[0].solution != "sound" or prop.startswith(("P>", "P<", "R{", "R<")):
            continue
        ref = _exact(path, None, prop)
        if ref is None:
            continue
        (entry,) = verify(path, prop, mode="monolithic", precision=1e-5, sound_mdp=True).results  # type: ignore[union-attr]
        _check_entry(entry, ref)


def test_globally_bounds_are_relative_to_the_iterated_complement() -> None:
    # G phi = 1 - F !phi: a relative error on F !phi near 1 is an absolute one on a small G value
    from distmc.check.result import Precision

    lo, hi = Precision(1e-3, relative=True).interval(1e-6, probability=True, complement=True)
    assert lo == 0.0 and hi >= 1e-6 + 1e-3 * (1 - 1e-6)
    lo, hi = Precision(1e-3, relative=True).interval(1e-6, probability=True)
    assert hi - lo == pytest.approx(2e-9)


def test_long_run_average_is_accurate() -> None:
    # crash and goal are absorbing in the gridworld: the long-run share of crash states is the probability of
    # reaching one (with sound value iteration inside, Storm's long-run average was 1.2e-7 off at N=12)
    example = Path(__file__).resolve().parents[1] / "distmc" / "examples" / "gridworld.prism"
    report = verify(example, None, props=['P=? [F "crash"]', 'S=? ["crash"]'], constants="N=6")
    reach, steady = report.results  # type: ignore[union-attr]
    assert steady["method"] == "other" and steady["bounds"] is None
    assert abs(reach["value"] - steady["value"]) <= 1e-12


def test_several_reward_structures_on_one_model() -> None:
    # firewire has "time" and "time_sending": with both in the induced model, Storm needs each R's structure named
    path = STORM_FILES / "mdp" / "firewire.nm"
    props = ['Rmin=? [F "elected"]', 'R{"time_sending"}max=? [F "elected"]']
    together = verify(path, None, props=props, constants="delay=3,fast=0.5", mode="monolithic")
    for prop, entry in zip(props, together.results, strict=True):  # type: ignore[union-attr]
        alone = verify(path, prop, constants="delay=3,fast=0.5", mode="monolithic")
        assert abs(entry["value"] - alone.result) <= 2e-12  # type: ignore[operator, union-attr]
