"""The MOSAIC front end: interval steps, network bounds, splitting by action, the abstract MDP's soundness."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distmc.abstract.bounds import action_masks, crown, ibp
from distmc.abstract.check import check_bounds
from distmc.abstract.envs import get_env, isin
from distmc.abstract.faults import FaultModel, parse_fault
from distmc.abstract.mdp import BoxExpander
from distmc.abstract.network import Network, load_network
from distmc.abstract.refine import analyse
from distmc.abstract.simulate import failure_frequency
from distmc.abstract.split import Splitter, split_boxes
from distmc.cli import main
from distmc.errors import DistmcError

POLICIES = Path(__file__).resolve().parents[1] / "benchmarks" / "policies"
FAST = settings(max_examples=25, deadline=None)


def _points(rng: np.random.Generator, lo: np.ndarray, hi: np.ndarray, n: int) -> np.ndarray:
    """``[B, n, d]`` random points in each box, the corners included."""
    pts = lo[:, None, :] + (hi - lo)[:, None, :] * rng.uniform(size=(lo.shape[0], n, lo.shape[1]))
    pts[:, 0], pts[:, 1] = lo, hi
    return pts


# -- environments ----------------------------------------------------------------------------------------------


@FAST
@given(seed=st.integers(0, 2**32 - 1), width=st.floats(1e-6, 10.0))
def test_interval_sine_contains_every_point(seed: int, width: float) -> None:
    rng = np.random.default_rng(seed)
    lo = rng.uniform(-10, 10, 200)
    hi = lo + width * rng.uniform(size=200)
    x = lo[:, None] + (hi - lo)[:, None] * rng.uniform(size=(200, 50))
    slo, shi = isin((lo, hi))
    assert (np.sin(x) >= slo[:, None]).all() and (np.sin(x) <= shi[:, None]).all()


@pytest.mark.parametrize("name", ["pendulum", "cartpole"])
@FAST
@given(seed=st.integers(0, 2**32 - 1), scale=st.floats(1e-4, 1.0))
def test_interval_step_contains_concrete_steps(name: str, seed: int, scale: float) -> None:
    env = get_env(name)
    rng = np.random.default_rng(seed)
    a = env.arrays()
    span = np.where(np.isfinite(a["safe_hi"]), a["safe_hi"], 2.0)
    lo = rng.uniform(-1.5, 1.5, (100, env.dim)) * span
    hi = lo + scale * span * rng.uniform(size=(100, env.dim))
    for u in (*env.actions, env.noop):
        blo, bhi = env.step_box(lo, hi, np.full(100, u))
        pts = _points(rng, lo, hi, 40)
        nxt = env.step(pts.reshape(-1, env.dim), np.full(pts.shape[0] * pts.shape[1], u)).reshape(pts.shape)
        assert (nxt >= blo[:, None, :]).all() and (nxt <= bhi[:, None, :]).all()


def test_pendulum_parameters_are_the_issue_s() -> None:
    env = get_env("pendulum")
    assert env.params["g"] == 10 and env.params["m"] == env.params["l"] == 1 and env.params["dt"] == 0.05
    assert env.actions == (-2.0, 2.0)
    assert env.failed(np.array([[math.pi / 4 + 1e-9, 0.0], [math.pi / 4, 0.0]])).tolist() == [True, False]
    with pytest.raises(DistmcError, match="unknown environment"):
        get_env("acrobot")


# -- faults ----------------------------------------------------------------------------------------------------


def test_fault_outcomes() -> None:
    f = parse_fault("fail:0.1,sticky:0.2")
    outs = dict((e, p) for p, e in f.outcomes())
    assert math.isclose(sum(outs.values()), 1.0)
    assert math.isclose(outs[(True,)], 0.72) and math.isclose(outs[(False, False)], 0.02)
    assert FaultModel().outcomes() == [(1.0, (True,))]
    assert parse_fault(None) == FaultModel()
    for bad in ("sticky", "sticky:2", "slip:0.1"):
        with pytest.raises(DistmcError, match="--fault"):
            parse_fault(bad)


# -- network bounds --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@FAST
@given(seed=st.integers(0, 2**16), width=st.floats(1e-3, 2.0))
def test_bounds_contain_the_network_outputs(activation: str, seed: int, width: float) -> None:
    net = Network.random([3, 16, 16, 3], activation, seed)
    rng = np.random.default_rng(seed)
    lo = rng.uniform(-2, 2, (30, 3))
    hi = lo + width * rng.uniform(size=(30, 3))
    spec = np.array([[1.0, 0, 0], [0, 1, 0], [0, 0, 1], [1, -1, 0], [0, 1, -1]])
    pts = _points(rng, lo, hi, 100)
    y = net.forward(torch.as_tensor(pts.reshape(-1, 3))).numpy() @ spec.T
    y = y.reshape(30, 100, -1)
    for method in (ibp, crown):
        lb, ub = method(net, lo, hi, spec)
        assert (y >= lb[:, None, :]).all() and (y <= ub[:, None, :]).all()
    masks = action_masks(net, lo, hi)
    chosen = net.act(pts.reshape(-1, 3)).reshape(30, 100)
    assert np.take_along_axis(masks, chosen, axis=1).all()


def test_crown_is_tighter_than_ibp() -> None:
    net = Network.random([2, 64, 64, 2], "relu", 3)
    rng = np.random.default_rng(0)
    lo = rng.uniform(-1, 1, (200, 2))
    hi = lo + 0.2
    spec = np.eye(2)
    (l1, u1), (l2, u2) = ibp(net, lo, hi, spec), crown(net, lo, hi, spec)
    assert (u2 - l2 <= u1 - l1 + 1e-12).all()
    assert (u2 - l2).mean() < 0.5 * (u1 - l1).mean()


# -- splitting by action ---------------------------------------------------------------------------------------


def test_split_pieces_tile_the_box_and_hold_every_point_s_action() -> None:
    net = Network.random([2, 32, 32, 3], "relu", 7)
    rng = np.random.default_rng(1)
    lo = rng.uniform(-1, 1, (20, 2))
    hi = lo + 0.5
    p = split_boxes(net, lo, hi, np.ones(2), max_splits=6)
    vol = np.bincount(p.owner, weights=np.prod(p.hi - p.lo, axis=1), minlength=20)
    assert np.allclose(vol, np.prod(hi - lo, axis=1))
    assert (p.lo >= lo[p.owner]).all() and (p.hi <= hi[p.owner]).all()
    assert (p.mask.sum(axis=1) >= 1).all() and (p.mask.sum(axis=1) == 1).mean() > 0.5
    pts = _points(rng, p.lo, p.hi, 30)
    chosen = net.act(pts.reshape(-1, 2)).reshape(p.lo.shape[0], 30)
    assert np.take_along_axis(p.mask, chosen, axis=1).all()
    undecided = p.mask.sum(axis=1) > 1
    depth_full = np.isclose((p.hi - p.lo).prod(axis=1), 0.25 / 2**6)
    assert (depth_full[undecided]).all()  # only minimum-size pieces stay undecided


def test_splitter_cache_and_workers_do_not_change_the_result() -> None:
    net = Network.random([2, 32, 32, 2], "relu", 5)
    rng = np.random.default_rng(2)
    lo = rng.uniform(-1, 1, (300, 2))
    hi = lo + 0.4
    one = Splitter(net, np.ones(2), 5, workers=1).split(lo, hi)
    with Splitter(net, np.ones(2), 5, workers=2) as s:
        two = s.split(lo, hi)
        inner_lo, inner_hi = two.lo[two.mask.sum(axis=1) == 1][:5], two.hi[two.mask.sum(axis=1) == 1][:5]
        again = s.split(inner_lo + 0.25 * (inner_hi - inner_lo), inner_hi)
        assert s.stats["cache_hits"] == 5 and again.owner.tolist() == list(range(5))
    for f in ("owner", "lo", "hi", "mask"):
        assert np.array_equal(getattr(one, f), getattr(two, f))


def test_cache_lookup_equals_brute_force() -> None:
    # The R*-tree lookup (one intersection_v query per batch) against checking every cached piece by hand.
    net = Network.random([2, 16, 16, 3], "relu", 7)
    rng = np.random.default_rng(4)
    s = Splitter(net, np.ones(2), 4)
    lo = rng.uniform(-1, 1, (200, 2))
    s.split(lo, lo + rng.uniform(0.05, 0.6, (200, 2)))
    qlo = rng.uniform(-1, 1, (500, 2))
    qhi = qlo + rng.uniform(0.0, 0.2, (500, 2))
    got = s._cached(qlo, qhi)
    want = np.ones_like(got)
    for i in range(qlo.shape[0]):
        inside = (s._lo[: s._n] <= qlo[i]).all(axis=1) & (s._hi[: s._n] >= qhi[i]).all(axis=1)
        want[i] = s._mask[: s._n][inside].all(axis=0)
    assert np.array_equal(got, want)
    assert (~got).any() and got.any()  # some boxes are decided by the cache, some not


# -- the abstract MDP: soundness against simulation ----------------------------------------------------------


def _hoeffding(n: int, delta: float = 1e-6) -> float:
    return math.sqrt(math.log(2 / delta) / (2 * n))


@pytest.mark.parametrize(
    ("fault", "max_splits"),
    [("sticky:0.2", 4), pytest.param("fail:0.1,sticky:0.2", 4, marks=pytest.mark.slow), ("fail:0.2", 0)],
)
def test_bounds_bracket_simulated_failure_frequency(fault: str, max_splits: int) -> None:
    env, net = get_env("pendulum"), load_network(POLICIES / "pendulum.json")
    faults = parse_fault(fault)
    res = analyse(env, net, faults, horizon=4, refine=5, threshold=0.05, max_splits=max_splits)
    n = 1500
    freq = failure_frequency(env, net, faults, res.lo, res.hi, 4, n, np.random.default_rng(0))
    margin = _hoeffding(n)
    assert (freq <= res.upper + margin).all(), np.max(freq - res.upper)
    assert (freq >= res.lower - margin).all(), np.max(res.lower - freq)
    # The bounds say something: safe boxes, surely failing boxes, and the simulation fails in between.
    assert (res.upper < 0.1).any() and (res.lower > 0.05).any() and (freq > 0.5).any() and (freq == 0).any()
    assert (res.lower <= res.upper).all()


def test_cartpole_bounds_bracket_simulation() -> None:
    env, net = get_env("cartpole"), load_network(POLICIES / "cartpole.json")
    faults = parse_fault("fail:0.3")
    a = env.arrays()
    lo = np.array([a["init_lo"], [-0.05, -0.05, 0.18, 1.0]])
    hi = np.array([a["init_hi"], [0.05, 0.05, 0.2, 1.2]])  # the second box reaches the failure region
    with Splitter(net, a["cell"], 2) as s:
        res = check_bounds(BoxExpander(env, s, faults), lo, hi, 2)
    freq = failure_frequency(env, net, faults, lo, hi, 2, 4000, np.random.default_rng(1))
    m = _hoeffding(4000)
    assert (freq <= res.upper + m).all() and (freq >= res.lower - m).all()
    assert res.upper[0] == 0.0 and freq[1] > 0


def test_refinement_never_loosens_a_region_s_bounds() -> None:
    env, net = get_env("pendulum"), load_network(POLICIES / "pendulum.json")
    faults = parse_fault("sticky:0.2")
    runs = [analyse(env, net, faults, horizon=3, refine=r, threshold=0.05) for r in (0, 3, 5)]
    for coarse, fine in zip(runs[:-1], runs[1:], strict=True):
        for i in range(fine.lo.shape[0]):
            inside = np.flatnonzero((coarse.lo <= fine.lo[i]).all(axis=1) & (coarse.hi >= fine.hi[i]).all(axis=1))
            assert inside.size == 1
            assert fine.upper[i] <= coarse.upper[inside[0]] and fine.lower[i] >= coarse.lower[inside[0]]
        assert fine.safe_fraction() >= coarse.safe_fraction()
    assert runs[-1].safe_fraction() > runs[0].safe_fraction()
    steps = [h["safe_fraction"] for h in runs[-1].history]
    assert steps == sorted(steps)


# -- policies and the command line -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["pendulum", "cartpole"])
def test_shipped_policy_matches_its_torch_network(name: str) -> None:
    spec = json.loads((POLICIES / f"{name}.json").read_text())
    seq = torch.nn.Sequential(
        torch.nn.Linear(get_env(name).dim, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 2),
    ).double()
    seq.load_state_dict(torch.load(POLICIES / spec["weights"], weights_only=True))
    net = load_network(POLICIES / f"{name}.json")
    x = torch.randn(100, get_env(name).dim, dtype=torch.float64)
    assert torch.allclose(net.forward(x), seq(x).detach())
    assert spec["training"]["steps"] > 0 and "mean_reward" in spec["training"]


def test_cli_abstract_writes_table_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "r.json", tmp_path / "h.png"
    code = main(
        [
            "abstract",
            "pendulum",
            "--policy",
            str(POLICIES / "pendulum.json"),
            "--horizon",
            "3",
            "--refine",
            "2",
            "--fault",
            "sticky:0.2",
            "--json",
            str(out),
            "--plot",
            str(png),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "safe volume" in text and "theta_dot" in text
    doc = json.loads(out.read_text())
    assert len(doc["boxes"]) == doc["history"][-1]["boxes"] and 0 <= doc["safe_fraction"] <= 1
    assert png.stat().st_size > 1000


def test_cli_abstract_errors(tmp_path: Path) -> None:
    policy = str(POLICIES / "pendulum.json")
    assert main(["abstract", "cartpole", "--policy", policy]) == 6  # trained for another system
    assert main(["abstract", "pendulum", "--policy", str(tmp_path / "none.json")]) == 6
    assert main(["abstract", "pendulum", "--policy", policy, "--fault", "sticky:3"]) == 1
    assert main(["abstract", "pendulum", "--policy", policy, "--horizon", "0"]) == 5


def test_cartpole_projection_plot(tmp_path: Path) -> None:
    from distmc.abstract.refine import Analysis
    from distmc.abstract.report import plot

    rng = np.random.default_rng(0)
    lo = rng.uniform(-1, 0, (20, 4))
    a = Analysis("cartpole", 3, 0.05, "none", lo, lo + 0.3, rng.uniform(size=20), np.zeros(20))
    plot(a, get_env("cartpole"), tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_loader_drops_a_final_softmax_and_reads_tanh(tmp_path: Path) -> None:
    seq = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3), torch.nn.Softmax(dim=1))
    torch.save(seq.state_dict(), tmp_path / "n.pt")
    layers = [
        {"type": "linear", "in": 2, "out": 8},
        {"type": "tanh"},
        {"type": "linear", "in": 8, "out": 3},
        {"type": "softmax"},
    ]
    (tmp_path / "n.json").write_text(json.dumps({"weights": "n.pt", "layers": layers}))
    net = load_network(tmp_path / "n.pt")
    x = torch.randn(50, 2)
    assert (net.act(x.double().numpy()) == seq(x).argmax(dim=1).numpy()).all()
    (tmp_path / "bad.json").write_text(json.dumps({"weights": "n.pt", "layers": [{"type": "conv"}]}))
    with pytest.raises(DistmcError, match="not supported"):
        load_network(tmp_path / "bad.json")


def test_analysis_options_object_and_keywords_agree() -> None:
    """``analyse`` takes an :class:`AbstractOptions`, keywords over one, or keywords alone: the same analysis; a bad
    value is a UsageError when the options are made, an unknown keyword a TypeError."""
    from dataclasses import replace

    from distmc.abstract.options import AbstractOptions
    from distmc.errors import UsageError

    env, net, faults = get_env("pendulum"), load_network(POLICIES / "pendulum.json"), parse_fault("sticky:0.2")
    base = AbstractOptions(horizon=2, refine=1, workers=1)
    by_object = analyse(env, net, faults, base)
    by_keywords = analyse(env, net, faults, horizon=2, refine=1, workers=1)
    over = analyse(env, net, faults, replace(base, refine=0), refine=1)
    for other in (by_keywords, over):
        assert np.array_equal(by_object.upper, other.upper) and np.array_equal(by_object.lower, other.lower)
        assert np.array_equal(by_object.lo, other.lo)
    assert (base.splits, AbstractOptions(2, 1, abstraction="lattice").splits) == (0, 4)
    with pytest.raises(UsageError, match="driver must be 'local' or 'ray'"):
        AbstractOptions(horizon=2, refine=1, driver="slurm")
    with pytest.raises(UsageError, match="need --refine >= 0"):
        analyse(env, net, faults, horizon=2, refine=-1)
    with pytest.raises(TypeError, match="refin"):
        analyse(env, net, faults, horizon=2, refin=1)
