"""The distributed checker (:mod:`distmc.check.distributed`): rows stay on the workers, the check runs there.

Two levels:
- in-process, W workers as threads with mailboxes (no Ray): every state's value, lower and upper bound equal the
  native checker's bit for bit, for W = 1..4, on every property form the native checker takes;
- on Ray (``--checker distributed``, 2 and 3 workers): the value equals the native checker's (1e-12) and Storm's
  (1e-9 relative), the report says ``distributed``, and the driver holds no row.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from distmc.api import verify
from distmc.assemble.reducer import assemble
from distmc.check import channels as channels_mod
from distmc.check.channels import SHM_DIR, open_channels
from distmc.check.distributed import Mailbox, WorkerEngine
from distmc.check.kernels import compact_probabilities, expand_probabilities
from distmc.check.native import LocalEngine, matrix_of, values_of
from distmc.check.worker_part import build_part
from distmc.cli import main
from distmc.distributed import owner_of
from distmc.errors import DistmcError, PropertyError, ResourceLimitError
from distmc.explore.limits import LimitCheck, Limits
from distmc.explore.local import explore_local
from distmc.pipeline import Job
from tests.conftest import SHARED_MODELS, STORM_FILES

EXAMPLES = Path(__file__).resolve().parents[1] / "distmc" / "examples"
EXAMPLE = EXAMPLES / "gridworld.prism"
CHAIN = Path(__file__).resolve().parent / "data" / "gym" / "chain.prism"
POLICY = {"policy": str(EXAMPLES / "gridworld_policy.pt"), "interface": str(EXAMPLES / "gridworld_policy.json")}

CASES = [
    (EXAMPLE, "N=5", 'P=? [F "crash"]', POLICY),
    (EXAMPLE, "N=5", 'P=? [F<=12 "crash"]', POLICY),
    (EXAMPLE, "N=5", 'P=? [!"goal" U "crash"]', {}),
    (EXAMPLE, "N=5", 'P=? [x < 3 U<=20 "goal"]', {}),
    (EXAMPLE, "N=5", "P=? [F x=2 & y=1]", {}),
    (EXAMPLE, "N=5", 'R=? [F "crash" | "goal"]', POLICY),
    (EXAMPLE, "N=5", 'R=? [F "goal"]', {}),  # infinite from states that may crash
    (EXAMPLE, "N=5", "R=? [C<=10]", POLICY),
    (STORM_FILES / "dtmc/brp-16-2.pm", None, "P=? [F s=5]", {}),
    (STORM_FILES / "dtmc/crowds-5-5.pm", None, "P=? [F<=20 observe0>1]", {}),
    (STORM_FILES / "dtmc/die.pm", None, 'R=? [F "done"]', {}),
    (CHAIN, None, 'R=? [F "done"]', {}),
    (CHAIN, None, "R=? [I=2]", {}),
]


class _Peer:
    """A stand-in for a Ray actor handle: ``peer.deliver.options(...).remote(key, payload)`` fills a mailbox."""

    def __init__(self, box: Mailbox) -> None:
        self.deliver = self
        self.box = box

    def options(self, **_: Any) -> _Peer:
        return self

    def remote(self, key: tuple[str, int, int], payload: Any) -> None:
        self.box.put(key, payload)


def _explored(model: Path, constants: str | None, prop: str, kw: dict[str, str]) -> tuple[Any, ...]:
    job = Job(str(model), prop, constants, kw.get("policy", "uniform"), kw.get("interface"))
    parts = job.build()
    assert parts.expander is not None
    explored = explore_local(parts.expander, parts.codec.pack(parts.model.initial_states))
    loop, deadlock, rewards = explored.loop.copy(), explored.deadlock.copy(), dict(explored.rewards)
    induced = assemble(explored, parts.model, parts.codec, parts.spec.atoms, parts.reward_names)
    return parts, induced, loop, deadlock, rewards


def _split(
    parts: Any,
    induced: Any,
    loop: np.ndarray,
    deadlock: np.ndarray,
    rewards: dict[str, np.ndarray],
    w: int,
    direct: bool | None = None,
) -> list[Any]:
    """The induced DTMC's rows spread over ``w`` workers by owner, as the Ray actors hold them."""
    owner = owner_of(parts.codec.to_words(induced.keys), w)
    targets, prob = induced.targets, induced.prob
    counts = np.diff(induced.row_offsets)
    out = []
    for r in range(w):
        own = np.flatnonzero(owner == r)
        branch = np.repeat(owner == r, counts)
        # as an actor holds them: int32 targets, a table of the distinct probabilities (every other worker's plain)
        p = compact_probabilities(prob[branch]) if r % 2 == 0 else prob[branch]
        rows = [(own, induced.row_action[own], counts[own], targets[branch].astype(np.int32), p)]
        part = build_part(
            r,
            w,
            own,
            induced.keys[own],
            rows,
            [{k: v[own] for k, v in rewards.items()}],
            [(own, loop[own], deadlock[own])],
            lambda g: owner[g],
            induced.initial.shape[0],
            induced.n_states,
            parts.model,
            parts.codec,
            parts.spec.atoms,
            parts.reward_names,
            direct=direct,
        )
        out.append(part)
    boxes = [Mailbox() for _ in range(w)]
    peers = [_Peer(b) for b in boxes]
    asks = [p.requests() for p in out]
    for o, p in enumerate(out):
        p.serve([asks[s][o] for s in range(w)])
    return [(p, peers, boxes[p.rank]) for p in out]


def _run_threads(
    workers: list[Any], spec: Any, limits: LimitCheck | None = None, shm: bool = False, order: str = "blocks"
) -> list[Any]:
    """Every worker's check as a thread; with ``shm``, values through shared-memory channels (all on one node)."""
    results: list[Any] = [None] * len(workers)
    w = len(workers)
    prefix = f"distmc-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    channels = [
        open_channels(
            prefix,
            p.rank,
            [int(s.shape[0]) for s in p.send],
            [int(p.recv_off[o + 1] - p.recv_off[o]) for o in range(w)],
            ["node"] * w,
        )
        if shm
        else None
        for p, _, _ in workers
    ]

    def one(i: int) -> None:
        part, peers, box = workers[i]
        try:
            engine = WorkerEngine(part, peers, box, limits, channels=channels[i], order=order)
            results[i] = values_of(engine, part, spec)
        except BaseException as exc:  # noqa: BLE001 - reported below
            results[i] = exc
            for _, _, b in workers:
                b.close(f"worker {i} failed")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for c in channels:
        if c is not None:
            c.unlink()
    assert not any(name.startswith(prefix) for name in os.listdir(SHM_DIR)) if os.path.isdir(SHM_DIR) else True
    return results


@pytest.mark.parametrize("order", ["blocks", "levels"])
@pytest.mark.parametrize(("model", "constants", "prop", "kw"), CASES)
def test_workers_give_the_native_checkers_bits(
    model: Path, constants: str | None, prop: str, kw: dict[str, str], order: str
) -> None:
    parts, induced, loop, deadlock, rewards = _explored(model, constants, prop, kw)
    assert induced.kind == "dtmc"
    native = values_of(LocalEngine(matrix_of(induced), None, induced.initial, order=order), induced, parts.spec)
    # both ways of making the columns; values through the mailboxes, or through shared memory (3 workers)
    for w, direct, shm in ((1, None, False), (2, True, False), (3, False, True), (4, None, False)):
        workers = _split(parts, induced, loop, deadlock, rewards, w, direct)
        got = _run_threads(workers, parts.spec, shm=shm, order=order)
        for r in got:
            if isinstance(r, BaseException):
                raise r
        for k in range(3):  # value, lower, upper at every state
            full = np.empty(induced.n_states)
            for (part, _, _), vals in zip(workers, got, strict=True):
                full[part.gids] = vals[k]
            assert np.array_equal(full, native[k]), (w, k, np.abs(full - native[k]).max())


def test_channels_alternate_halves_and_leave_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A block goes into the peer's file, halves in turn; names go, maps stay; short of room: receive only."""
    monkeypatch.setattr(channels_mod, "SHM_DIR", str(tmp_path))
    a = open_channels("t", 0, [0, 3, 2], [0, 2, 0], ["n", "n", "other"])
    b = open_channels("t", 1, [2, 0, 0], [3, 0, 0], ["n", "n", "other"])
    assert a is not None and b is not None and a.out[2] is None  # worker 2 is on another node: Ray
    assert sorted(os.listdir(tmp_path)) == ["t-0-1", "t-1-0"]
    b.attach()
    v = np.arange(10.0)
    notes = [a.write(1, [v, -v], np.array([7, 1, 4])) for _ in range(3)]
    assert [n[1] for n in notes if n is not None] == [0, 1, 0]
    assert b.read(0, notes[2]).tolist() == [[7.0, 1.0, 4.0], [-7.0, -1.0, -4.0]]  # type: ignore[arg-type]
    assert a.write(1, [v, v, v], np.array([0, 1, 2])) is None  # three vectors: through Ray
    a.unlink()
    b.unlink()
    assert os.listdir(tmp_path) == [] and b.read(0, notes[2])[0].tolist() == [7.0, 1.0, 4.0]  # type: ignore[arg-type]
    assert open_channels("t", 0, [0, 3], [0, 2], ["n", "m"]) is None  # no peer on this node
    assert open_channels(None, 0, [0, 3], [0, 2], ["n", "n"]) is None  # the driver said no (DISTMC_SHM=0)

    class Full:
        f_bavail, f_frsize = 1, 4096

    monkeypatch.setattr(channels_mod.os, "statvfs", lambda _: Full())
    c = open_channels("u", 0, [0, 10_000], [0, 5], ["n", "n"])
    assert c is not None and c.out == [None, None] and os.listdir(tmp_path) == []  # receives, sends through Ray


def test_compact_probabilities_are_exact() -> None:
    rng = np.random.default_rng(1)
    few = rng.choice(rng.random(300), size=100_000)  # as a uniform policy's rows: a few hundred distinct values
    table, idx = compact_probabilities(few)  # type: ignore[misc]
    assert idx.dtype == np.uint16 and table.shape[0] == np.unique(few).shape[0]
    assert np.array_equal(expand_probabilities((table, idx)), few)
    many = rng.random(70_000)  # more distinct values than a uint16 index holds: kept as it is
    assert compact_probabilities(many) is many


def test_parts_hold_at_most_12_bytes_a_transition() -> None:
    parts, induced, loop, deadlock, rewards = _explored(EXAMPLE, "N=6", 'P=? [F "crash"]', POLICY)
    workers = _split(parts, induced, loop, deadlock, rewards, 2)
    transitions = [int(p.matrix.row_offsets[-1]) for p, _, _ in workers]
    held = [p.matrix.nbytes - p.matrix.row_offsets.nbytes for p, _, _ in workers]
    assert held[1] == 12 * transitions[1]  # int32 column + float64 probability
    assert held[0] <= 12 * transitions[0]  # the network's probabilities are nearly all distinct: not compacted
    parts, induced, loop, deadlock, rewards = _explored(EXAMPLE, "N=6", 'P=? [F "crash"]', {})  # uniform policy
    p0 = _split(parts, induced, loop, deadlock, rewards, 2)[0][0]
    assert p0.matrix.nbytes - p0.matrix.row_offsets.nbytes < 6.5 * int(p0.matrix.row_offsets[-1])
    assert sum(p.n_states for p, _, _ in workers) == induced.n_states
    # each worker holds copies of the peer's states its rows point to, at most all of them
    for p, _, _ in workers:
        assert 0 < p.n_cols - p.n_states <= induced.n_states - p.n_states


def test_a_limit_stops_every_worker() -> None:
    parts, induced, loop, deadlock, rewards = _explored(EXAMPLE, "N=5", 'P=? [F<=100000 "crash"]', POLICY)
    workers = _split(parts, induced, loop, deadlock, rewards, 2)
    passed = LimitCheck(Limits(timeout=1.0), start=0.0)  # started long ago: the timeout has passed
    got = _run_threads(workers, parts.spec, passed)
    assert all(isinstance(r, DistmcError) for r in got)
    assert any(isinstance(r, ResourceLimitError) and "--timeout" in str(r) for r in got)


def test_an_mdp_is_refused() -> None:
    job = Job(str(EXAMPLE), 'P=? [F "crash"]', "N=4", "uniform", None, "monolithic")
    parts = job.build()
    assert parts.expander is not None
    explored = explore_local(parts.expander, parts.codec.pack(parts.model.initial_states))
    n = explored.n_states
    rows = [
        (
            explored.row_state,
            explored.row_action,
            np.diff(explored.branch_offsets),
            np.concatenate(explored.target_chunks),
            np.concatenate(explored.prob_chunks),
        )
    ]
    with pytest.raises(PropertyError, match="DTMC"):
        build_part(
            0,
            1,
            np.arange(n),
            explored.keys,
            rows,
            [{}],
            [],
            lambda g: g * 0,
            1,
            n,
            parts.model,
            parts.codec,
            parts.spec.atoms,
            [],
        )


# -- on Ray ----------------------------------------------------------------------------------------------------


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300) if a != b else 0.0


RAY_CASES = [
    (EXAMPLE, "N=6", 'P=? [F "crash"]', POLICY),
    (EXAMPLE, "N=6", 'P=? [F<=12 "crash"]', POLICY),
    pytest.param(EXAMPLE, "N=6", 'P=? [!"goal" U "crash"]', {}, marks=pytest.mark.slow),  # 800 passes of levels
    (EXAMPLE, "N=6", 'R=? [F "crash" | "goal"]', POLICY),
    (EXAMPLE, "N=6", "R=? [C<=10]", {}),
    (STORM_FILES / "dtmc/brp-16-2.pm", None, "P=? [F s=5]", {}),
    (CHAIN, None, "R=? [I=2]", {}),
]
_SEQUENTIAL: dict[tuple[str, str | None, str, str], tuple[Any, Any]] = {}  # Storm's and the native checker's runs


# The worker count varies slowest: the cases of one count take the actors the run before kept. Two workers (peers
# that exchange) by default; one and three (a lone worker, an odd split) in the slow run.
@pytest.mark.parametrize(("model", "constants", "prop", "kw"), RAY_CASES)
@pytest.mark.parametrize("w", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(3, marks=pytest.mark.slow)])
def test_ray_distributed_check_matches_storm_and_native(
    local_ray: None, w: int, model: Path, constants: str | None, prop: str, kw: dict[str, str]
) -> None:
    key = (str(model), constants, prop, str(sorted(kw.items())))
    if key not in _SEQUENTIAL:
        _SEQUENTIAL[key] = (
            verify(model, prop, constants=constants, checker="storm", **kw),
            verify(model, prop, constants=constants, checker="native", **kw),
        )
    storm, native = _SEQUENTIAL[key]
    r = verify(model, prop, constants=constants, workers=w, checker="distributed", **kw)
    assert r.checker == "distributed" and r.driver == "ray"  # type: ignore[union-attr]
    assert (r.states, r.transitions) == (storm.states, storm.transitions)  # type: ignore[union-attr]
    assert abs(r.result - native.result) <= 1e-12, (w, r.result, native.result)  # type: ignore[union-attr, operator]
    assert _rel(r.result, storm.result) <= 1e-9, (w, r.result, storm.result)  # type: ignore[union-attr, arg-type]
    assert len(r.memory["worker_peak_bytes"]) == w  # type: ignore[union-attr, arg-type]
    assert all(ws["check_transitions"] > 0 for ws in r.worker_stats)  # type: ignore[union-attr]
    assert sum(ws["check_transitions"] for ws in r.worker_stats) == r.transitions  # type: ignore[union-attr]


@pytest.mark.skipif(
    not (SHARED_MODELS / "avoid.prism").exists(), reason="../shared/models/coolmc is not beside this checkout"
)
@pytest.mark.parametrize(
    "prop", ["P=? [F<=100 COLLISION=true]", pytest.param("P=? [x<3 U COLLISION=true]", marks=pytest.mark.slow)]
)
def test_ray_distributed_check_on_avoid(local_ray: None, prop: str) -> None:
    kw = {"constants": "xMax=4,yMax=4,slickness=0.1"}
    native = verify(SHARED_MODELS / "avoid.prism", prop, checker="native", **kw)
    for w, shm in ((2, True), (2, False), (3, True)):
        with pytest.MonkeyPatch.context() as mp:
            if not shm:
                mp.setenv("DISTMC_SHM", "0")  # the values through Ray calls
            r = verify(SHARED_MODELS / "avoid.prism", prop, workers=w, checker="distributed", **kw)
        assert abs(r.result - native.result) <= 1e-12  # type: ignore[union-attr, operator]
        stats = r.worker_stats  # type: ignore[union-attr]
        expect = shm and os.path.isdir(SHM_DIR)  # a machine without /dev/shm sends through Ray
        assert all(ws["check_bytes_sent"] > 0 and (ws["check_bytes_shm"] > 0) == expect for ws in stats), (w, shm)
    if os.path.isdir(SHM_DIR):
        assert not [n for n in os.listdir(SHM_DIR) if n.startswith("distmc-")]  # every name removed


def test_cli_distributed_report(local_ray: None, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "run",
                str(EXAMPLE),
                "--const",
                "N=5",
                "--prop",
                'P=? [F<=12 "crash"]',
                "--workers",
                "2",
                "--checker",
                "distributed",
                "--quiet",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    rep = json.loads(out.read_text())
    assert rep["checker"] == "distributed" and rep["induced"] == "dtmc"
    assert rep["memory"]["driver_peak_bytes"] > 0 and len(rep["memory"]["worker_peak_bytes"]) == 2
    local = verify(EXAMPLE, 'P=? [F<=12 "crash"]', constants="N=5", checker="native")
    assert abs(rep["result"] - local.result) <= 1e-12  # type: ignore[union-attr, operator]


def test_distributed_refuses_what_it_cannot_check(local_ray: None) -> None:
    with pytest.raises(PropertyError, match="--checker distributed cannot check"):
        verify(EXAMPLE, "R=? [C]", constants="N=4", workers=2, checker="distributed")
    with pytest.raises(DistmcError, match="--driver ray"):
        verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", driver="local", checker="distributed")
    with pytest.raises(DistmcError, match="export"):
        verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", workers=2, checker="distributed", export_path="m.umb")


@pytest.mark.slow  # 38 s; tests/test_faults.py covers loss in the levels
def test_a_worker_lost_in_the_check_says_how_to_resume(local_ray: None, tmp_path: Path) -> None:
    import os
    import signal

    prop = 'P=? [F<=4000 "crash"]'  # thousands of exchanges: the check outlasts the first live-line poll
    ck = tmp_path / "ck"
    pids: list[int] = []
    killed: list[int] = []

    def progress(info: dict[str, Any]) -> None:
        if "worker_pids" in info:
            pids[:] = info["worker_pids"]
        elif "step" in str(info.get("phase", "")) and not killed:
            killed.append(pids[1])
            os.kill(pids[1], signal.SIGKILL)

    with pytest.raises(DistmcError, match=f"--resume {ck}") as err:
        verify(
            EXAMPLE,
            prop,
            constants="N=5",
            **POLICY,
            workers=2,
            checker="distributed",
            checkpoint_dir=ck,
            progress=progress,
        )
    assert killed and err.value.exit_code == 8
    resumed = verify(None, None, resume=ck, workers=3, checker="distributed")  # other owners than the first run
    native = verify(EXAMPLE, prop, constants="N=5", **POLICY, checker="native")
    assert resumed.checker == "distributed"  # type: ignore[union-attr]
    assert (resumed.states, resumed.transitions) == (native.states, native.transitions)  # type: ignore[union-attr]
    assert abs(resumed.result - native.result) <= 1e-12  # type: ignore[union-attr, operator]


@pytest.mark.slow  # 20 s
def test_the_timeout_holds_during_the_check(local_ray: None) -> None:
    import time

    t = time.perf_counter()
    with pytest.raises(ResourceLimitError, match="checked") as err:  # "... was explored but not checked"
        verify(EXAMPLE, 'P=? [F<=100000000 "crash"]', constants="N=5", workers=2, checker="distributed", timeout=20)
    assert err.value.exit_code == 7
    assert time.perf_counter() - t < 90  # 10^8 steps would take days: the workers stopped at the limit


def test_values_parts_written_by_the_workers(local_ray: None, tmp_path: Path) -> None:
    from distmc.explain.values import read_values

    prop = 'P=? [F<=20 "crash"]'
    one = tmp_path / "one.parquet"
    local = verify(EXAMPLE, prop, constants="N=5", **POLICY, checker="native", values=one)
    parts_dir = tmp_path / "parts"
    dist = verify(EXAMPLE, prop, constants="N=5", **POLICY, workers=2, checker="distributed", values=parts_dir)
    assert dist.checker == "distributed"  # type: ignore[union-attr]
    assert sorted(p.name for p in parts_dir.iterdir()) == ["part-00000.parquet", "part-00001.parquet"]
    cols = [("x", "ascending"), ("y", "ascending"), ("px", "ascending"), ("py", "ascending")]
    a = read_values(one).sort_by(cols)
    b = read_values(parts_dir).sort_by(cols)
    assert a.column_names == b.column_names and a.num_rows == b.num_rows == local.states  # type: ignore[union-attr]
    assert a.column("depth").to_pylist() == b.column("depth").to_pylist()
    va, vb = a.column("value").to_numpy(), b.column("value").to_numpy()
    assert np.abs(va - vb).max() <= 1e-12
    assert dist.riskiest_states == local.riskiest_states  # type: ignore[union-attr]
