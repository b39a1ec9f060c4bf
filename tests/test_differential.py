"""Monolithic mode against Storm's own property-driven builder and checker: states, transitions, values."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from distmc.api import verify
from distmc.model.program import load_model
from tests.conftest import SHARED_MODELS, STORM_FILES
from tests.reference import storm_reference

STORM_CASES = [
    ("dtmc/die.pm", None),
    ("dtmc/brp-16-2.pm", None),
    ("dtmc/crowds-5-5.pm", None),
    ("dtmc/leader-3-5.pm", None),
    ("dtmc/nand-5-2.pm", None),
    ("mdp/coin2-2.nm", None),
    ("mdp/csma2-2.nm", None),
    ("mdp/firewire.nm", "delay=3,fast=0.5"),
    ("mdp/leader3.nm", None),
    ("mdp/maze_2.nm", None),
    ("mdp/slipgrid.nm", None),
    ("mdp/two_dice.nm", None),
    ("mdp/wlan0-2-2.nm", None),
    ("mdp/tiny_rewards.nm", None),
    ("mdp/die_c1.nm", None),
    ("mdp/SmallPrismTest.nm", None),
    ("mdp/multiobjective1.nm", None),
]
COOLMC_CASES = [
    ("avoid.prism", "xMax=2,yMax=2,slickness=0.1"),
    ("freeway.prism", None),
    ("crazy_climber.prism", None),
    ("transporter.prism", "MAX_JOBS=2,MAX_FUEL=10"),
    ("frozen_lake.prism", "control=0.333,start_position=0"),
    ("stock_market.prism", None),
    ("cleaning_system.prism", None),
    ("compressed_dummy.prism", None),
    ("csma.2-2.v1.prism", None),
    ("resource_gathering.prism", "GOLD_TO_COLLECT=2,GEM_TO_COLLECT=2,B=2"),
    ("ski2.prism", None),
    ("transporter_with_rewards.prism", "MAX_JOBS=2,MAX_FUEL=10"),
    ("ttt.prism", None),
    ("zeroconf.prism", "N=20,K=2,reset=true"),
    ("pacman.prism", "MAXSTEPS=5"),
]
# Left out, too large for a unit test on 2 cores (they belong in benchmarks): pokemon.prism (over 3 M states and
# 78 M transitions by depth 7) and scheduling_task.prism (over 320 k states and 34 M transitions by depth 5).


def close(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return close(a["min"], b["min"]) and close(a["max"], b["max"])
    assert isinstance(a, float) and isinstance(b, float)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-9


def properties_for(path: Path, constants: str | None) -> list[str]:
    """Unbounded and bounded reachability of the model's labels, and a reward query when it has rewards."""
    m = load_model(path, constants)
    labels = list(m.labels)
    if labels:
        props = [f'P=? [F "{labels[0]}"]', f'P=? [F<=8 "{labels[-1]}"]']
        if len(labels) > 1:
            props.append(f'P=? [!"{labels[-1]}" U "{labels[0]}"]')
    else:
        v = m.variables[0]
        props = [f"P=? [F {v.name}={v.hi}]", f"P=? [F<=8 {v.name}={v.hi}]"]
    if m.rewards:
        r = m.rewards[0].name
        head = f'R{{"{r}"}}' if r else "R"
        if labels:
            props.append(f'{head}=? [F "{labels[0]}"]')
        props.append(f"{head}=? [C<=5]")
    return props


def _cases() -> list[tuple[Path, str | None]]:
    out = [(STORM_FILES / f, c) for f, c in STORM_CASES]
    out += [(SHARED_MODELS / f, c) for f, c in COOLMC_CASES]
    return out


@pytest.mark.parametrize(("path", "constants"), _cases(), ids=lambda x: Path(x).name if isinstance(x, Path) else str(x))
def test_monolithic_matches_storm(path: Path, constants: str | None) -> None:
    if not path.is_file():
        pytest.skip(f"reference model {path} not present (../shared/models/coolmc is only beside a checkout)")
    for prop in properties_for(path, constants):
        ref = storm_reference(path, constants, prop)
        got = verify(path, prop, constants=constants, mode="monolithic")
        assert (got.states, got.transitions, got.choices) == (ref["states"], ref["transitions"], ref["choices"]), prop
        assert close(got.result, ref["result"]), (prop, got.result, ref["result"])
