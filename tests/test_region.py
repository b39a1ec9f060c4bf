"""Parameter regions (distmc.region): sound bounds over a box of constants from one exploration, and verdicts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from distmc.api import verify
from distmc.check.interval import IntervalChain, interval_bounds, robust_step
from distmc.cli import main
from distmc.errors import DistmcError
from distmc.model.region import parse_region
from distmc.pipeline import Job
from distmc.region import bounds_over, build_region_chain, verify_region

ROOT = Path(__file__).resolve().parents[1]
DELIVERY = str(ROOT / "benchmarks/envs/delivery.prism")
AVOID = str(ROOT / "benchmarks/envs/avoid.prism")
POLICY = str(ROOT / "benchmarks/policies/delivery/policy.pt")
INTERFACE = str(ROOT / "benchmarks/policies/delivery/policy.json")
SMALL = "N=3,FUEL=8"

CASES = [
    # (model, property, region, constants, policy options)
    (DELIVERY, 'P=? [F "delivered"]', "0.05<=slip<=0.15", SMALL, {}),
    (DELIVERY, 'P=? [F<=12 "delivered"]', "0.05<=slip<=0.15", SMALL, {}),
    (DELIVERY, 'R{"delivery"}=? [F "done"]', "0.05<=slip<=0.15", SMALL, {}),
    (DELIVERY, 'P=? [F "delivered"]', "0.05<=slip<=0.15", "N=6,FUEL=20", {"policy": POLICY, "interface": INTERFACE}),
    (AVOID, 'P=? [F<=8 "crash"]', "0.05<=slickness<=0.3", "N=3", {}),
]


@pytest.mark.parametrize(("model", "prop", "region", "constants", "extra"), CASES)
def test_exact_points_lie_inside_the_region_bounds(
    model: str, prop: str, region: str, constants: str, extra: dict[str, str]
) -> None:
    report = verify_region(model, prop, region, constants=constants, **extra)
    box = parse_region(region)
    ((name, lo, hi),) = box.params
    assert report.lower <= report.upper
    for v in map(float, np.linspace(lo, hi, 5)):
        exact = verify(model, prop, constants=f"{constants},{name}={v!r}", **extra)
        bounds = exact.bounds if exact.bounds is not None else [exact.result, exact.result]  # bounded: exact
        assert isinstance(bounds, list)
        assert report.lower - 1e-9 <= bounds[0] and bounds[1] <= report.upper + 1e-9, (v, bounds, report)


def test_each_split_lies_inside_its_parent() -> None:
    job = Job(DELIVERY, 'P=? [F "delivered"]', SMALL)
    box = parse_region("0.05<=slip<=0.25")
    rc = build_region_chain(job, box)
    spec = rc.parts.spec
    parents = [(box, bounds_over(rc, spec, box))]
    for _ in range(3):
        children = []
        for sub, (lo, hi) in parents:
            for half in sub.split():
                assert sub.contains(half)
                c_lo, c_hi = bounds_over(rc, spec, half)
                assert lo - 1e-12 <= c_lo <= c_hi <= hi + 1e-12
                children.append((half, (c_lo, c_hi)))
        parents = children
    # refined, the bounds on each of the 8 pieces are much tighter than on the whole region
    whole = bounds_over(rc, spec, box)
    assert max(hi - lo for _, (lo, hi) in parents) < (whole[1] - whole[0]) / 3


def test_the_corner_values_reproduce_an_exact_point() -> None:
    rc = build_region_chain(Job(DELIVERY, 'P=? [F "delivered"]', SMALL), parse_region("0.05<=slip<=0.15"))
    point = rc.chain(parse_region("0.08<=slip<=0.08000000001"))
    exact = verify(DELIVERY, 'P=? [F "delivered"]', constants=f"{SMALL},slip=0.08")
    lo, hi = interval_bounds(point, rc.parts.spec)
    assert abs(lo[rc.initial[0]] - float(exact.result)) < 1e-8  # type: ignore[arg-type]
    assert abs(hi[rc.initial[0]] - float(exact.result)) < 1e-8  # type: ignore[arg-type]


def test_a_threshold_that_changes_inside_the_region_gets_both_verdicts() -> None:
    report = verify_region(DELIVERY, 'P>=0.0003 [F "delivered"]', "0.05<=slip<=0.15", constants=SMALL, coverage=0.95)
    verdicts = {s.verdict for s in report.subregions}
    assert {"holds", "violated"} <= verdicts
    assert report.coverage is not None and report.coverage >= 0.95
    assert abs(sum(s.volume for s in report.subregions) - 1.0) < 1e-9
    for s in report.subregions:
        if s.verdict == "violated":
            assert s.witness is not None and s.witness_value is not None and s.witness_value < 0.0003
            assert s.lower - 1e-9 <= s.witness_value <= s.upper + 1e-9
        if s.verdict == "holds":
            assert s.lower >= 0.0003
    holds = [s for s in report.subregions if s.verdict == "holds"]
    point = holds[0].region.split("<=")[0]  # a holding subregion's lower end: a single run confirms it
    assert verify(DELIVERY, 'P>=0.0003 [F "delivered"]', constants=f"{SMALL},slip={point}").truth is True


def test_the_robust_step_picks_the_worst_and_best_distribution() -> None:
    # state 0 -> {1: [0.2, 0.6], 2: [0.3, 0.8]}; 1 is the target, 2 a sink
    chain = IntervalChain(
        np.array([0, 2, 3, 4]),
        np.array([1, 2, 1, 2]),
        np.array([0.2, 0.3, 1.0, 1.0]),
        np.array([0.6, 0.8, 1.0, 1.0]),
        np.array([0]),
        {"t": np.array([False, True, False])},
        {},
    )
    x = np.array([0.0, 1.0, 0.0])
    active = np.array([True, False, False])
    assert robust_step(chain, x, np.zeros(3), active, x, False)[0] == pytest.approx(0.2)
    assert robust_step(chain, x, np.zeros(3), active, x, True)[0] == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("region", "constants", "message"),
    [
        ("0.15<=slip<=0.05", SMALL, "is empty"),
        ("0.1<=slip<=0.1", SMALL, "a single point"),
        ("slip=0.1", SMALL, "cannot read region part"),
        ("0.1<=friction<=0.2", SMALL, "no undefined constant"),
        ("0.1<=slip<=0.2", f"{SMALL},slip=0.1", "both a value"),
        ("1<=FUEL<=3", "N=3", "int or bool"),
        ("0<=slip<=0.1", SMALL, "structure changes"),
    ],
)
def test_bad_regions_are_one_line(
    region: str, constants: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["run", DELIVERY, "--const", constants, "--region", region, "--prop", 'P=? [F "delivered"]'])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and message in err and len(err.splitlines()) == 1, err


def test_a_constant_the_structure_depends_on_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "guard.prism"
    model.write_text(
        "dtmc\nconst double p;\nmodule m\n  x : [0..2] init 0;\n"
        "  [] x=0 & p>0.5 -> p : (x'=1) + 1-p : (x'=2);\n  [] x>0 -> true;\nendmodule\n"
    )
    with pytest.raises(DistmcError, match="the guard of module 'm'.*depends on 'p'"):
        verify_region(model, "P=? [F x=1]", "0.2<=p<=0.4")
    model.write_text(
        "dtmc\nconst double p;\nmodule m\n  x : [0..2] init 0;\n"
        "  [] x=0 -> p*p : (x'=1) + 1-p*p : (x'=2);\n  [] x>0 -> true;\nendmodule\n"
    )
    with pytest.raises(DistmcError, match="not affine in 'p'"):
        verify_region(model, "P=? [F x=1]", "0.2<=p<=0.4")


def test_the_cli_prints_bounds_and_the_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    rc = main(
        [
            "run",
            DELIVERY,
            "--const",
            SMALL,
            "--region",
            "0.05<=slip<=0.15",
            "--prop",
            'P=? [F "delivered"]',
            "--json",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0 and "over  0.05<=slip<=0.15" in text and "engine: native robust value iteration" in text
    assert '"lower"' in out.read_text()


def _interval_drn(c: IntervalChain, path: Path, label: str) -> None:
    """``c`` as Storm's explicit format with interval probabilities (``@value_type: double-interval``)."""
    lines = [
        "@type: DTMC",
        "@value_type: double-interval",
        "@parameters",
        "",
        "@reward_models",
        "",
        f"@nr_states\n{c.n_states}",
        f"@nr_choices\n{c.n_states}",
        "@model",
    ]
    init = set(c.initial.tolist())
    for s in range(c.n_states):
        marks = (" init" if s in init else "") + (f" {label}" if c.labels[label][s] else "")
        lines += [f"state {s}{marks}", "\taction 0"]
        for j in range(int(c.row_offsets[s]), int(c.row_offsets[s + 1])):
            lines.append(f"\t\t{int(c.targets[j])} : [{float(c.lo[j])!r}, {float(c.hi[j])!r}]")
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("prop", ['P=? [F "delivered"]', 'P=? [F<=12 "delivered"]'])
def test_the_bounds_agree_with_storms_robust_value_iteration(prop: str, tmp_path: Path) -> None:
    import stormpy

    rc = build_region_chain(Job(DELIVERY, prop, SMALL), parse_region("0.05<=slip<=0.15"))
    chain = rc.chain(rc.region)
    ours = interval_bounds(chain, rc.parts.spec, 1e-12)
    _interval_drn(chain, tmp_path / "m.drn", "delivered")
    model = stormpy.build_model_from_drn[stormpy.Interval](str(tmp_path / "m.drn"))
    formula = stormpy.parse_properties(prop)[0]
    s0 = int(rc.initial[0])
    for mode, mine in (
        (stormpy.UncertaintyResolutionMode.MINIMIZE, ours[0]),
        (stormpy.UncertaintyResolutionMode.MAXIMIZE, ours[1]),
    ):
        storm = stormpy.model_checking(model, formula, uncertainty_resolution_mode=mode).get_value(s0)
        assert mine[s0] == pytest.approx(storm, rel=1e-5, abs=1e-12)


TWO = """mdp
const double p;
const double q;
module a
  x : [0..3] init 0;
  [go]   x<3 -> p : (x'=x+1) + 1-p : (x'=0);
  [stay] x<3 -> 0.5 : (x'=min(x+1, 3)) + 0.5 : true;
  [go]   x=3 -> true;
  [stay] x=3 -> true;
endmodule
module b
  y : [0..2] init 0;
  [go]   true -> q : (y'=min(y+1, 2)) + 1-q : (y'=0);
  [stay] true -> 1 : true;
endmodule
label "goal" = x=3 & y=2;
"""


def test_two_parameters_bound_every_sampled_point(tmp_path: Path) -> None:
    model = tmp_path / "two.prism"
    model.write_text(TWO)
    prop = 'P=? [F<=6 "goal"]'
    report = verify_region(model, prop, "0.3<=p<=0.6,0.4<=q<=0.8")
    assert report.lower < report.upper
    for p in (0.3, 0.45, 0.6):
        for q in (0.4, 0.6, 0.8):
            value = float(verify(str(model), prop, constants=f"p={p},q={q}").result)  # type: ignore[arg-type]
            assert report.lower - 1e-12 <= value <= report.upper + 1e-12
    halves = parse_region("0.3<=p<=0.6,0.4<=q<=0.8").split()
    assert halves[0].params[0] == ("p", 0.3, 0.6) and halves[0].params[1][2] == pytest.approx(0.6)  # q is wider
