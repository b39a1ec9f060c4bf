"""distmc's native checker (:mod:`distmc.check.native`) against Storm on the same induced DTMCs, and its choice.

Storm is the reference: bounded values must agree to 1e-12, unbounded ones (both sides sound to 1e-12) to 2e-12.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distmc.api import verify
from distmc.check.choice import choose_checker
from distmc.cli import main
from distmc.errors import PropertyError, ResourceLimitError
from distmc.explore.limits import Limits, rss_bytes
from distmc.pipeline import Job
from tests.conftest import SHARED_MODELS, STORM_FILES

EXAMPLES = Path(__file__).resolve().parents[1] / "distmc" / "examples"
EXAMPLE = EXAMPLES / "gridworld.prism"
CHAIN = Path(__file__).resolve().parent / "data" / "gym" / "chain.prism"
POLICY = dict(policy=str(EXAMPLES / "gridworld_policy.pt"), interface=str(EXAMPLES / "gridworld_policy.json"))

GRID_PROPS = [
    'P=? [F "crash"]',
    'P=? [F<=12 "crash"]',
    'P=? [F<12 "goal"]',
    'P=? [!"goal" U "crash"]',
    'P=? [x < 3 U<=20 "goal"]',
    'P=? [F<=0 "crash"]',
    'P=? [true U "init"]',
    "P=? [F x=2 & y=1]",
    'P=? [F ("crash" & "init")]',
    'P=? [!"init" U<=7 "crash" | "goal"]',
    'R=? [F "crash" | "goal"]',
    'R=? [F "goal"]',  # infinite: a crash ends the episode short of the goal
    "R=? [C<=10]",
    "R=? [C<=0]",
]


def _both(*args: object, **kwargs: object) -> tuple[object, object]:
    storm = verify(*args, checker="storm", **kwargs)  # type: ignore[arg-type, misc]
    native = verify(*args, checker="native", **kwargs)  # type: ignore[arg-type, misc]
    assert storm.checker == "storm" and native.checker == "native"  # type: ignore[union-attr]
    assert (storm.states, storm.transitions) == (native.states, native.transitions)  # type: ignore[union-attr]
    return storm.result, native.result  # type: ignore[union-attr]


def _close(a: object, b: object, tol: float) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return _close(a["min"], b["min"], tol) and _close(a["max"], b["max"], tol)
    return a == b or abs(a - b) <= tol  # type: ignore[operator]


@pytest.mark.parametrize("prop", GRID_PROPS)
@pytest.mark.parametrize("policy", ["network", "uniform"])
def test_gridworld_matches_storm(prop: str, policy: str) -> None:
    kwargs = POLICY if policy == "network" else {"policy": "uniform"}
    storm, native = _both(EXAMPLE, prop, constants="N=5", **kwargs)
    assert _close(storm, native, 2e-12), (storm, native)


@pytest.mark.parametrize(
    ("name", "prop"),
    [
        ("dtmc/die.pm", 'P=? [F "one"]'),
        ("dtmc/die.pm", 'P=? [F<=3 "done"]'),
        ("dtmc/brp-16-2.pm", "P=? [F s=5]"),
        ("dtmc/crowds-5-5.pm", "P=? [F observe0>1]"),
        ("dtmc/crowds-5-5.pm", "P=? [F<=20 observe0>1]"),
        ("dtmc/leader-3-5.pm", 'P=? [F<=4 "elected"]'),
        ("dtmc/nand-5-2.pm", "P=? [F s=4 & z/N<0.1]"),
        ("mdp/slipgrid.nm", "P=? [F x=3 & y=3]"),
        ("dtmc/die.pm", 'R=? [F "done"]'),
        ("dtmc/die.pm", "R=? [C<=5]"),
        (CHAIN, 'R=? [F "done"]'),  # state rewards
        (CHAIN, "R=? [I=1]"),
        (CHAIN, "R=? [I=2]"),
        (CHAIN, "R=? [C<=3]"),
    ],
)
def test_storm_models_match_storm(name: str | Path, prop: str) -> None:
    storm, native = _both(STORM_FILES / name, prop)
    assert _close(storm, native, 2e-12), (storm, native)


@pytest.mark.skipif(
    not (SHARED_MODELS / "avoid.prism").exists(), reason="../shared/models/coolmc is not beside this checkout"
)
@pytest.mark.parametrize("prop", ["P=? [F<=100 COLLISION=true]", "P=? [x<3 U COLLISION=true]"])
def test_avoid_matches_storm(prop: str) -> None:
    storm, native = _both(SHARED_MODELS / "avoid.prism", prop, constants="xMax=4,yMax=4,slickness=0.1")
    assert _close(storm, native, 2e-12), (storm, native)


@pytest.mark.parametrize(
    ("prop", "kwargs", "why"),
    [
        ("R=? [C]", {}, "rewards of the forms"),
        ("R=? [LRA]", {}, "rewards of the forms"),
        ("R=? [C<3]", {}, "rewards of the forms"),
        ('P=? [F "crash"]', {"mode": "monolithic"}, "MDP"),
        ('P=? [F[2,5] "crash"]', {}, "step bounds"),
        ('P=? [F P>0.5 [F "goal"]]', {}, "propositional state formulas"),
    ],
)
def test_native_refuses_what_it_cannot_check(prop: str, kwargs: dict[str, str], why: str) -> None:
    with pytest.raises(PropertyError, match=why):
        verify(EXAMPLE, prop, constants="N=4", checker="native", **kwargs)
    # auto keeps Storm for these
    assert verify(EXAMPLE, prop, constants="N=4", **kwargs).checker == "storm"  # type: ignore[union-attr]


def _induced() -> tuple[object, object]:
    report, induced = verify(EXAMPLE, 'P=? [F<=10 "crash"]', constants="N=4", keep_model=True)  # type: ignore[misc]
    spec = (
        Job(str(EXAMPLE), 'P=? [F<=10 "crash"]', "N=4", "uniform", None, "stochastic", 0.0, "none", False)
        .build(explorer=True)
        .spec
    )
    return induced, spec


def test_auto_takes_native_only_when_storm_would_not_fit() -> None:
    induced, spec = _induced()
    roomy = Limits(max_memory=rss_bytes() + 2**30)
    tight = Limits(max_memory=rss_bytes() + 1)  # Storm's estimate is rss + 64-80 B per transition
    assert choose_checker("auto", roomy, induced, spec, 0, release=True) == "storm"  # type: ignore[arg-type]
    assert choose_checker("auto", tight, induced, spec, 0, release=True) == "native"  # type: ignore[arg-type]
    assert choose_checker("auto", Limits(), induced, spec, 0, release=True) == "storm"  # type: ignore[arg-type]
    with pytest.raises(ResourceLimitError, match="--max-memory"):
        choose_checker("storm", tight, induced, spec, 0, release=True)  # type: ignore[arg-type]


def test_auto_stops_when_neither_fits() -> None:
    report, induced = verify(EXAMPLE, "R=? [C]", constants="N=4", keep_model=True)  # type: ignore[misc]
    spec = (
        Job(str(EXAMPLE), "R=? [C]", "N=4", "uniform", None, "stochastic", 0.0, "none", False).build(explorer=True).spec
    )
    with pytest.raises(ResourceLimitError, match="native checker cannot check it: .*rewards"):
        choose_checker("auto", Limits(max_memory=rss_bytes() + 1), induced, spec, 0, release=True)


def test_cli_checker_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "run",
                str(EXAMPLE),
                "--const",
                "N=4",
                "--prop",
                'P=? [F "crash"]',
                "--checker",
                "native",
                "--quiet",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    native = json.loads(out.read_text())
    assert native["checker"] == "native"
    assert (
        main(["run", str(EXAMPLE), "--const", "N=4", "--prop", 'P=? [F "crash"]', "--quiet", "--json", str(out)]) == 0
    )
    storm = json.loads(out.read_text())
    assert storm["checker"] == "storm"
    assert abs(native["result"] - storm["result"]) <= 2e-12
    assert main(["run", str(EXAMPLE), "--const", "N=4", "--prop", "R=? [C]", "--checker", "native", "--quiet"]) != 0
    assert "--checker native cannot check" in capsys.readouterr().err
