"""Issue 14, item 6: a sweep in one process reuses the Ray actors its first run started."""

from __future__ import annotations

import pytest

from distmc.api import Report, Session, verify
from distmc.options import VerifyOptions
from tests.test_options import EXAMPLE, IFACE, NET, PROP

pytest.importorskip("ray", reason="the Ray driver needs ray")

from distmc.distributed import pool  # noqa: E402  (after the skip: it needs ray's package present)


def _kept_ids() -> list[str]:
    """The Ray actor ids of the workers the last run kept."""
    return [a._actor_id.hex() for a in pool._kept["run"][1]]


def test_sweep_reuses_the_kept_actors(local_ray: None) -> None:
    base = VerifyOptions(constants="N=4", workers=2, interface=IFACE)
    variants = [{"policy": NET}, {"policy": "uniform"}, {"policy": NET, "constants": "N=5", "checker": "distributed"}]
    reports: list[Report] = []
    ids: list[list[str]] = []
    with Session(base) as s:
        for v in variants:
            r = s.verify(EXAMPLE, PROP, v)
            assert isinstance(r, Report) and r.driver == "ray"
            reports.append(r)
            ids.append(_kept_ids())
    assert "run" not in pool._kept  # the session ended them
    assert len(ids[0]) == 2 and ids[1] == ids[0] and ids[2] == ids[0]  # no new actor after the first run
    pids = [sorted(int(w["pid"]) for w in r.worker_stats) for r in reports]
    assert pids[1] == pids[0] and pids[2] == pids[0]
    assert reports[2].checker == "distributed"
    for v, r in zip(variants, reports, strict=True):  # the values of separate in-process runs
        checker = "native" if v.get("checker") == "distributed" else "auto"
        alone = verify(EXAMPLE, PROP, base, **{**v, "workers": 1, "checker": checker})
        assert isinstance(alone, Report) and alone.driver == "local"
        # (bit for bit but for the distributed checker: its levels order and native's components order differ in
        # the last bits, each within its bounds)
        assert r.states == alone.states
        if v.get("checker") == "distributed":
            assert r.result == pytest.approx(alone.result, rel=1e-11, abs=1e-15)
        else:
            assert r.result == alone.result
