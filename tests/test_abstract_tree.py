"""The tree of image boxes (distmc.abstract.tree): its values against Storm, its soundness against exact point
probabilities, the regions a user sets, --validate, and the folded CROWN pass."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import stormpy
import torch

from distmc.abstract import bounds
from distmc.abstract.envs import get_env, with_regions
from distmc.abstract.faults import parse_fault
from distmc.abstract.network import Network, load_network
from distmc.abstract.refine import analyse
from distmc.abstract.simulate import point_probability, validate
from distmc.abstract.split import Splitter
from distmc.abstract.tree import Level, TreeBounds
from distmc.assemble.reducer import InducedModel
from distmc.assemble.storm import to_storm
from distmc.check.checker import value_vector
from distmc.cli import main
from distmc.errors import DistmcError

POLICIES = Path(__file__).resolve().parents[1] / "benchmarks" / "policies"


def _tree_as_mdp(levels: list[Level], n_out: int, probs: np.ndarray) -> tuple[InducedModel, np.ndarray]:
    """The tree written as an MDP: a state per node, one row per choice; a branch to FAIL (labelled ``f`` and
    ``pf``) where the child surely fails, to a ``pf`` state that moves on to the child where it may, to the child
    where it cannot, and to DONE past the horizon. Returns the model and the states of the first level's nodes."""
    first = np.cumsum([0] + [lv.nodes for lv in levels])
    n_nodes = int(first[-1])
    fail, done = n_nodes, n_nodes + 1
    maybe_states: list[int] = []  # one pf state per (choice, outcome) that may fail
    rows: list[tuple[int, list[tuple[int, float]]]] = []
    extra = n_nodes + 2
    for t, lv in enumerate(levels):
        for c in range(lv.parent.shape[0]):
            branches = []
            for o in range(n_out):
                child = int(first[t + 1] + lv.child[c, o]) if lv.child[c, o] >= 0 else done
                if lv.surely[c, o]:
                    tgt = fail
                elif lv.maybe[c, o]:
                    tgt = extra + len(maybe_states)
                    maybe_states.append(child)
                else:
                    tgt = child
                branches.append((tgt, float(probs[o])))
            rows.append((int(first[t] + lv.parent[c]), branches))
    n = extra + len(maybe_states)
    for s in (fail, done):
        rows.append((s, [(s, 1.0)]))
    for k, child in enumerate(maybe_states):
        rows.append((extra + k, [(child, 1.0)]))
    rows.sort(key=lambda r: r[0])
    src = np.array([r[0] for r in rows])
    assert (np.unique(src) == np.arange(n)).all()  # every state has a row (the last level's nodes have choices)
    row_groups = np.searchsorted(src, np.arange(n + 1))
    targets, pr, offsets = [], [], [0]
    for _, br in rows:
        merged: dict[int, float] = {}
        for t, p in br:
            merged[t] = merged.get(t, 0.0) + p
        for t in sorted(merged):
            targets.append(t)
            pr.append(merged[t])
        offsets.append(len(targets))
    labels = {"f": np.zeros(n, bool), "pf": np.zeros(n, bool), "init": np.zeros(n, bool)}
    labels["f"][fail] = labels["pf"][fail] = True
    labels["pf"][extra:] = True
    roots = np.arange(levels[0].nodes)
    labels["init"][roots] = True
    model = InducedModel(
        "mdp",
        row_groups,
        np.array(offsets),
        [np.array(targets)],
        [np.array(pr)],
        np.full(len(rows), -1),
        roots,
        labels,
        {},
        np.arange(n, dtype=np.uint64),
    )
    return model, roots


@pytest.mark.parametrize(("name", "fault"), [("pendulum", "fail:0.1,sticky:0.2"), ("cartpole-mosaic", "sticky:0.2")])
def test_tree_values_are_storm_s_on_the_tree_as_an_mdp(name: str, fault: str) -> None:
    env = get_env(name)
    net = load_network(POLICIES / f"{name.split('-')[0]}.json")
    faults = parse_fault(fault)
    a = env.arrays()
    rng = np.random.default_rng(3)
    w = (a["init_hi"] - a["init_lo"]) / 4
    lo = a["init_lo"] + rng.uniform(size=(6, env.dim)) * (a["init_hi"] - a["init_lo"] - w)
    hi = lo + w
    with Splitter(net, a["cell"], 1, use_cache=False) as sp:
        tb = TreeBounds(env, sp, faults)
        levels = tb.build(lo, hi, 3)
        up, low = tb.reduce(levels)
    model, roots = _tree_as_mdp(levels, len(faults.outcomes()), tb.probs)
    sm = to_storm(model)
    su = value_vector(sm, stormpy.parse_properties('Pmax=? [F "pf"]')[0].get_raw_formula())[roots]
    sl = value_vector(sm, stormpy.parse_properties('Pmin=? [F "f"]')[0].get_raw_formula())[roots]
    assert np.allclose(up, su, atol=1e-9) and np.allclose(low, sl, atol=1e-9)
    assert (up > low).any()  # the comparison is not between two zero vectors


def test_point_probability_enumerates_every_outcome() -> None:
    env, net = get_env("cartpole-mosaic"), load_network(POLICIES / "cartpole.json")
    faults = parse_fault("fail:0.1,sticky:0.2")
    rng = np.random.default_rng(0)
    x = rng.uniform(-0.05, 0.05, size=(12, 4))
    exact = point_probability(env, net, faults, x, 3)
    # each prefix that failed is counted once per continuation in _brute_force: divide by their number
    outs = len(faults.outcomes())
    ref = []
    for xi in x:
        total = 0.0
        for seq in itertools.product(range(outs), repeat=3):
            y, p, failed = xi[None, :].copy(), 1.0, False
            for o in seq:
                prob, executed = faults.outcomes()[o]
                p *= prob
                if failed:
                    continue
                u = np.array([env.actions[int(net.act(y)[0])]])
                for ex in executed:
                    y = env.step(y, u if ex else np.array([env.noop]))
                    failed = failed or bool(env.failed(y)[0])
            total += p if failed else 0.0
        ref.append(total)
    assert np.allclose(exact, ref, atol=1e-12)
    assert 0 < exact.max() and exact.min() < 1  # the points are not all alike


@pytest.mark.parametrize(
    ("name", "fault", "horizon"), [("pendulum", "sticky:0.2", 5), ("cartpole-mosaic", "sticky:0.2", 7)]
)
def test_bounds_contain_every_sampled_point_s_exact_probability(name: str, fault: str, horizon: int) -> None:
    env = get_env(name)
    net = load_network(POLICIES / f"{name.split('-')[0]}.json")
    faults = parse_fault(fault)
    res = analyse(env, net, faults, horizon=horizon, refine=6, validate=6, seed=1)
    assert res.inside is not None and res.inside.all()
    v = validate(env, net, faults, res.lo, res.hi, res.upper, res.lower, horizon, 20, np.random.default_rng(2))
    assert v["inside"].all()
    assert (v["point_max"] > 0).any() and (res.upper < 1).any()  # neither side trivial
    assert res.history[-1]["mean_gap"] == pytest.approx(res.mean_gap())


def test_tree_is_tighter_than_the_lattice_on_mosaic_s_cartpole() -> None:
    from distmc.abstract.check import check_bounds
    from distmc.abstract.mdp import BoxExpander

    env, net = get_env("cartpole-mosaic"), load_network(POLICIES / "cartpole.json")
    faults = parse_fault("sticky:0.2")
    a = env.arrays()
    g = np.random.default_rng(5).integers(0, 8, size=(48, 4))  # boxes of the 8^4 grid of the initial region
    w = (a["init_hi"] - a["init_lo"]) / 8
    lo, hi = a["init_lo"] + g * w, a["init_lo"] + (g + 1) * w
    with Splitter(net, a["cell"], 1, use_cache=False) as sp:
        up_tree, _ = TreeBounds(env, sp, faults).bounds(lo, hi, 3)
        up_lattice = check_bounds(BoxExpander(env, sp, faults), lo, hi, 3).upper
    assert (up_tree <= 0.05).sum() > (up_lattice <= 0.05).sum()
    assert up_tree.mean() < up_lattice.mean()


def test_regions_a_user_sets() -> None:
    env = get_env("cartpole-mosaic")
    assert env.safe_hi[0] == 0.05 and env.safe_hi[2] == pytest.approx(10 * math.pi / 180)
    e2 = with_regions(env, init="x=-0.01:0.02", safe="x_dot=-1:1,theta=-0.2:inf")
    assert e2.init_lo[0] == -0.01 and e2.init_hi[0] == 0.02 and e2.init_lo[1] == -0.05
    assert e2.safe_lo[1] == -1 and e2.safe_hi[2] == math.inf and env.safe_lo[1] == -math.inf  # a copy
    for bad in ("y=0:1", "x=1:0", "x=0", "x=a:b"):
        with pytest.raises(DistmcError):
            with_regions(env, init=bad)
    with pytest.raises(DistmcError, match="does not lie inside"):
        with_regions(env, init="x=-1:1")
    x = np.array([[0.0, 0.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0]])
    assert e2.failed(x).tolist() == [False, True]


def test_cli_regions_validate_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    code = main(
        [
            "abstract",
            "cartpole-mosaic",
            "--policy",
            str(POLICIES / "cartpole.json"),
            "--horizon",
            "3",
            "--fault",
            "sticky:0.2",
            "--refine",
            "2",
            "--init",
            "x=-0.02:0.02",
            "--safe",
            "x=-0.06:0.06",
            "--validate",
            "4",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "init region: x=[-0.02, 0.02]" in text and "--validate: every sampled point" in text
    doc = json.loads(out.read_text())
    assert doc["regions"]["init"]["x"] == [-0.02, 0.02] and doc["regions"]["safe"]["x"] == [-0.06, 0.06]
    assert doc["regions"]["safe"]["x_dot"] == ["-inf", "inf"] and doc["validate"]["all_inside"] is True
    assert "mean_gap" in doc["history"][-1] and doc["stats"]["abstraction"] == "tree"
    policy = str(POLICIES / "cartpole.json")
    assert main(["abstract", "cartpole-mosaic", "--policy", policy, "--init", "z=0:1"]) == 1
    assert main(["abstract", "cartpole-mosaic", "--policy", policy, "--validate", "-1"]) == 1


@pytest.mark.parametrize(
    ("sizes", "act"), [([4, 64, 64, 2], "relu"), ([2, 16, 16, 16, 3], "tanh"), ([3, 8, 2], "relu")]
)
def test_folded_crown_pass_equals_the_per_box_pass(sizes: list[int], act: str) -> None:
    net = Network.random(sizes, act, seed=1)
    rng = np.random.default_rng(0)
    c, w = rng.normal(size=(50, sizes[0])), rng.uniform(0, 0.5, size=(50, sizes[0]))
    lo, hi = torch.as_tensor(c - w), torch.as_tensor(c + w)
    spec = torch.as_tensor(bounds.pairwise_spec(sizes[-1])[0])
    interval = bounds._ibp_layers(net.layers, lo, hi)
    relax = {}
    for i, (kind, _, _) in enumerate(net.layers):
        if kind != "linear":
            pl, pu = bounds._backward(net.layers[:i], relax, lo, hi, None)
            relax[i] = bounds._relaxation(kind, torch.maximum(pl, interval[i][0]), torch.minimum(pu, interval[i][1]))
    folded = bounds._backward(net.layers, relax, lo, hi, spec)
    per_box = bounds._backward(net.layers, relax, lo, hi, spec.expand(50, *spec.shape))  # 3-D: no folding
    for f, p in zip(folded, per_box, strict=True):
        assert torch.allclose(f, p, rtol=0, atol=1e-12)
