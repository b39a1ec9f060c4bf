"""Several properties, one exploration, on 2 Ray workers: the in-process run's model and every property's value."""

from __future__ import annotations

from pathlib import Path

import pytest

from distmc.api import verify

pytest.importorskip("ray", reason="the Ray driver needs ray")
pytestmark = pytest.mark.usefixtures("local_ray")

EXAMPLE = Path(__file__).resolve().parents[1] / "distmc" / "examples" / "gridworld.prism"
PROPS = ['P=? [F "crash"]', 'P>=0.5 [F<=10 "goal"]', 'R{"steps"}=? [F "goal"]', "P=? [X x=1]", 'S=? ["goal"]']


def test_several_properties_on_two_workers() -> None:
    local = verify(EXAMPLE, None, props=PROPS, constants="N=4")
    got = verify(EXAMPLE, None, props=PROPS, constants="N=4", workers=2, driver="ray")
    assert (got.states, got.transitions) == (local.states, local.transitions)  # type: ignore[union-attr]
    assert got.single_states == local.single_states  # type: ignore[union-attr]
    for a, b in zip(got.results, local.results, strict=True):  # type: ignore[union-attr]
        assert (a["property"], a["value"], a.get("truth"), a["bounds"]) == (
            b["property"],
            b["value"],
            b.get("truth"),
            b["bounds"],
        )
