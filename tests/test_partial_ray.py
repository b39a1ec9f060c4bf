"""``--width`` and ``--order`` on Ray: the in-process explored set, ids, model and bounds, for any number of workers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from distmc import Report, verify
from distmc.errors import UsageError

EXAMPLES = Path(__file__).resolve().parents[1] / "distmc" / "examples"
EXAMPLE = EXAMPLES / "gridworld.prism"
POLICY = dict(policy=str(EXAMPLES / "gridworld_policy.pt"), interface=str(EXAMPLES / "gridworld_policy.json"))
CRASH = 'P=? [F "crash"]'


def _same(a: Report, b: Report) -> None:
    """The same explored part and bounds, bit for bit (the Ray workers add the mass in the in-process order)."""
    assert (a.states, a.transitions, a.partial) == (b.states, b.transitions, b.partial)
    assert a.frontier == b.frontier
    assert a.bounds == b.bounds and a.result == b.result
    ra, rb = a.rounds or [], b.rounds or []
    assert [(r["states"], r["explored_states"], r["width"]) for r in ra] == [
        (r["states"], r["explored_states"], r["width"]) for r in rb
    ]


@pytest.mark.parametrize(
    "workers", [2, pytest.param(1, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)]
)
def test_width_rounds_on_ray_explore_the_in_process_set(local_ray: None, workers: int) -> None:
    here = verify(EXAMPLE, CRASH, constants="N=8", **POLICY, width=1e-2)
    there = verify(EXAMPLE, CRASH, constants="N=8", **POLICY, width=1e-2, workers=workers, driver="ray")
    assert isinstance(here, Report) and isinstance(there, Report)
    assert here.rounds is not None and len(here.rounds) >= 2  # several rounds, each going on from the last
    _same(here, there)


@pytest.mark.slow
@pytest.mark.parametrize("order", ["mass", "bfs"])
def test_a_budget_on_ray_explores_the_in_process_set(local_ray: None, order: str) -> None:
    for prop in (CRASH, 'R{"steps"}=? [C<=15]'):
        here = verify(EXAMPLE, prop, constants="N=8", **POLICY, order=order, max_states=2000)
        there = verify(EXAMPLE, prop, constants="N=8", **POLICY, order=order, max_states=2000, workers=2)
        assert isinstance(here, Report) and isinstance(there, Report) and there.partial
        _same(here, there)


def test_the_horizon_cut_in_bfs_order_on_ray_is_exact(local_ray: None) -> None:
    prop = 'P=? [F<=6 "crash"]'
    full = verify(EXAMPLE, prop, constants="N=8", **POLICY)
    cut = verify(EXAMPLE, prop, constants="N=8", **POLICY, order="bfs", horizon_cut=True, workers=2)
    assert isinstance(full, Report) and isinstance(cut, Report)
    assert not cut.partial and cut.states < full.states
    assert float(cut.result) == pytest.approx(float(full.result), abs=1e-12)  # type: ignore[arg-type]


def test_resume_on_ray_goes_on_from_an_in_process_checkpoint(local_ray: None, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    first = verify(EXAMPLE, CRASH, constants="N=8", **POLICY, width=0.5, checkpoint_dir=ck)
    assert isinstance(first, Report) and first.partial and first.rounds is not None
    had = first.rounds[-1]["explored_states"]
    again = verify(None, None, resume=ck, width=1e-3, workers=2)  # the in-process file, taken up by two workers
    assert isinstance(again, Report) and again.rounds is not None
    assert again.rounds[0]["explored_states"] == had
    straight = verify(EXAMPLE, CRASH, constants="N=8", **POLICY, width=1e-3)
    assert isinstance(straight, Report)
    _same_end = (straight.states, straight.bounds)
    assert (again.states, again.bounds) == _same_end
    # and back: the workers' file goes on in this process
    third = verify(None, None, resume=ck, width=1e-4)
    assert isinstance(third, Report) and third.rounds is not None
    assert third.rounds[0]["explored_states"] == again.rounds[-1]["explored_states"]
    assert np.isfinite(third.width())


def test_width_with_the_distributed_checker_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--width and --order check each round"):
        verify(EXAMPLE, CRASH, constants="N=8", **POLICY, width=1e-3, workers=2, checker="distributed")


def test_a_lost_worker_ends_a_width_run_with_one_clear_error(local_ray: None) -> None:
    import os
    import signal
    import subprocess

    from distmc.errors import WorkerError

    def kill_workers(info: dict) -> None:
        if str(info.get("phase", "")).startswith("round 1:"):  # after the first round's check: kill every actor
            pids = subprocess.run(["pgrep", "-f", "ray::PartitionActor"], capture_output=True, text=True).stdout
            for pid in pids.split():
                os.kill(int(pid), signal.SIGKILL)

    with pytest.raises(WorkerError, match="lost .* --width/--order run.*--resume"):
        verify(EXAMPLE, CRASH, constants="N=8", **POLICY, width=1e-9, workers=2, progress=kill_workers)


class _CtrlCAfter:
    """Ctrl-C as the Ray level loop sees it: ``why`` is set from the ``levels``-th level on (read once a level)."""

    def __init__(self, levels: int) -> None:
        self.levels, self.reads = levels, 0

    def __enter__(self) -> _CtrlCAfter:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    @property
    def why(self) -> str | None:
        self.reads += 1
        return "interrupted (Ctrl-C)" if self.reads >= self.levels else None


@pytest.mark.slow  # 14 s; the in-process Ctrl-C tests stay
def test_ctrl_c_with_the_next_level_expanded_ahead_stops_where_one_worker_stops(
    local_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers expand the next level with a level's store; a stop takes that expansion back (unexpand)."""
    from distmc.distributed import coordinator

    runs = []
    for workers in (1, 2):  # one worker numbers its own levels (nothing expanded ahead); two expand ahead
        monkeypatch.setattr(coordinator, "Interrupt", lambda: _CtrlCAfter(4))
        runs.append(verify(EXAMPLE, CRASH, constants="N=8", **POLICY, workers=workers, driver="ray"))
    one, two = runs
    assert isinstance(one, Report) and isinstance(two, Report) and one.partial and two.partial
    assert (one.states, one.transitions, one.frontier, one.depth) == (
        two.states,
        two.transitions,
        two.frontier,
        two.depth,
    )
    assert one.bounds == pytest.approx(two.bounds, abs=1e-12)
