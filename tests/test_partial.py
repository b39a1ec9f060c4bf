"""Bounds from a partial model (distmc.check.partial): sound against full runs, nested, the same for any driver.

Every case compares with the full run's value of the same property (Storm's check of the whole induced model):
it must lie in the partial run's ``[lo, hi]`` (to the checker's own 1e-9), and doubling the state budget must
give an interval inside the last one. The horizon cut must give the full run's value to 1e-12.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from distmc.api import Report, verify
from distmc.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "distmc" / "examples"
EXAMPLE = EXAMPLES / "gridworld.prism"
POLICY = dict(policy=str(EXAMPLES / "gridworld_policy.pt"), interface=str(EXAMPLES / "gridworld_policy.json"))
TOL = 1e-9

#: One property of every form the bounds cover (gridworld: labels "crash", "goal"; action rewards "steps").
PROPS = [
    'P=? [F "crash"]',
    'P=? [!"crash" U "goal"]',
    'P=? [F<=12 "goal"]',
    'P=? [!"crash" U<=9 "goal"]',
    'P=? [G !"crash"]',
    'R{"steps"}=? [F "goal" | "crash"]',
    'R{"steps"}=? [C<=15]',
]


def _bounds(r: Report) -> tuple[float, float]:
    b = r.bounds
    assert isinstance(b, list)
    return float(b[0]), float(b[1])


def _inside(v: float, lo: float, hi: float) -> bool:
    return lo - TOL <= v <= hi + TOL


@pytest.fixture(scope="module")
def full() -> dict[str, float]:
    return {p: float(verify(EXAMPLE, p, constants="N=5", **POLICY).result) for p in PROPS}  # type: ignore[union-attr,arg-type]


@pytest.mark.parametrize("prop", PROPS)
def test_bounds_contain_the_full_value_and_nest(full: dict[str, float], prop: str) -> None:
    last = (-math.inf, math.inf)
    widths = []
    for budget in (40, 80, 160, 320):
        r = verify(EXAMPLE, prop, constants="N=5", **POLICY, max_states=budget)
        assert isinstance(r, Report)
        lo, hi = _bounds(r)
        assert r.partial and r.frontier is not None and r.frontier["frontier_states"] > 0
        assert r.frontier["explored_states"] + r.frontier["frontier_states"] == r.states
        assert _inside(full[prop], lo, hi), (budget, lo, hi, full[prop])
        assert last[0] - TOL <= lo and hi <= last[1] + TOL, (budget, last, (lo, hi))  # nested
        last = (lo, hi)
        widths.append(hi - lo)
    assert math.isinf(widths[-1]) or widths[-1] < widths[0]  # more states, a narrower interval


@pytest.mark.parametrize(
    "prop", ['P=? [F "crash"]', 'P=? [F<=12 "goal"]', 'R{"steps"}=? [C<=15]', 'R{"steps"}=? [F "goal" | "crash"]']
)
def test_native_and_storm_give_the_same_bounds(prop: str) -> None:
    a = verify(EXAMPLE, prop, constants="N=5", **POLICY, max_states=120, checker="storm")
    b = verify(EXAMPLE, prop, constants="N=5", **POLICY, max_states=120, checker="native")
    assert isinstance(a, Report) and isinstance(b, Report) and b.checker == "native"
    for x, y in zip(_bounds(a), _bounds(b), strict=True):
        assert x == y or abs(x - y) <= 4e-12


def test_reward_to_a_target_has_no_upper_bound_and_says_so() -> None:
    r = verify(EXAMPLE, 'R{"steps"}=? [F "goal" | "crash"]', constants="N=5", **POLICY, max_states=100)
    assert isinstance(r, Report) and math.isinf(_bounds(r)[1])
    assert "not bounded" in str(r.results[0]["not_bounded"]) or "infinite" in str(r.results[0]["not_bounded"])


def test_monolithic_mdp_bounds_min_and_max(storm_files: Path) -> None:
    model = storm_files / "mdp" / "coin2-2.nm"
    prop = 'P=? [F "finished"]'
    exact = verify(model, prop)
    part = verify(model, prop, max_states=40, mode="monolithic")
    assert isinstance(exact, Report) and isinstance(part, Report) and part.partial
    assert isinstance(part.bounds, dict) and isinstance(exact.result, dict)
    for d in ("min", "max"):
        lo, hi = part.bounds[d]
        assert _inside(exact.result[d], lo, hi)


def test_threshold_decided_and_undecided(full: dict[str, float]) -> None:
    decided = verify(EXAMPLE, 'P>=0.001 [F "crash"]', constants="N=5", **POLICY, max_states=320)
    assert isinstance(decided, Report) and decided.partial
    lo, hi = _bounds(decided)
    assert lo >= 0.001 and decided.truth is True and decided.results[0]["decided"] is True
    assert full['P=? [F "crash"]'] >= 0.001  # what the full run says too
    undecided = verify(EXAMPLE, 'P<=0.5 [F "crash"]', constants="N=5", **POLICY, max_states=160)
    assert isinstance(undecided, Report)
    lo, hi = _bounds(undecided)
    assert lo <= 0.5 < hi and undecided.truth is None and undecided.results[0]["truth"] == "undecided"


def test_horizon_cut_is_exact() -> None:
    for prop in ('P=? [F<=6 "crash"]', 'P=? [!"goal" U<=7 "crash"]', 'R{"steps"}=? [C<=5]'):
        whole = verify(EXAMPLE, prop, constants="N=6", **POLICY)
        cut = verify(EXAMPLE, prop, constants="N=6", **POLICY, horizon_cut=True)
        assert isinstance(whole, Report) and isinstance(cut, Report)
        assert not cut.partial and cut.frontier is not None and cut.states < whole.states
        assert abs(float(cut.result) - float(whole.result)) <= 1e-12, prop  # type: ignore[arg-type]
    # several properties: the deepest bound decides, and each is exact
    both = verify(EXAMPLE, 'P=? [F<=3 "crash"]; P=? [F<=6 "crash"]', constants="N=6", **POLICY, horizon_cut=True)
    assert isinstance(both, Report) and both.frontier is not None and both.frontier["horizon"] == 6
    for entry, k in zip(both.results, (3, 6), strict=True):
        one = verify(EXAMPLE, f'P=? [F<={k} "crash"]', constants="N=6", **POLICY)
        assert abs(float(entry["value"]) - float(one.result)) <= 1e-12  # type: ignore[arg-type,union-attr]
    # an unbounded property: no cut
    plain = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", **POLICY, horizon_cut=True)
    assert isinstance(plain, Report) and plain.frontier is None


def test_cli_exits_0_with_bounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "run",
                "example",
                "--const",
                "N=5",
                "--policy",
                "example",
                "--prop",
                'P=? [F "crash"]',
                "--max-states",
                "100",
                "--json",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    rep = json.loads(out.read_text())
    assert rep["partial"] is True and rep["frontier"]["frontier_states"] > 0
    assert 0.0 <= rep["frontier"]["frontier_probability"] <= 1.0
    assert rep["results"][0]["partial"] is True and len(rep["bounds"]) == 2
    text = capsys.readouterr().out
    assert "in [" in text and "partial model" in text


@pytest.mark.parametrize(
    "workers", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(3, marks=pytest.mark.slow)]
)
def test_ray_gives_the_in_process_bounds(local_ray: None, full: dict[str, float], workers: int) -> None:
    for prop in ('P=? [F "crash"]', 'P=? [F<=12 "goal"]', 'R{"steps"}=? [C<=15]'):
        here = verify(EXAMPLE, prop, constants="N=5", **POLICY, max_states=160)
        there = verify(EXAMPLE, prop, constants="N=5", **POLICY, max_states=160, workers=workers, driver="ray")
        assert isinstance(here, Report) and isinstance(there, Report) and there.partial
        assert there.frontier == here.frontier
        assert _bounds(there) == pytest.approx(_bounds(here), abs=1e-12)
        assert _inside(full[prop], *_bounds(there))


# -- rounds: --width, --order, --checkpoint-dir and --resume ----------------------------------------------------------


@pytest.mark.parametrize("order", ["mass", "bfs"])
def test_width_rounds_reach_the_width(full: dict[str, float], order: str) -> None:
    r = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=5", **POLICY, width=1e-3, order=order)
    assert isinstance(r, Report) and r.rounds is not None and len(r.rounds) >= 1
    widths = [x["width"] for x in r.rounds]
    assert widths[-1] <= 1e-3 and all(b <= a + TOL for a, b in zip(widths, widths[1:], strict=False))
    states = [x["explored_states"] for x in r.rounds]
    assert states == sorted(states)
    lo, hi = _bounds(r) if r.partial else (float(r.result), float(r.result))  # type: ignore[arg-type]
    assert _inside(full['P=? [F "crash"]'], lo - 2e-12, hi + 2e-12)


def test_mass_first_is_narrower_than_bfs_for_the_same_budget() -> None:
    mass = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=8", **POLICY, order="mass", max_states=2000)
    bfs = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=8", **POLICY, order="bfs", max_states=2000)
    assert isinstance(mass, Report) and isinstance(bfs, Report) and mass.partial and bfs.partial
    wm, wb = _bounds(mass)[1] - _bounds(mass)[0], _bounds(bfs)[1] - _bounds(bfs)[0]
    assert wm < wb  # measured: about 0.16 against 0.997 (benchmarks/RESULTS.md, issue 22)


def test_priority_explorer_explores_the_level_drivers_model() -> None:
    for order in ("mass", "bfs"):
        a = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=5", **POLICY, order=order)
        b = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=5", **POLICY)
        assert isinstance(a, Report) and isinstance(b, Report) and not a.partial
        assert (a.states, a.transitions) == (b.states, b.transitions)
        assert abs(float(a.result) - float(b.result)) <= 2e-12  # type: ignore[arg-type]


def test_resume_to_a_smaller_width_goes_on_from_the_checkpoint(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    first = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=8", **POLICY, width=0.5, checkpoint_dir=ck)
    assert isinstance(first, Report) and first.rounds is not None and first.partial
    had = first.rounds[-1]["explored_states"]
    again = verify(None, None, resume=ck, width=1e-6)
    assert isinstance(again, Report) and again.rounds is not None
    assert again.rounds[0]["explored_states"] == had  # its first round checks what the checkpoint holds
    assert again.rounds[-1]["width"] <= 1e-6 < first.rounds[-1]["width"]
    straight = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=8", **POLICY, width=1e-6)
    assert isinstance(straight, Report) and straight.states == again.states  # the same explored set
    assert _bounds(straight) == pytest.approx(_bounds(again), abs=2e-12)


@pytest.mark.parametrize(
    "workers", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(3, marks=pytest.mark.slow)]
)
def test_distributed_checker_bounds_the_partial_model_on_the_workers(
    local_ray: None, full: dict[str, float], workers: int
) -> None:
    for prop in (
        'P=? [F "crash"]',
        'P=? [!"crash" U "goal"]',
        'P=? [F<=12 "goal"]',
        'R{"steps"}=? [C<=15]',
        'R{"steps"}=? [F "goal" | "crash"]',
    ):
        here = verify(EXAMPLE, prop, constants="N=5", **POLICY, max_states=160, checker="native")
        there = verify(EXAMPLE, prop, constants="N=5", **POLICY, max_states=160, workers=workers, checker="distributed")
        assert isinstance(here, Report) and isinstance(there, Report)
        assert there.partial and there.checker == "distributed"
        assert there.frontier is not None and here.frontier is not None
        assert there.frontier["frontier_states"] == here.frontier["frontier_states"]
        assert there.frontier["frontier_probability"] == pytest.approx(
            here.frontier["frontier_probability"], abs=2e-6
        )  # REACH_PRECISION
        assert _bounds(there) == pytest.approx(_bounds(here), abs=1e-11), prop
        assert _inside(full[prop], *_bounds(there))


@pytest.mark.slow
def test_horizon_cut_on_the_workers_is_exact(local_ray: None) -> None:
    for prop in ('P=? [F<=6 "crash"]', 'R{"steps"}=? [C<=5]'):
        whole = verify(EXAMPLE, prop, constants="N=6", **POLICY)
        for checker in ("distributed", "auto"):
            cut = verify(
                EXAMPLE, prop, constants="N=6", **POLICY, horizon_cut=True, workers=2, driver="ray", checker=checker
            )
            assert isinstance(whole, Report) and isinstance(cut, Report) and not cut.partial
            assert cut.frontier is not None and cut.states < whole.states
            assert abs(float(cut.result) - float(whole.result)) <= 1e-12, (prop, checker)  # type: ignore[arg-type]


def test_ctrl_c_in_process_answers_with_bounds(full: dict[str, float]) -> None:
    import os
    import signal

    def progress(info: dict[str, float]) -> None:
        if info.get("depth") == 3:
            os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C: stop exploring at the end of the level

    # A shell's background job (nohup, `&`) starts with SIGINT ignored, and distmc rightly leaves an ignored signal
    # alone: the test stands for a terminal's foreground process, where Python's own handler is installed.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        r = verify(EXAMPLE, 'P=? [F<=12 "goal"]', constants="N=5", **POLICY, progress=progress)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back after the exploration
    finally:
        signal.signal(signal.SIGINT, before)
    assert isinstance(r, Report) and r.partial and r.frontier is not None
    assert r.frontier["reason"] == "interrupted (Ctrl-C)" and r.depth == 4
    assert _inside(full['P=? [F<=12 "goal"]'], *_bounds(r))


def test_frontier_probability_is_the_same_by_storm_and_by_the_native_checker() -> None:
    got = {}
    for checker in ("storm", "native"):
        r = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=8", **POLICY, max_states=2000, checker=checker)
        assert isinstance(r, Report) and r.frontier is not None and r.checker == checker
        got[checker] = r.frontier["frontier_probability"]
    assert isinstance(got["storm"], float) and isinstance(got["native"], float)
    assert got["storm"] == pytest.approx(got["native"], abs=2e-6) and 0.01 < got["storm"] < 1
