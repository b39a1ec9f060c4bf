"""The Ray driver on a real multi-node cluster on this host (three raylets): the batches cross between nodes."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
def cluster() -> Iterator[Any]:
    from distmc.distributed import release_workers

    release_workers()
    if ray.is_initialized():  # the local Ray the other modules share (tests/conftest.py): this module has its own
        ray.shutdown()
    c = start(nodes=3)
    try:
        yield c
    finally:
        release_workers()
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


def test_three_nodes_identical_model(cluster: Any) -> None:
    ref = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=5", **POLICY, keep_model=True)
    assert isinstance(ref, tuple)
    got = verify(
        EXAMPLE, 'P=? [F "crash"]', constants="N=5", **POLICY, workers=3, address=cluster.address, keep_model=True
    )
    assert isinstance(got, tuple)
    (r0, m0), (r, m) = ref, got
    assert r.driver == "ray"
    assert len({w["node"] for w in r.worker_stats}) == 3  # one actor per node: batches crossed between raylets
    assert (r.states, r.transitions, r.result) == (r0.states, r0.transitions, r0.result)
    for f in ("row_offsets", "targets", "prob", "keys"):
        assert np.array_equal(getattr(m, f), getattr(m0, f))


@pytest.mark.slow  # 32 s; test_three_nodes_identical_model stays
def test_three_nodes_distributed_check(cluster: Any) -> None:
    """The check on actors on three nodes: the in-process value, and no row in the driver."""
    from distmc.explore.limits import rss_bytes

    for prop in ('P=? [F<=30 "crash"]', 'P=? [!"goal" U "crash"]'):
        local = verify(EXAMPLE, prop, constants="N=5", **POLICY, checker="native")
        r = verify(EXAMPLE, prop, constants="N=5", **POLICY, workers=3, address=cluster.address, checker="distributed")
        assert r.checker == "distributed"  # type: ignore[union-attr]
        assert len({w["node"] for w in r.worker_stats}) == 3  # type: ignore[union-attr]
        assert (r.states, r.transitions) == (local.states, local.transitions)  # type: ignore[union-attr]
        assert abs(r.result - local.result) <= 1e-12  # type: ignore[union-attr, operator]
    # The driver's memory does not grow with the transitions: sampled at every level and every poll of the check,
    # it stays well below what the rows alone would take in it (16 B a transition).
    base = rss_bytes()
    peak = [base]

    def sample(info: dict) -> None:
        peak[0] = max(peak[0], rss_bytes())

    big = verify(
        EXAMPLE,
        'P=? [F<=50 "crash"]',
        constants="N=40",
        workers=3,
        address=cluster.address,
        checker="distributed",
        progress=sample,
    )
    rows = 16 * big.transitions  # type: ignore[union-attr]
    assert big.transitions > 30_000_000  # type: ignore[union-attr]
    assert peak[0] - base < rows / 8, (peak[0] - base, rows)  # about 20 MB of Ray's own, against 480 MB of rows


@pytest.mark.slow  # 15 s
def test_worker_process_killed_and_node_lost_on_a_cluster(cluster: Any, tmp_path: Path) -> None:
    """Worker faults on a real 3-node cluster: one worker's process is killed, then a whole node is removed.

    The last test of the module: it leaves the cluster a node short.
    """
    c = cluster
    ref = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=6", **POLICY, keep_model=True)
    assert isinstance(ref, tuple)
    (r0, m0), events = ref, []
    head = c.head_node.node_id

    def fault(info: dict) -> None:
        if info["depth"] == 2 and not events:  # kill worker 1's process
            os.kill(info["worker_pids"][1], signal.SIGKILL)
            events.append("kill")
        elif info["depth"] == 5 and len(events) == 1:  # lose a node that runs a worker (not the head)
            node = next(n for n in c.worker_nodes if n.node_id in info["worker_nodes"] and n.node_id != head)
            c.remove_node(node)
            events.append("node")

    got = verify(
        EXAMPLE,
        'P=? [F "crash"]',
        constants="N=6",
        **POLICY,
        workers=3,
        address=c.address,
        checkpoint_dir=tmp_path / "ck",
        progress=fault,
        keep_model=True,
    )
    assert isinstance(got, tuple)
    r, m = got
    assert events == ["kill", "node"] and r.restarts == 2
    assert (r.states, r.transitions, r.result) == (r0.states, r0.transitions, r0.result)
    for f in ("row_offsets", "targets", "prob", "keys"):
        assert np.array_equal(getattr(m, f), getattr(m0, f))
