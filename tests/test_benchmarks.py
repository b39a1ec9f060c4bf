"""The project's benchmark environments and trained policies (``benchmarks/envs/``, ``benchmarks/policies/``).

* every environment parses in Storm, and distmc's monolithic check matches Storm's own builder and checker on every
  property of the manifest (states, transitions, [min, max]);
* every shipped policy has the paper's shape and its training metadata;
* Monte Carlo: rolling each shipped policy out (its action distribution, masked and renormalised as distmc does,
  sampled in distmc's kernel) estimates the manifest's bounded property; the value distmc verifies lies in the
  estimate's Wilson interval, in stochastic and deterministic mode. A policy other than the verified one lands
  outside the interval (the check can fail);
* every distinct state is sent through the network exactly once, in batches;
* ``benchmarks/paper.py`` replaces its own section of RESULTS.md and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.paper import BEGIN, END, write_results
from benchmarks.suite import BenchEnv, bounded_reach, load_envs, monte_carlo, wilson_interval
from distmc.api import verify
from distmc.errors import DistmcError
from distmc.explore.local import explore_local
from distmc.pipeline import Job
from distmc.policy import load_policy
from tests.reference import storm_reference

ENVS = load_envs()
EPISODES = 1500
ALPHA = 1e-4  # the rollouts are seeded, so the check is deterministic; alpha sets how wide the interval is


def test_manifest_lists_the_papers_environments_and_more() -> None:
    assert {"freeway", "avoid", "crazy_climber"} <= set(ENVS)
    assert len(ENVS) >= 5
    for e in ENVS.values():
        k, label = bounded_reach(e.monte_carlo)
        assert k > 0 and e.monte_carlo in e.properties
        assert label in e.load_model().labels


def test_manifest_errors_name_the_table(tmp_path: Path) -> None:
    bad = tmp_path / "envs.toml"
    bad.write_text('[x]\nfile = "nope.prism"\n')
    with pytest.raises(DistmcError, match=r"\[x\]"):
        load_envs(bad)
    with pytest.raises(DistmcError, match="not of the form"):
        bounded_reach('P=? [F "crash"]')


#: Environments whose full MDP takes seconds to build twice (Storm and distmc): marked slow.
LARGE = {"avoid", "crazy_climber"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in LARGE else n for n in ENVS])
def test_monolithic_matches_storm(name: str) -> None:
    e = ENVS[name]
    for prop in e.properties:
        ref = storm_reference(e.file, e.constants, prop)
        r = verify(e.file, prop, constants=e.constants, mode="monolithic")
        assert not isinstance(r, tuple)
        assert (r.states, r.transitions) == (ref["states"], ref["transitions"]), prop
        assert isinstance(r.result, dict)
        for side in ("min", "max"):
            assert r.result[side] == pytest.approx(ref["result"][side], abs=1e-9), (prop, side)


@pytest.mark.parametrize("name", list(ENVS))
def test_shipped_policy_has_the_papers_shape_and_metadata(name: str) -> None:
    e = ENVS[name]
    meta = json.loads(e.meta.read_text())
    assert meta["steps"] > 0 and isinstance(meta["seed"], int) and isinstance(meta["mean_reward"], float)
    assert meta["net_arch"]["pi"] == [e.hidden, e.hidden]
    net = torch.jit.load(str(e.policy))
    shapes = [tuple(p.shape) for p in net.parameters() if p.dim() == 2]
    model = e.load_model()
    spec = json.loads(e.interface.read_text())
    assert shapes == [(e.hidden, len(spec["features"])), (e.hidden, e.hidden), (len(spec["actions"]), e.hidden)]
    assert spec["features"] == [v.name for v in model.variables]


def _verified(e: BenchEnv, mode: str) -> float:
    r = verify(e.file, e.monte_carlo, constants=e.constants, policy=str(e.policy), interface=e.interface, mode=mode)
    assert not isinstance(r, tuple) and isinstance(r.result, float)
    return r.result


@pytest.mark.parametrize("mode", ["stochastic", "deterministic"])
@pytest.mark.parametrize("name", list(ENVS))
def test_monte_carlo_agrees_with_the_verified_value(name: str, mode: str) -> None:
    e = ENVS[name]
    model = e.load_model()
    policy = load_policy(str(e.policy), model, e.interface)
    hits, n = monte_carlo(e, policy, mode, EPISODES, seed=7)
    lo, hi = wilson_interval(hits, n, ALPHA)
    value = _verified(e, mode)
    assert 0.01 < value < 0.99, f"{name} {mode}: {value} is too close to 0 or 1 for the check to mean much"
    assert lo <= value <= hi, f"{name} {mode}: verified {value}, Monte Carlo {hits}/{n} -> [{lo}, {hi}]"


def test_monte_carlo_tells_policies_apart() -> None:
    """The uniform policy's rollouts do not match the trained policy's verified value on some environment."""
    outside = []
    for name in ("freeway", "lake"):
        e = ENVS[name]
        hits, n = monte_carlo(e, None, "stochastic", EPISODES, seed=7)
        lo, hi = wilson_interval(hits, n, ALPHA)
        value = _verified(e, "stochastic")
        outside.append(not lo <= value <= hi)
    assert any(outside)


def test_wilson_interval() -> None:
    lo, hi = wilson_interval(50, 100, 0.05)
    assert lo == pytest.approx(0.4038, abs=1e-3) and hi == pytest.approx(0.5962, abs=1e-3)
    assert wilson_interval(0, 10, 0.05)[0] == pytest.approx(0.0, abs=1e-12)


def test_each_distinct_state_goes_through_the_network_once() -> None:
    e = ENVS["freeway"]
    parts = Job(str(e.file), 'P=? [F<=20 "crash"]', e.constants, str(e.policy), str(e.interface), "stochastic").build()
    assert parts.expander is not None and parts.policy is not None
    pol = parts.policy
    seen: list[np.ndarray] = []
    forward = pol.forward

    def recording(states: np.ndarray) -> np.ndarray:
        seen.append(states.copy())
        return forward(states)

    pol.forward = recording  # type: ignore[method-assign]
    explored = explore_local(parts.expander, parts.codec.pack(parts.model.initial_states))
    sent = np.concatenate(seen)
    expanded = int((~explored.loop).sum())  # every state that is neither terminal nor a deadlock
    assert sent.shape[0] == expanded == int(explored.stats["policy_states"])
    assert np.unique(sent, axis=0).shape[0] == sent.shape[0]  # no state twice
    assert len(seen) <= int(explored.stats["depth"]) + 1  # batches: at most one call per BFS level here


def test_paper_results_section_is_replaced_in_place(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Other section\n\nkept\n")
    row = {
        "env": "e",
        "origin": "project",
        "property": 'P=? [F "a"]',
        "method": "distmc stoch",
        "hidden": 64,
        "constants": "",
        "states": 3,
        "transitions": 4,
        "result": 0.5,
        "seconds": 0.1,
    }
    cb = {**row, "method": "callback stoch", "seconds": 2.0}
    write_results([row, cb], "cmd one", 10.0, results)
    write_results([row, {**cb, "timeout": True}], "cmd two", 10.0, results)
    text = results.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert "kept" in text and "cmd two" in text and "cmd one" not in text and "timeout" in text
    write_results([row, cb], "cmd three", 10.0, results)
    assert "| 20.0x |" in results.read_text()
