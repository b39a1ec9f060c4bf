"""Stochastic and deterministic networks against Storm's own mask builder (the callback approach) on the same net.

Storm's explicit builder asks the network which actions to keep (``benchmarks/callback_baseline.py``), the kept
choices are weighted by pi(a|s) and merged into a DTMC; distmc must build the same DTMC (states, transitions) and
find the same value. The network evaluates in float64 so that a batched and a one-state forward pass agree to the
last bit (in float32 they differ in the last bit, by design of the matrix kernels).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks.callback_baseline import network_for, run_callback, run_distmc, save_network
from tests.conftest import SHARED_MODELS

CASES = [
    (SHARED_MODELS / "avoid.prism", "xMax=2,yMax=2,slickness=0.1", "P=? [F<=20 COLLISION=true]"),
    (SHARED_MODELS / "avoid.prism", "xMax=2,yMax=3,slickness=0.3", "P=? [F COLLISION=true]"),
    (SHARED_MODELS / "crazy_climber.prism", None, "P=? [F<=10 COLLISION=true]"),
]


@pytest.mark.parametrize("mode", ["stochastic", "deterministic"])
@pytest.mark.parametrize(
    ("path", "constants", "prop"),
    CASES[:2] + [pytest.param(*CASES[2], marks=pytest.mark.slow)],
    ids=["avoid-bounded", "avoid-slick", "climber"],
)
def test_distmc_equals_storm_mask_builder(
    tmp_path: Path, path: Path, constants: str | None, prop: str, mode: str
) -> None:
    if not path.is_file():
        pytest.skip(f"reference model {path} not present (../shared/models/coolmc is only beside a checkout)")
    net, features, actions = network_for(path, constants, hidden=16, seed=3, dtype=torch.float64)
    policy, interface = save_network(net, features, actions, tmp_path)
    ref = run_callback(path, constants, prop, net, mode, features, actions)
    got = run_distmc(path, constants, prop, policy, interface, mode)
    assert (got["states"], got["transitions"]) == (ref["states"], ref["transitions"])
    assert abs(got["result"] - ref["result"]) <= 1e-9
