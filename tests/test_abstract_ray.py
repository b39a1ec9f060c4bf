"""The abstract MDP explored by distmc's Ray driver gives the in-process bounds, box for box."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from distmc.abstract.check import check_bounds
from distmc.abstract.envs import get_env
from distmc.abstract.faults import parse_fault
from distmc.abstract.mdp import BoxExpander
from distmc.abstract.network import load_network
from distmc.abstract.refine import analyse
from distmc.abstract.split import Splitter

ray = pytest.importorskip("ray", reason="the Ray driver needs ray")
POLICIES = Path(__file__).resolve().parents[1] / "benchmarks" / "policies"


pytestmark = pytest.mark.usefixtures("local_ray")  # conftest.py: one local Ray for the module


def test_ray_driver_gives_the_in_process_bounds() -> None:
    env, net = get_env("pendulum"), load_network(POLICIES / "pendulum.json")
    faults = parse_fault("fail:0.1,sticky:0.2")
    a = env.arrays()
    mid = (a["init_lo"] + a["init_hi"]) / 2
    lo = np.array([a["init_lo"], mid, [a["init_lo"][0], mid[1]]])
    hi = np.array([mid, a["init_hi"], [mid[0], a["init_hi"][1]]])
    with Splitter(net, a["cell"], 3, use_cache=False) as s:  # the actors split without the cache
        local = check_bounds(BoxExpander(env, s, faults), lo, hi, 3)
    with Splitter(net, a["cell"], 3, use_cache=False) as s:
        dist = check_bounds(BoxExpander(env, s, faults), lo, hi, 3, driver="ray", workers=2)
    assert np.allclose(dist.upper, local.upper, atol=1e-12) and np.allclose(dist.lower, local.lower, atol=1e-12)
    assert dist.stats["states"] >= local.stats["states"]  # the Ray driver explores to the fixpoint
    assert (local.upper > local.lower).any()


def test_analyse_on_ray_refines() -> None:  # the tree, by default
    env, net = get_env("pendulum"), load_network(POLICIES / "pendulum.json")
    res = analyse(env, net, parse_fault("sticky:0.2"), horizon=2, refine=2, driver="ray", workers=2)
    assert len(res.history) == 3 and res.stats["driver"] == "ray"
    assert res.history[-1]["safe_fraction"] >= res.history[0]["safe_fraction"]


@pytest.mark.slow  # 12 s; test_ray_driver_gives_the_in_process_bounds stays
def test_tree_on_ray_actors_gives_the_in_process_bounds() -> None:
    env, net = get_env("cartpole-mosaic"), load_network(POLICIES / "cartpole.json")
    faults = parse_fault("sticky:0.2")
    local = analyse(env, net, faults, horizon=4, refine=5, workers=1)
    dist = analyse(env, net, faults, horizon=4, refine=5, driver="ray", workers=2)
    assert np.array_equal(local.lo, dist.lo) and np.array_equal(local.hi, dist.hi)
    assert np.array_equal(local.upper, dist.upper) and np.array_equal(local.lower, dist.lower)
    assert dist.stats["abstraction"] == "tree" and dist.stats["abstract_states"] == local.stats["abstract_states"]
    assert (local.upper < 1).any()
    lattice = analyse(
        get_env("pendulum"),
        load_network(POLICIES / "pendulum.json"),
        faults,
        horizon=2,
        refine=1,
        driver="ray",
        workers=2,
        abstraction="lattice",
    )
    assert lattice.stats["abstraction"] == "lattice" and len(lattice.history) == 2
