"""Issue 14's rough edges of Ray runs: a resumed run's report, Ctrl-C, Ray's own notices."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distmc.api import verify
from distmc.cli import main

ray = pytest.importorskip("ray", reason="the Ray driver needs ray")

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "distmc" / "examples"
EXAMPLE = EXAMPLES / "gridworld.prism"
POLICY = dict(policy=str(EXAMPLES / "gridworld_policy.pt"), interface=EXAMPLES / "gridworld_policy.json")
PROP = 'P=? [F "crash"]'
AVOID = REPO / "benchmarks" / "envs" / "avoid.prism"


def test_resumed_report_names_the_checkpoints_job(local_ray: None, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    assert verify(
        EXAMPLE,
        PROP,
        constants="N=7",
        **POLICY,
        mode="deterministic",
        checker="native",
        workers=1,
        checkpoint_dir=ck,
        max_states=60,
    ).partial  # type: ignore[union-attr]
    assert json.loads((ck / "meta.json").read_text())["checker"] == "native"
    out = tmp_path / "r.json"
    assert main(["run", "--resume", str(ck), "--json", str(out), "--quiet"]) == 0
    rep = json.loads(out.read_text())
    straight = verify(EXAMPLE, PROP, constants="N=7", **POLICY, mode="deterministic", checker="native")
    assert (rep["policy"], rep["mode"], rep["checker"]) == ("gridworld_policy.pt", "deterministic", "native")
    assert (rep["result"], rep["states"]) == (straight.result, straight.states)  # type: ignore[union-attr]


def _descendants(pid: int) -> set[int]:
    """The live processes below ``pid`` (Linux /proc)."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.update(kids)
        todo.extend(kids)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_ctrl_c_during_a_ray_run(local_ray: None, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    args = [
        sys.executable,
        "-m",
        "distmc.cli",
        "run",
        str(AVOID),
        "--const",
        "N=7,slickness=0.1",
        "--prop",
        PROP,
        "--workers",
        "2",
        "--checkpoint-dir",
        str(ck),
        "--quiet",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    meta = ck / "meta.json"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if meta.is_file() and json.loads(meta.read_text() or "{}").get("level", -1) >= 2:
            break
        time.sleep(0.02)
    assert proc.poll() is None, f"the run ended before it could be interrupted: {proc.communicate()}"
    ray_processes = _descendants(proc.pid)
    assert ray_processes  # the local Ray it started
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    # the first Ctrl-C stops the exploration at the end of its level: bounds from the explored part, exit 0
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "interrupted (Ctrl-C)" in out and "partial model" in out, (out, err)
    assert "Token authentication" not in err  # Ray's notices stay out of distmc's output
    time.sleep(1.0)
    assert not [p for p in ray_processes if _alive(p)], "Ray's processes outlived the interrupted run"
    # The checkpoint is committed: the run goes on from it, to the value of a run never interrupted.
    resumed = verify(None, None, resume=ck, workers=2)
    straight = verify(AVOID, PROP, constants="N=7,slickness=0.1")
    assert (resumed.result, resumed.states, resumed.transitions) == (  # type: ignore[union-attr]
        straight.result,
        straight.states,
        straight.transitions,
    )  # type: ignore[union-attr]


def test_distmc_scale(local_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "s.json", tmp_path / "s.png"
    assert (
        main(
            [
                "scale",
                "example",
                "--const",
                "N=5",
                "--prop",
                PROP,
                "--policy",
                "example",
                "--workers",
                "1,2",
                "--repeat",
                "2",
                "--json",
                str(out),
                "--plot",
                str(png),
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    rep = json.loads(out.read_text())
    straight = verify(EXAMPLE, PROP, constants="N=5", **POLICY)
    assert rep["same_value"] is True and rep["states"] == straight.states  # type: ignore[union-attr]
    assert [r["workers"] for r in rep["runs"]] == [1, 2]
    for run in rep["runs"]:
        assert set(run) >= {
            "workers",
            "result",
            "timings",
            "speedup",
            "efficiency",
            "bytes_per_state",
            "balance",
            "worker_stats",
        }
        assert run["result"] == straight.result  # type: ignore[union-attr]
        assert len(run["worker_stats"]) == run["workers"]
        t = run["timings"]
        assert run["speedup"] == pytest.approx(
            (rep["runs"][0]["timings"]["levels_s"] + rep["runs"][0]["timings"]["gather_s"])
            / (t["levels_s"] + t["gather_s"])
        )
    assert rep["runs"][0]["speedup"] == 1.0 and rep["runs"][0]["bytes_per_state"] == 0.0  # one worker sends nothing
    assert rep["runs"][1]["bytes_per_state"] > 0 and rep["runs"][1]["efficiency"] == rep["runs"][1]["speedup"] / 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = captured.out.splitlines()
    assert table[2].startswith("| workers | value |") and len([ln for ln in table if ln.startswith("| 1 |")]) == 1
    assert "the same value" in captured.out
    assert len([ln for ln in captured.err.splitlines() if ln.startswith("workers ")]) == 4  # a line per run


def test_scale_says_when_worker_counts_disagree() -> None:
    from distmc.scale import Scaling, table

    runs = [
        {
            "workers": w,
            "result": v,
            "states": 10,
            "timings": {"explore_s": 1.0, "assemble_s": 0.0, "check_s": 0.0, "total_s": 1.0},
            "speedup": 1.0,
            "efficiency": 1.0,
            "bytes_per_state": 0.0,
            "balance": 1.0,
        }
        for w, v in ((1, 0.5), (2, 0.25))
    ]
    text = table(Scaling("m.prism", "P=? [F x=1]", None, "uniform", 10, 20, runs, same_value=False))
    assert "DIFFERENT results (1 workers: 0.5 (10 states), 2 workers: 0.25 (10 states))" in text


def test_distributed_check_phases_add_up(local_ray: None) -> None:
    seen: list[tuple[str, str]] = []
    r = verify(
        EXAMPLE,
        PROP,
        constants="N=5",
        **POLICY,
        workers=2,
        checker="distributed",
        phases=lambda n, d: seen.append((n, d)),
    )
    assert r.checker == "distributed"  # type: ignore[union-attr]
    assert [n for n, _ in seen] == ["parsing", "exploring", "assembling", "checking"]
    assert seen[-1][1] == "distributed, on the Ray workers"
    t = r.timings  # type: ignore[union-attr]
    parts = ("parse_s", "explore_s", "assemble_s", "handoff_s", "check_s")
    assert abs(sum(t[k] for k in parts) - t["total_s"]) < 1e-9 and t["handoff_s"] == 0.0
    assert t["assemble_s"] > 0 and t["check_s"] > 0
