"""Bounds that hold: every checker's ``[lo, hi]`` contains the exact value of the induced model.

The reference is Storm's exact engine on the rationals of the induced doubles (the model ``verify`` built, handed
over with ``exact=True``). Every checker (Storm, native, distributed on 2 Ray workers) must give an interval that
contains it and meets the default rule (within 1e-12 absolute and 1e-6 relative), also for a rare event of about
1e-9 (where 1e-12 absolute alone leaves a relative error of 1e-3). Also: relative ``--precision`` with the native
and the distributed checker, sound bounds on MDPs when a precision is given (and the "not sound" line when none
is), several properties in one distributed run with a threshold's truth value, and a chain where value iteration
converges very slowly (Haddad and Monmege's, :mod:`benchmarks.slow_chain`): answered by the exact engine or
stopped with a sentence, never a wrong number and never a silent wait.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from benchmarks.slow_chain import PROPERTY as SLOW_PROPERTY
from benchmarks.slow_chain import chain_text
from distmc.api import verify
from distmc.assemble.storm import to_storm
from distmc.check.checker import check
from distmc.check.properties import parse_properties
from distmc.check.result import DEFAULT_PRECISION, DEFAULT_RELATIVE, Precision, widen
from distmc.errors import SlowConvergenceError
from distmc.model.program import load_model
from tests.conftest import STORM_FILES

#: A chain with a rare event: 30 successes in a row (probability 1/2 each; a failure restarts or ends the run)
#: reach "fail"; its probability is about 1.9e-9.
RARE = """dtmc
module rare
  s : [0..31] init 0;
  [] s<30 -> 0.5 : (s'=s+1) + 0.25 : (s'=0) + 0.25 : (s'=31);
  [] s>=30 -> 1 : true;
endmodule
label "fail" = s=30;
"""

CASES = [
    ("dtmc/brp-16-2.pm", "P=? [F s=5]"),
    ("dtmc/brp-16-2.pm", "P=? [F srep=2]"),
    ("dtmc/die.pm", "P=? [F s=7&d=2]"),
    ("dtmc/die.pm", 'R{"coin_flips"}=? [F "done"]'),
    ("dtmc/crowds-5-5.pm", "P=? [F observe0>1]"),
    ("rare", 'P=? [F "fail"]'),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("models")
    (d / "rare.prism").write_text(RARE)
    (d / "slow.prism").write_text(chain_text(100))
    return {"rare": d / "rare.prism", "slow": d / "slow.prism"}


def _path(name: str, models: dict[str, Path]) -> Path:
    return models[name] if name in models else STORM_FILES / name


def _exact(path: Path, prop: str) -> Fraction:
    """Storm's exact value on the rationals of the induced model's doubles (the model distmc checks)."""
    report, induced = verify(path, prop, keep_model=True)  # type: ignore[misc]
    spec = parse_properties(prop, load_model(path, None)).specs[0]
    res = check(to_storm(induced, exact=True), spec, induced.kind, induced.initial, Precision(exact=True))
    assert isinstance(res.exact, str)
    return Fraction(res.exact)


def _holds(
    entry: dict[str, object],
    q: Fraction,
    rel: float = DEFAULT_RELATIVE,
    absolute: float = DEFAULT_PRECISION,
) -> None:
    bounds = entry["bounds"]
    assert isinstance(bounds, list), entry
    lo, hi = bounds
    assert Fraction(lo) <= q <= Fraction(hi), (entry, float(q))
    width = hi - lo
    assert width <= rel * float(q), (entry, float(q), width / float(q))
    assert width <= absolute * max(1.0, float(q)), (entry, width)


def _usable(path: Path, prop: str) -> bool:
    try:
        parse_properties(prop, load_model(path, None))
    except Exception:  # noqa: BLE001 - a label the bundled model does not have: not this case
        return False
    return True


@pytest.mark.parametrize("checker", ["storm", "native"])
@pytest.mark.parametrize(("name", "prop"), CASES)
def test_bounds_contain_the_exact_value(models: dict[str, Path], name: str, prop: str, checker: str) -> None:
    path = _path(name, models)
    if not _usable(path, prop):
        pytest.skip(f"{name} has no label for {prop}")
    q = _exact(path, prop)
    (entry,) = verify(path, prop, checker=checker).results  # type: ignore[union-attr]
    assert entry["checker"] == checker and entry["method"] == "sound"
    _holds(entry, q)


STEP_CASES = [
    ("dtmc/crowds-5-5.pm", "P=? [F<=20 observe0>1]"),
    ("dtmc/die.pm", 'R{"coin_flips"}=? [C<=5]'),
    ("rare", 'P=? [F<=200 "fail"]'),
]


@pytest.mark.parametrize(("name", "prop"), STEP_CASES)
def test_step_bounds_cover_their_rounding(models: dict[str, Path], name: str, prop: str) -> None:
    """A step-bounded value's bounds contain the exact value of its recurrence on the model's doubles."""
    path = _path(name, models)
    q = _exact(path, prop)
    (entry,) = verify(path, prop, checker="native").results  # type: ignore[union-attr]
    assert entry["method"] == "steps"
    lo, hi = entry["bounds"]
    assert lo < hi and Fraction(lo) <= q <= Fraction(hi), (entry, float(q))
    assert hi - lo <= 1e-12 * max(1.0, float(q)), entry  # the rounding of a few hundred steps: far below 1e-12


def test_a_rare_event_keeps_its_digits(models: dict[str, Path]) -> None:
    q = _exact(models["rare"], 'P=? [F "fail"]')
    assert 1e-9 < q < 1e-8
    for checker in ("storm", "native"):
        (entry,) = verify(models["rare"], 'P=? [F "fail"]', checker=checker).results  # type: ignore[union-attr]
        lo, hi = entry["bounds"]  # type: ignore[misc]
        assert (hi - lo) / float(q) <= DEFAULT_RELATIVE  # 1e-12 absolute alone: about 5e-4 relative
        # with --precision-abs 1e-12 alone (the old default) the interval is three orders wider
        (old,) = verify(models["rare"], 'P=? [F "fail"]', checker=checker, precision_abs=1e-12).results  # type: ignore[union-attr]
        assert Fraction(old["bounds"][0]) <= q <= Fraction(old["bounds"][1])  # type: ignore[index]


@pytest.mark.parametrize("checker", ["storm", "native"])
def test_relative_precision(models: dict[str, Path], checker: str) -> None:
    for name, prop in (("dtmc/crowds-5-5.pm", "P=? [F observe0>1]"), ("rare", 'P=? [F "fail"]')):
        path = _path(name, models)
        q = _exact(path, prop)
        r = verify(path, prop, checker=checker, precision=1e-4)
        (entry,) = r.results  # type: ignore[union-attr]
        assert r.precision == "0.0001 relative"  # type: ignore[union-attr]
        _holds(entry, q, rel=1e-4, absolute=1.0)


def test_mdp_bounds_whenever_a_precision_is_given() -> None:
    path, prop = STORM_FILES / "mdp/coin2-2.nm", 'Pmin=? [F "finished"&"all_coins_equal_1"]'
    q = _exact(path, prop)
    for kw in ({"precision": 1e-6}, {"precision_abs": 1e-9}):
        r = verify(path, prop, mode="monolithic", **kw)
        (entry,) = r.results  # type: ignore[union-attr]
        assert entry["method"] == "sound" and "note" not in entry
        _holds(entry, q, rel=1e-6 if "precision" in kw else 1.0, absolute=1e-9 if "precision_abs" in kw else 1.0)
    r = verify(path, prop, mode="monolithic")
    (entry,) = r.results  # type: ignore[union-attr]
    assert entry["method"] == "iterative" and entry["bounds"] is None
    assert "not sound" in r.summary()  # type: ignore[union-attr]


def test_a_slow_chain_is_answered_exactly(models: dict[str, Path]) -> None:
    q = _exact(models["slow"], SLOW_PROPERTY)
    for checker in ("storm", "native"):
        r = verify(models["slow"], SLOW_PROPERTY, checker=checker)
        (entry,) = r.results  # type: ignore[union-attr]
        assert entry["checker"] == "storm-exact" and entry["method"] == "exact"
        assert Fraction(entry["exact"]) == q  # type: ignore[arg-type]
        assert "converges too slowly" in r.summary()  # type: ignore[union-attr]


def test_the_native_checker_sees_a_slow_chain_early(models: dict[str, Path]) -> None:
    from distmc.check.native import check_native

    _, induced = verify(models["slow"], SLOW_PROPERTY, keep_model=True)  # type: ignore[misc]
    spec = parse_properties(SLOW_PROPERTY, load_model(models["slow"], None)).specs[0]
    with pytest.raises(SlowConvergenceError, match="converges too slowly") as err:
        check_native(induced, spec)
    assert err.value.exit_code == 5


# -- on 2 Ray workers ------------------------------------------------------------------------------------------


@pytest.mark.slow  # 43 s; test_distributed_threshold_reports_its_truth stays
def test_distributed_bounds_and_several_properties(local_ray: None, models: dict[str, Path]) -> None:
    by_model: dict[str, list[str]] = {}
    for name, prop in CASES:
        if _usable(_path(name, models), prop):
            by_model.setdefault(name, []).append(prop)
    for name, props in by_model.items():
        path = _path(name, models)
        r = verify(path, None, props=props, workers=2, checker="distributed")
        assert r.checker == "distributed" and len(r.results) == len(props)  # type: ignore[union-attr]
        for prop, entry in zip(props, r.results, strict=True):  # type: ignore[union-attr]
            assert entry["property"] == prop
            _holds(entry, _exact(path, prop))
        rel = verify(path, None, props=props, workers=2, checker="distributed", precision=1e-4)
        for prop, entry in zip(props, rel.results, strict=True):  # type: ignore[union-attr]
            _holds(entry, _exact(path, prop), rel=1e-4, absolute=1.0)


def test_distributed_threshold_reports_its_truth(local_ray: None) -> None:
    path = STORM_FILES / "dtmc/leader-3-5.pm"
    props = ['P>=1 [F "elected"]', 'P=? [F "elected"]', 'P<0.5 [F<=3 "elected"]']
    here = verify(path, None, props=props)
    there = verify(path, None, props=props, workers=2, checker="distributed")
    for a, b in zip(here.results, there.results, strict=True):  # type: ignore[union-attr]
        assert a.get("truth") == b.get("truth"), (a, b)
        assert abs(a["value"] - b["value"]) <= 1e-9  # type: ignore[operator]
    assert there.results[0]["truth"] is True and there.truth is True  # type: ignore[union-attr]


@pytest.mark.slow  # 115 s: a slow chain's passes on the workers
def test_distributed_slow_chain_says_what_to_use(local_ray: None, models: dict[str, Path]) -> None:
    with pytest.raises(SlowConvergenceError, match="--checker storm --exact"):
        verify(models["slow"], SLOW_PROPERTY, workers=2, checker="distributed")


def test_the_precision_rule() -> None:
    p = Precision()  # 1e-12 absolute and 1e-6 relative
    lo = np.array([0.5, 1e-9, 300.0, 0.0])
    assert list(p.target(lo, lo)) == pytest.approx([1e-12, 1e-15, 300.0 * 2.0**-46, 0.0])
    assert p.excess(np.array([1e-9]), np.array([1e-9 + 2e-15])) > 0  # 1e-12 absolute alone would take it
    assert Precision(1e-12, rel=None).excess(np.array([1e-9]), np.array([1e-9 + 2e-15])) <= 0
    assert p.excess(np.array([0.0, 1.0]), np.array([0.0, 1.0])) <= 0  # points (graph analysis) meet any rule
    assert Precision(1e-3, relative=True).excess(np.array([2.0]), np.array([2.0019])) <= 0
    assert Precision.from_options(None, None).describe() == "1e-12 absolute and 1e-06 relative"
    assert Precision.from_options(1e-6, None).sound_mdp and Precision.from_options(None, 1e-9).sound_mdp
    assert not Precision.from_options(None, None).sound_mdp
    lo_w, hi_w = widen(np.array([0.0, 0.25]), np.array([0.0, 0.25]), probability=True)
    assert lo_w[0] == hi_w[0] == 0.0 and lo_w[1] < 0.25 < hi_w[1]


@pytest.mark.parametrize("order", ["components", "levels", "blocks"])
@pytest.mark.parametrize(("name", "prop"), CASES)
def test_every_update_order_contains_the_exact_value(models: dict[str, Path], name: str, prop: str, order: str) -> None:
    """The native engine's own bounds (before the report's margin), in each of its update orders."""
    from distmc.check.native import LocalEngine, matrix_of, values_of

    path = _path(name, models)
    if not _usable(path, prop):
        pytest.skip(f"{name} has no label for {prop}")
    q = _exact(path, prop)
    _, induced = verify(path, prop, keep_model=True)  # type: ignore[misc]
    spec = parse_properties(prop, load_model(path, None)).specs[0]
    _, lo, hi = values_of(LocalEngine(matrix_of(induced), None, induced.initial, order=order), induced, spec)
    i = int(induced.initial[0])
    assert Fraction(float(lo[i])) <= q <= Fraction(float(hi[i])), (order, float(lo[i]), float(q), float(hi[i]))
    assert hi[i] - lo[i] <= DEFAULT_RELATIVE * float(q)
