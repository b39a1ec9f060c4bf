"""--traces and --values on 2 Ray workers: the same traces, values and depths as in-process (which
tests/test_explain.py holds to a plain enumeration of paths and to Storm's own per-state values)."""

from __future__ import annotations

from pathlib import Path

import pytest

from distmc.api import verify
from distmc.explain.values import read_values
from tests.conftest import STORM_FILES

ray = pytest.importorskip("ray", reason="the Ray driver needs ray")

REPO = Path(__file__).resolve().parents[1]
EX = REPO / "distmc" / "examples"
LOOPS = REPO / "tests" / "data" / "explain" / "loops.prism"


pytestmark = pytest.mark.usefixtures("local_ray")  # conftest.py: one local Ray for the module


@pytest.mark.parametrize(
    ("path", "constants", "prop", "kw"),
    [
        (
            EX / "gridworld.prism",
            "N=6",
            'P=? [F "crash"]',
            {"policy": str(EX / "gridworld_policy.pt"), "interface": EX / "gridworld_policy.json"},
        ),
        (EX / "gridworld.prism", "N=4", 'P=? [F<=6 "crash"]', {}),
        (LOOPS, None, 'P=? [!"trap" U<=9 "bad"]', {}),
        (STORM_FILES / "dtmc" / "brp-16-2.pm", None, "P=? [F s=5]", {}),
    ],
    ids=["grid-trained", "grid-bounded", "loops-until", "brp"],
)
def test_two_workers_give_the_same_traces_and_values(
    path: Path, constants: str | None, prop: str, kw: dict, tmp_path: Path
) -> None:
    local = verify(path, prop, constants=constants, traces=10, values=tmp_path / "local.parquet", **kw)
    ray_run = verify(
        path, prop, constants=constants, traces=10, values=tmp_path / "ray.parquet", workers=2, driver="ray", **kw
    )
    assert ray_run.driver == "ray" and local.driver == "local"  # type: ignore[union-attr]
    assert ray_run.traces == local.traces and ray_run.traces_mass == local.traces_mass  # type: ignore[union-attr]
    assert ray_run.riskiest_states == local.riskiest_states  # type: ignore[union-attr]
    assert read_values(tmp_path / "ray.parquet").equals(read_values(tmp_path / "local.parquet"))
