from __future__ import annotations

import json
from pathlib import Path

import pytest

from distmc.cli import main


def test_run_example_json(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert main(["run", "example", "--const", "N=4", "--prop", 'P=? [F "crash"]', "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert set(rep) >= {"result", "states", "transitions", "mode", "workers", "timings"}
    assert set(rep["timings"]) >= {"explore_s", "assemble_s", "check_s", "total_s"}
    assert 0.0 < rep["result"] < 1.0


def test_monolithic_gives_min_max(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "run",
                "example",
                "--const",
                "N=4",
                "--prop",
                'P=? [F "crash"]',
                "--mode",
                "monolithic",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())["result"]
    assert r["min"] <= r["max"]


def test_export_umb_and_drn(tmp_path: Path) -> None:
    for suffix in (".umb", ".drn"):
        f = tmp_path / f"m{suffix}"
        assert main(["run", "example", "--const", "N=3", "--prop", 'P=? [F "crash"]', "--export", str(f)]) == 0
        assert f.stat().st_size > 0


def _crash(tmp_path: Path, policy: str, *extra: str) -> dict:
    out = tmp_path / f"{policy}.json"
    assert (
        main(
            [
                "run",
                "example",
                "--const",
                "N=6",
                "--policy",
                policy,
                "--prop",
                'P=? [F "crash"]',
                "--json",
                str(out),
                *extra,
            ]
        )
        == 0
    )
    return json.loads(out.read_text())


def test_bundled_example_policy(tmp_path: Path) -> None:
    rep = _crash(tmp_path, "example")
    assert rep["policy"] == "gridworld_policy.pt" and rep["induced"] == "dtmc"
    assert 0.0 < rep["result"] < 1.0


def test_bundled_policy_is_trained(tmp_path: Path) -> None:
    # The bundled network imitates a goal-seeking, patrol-avoiding heuristic: it must crash far less often than
    # the uniform policy (measured: about 0.010 against 0.685).
    trained = _crash(tmp_path, "example")["result"]
    uniform = _crash(tmp_path, "uniform")["result"]
    assert trained < 0.1 < 0.5 < uniform


def test_bundled_policy_explicit_interface_and_deterministic(tmp_path: Path) -> None:
    iface = Path(__file__).resolve().parents[1] / "distmc" / "examples" / "gridworld_policy.json"
    rep = _crash(tmp_path, "example", "--interface", str(iface), "--mode", "deterministic")
    assert rep["mode"] == "deterministic" and 0.0 < rep["result"] < 1.0
    assert rep["states"] < 6**4  # the argmax policy reaches only part of the grid


def test_export_bad_suffix_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "example", "--const", "N=3", "--prop", 'P=? [F "crash"]', "--export", "model.txt"])
    assert exit_info.value.code == 2
    assert ".drn or .umb" in capsys.readouterr().err
