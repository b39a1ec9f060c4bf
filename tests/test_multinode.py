"""The Ray driver on a real multi-node cluster on this host (three raylets): the batches cross between nodes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from distmc.api import verify

ray = pytest.importorskip("ray", reason="the Ray driver needs ray")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
from local_cluster import start  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "distmc" / "examples"
EXAMPLE = EXAMPLES / "gridworld.prism"
POLICY = dict(policy=str(EXAMPLES / "gridworld_policy.pt"), interface=EXAMPLES / "gridworld_policy.json")


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    c = start(nodes=3)
    try:
        yield c.address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


def test_three_nodes_identical_model(cluster: str) -> None:
    ref = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=5", **POLICY, keep_model=True)
    assert isinstance(ref, tuple)
    got = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=5", **POLICY, workers=3, address=cluster,
                 keep_model=True)
    assert isinstance(got, tuple)
    (r0, m0), (r, m) = ref, got
    assert r.driver == "ray"
    assert len({w["node"] for w in r.worker_stats}) == 3  # one actor per node: batches crossed between raylets
    assert (r.states, r.transitions, r.result) == (r0.states, r0.transitions, r0.result)
    for f in ("row_offsets", "targets", "prob", "keys"):
        assert np.array_equal(getattr(m, f), getattr(m0, f))
