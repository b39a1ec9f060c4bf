"""Several properties, one exploration, on 2 Ray workers: the in-process run's model and every property's value."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from distmc.api import verify

ray = pytest.importorskip("ray", reason="the Ray driver needs ray")

EXAMPLE = Path(__file__).resolve().parents[1] / "distmc" / "examples" / "gridworld.prism"
PROPS = ['P=? [F "crash"]', 'P>=0.5 [F<=10 "goal"]', 'R{"steps"}=? [F "goal"]', "P=? [X x=1]", 'S=? ["goal"]']


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_several_properties_on_two_workers() -> None:
    local = verify(EXAMPLE, None, props=PROPS, constants="N=4")
    got = verify(EXAMPLE, None, props=PROPS, constants="N=4", workers=2, driver="ray")
    assert (got.states, got.transitions) == (local.states, local.transitions)  # type: ignore[union-attr]
    assert got.single_states == local.single_states  # type: ignore[union-attr]
    for a, b in zip(got.results, local.results, strict=True):  # type: ignore[union-attr]
        assert (a["property"], a["value"], a.get("truth"), a["bounds"]) == (b["property"], b["value"],
                                                                            b.get("truth"), b["bounds"])
