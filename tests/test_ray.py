"""The Ray driver against the in-process driver: the identical model (state for state) for any number of workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from distmc.api import verify
from distmc.cli import main
from tests.conftest import SHARED_MODELS, STORM_FILES

ray = pytest.importorskip("ray", reason="the Ray driver needs ray")

EXAMPLE = Path(__file__).resolve().parents[1] / "distmc" / "examples" / "gridworld.prism"
CASES = [
    (EXAMPLE, "N=5", 'P=? [F "crash"]'),
    (EXAMPLE, "N=4", 'R{"steps"}=? [F "goal"]'),
    (STORM_FILES / "dtmc" / "crowds-5-5.pm", None, 'P=? [F "observe0Greater1"]'),
    (STORM_FILES / "mdp" / "coin2-2.nm", None, 'P=? [F "finished"]'),
    (SHARED_MODELS / "avoid.prism", "xMax=3,yMax=3,slickness=0.1", "P=? [F<=20 COLLISION=true]"),
    (SHARED_MODELS / "crazy_climber.prism", None, "P=? [F COLLISION=true]"),  # two-word keys
]
IDS = ["grid", "grid-reward", "crowds", "coin", "avoid", "climber"]
FIELDS = ("row_groups", "row_offsets", "targets", "prob", "row_action", "keys", "initial")


pytestmark = pytest.mark.usefixtures("local_ray")  # conftest.py: one local Ray for the module


_REFERENCE: dict[tuple[str, str], tuple[Any, Any]] = {}  # (case, mode) -> the in-process run, once a module


def _reference(case: str, path: Path, constants: str | None, prop: str, mode: str) -> tuple[Any, Any]:
    if (case, mode) not in _REFERENCE:
        ref = verify(path, prop, constants=constants, mode=mode, keep_model=True)
        assert isinstance(ref, tuple)
        _REFERENCE[case, mode] = ref
    return _REFERENCE[case, mode]


# The worker count varies slowest (the last decorator): the 18 runs of one count take the actors the run before kept,
# and only a change of count starts new ones (a Ray actor's start is most of a small run's time).
@pytest.mark.parametrize("mode", ["stochastic", "deterministic", "monolithic"])
@pytest.mark.parametrize(
    ("case", "path", "constants", "prop"), [(i, *c) for i, c in zip(IDS, CASES, strict=True)], ids=IDS
)
@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_ray_driver_builds_the_identical_model(
    workers: int, case: str, path: Path, constants: str | None, prop: str, mode: str
) -> None:
    if not path.is_file():
        pytest.skip(f"reference model {path} not present (../shared/models/coolmc is only beside a checkout)")
    r0, m0 = _reference(case, path, constants, prop, mode)
    got = verify(path, prop, constants=constants, mode=mode, workers=workers, driver="ray", keep_model=True)
    assert isinstance(got, tuple)
    r, m = got
    assert (r.states, r.transitions, r.choices, r.depth) == (r0.states, r0.transitions, r0.choices, r0.depth)
    assert r.result == r0.result  # the same model, state for state, gives the same value to the last bit
    for f in FIELDS:
        assert np.array_equal(getattr(m, f), getattr(m0, f)), (workers, f)
    assert sum(w["states"] for w in r.worker_stats) == r.states


def test_cli_workers_json(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert (
        main(["run", "example", "--const", "N=4", "--prop", 'P=? [F "crash"]', "--workers", "2", "--json", str(out)])
        == 0
    )
    rep = json.loads(out.read_text())
    assert rep["workers"] == 2 and rep["driver"] == "ray" and len(rep["worker_stats"]) == 2
    ws = rep["worker_stats"][0]
    assert {"states", "batches", "bytes_sent", "expand_s", "lookup_s", "store_s", "exchange_s", "idle_s"} <= set(ws)
    busy = ws["expand_s"] + ws["lookup_s"] + ws["store_s"] + ws["exchange_s"] + ws["checkpoint_s"] + ws["idle_s"]
    assert ws["exchange_s"] > 0 and busy >= rep["timings"]["levels_s"] - 1e-9  # idle is what the levels leave


def test_kept_workers_rebuild_a_changed_job(tmp_path: Path) -> None:
    """The same job twice on kept actors reuses their parts (same counts); an edited model file is parsed again."""
    import os
    import shutil

    examples = EXAMPLE.parent
    policy = dict(policy=str(examples / "gridworld_policy.pt"), interface=examples / "gridworld_policy.json")
    model = tmp_path / "grid.prism"
    shutil.copy(EXAMPLE, model)
    prop = 'P=? [F "crash"]'
    pids, calls = None, 0
    for edit in (False, False, True):
        if edit:
            model.write_text(model.read_text().replace("slip = 0.1", "slip = 0.2"))
            os.utime(model, ns=(1, 1))  # same size, other time stamp: the kept actors must parse it again
        ref = verify(model, prop, constants="N=5", **policy, keep_model=True)
        got = verify(model, prop, constants="N=5", **policy, workers=2, driver="ray", keep_model=True)
        assert isinstance(ref, tuple) and isinstance(got, tuple)
        (r0, m0), (r, m) = ref, got
        assert (r.states, r.transitions, r.result, r.policy_states) == (
            r0.states,
            r0.transitions,
            r0.result,
            r0.policy_states,
        )
        for f in FIELDS:
            assert np.array_equal(getattr(m, f), getattr(m0, f)), f
        if pids is not None:  # kept actors, and their counts are this run's only
            assert [w["pid"] for w in r.worker_stats] == pids and r.policy_calls == calls
        pids, calls = [w["pid"] for w in r.worker_stats], r.policy_calls


def test_kept_workers_run_the_next_jobs() -> None:
    """A finished run's actors are kept, emptied, and explore the next run's job (any model) to the identical model;
    a failed run's actors end, and so do they with ``release_workers``."""
    from distmc.distributed import release_workers
    from distmc.errors import ResourceLimitError

    release_workers()
    pids: list[int] | None = None
    for path, constants, prop in CASES:
        if not path.is_file():
            continue
        ref = verify(path, prop, constants=constants, keep_model=True)
        got = verify(path, prop, constants=constants, workers=2, driver="ray", keep_model=True)
        assert isinstance(ref, tuple) and isinstance(got, tuple)
        (r0, m0), (r, m) = ref, got
        assert (r.states, r.transitions, r.result) == (r0.states, r0.transitions, r0.result)
        for f in FIELDS:
            assert np.array_equal(getattr(m, f), getattr(m0, f)), (path, f)
        now = [w["pid"] for w in r.worker_stats]
        assert pids is None or now == pids  # the same processes: kept, not started again
        pids = now
    with pytest.raises(ResourceLimitError):  # a worker passes its memory share inside a level: the run fails
        verify(EXAMPLE, 'P=? [F "crash"]', constants="N=7", workers=2, driver="ray", max_memory="1M")
    r = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", workers=2, driver="ray")
    assert pids is not None and not set(pids) & {w["pid"] for w in r.worker_stats}
    pids = [w["pid"] for w in r.worker_stats]
    release_workers()
    r = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", workers=2, driver="ray")
    assert not set(pids) & {w["pid"] for w in r.worker_stats}


@pytest.mark.parametrize(("workers", "servers"), [(2, 1), (3, 2)])
def test_policy_servers_build_the_identical_model(workers: int, servers: int) -> None:
    """Workers whose policy is evaluated by policy-server actors build the model a replica per worker builds."""
    examples = EXAMPLE.parent
    kw = dict(
        constants="N=6",
        policy=str(examples / "gridworld_policy.pt"),
        interface=examples / "gridworld_policy.json",
        keep_model=True,
    )
    ref = verify(EXAMPLE, 'P=? [F "crash"]', **kw)
    got = verify(EXAMPLE, 'P=? [F "crash"]', workers=workers, policy_servers=servers, **kw)
    assert isinstance(ref, tuple) and isinstance(got, tuple)
    (r0, m0), (r, m) = ref, got
    assert r.driver == "ray" and (r.states, r.transitions, r.policy_states) == (
        r0.states,
        r0.transitions,
        r0.policy_states,
    )
    assert r.result == r0.result
    for f in FIELDS:
        assert np.array_equal(getattr(m, f), getattr(m0, f)), f


def test_policy_servers_are_kept_for_the_same_job() -> None:
    from distmc.distributed import pool as ray_driver

    examples = EXAMPLE.parent
    kw = dict(
        constants="N=4",
        policy=str(examples / "gridworld_policy.pt"),
        interface=examples / "gridworld_policy.json",
        workers=2,
        policy_servers=1,
    )
    ids = []
    for prop in ('P=? [F "crash"]', 'P=? [F "crash"]', 'P=? [F "goal"]'):
        r = verify(EXAMPLE, prop, **kw)
        assert r.result is not None
        ids.append([a._actor_id for a in ray_driver._kept["servers"][1]])
    assert ids[0] == ids[1] and ids[1] != ids[2]  # the same job reuses its servers, another job gets new ones
    ray_driver.release_workers()
    assert "servers" not in ray_driver._kept and "run" not in ray_driver._kept


def test_ray_options_are_checked() -> None:
    from distmc.errors import DistmcError

    with pytest.raises(DistmcError, match="policy servers serve Ray workers"):
        verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", driver="local", policy_servers=1)
    with pytest.raises(DistmcError, match="--policy-servers must be 0 or more"):
        verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", workers=2, policy_servers=-1)
    with pytest.raises(DistmcError, match="--threads-per-worker must be at least 1"):
        verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", workers=2, threads_per_worker=0)
    r = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", workers=2, threads_per_worker=1)
    assert r.result == verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4").result
