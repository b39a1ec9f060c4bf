"""The mass-first order's rank and batches (distmc.explore.priority): sound, nested, reproducible, checkpointed.

Every rank (``reach``: the mass pushed forward; ``path``: the most likely path) and batch limit (``spread``) must
give bounds that contain the full run's value and nest as the budget grows; the explored set must not depend on
how the budget was split into rounds, nor change across a checkpoint. The speed-up itself is measured by
``benchmarks/partial_efficiency.py`` (``benchmarks/RESULTS.md``, issue 22); here only that the default order
follows a model that moves as a wave (delivery: every state is reached at one depth) where ``path`` does not.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import distmc.explore.priority as priority
from benchmarks.partial_efficiency import interval
from distmc.api import Report, verify
from distmc.explore.priority import MASS_RANKS, PriorityExplorer
from distmc.options import VerifyOptions
from distmc.run import Run

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "distmc" / "examples"
EXAMPLE = EXAMPLES / "gridworld.prism"
POLICY = dict(policy=str(EXAMPLES / "gridworld_policy.pt"), interface=str(EXAMPLES / "gridworld_policy.json"))
DELIVERY = REPO / "benchmarks" / "envs" / "delivery.prism"
DELIVERY_POLICY = dict(policy=str(REPO / "benchmarks" / "policies" / "delivery" / "policy.pt"))
PROPS = ['P=? [F "crash"]', 'P=? [G !"crash"]', 'P=? [!"crash" U "goal"]']
TOL = 1e-9
VARIANTS = [(rank, spread) for rank in MASS_RANKS for spread in (0.0, 1e-3)]


def _explorer(rank: str | None = None, spread: float | None = None, order: str = "mass") -> PriorityExplorer:
    run = Run.start(EXAMPLE, PROPS[0], VerifyOptions.build(None, constants="N=8", **POLICY, order=order))
    p = run.parts
    assert p.expander is not None
    return PriorityExplorer(p.expander, p.codec.pack(p.model.initial_states), order, rank=rank, spread=spread)


@pytest.fixture(scope="module")
def full() -> dict[str, float]:
    return {p: float(verify(EXAMPLE, p, constants="N=8", **POLICY).result) for p in PROPS}  # type: ignore[union-attr,arg-type]


@pytest.mark.parametrize(("rank", "spread"), VARIANTS)
def test_every_rank_is_sound_and_nests(
    full: dict[str, float], monkeypatch: pytest.MonkeyPatch, rank: str, spread: float
) -> None:
    monkeypatch.setattr(priority, "MASS_RANK", rank)
    monkeypatch.setattr(priority, "SPREAD", spread)
    for prop in PROPS:
        last = (-math.inf, math.inf)
        for budget in (500, 1000, 2000, 3000):
            r = verify(EXAMPLE, prop, constants="N=8", **POLICY, order="mass", max_states=budget)
            assert isinstance(r, Report)
            lo, hi = interval(r)
            assert lo - TOL <= full[prop] <= hi + TOL, (prop, budget, lo, hi, full[prop])
            assert last[0] - TOL <= lo and hi <= last[1] + TOL, (prop, budget, last, (lo, hi))
            last = (lo, hi)


@pytest.mark.parametrize(("rank", "spread"), VARIANTS)
def test_rounds_do_not_change_the_explored_set(rank: str, spread: float) -> None:
    a, b = _explorer(rank, spread), _explorer(rank, spread)
    for budget in (300, 700, 1500):
        a.grow(budget)
    b.grow(1500)
    n = a.n_states
    assert n == b.n_states and a.n_expanded == b.n_expanded
    assert np.array_equal(a.keys[:n], b.keys[:n]) and np.array_equal(a.expanded[:n], b.expanded[:n])
    assert np.array_equal(a.mass[:n], b.mass[:n])  # bit for bit: the same sums in the same order


def test_the_ranks_explore_different_sets_in_the_same_budget() -> None:
    reach, path = _explorer("reach", 0.0), _explorer("path", 0.0)
    reach.grow(1500)
    path.grow(1500)
    assert not np.array_equal(reach.keys[: reach.n_states], path.keys[: path.n_states])


def test_reach_mass_of_the_frontier_is_at_most_the_probability_of_reaching_it() -> None:
    ex = _explorer("reach", 1e-3)
    ex.grow(2000)
    n = ex.n_states
    pushed = float(ex.mass[:n][~ex.expanded[:n]].sum())
    r = verify(EXAMPLE, PROPS[0], constants="N=8", **POLICY, order="mass", max_states=2000)
    assert isinstance(r, Report) and r.frontier is not None and r.states == n  # the same explored part
    reach = r.frontier["frontier_probability"]
    assert isinstance(reach, float) and 0 < pushed <= reach + 1e-12


def test_checkpoint_keeps_rank_and_spread(tmp_path: Path) -> None:
    ex = _explorer("path", 1e-2)
    ex.grow(800)
    ex.save(tmp_path / "p.npz")
    back = PriorityExplorer.load(tmp_path / "p.npz", ex.expander)
    assert (back.rank, back.spread, back.order) == ("path", 1e-2, "mass")
    ex.grow(2000)
    back.grow(2000)
    n = ex.n_states
    assert n == back.n_states and np.array_equal(ex.keys[:n], back.keys[:n])
    # a checkpoint written before rank and spread were saved explored by the most likely path, batches unlimited
    with np.load(tmp_path / "p.npz") as z:
        old = {k: z[k] for k in z.files if k not in ("rank", "spread")}
    np.savez(tmp_path / "old.npz", **old)  # type: ignore[arg-type]
    legacy = PriorityExplorer.load(tmp_path / "old.npz", ex.expander)
    assert (legacy.rank, legacy.spread) == ("path", 0.0)


def test_bad_rank_or_spread_is_refused() -> None:
    with pytest.raises(ValueError, match="rank"):
        _explorer("most-likely")
    with pytest.raises(ValueError, match="spread"):
        _explorer("reach", 2.0)


def test_the_default_follows_a_wave_where_the_most_likely_path_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    prop, consts = 'P=? [F "delivered"]', "N=6,FUEL=20,slip=0.1"
    value = float(verify(DELIVERY, prop, constants=consts, **DELIVERY_POLICY).result)  # type: ignore[union-attr,arg-type]
    widths = {}
    for rank, spread in (("reach", 1e-3), ("path", 0.0)):
        monkeypatch.setattr(priority, "MASS_RANK", rank)
        monkeypatch.setattr(priority, "SPREAD", spread)
        r = verify(DELIVERY, prop, constants=consts, **DELIVERY_POLICY, order="mass", max_states=1100)
        assert isinstance(r, Report)
        lo, hi = interval(r)
        assert lo - TOL <= value <= hi + TOL
        widths[rank] = hi - lo
    assert widths["reach"] < 1e-3 * widths["path"]  # measured: 5.6e-8 against 0.050
