from __future__ import annotations

import numpy as np

from distmc.model.kernel import Kernel
from distmc.model.packing import StateCodec
from distmc.model.program import load_model
from tests.conftest import STORM_FILES


def test_die_initial_successors() -> None:
    m = load_model(STORM_FILES / "dtmc" / "die.pm")
    exp = Kernel(m).expand(m.initial_states)
    assert exp.n_choices == 1
    assert sorted(exp.prob.tolist()) == [0.5, 0.5]
    s_col = [v.name for v in m.variables].index("s")
    assert sorted(exp.succ[:, s_col].tolist()) == [1, 2]


def test_codec_roundtrip_multiword() -> None:
    lo = np.array([0, -5, 0, 0])
    hi = np.array([2**40, 5, 2**40, 1])
    codec = StateCodec(lo, hi)
    assert codec.words == 2
    rng = np.random.default_rng(0)
    s = np.stack([rng.integers(a, h + 1, 1000) for a, h in zip(lo, hi, strict=True)], axis=1)
    assert (codec.unpack(codec.pack(s)) == s).all()
