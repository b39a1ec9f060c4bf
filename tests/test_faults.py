"""Never wrong, never lost: limits end in a partial report, checkpoints survive killed workers and resume runs.

The Ray tests kill a worker's process (SIGKILL) between levels from the progress callback, so the next level
meets a dead actor; with a checkpoint the run must replace it and finish with the identical model.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from distmc.api import verify
from distmc.cli import main
from distmc.errors import DistmcError, ResourceLimitError, WorkerError
from distmc.explore.limits import parse_duration, parse_memory

EXAMPLES = Path(__file__).resolve().parents[1] / "distmc" / "examples"
EXAMPLE = EXAMPLES / "gridworld.prism"
POLICY = dict(policy=str(EXAMPLES / "gridworld_policy.pt"), interface=EXAMPLES / "gridworld_policy.json")
PROP = 'P=? [F "crash"]'
FIELDS = ("row_groups", "row_offsets", "targets", "prob", "row_action", "keys", "initial")


def same_model(a: object, b: object) -> None:
    for f in FIELDS:
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


@pytest.fixture(scope="module")
def reference() -> tuple[object, object]:
    got = verify(EXAMPLE, PROP, constants="N=7", **POLICY, keep_model=True)
    assert isinstance(got, tuple)
    return got


# -- limits (in-process driver) ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_states": 300}, "--max-states 300"),
        ({"timeout": 1e-6}, "--timeout"),
        ({"max_memory": "1M"}, "--max-memory"),
    ],
)
def test_limit_stops_with_bounds(reference: tuple, kwargs: dict[str, object], needle: str) -> None:
    r = verify(EXAMPLE, PROP, constants="N=7", **POLICY, **kwargs)  # type: ignore[arg-type]
    assert r.partial and r.frontier is not None and needle in str(r.frontier["reason"])  # type: ignore[union-attr]
    f = r.frontier  # type: ignore[union-attr]
    assert f["explored_states"] > 0 and f["frontier_states"] > 0 and r.transitions > 0  # type: ignore[union-attr]
    lo, hi = r.bounds  # type: ignore[union-attr,misc]
    assert lo - 1e-9 <= reference[0].result <= hi + 1e-9
    if "max_states" in kwargs:
        assert r.states > 300  # type: ignore[union-attr]


def test_memory_limit_stops_before_the_handoff(monkeypatch: pytest.MonkeyPatch) -> None:
    import distmc.check.choice

    monkeypatch.setattr(
        distmc.check.choice, "STORM_BYTES_PER_TRANSITION", 10**8
    )  # as if Storm needed 100 MB a transition
    with pytest.raises(ResourceLimitError, match="handing it to Storm needs") as err:
        verify(EXAMPLE, PROP, constants="N=7", **POLICY, max_memory="100G", checker="storm")
    assert err.value.partial["transitions"] > 0 and err.value.partial["frontier"] == 0
    # --checker auto (the default) checks it with the native checker instead, and gets Storm's value
    report = verify(EXAMPLE, PROP, constants="N=7", **POLICY, max_memory="100G")
    assert report.checker == "native"  # type: ignore[union-attr]
    monkeypatch.undo()
    storm = verify(EXAMPLE, PROP, constants="N=7", **POLICY, max_memory="100G")
    assert storm.checker == "storm"  # type: ignore[union-attr]
    assert abs(report.result - storm.result) <= 2e-12  # type: ignore[union-attr, operator]


def test_cli_limit_writes_partial_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "run",
                "example",
                "--const",
                "N=7",
                "--prop",
                PROP,
                "--max-states",
                "100",
                "--json",
                str(out),
                "--quiet",
                "--exact",
            ]
        )
        == 7
    )  # the exact engine checks complete models only: nothing is checked
    rep = json.loads(out.read_text())
    assert rep["partial"] is True and rep["states"] > 100 and rep["depth"] >= 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_parse_sizes_and_durations() -> None:
    assert parse_memory("1.5G") == 3 << 29 and parse_memory("512M") == 512 << 20 and parse_memory("4096") == 4096
    assert parse_duration("15m") == 900 and parse_duration("2h") == 7200 and parse_duration("90") == 90
    for bad in ("lots", "-1G", "0"):
        with pytest.raises(DistmcError):
            parse_memory(bad)


# -- checkpoints and worker loss (Ray driver) ----------------------------------------------------------------------

ray = pytest.importorskip("ray", reason="the Ray driver needs ray")


def killer(at_depths: tuple[int, ...], rank: int = 1) -> tuple[Callable[[dict], None], list[int]]:
    """A progress callback that SIGKILLs worker ``rank``'s process after each level in ``at_depths``."""
    killed: list[int] = []

    def progress(info: dict) -> None:
        if info["depth"] in at_depths and info["depth"] not in killed:
            os.kill(info["worker_pids"][rank], signal.SIGKILL)
            killed.append(info["depth"])

    return progress, killed


@pytest.mark.parametrize("workers", [2, pytest.param(1, marks=pytest.mark.slow)])
def test_killed_workers_are_replaced_from_checkpoints(
    local_ray: None, reference: tuple, tmp_path: Path, workers: int
) -> None:
    r0, m0 = reference
    progress, killed = killer((3, 7), rank=workers - 1)
    got = verify(
        EXAMPLE,
        PROP,
        constants="N=7",
        **POLICY,
        workers=workers,
        checkpoint_dir=tmp_path / "ck",
        progress=progress,
        keep_model=True,
    )
    assert isinstance(got, tuple)
    r, m = got
    assert killed == [3, 7] and r.restarts == 2
    assert (r.states, r.transitions, r.result) == (r0.states, r0.transitions, r0.result)
    same_model(m, m0)


def test_killed_worker_without_checkpoint_says_what_was_lost(local_ray: None) -> None:
    progress, killed = killer((2,))
    with pytest.raises(WorkerError, match="lost at depth 3.*--checkpoint-dir"):
        verify(EXAMPLE, PROP, constants="N=7", **POLICY, workers=2, progress=progress)
    assert killed == [2]


@pytest.mark.parametrize(
    ("first", "then"),
    [
        pytest.param(2, 3, marks=pytest.mark.slow),
        pytest.param(2, 1, marks=pytest.mark.slow),
        pytest.param(1, 2, marks=pytest.mark.slow),
        (1, 1),
    ],
)
def test_stopped_run_resumes_with_other_worker_count(
    local_ray: None, reference: tuple, tmp_path: Path, first: int, then: int
) -> None:
    r0, m0 = reference
    ck = tmp_path / "ck"
    assert verify(EXAMPLE, PROP, constants="N=7", **POLICY, workers=first, checkpoint_dir=ck, max_states=500).partial  # type: ignore[union-attr]
    meta = json.loads((ck / "meta.json").read_text())
    assert 0 < meta["level"] and meta["states"] > 500
    got = verify(None, None, resume=ck, workers=then, keep_model=True)
    assert isinstance(got, tuple)
    r, m = got
    assert (r.states, r.transitions, r.result, r.policy_states) == (
        r0.states,
        r0.transitions,
        r0.result,
        r0.policy_states,
    )
    same_model(m, m0)


def test_resume_refuses_changed_inputs(local_ray: None, tmp_path: Path) -> None:
    model = tmp_path / "grid.prism"
    shutil.copy(EXAMPLE, model)
    ck = tmp_path / "ck"
    assert verify(model, PROP, constants="N=5", workers=1, checkpoint_dir=ck, max_states=50).partial  # type: ignore[union-attr]
    with pytest.raises(DistmcError, match="not 'P=\\? \\[F \"goal\"\\]'"):
        verify(model, 'P=? [F "goal"]', resume=ck)
    model.write_text(model.read_text().replace("slip = 0.1", "slip = 0.2"))
    with pytest.raises(DistmcError, match="has changed"):
        verify(None, None, resume=ck)


# -- progress ------------------------------------------------------------------------------------------------------


def test_live_progress_shows_each_level() -> None:
    import io

    from rich.console import Console

    from distmc.progress import LiveProgress

    buf = io.StringIO()
    seen: list[dict] = []
    with LiveProgress(console=Console(file=buf, force_terminal=True, width=200)) as live:
        assert live.enabled

        def progress(info: dict) -> None:
            seen.append(info)
            live(info)

        verify(EXAMPLE, PROP, constants="N=7", **POLICY, progress=progress)
    assert [i["depth"] for i in seen] == list(range(1, len(seen) + 1)) and seen[-1]["frontier"] == 0
    assert all(seen[k]["states"] <= seen[k + 1]["states"] for k in range(len(seen) - 1))
    line = LiveProgress.render(seen[-1])
    assert line.startswith(f"depth {len(seen)} | states ") and "MiB" in line
    assert "depth" in buf.getvalue()
    assert not LiveProgress(console=Console(file=io.StringIO())).enabled  # not a terminal: nothing shown


def test_gpu_share() -> None:
    from distmc.distributed import gpu_share

    assert gpu_share(0, 4) == 0 and gpu_share(1, 4) == 0.25 and gpu_share(8, 4) == 1.0 and gpu_share(1, 1) == 1.0
    assert gpu_share(1, 4, 0) == 0 and gpu_share(0, 4, 0.5) == 0.5
    with pytest.raises(DistmcError, match="--gpus-per-worker"):
        gpu_share(1, 4, 1.5)
