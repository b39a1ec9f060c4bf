"""What a new user meets first: dependencies named before the work, the rough edges of issue 14."""

from __future__ import annotations

import json
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from distmc.cli import main
from distmc.errors import MissingDependencyError

REPO = Path(__file__).resolve().parents[1]
CRASH = ["--prop", 'P=? [F "crash"]']


def _one_error_line(err: str) -> str:
    err = err.strip()
    assert err.startswith("distmc: error: ") and len(err.splitlines()) == 1, err
    return err


# -- optional dependencies -------------------------------------------------------------------------------------


def test_matplotlib_is_a_core_dependency() -> None:
    # The README's plain install (`pip install -e .`) must give --plot what it needs.
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert any(dep.split(">")[0].split("=")[0].strip() == "matplotlib" for dep in project["dependencies"])


def _fake_ppo_zip(path: Path) -> Path:
    # What detect_format/detect_algorithm read of an SB3 file: a zip with 'data' (JSON) and 'policy.pth'.
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("data", json.dumps({"clip_range": {}, "policy_class": {"__module__": "stable_baselines3.common"}}))
        z.writestr("policy.pth", b"")
    return path


def test_missing_sb3_named_before_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)  # as if not installed
    import distmc.api

    def explored(*a: object, **k: object) -> None:
        raise AssertionError("the exploration started before the missing package was found")

    monkeypatch.setattr(distmc.api, "explore_local", explored)
    zpath = _fake_ppo_zip(tmp_path / "trained.zip")
    assert main(["run", "example", "--const", "N=3", *CRASH, "--policy", str(zpath), "--trust-policy",
                 "--quiet"]) == 1
    err = _one_error_line(capfd.readouterr().err)
    assert "stable-baselines3" in err and "pip install 'distmc[rl]'" in err


def test_missing_package_found_by_the_ray_drivers_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The Ray driver's own process builds the job without a policy (the actors load it): the check is there too.
    from distmc.cli import _example_path
    from distmc.pipeline import Job

    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    job = Job(_example_path("example"), 'P=? [F "crash"]', "N=3", str(_fake_ppo_zip(tmp_path / "t.zip")))
    with pytest.raises(MissingDependencyError, match=r"pip install 'distmc\[rl\]'"):
        job.build(explorer=False)


def test_missing_matplotlib_named_before_the_analysis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    import distmc.abstract.refine

    def analysed(*a: object, **k: object) -> None:
        raise AssertionError("the analysis started before the missing package was found")

    monkeypatch.setattr(distmc.abstract.refine, "analyse", analysed)
    code = main(["abstract", "pendulum", "--policy", str(REPO / "benchmarks/policies/pendulum.json"),
                 "--plot", str(tmp_path / "h.png")])
    assert code == 1
    err = _one_error_line(capfd.readouterr().err)
    assert "matplotlib" in err and "pip install matplotlib" in err
