"""The compiled kernel and the fused path against the numpy kernel and the general path: identical, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import distmc.explore.expander as expander_mod
from distmc.api import verify
from distmc.errors import ModelError
from distmc.model.kernel import Kernel
from distmc.model.program import load_model
from tests.conftest import SHARED_MODELS, STORM_FILES

MODELS = [
    (STORM_FILES / "dtmc" / "brp-16-2.pm", None),
    (STORM_FILES / "dtmc" / "crowds-5-5.pm", None),
    (STORM_FILES / "dtmc" / "leader-3-5.pm", None),
    (STORM_FILES / "dtmc" / "nand-5-2.pm", None),
    (STORM_FILES / "mdp" / "coin2-2.nm", None),
    (STORM_FILES / "mdp" / "csma2-2.nm", None),
    (STORM_FILES / "mdp" / "firewire.nm", "delay=3,fast=0.5"),
    (STORM_FILES / "mdp" / "wlan0-2-2.nm", None),
    (STORM_FILES / "mdp" / "two_dice.nm", None),
    (SHARED_MODELS / "avoid.prism", "xMax=3,yMax=3,slickness=0.1"),
    (SHARED_MODELS / "crazy_climber.prism", None),  # two-word keys
    (SHARED_MODELS / "freeway.prism", None),
    (SHARED_MODELS / "zeroconf.prism", "N=20,K=2,reset=true"),
    (SHARED_MODELS / "pacman.prism", "MAXSTEPS=5"),
]
FIELDS = ("choice_state", "choice_action", "branch_offsets", "succ_keys", "prob")


def _reachable_sample(kernel: Kernel, initial: np.ndarray, levels: int = 8, cap: int = 30_000) -> np.ndarray:
    seen = [initial]
    frontier = initial
    for _ in range(levels):
        succ = kernel.expand(frontier).succ
        frontier = np.unique(succ, axis=0)[:cap]
        seen.append(frontier)
    return np.unique(np.concatenate(seen), axis=0)


@pytest.mark.parametrize(("path", "constants"), MODELS, ids=lambda x: Path(x).name if isinstance(x, Path) else str(x))
def test_compiled_kernel_equals_numpy_kernel(path: Path, constants: str | None) -> None:
    if not path.is_file():
        pytest.skip(f"reference model {path} not present (../shared/models/coolmc is only beside a checkout)")
    model = load_model(path, constants)
    numpy_kernel = Kernel(model, compiled=False)
    compiled = Kernel(model, compiled=True)
    assert compiled.is_compiled
    states = _reachable_sample(numpy_kernel, model.initial_states)
    a, b = numpy_kernel.expand(states), compiled.expand(states)
    for f in FIELDS:
        assert np.array_equal(getattr(a, f), getattr(b, f)), f


@pytest.mark.parametrize("mode", ["stochastic", "deterministic"])
@pytest.mark.parametrize(
    ("path", "constants", "prop"),
    [
        (SHARED_MODELS / "avoid.prism", "xMax=3,yMax=3,slickness=0.1", "P=? [F<=20 COLLISION=true]"),
        (STORM_FILES / "dtmc" / "crowds-5-5.pm", None, 'P=? [F "observe0Greater1"]'),
        (Path(__file__).resolve().parents[1] / "distmc" / "examples" / "gridworld.prism", "N=5", 'P=? [F "crash"]'),
    ],
    ids=["avoid", "crowds", "gridworld"],
)
def test_fused_path_builds_the_same_model(
    monkeypatch: pytest.MonkeyPatch, path: Path, constants: str | None, prop: str, mode: str
) -> None:
    if not path.is_file():
        pytest.skip(f"reference model {path} not present (../shared/models/coolmc is only beside a checkout)")
    fused = verify(path, prop, constants=constants, mode=mode, keep_model=True)
    monkeypatch.setattr(expander_mod.Expander, "_expand_fused", lambda *args: None)
    general = verify(path, prop, constants=constants, mode=mode, keep_model=True)
    assert isinstance(fused, tuple) and isinstance(general, tuple)
    (r1, m1), (r2, m2) = fused, general
    assert r1.result == r2.result
    for f in ("row_groups", "row_offsets", "targets", "prob", "keys", "initial"):
        assert np.array_equal(getattr(m1, f), getattr(m2, f)), f


def test_compiled_kernel_reports_model_errors_like_numpy(tmp_path: Path) -> None:
    bad = tmp_path / "bad.prism"
    bad.write_text("mdp\nmodule m\n  x : [0..3] init 0;\n  [a] x < 3 -> 0.5 : (x'=x+2) + 0.5 : (x'=x+1);\nendmodule\n")
    model = load_model(bad)
    kernel = Kernel(model, compiled=True)
    assert kernel.is_compiled
    with pytest.raises(ModelError, match="outside its range"):
        kernel.expand(np.array([[2]], dtype=np.int64))
    with pytest.raises(ModelError, match="outside its range"):
        verify(bad, "P=? [F x=3]")
