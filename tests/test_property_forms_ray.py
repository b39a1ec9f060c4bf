"""The property forms of ``test_property_forms`` on 2 Ray workers: the in-process answers, Storm's exact values,
and the distributed checker's answer (or its refusal naming what to use) where the form is its to check."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from distmc.api import verify
from distmc.errors import PropertyError
from tests.test_property_forms import QUEUE, STARTS, WALK, close, exact, write

pytest.importorskip("ray", reason="the Ray driver needs ray")
pytestmark = pytest.mark.usefixtures("local_ray")

CASES = [
    ("queue", QUEUE, "K=5", ['S=? ["full"]', 'R{"len"}=? [LRA]'], False),
    ("walk", WALK, None, ['S=? ["near"]', "P=? [G<=8 !(hit=true)]", 'R{"cost"}=? [S]'], True),
    (
        "reward-bounded",
        WALK,
        None,
        ['P=? [F{"time"}<=5 hit]', 'P=? [F^{rew{"time"}<=5} hit]', 'R{"cost"}=? [F hit]', 'S=? ["near"]'],
        True,
    ),
    (
        "starts",
        STARTS,
        None,
        [
            'filter(max, R=? [F "stable"], "init")',
            'filter(avg, R=? [F "stable"], "init")',
            'filter(exists, P>=0.5 [F<=3 "stable"], "init")',
        ],
        False,
    ),
]


@pytest.mark.parametrize(("name", "text", "constants", "props", "policy"), CASES, ids=[c[0] for c in CASES])
def test_forms_on_two_workers(
    tmp_path: Path, name: str, text: str, constants: str | None, props: list[str], policy: bool
) -> None:
    path = write(tmp_path, f"{name}.prism", text)
    local = verify(path, None, props=props, constants=constants)
    got = verify(path, None, props=props, constants=constants, workers=2, driver="ray")
    assert (got.states, got.transitions) == (local.states, local.transitions)  # type: ignore[union-attr]
    for a, b in zip(got.results, local.results, strict=True):  # type: ignore[union-attr]
        assert (a["property"], a.get("truth"), a["bounds"]) == (b["property"], b.get("truth"), b["bounds"])
        va, vb = (v if isinstance(v, dict) else {"": v} for v in (a["value"], b["value"]))
        assert all(abs(va[k] - vb[k]) <= 1e-12 * max(1.0, abs(vb[k])) for k in vb), (a, b)
    for prop, entry in zip(props, got.results, strict=True):  # type: ignore[union-attr]
        if prop.startswith("filter") or "G<=" in prop or "^" in prop:
            continue  # checked in-process against Storm's own forms of them
        (q,) = exact(path, prop, constants, dtmc=policy)
        assert close(entry["value"], q), (prop, entry["value"], float(q))


def test_distributed_checker_takes_its_forms_and_names_what_to_use_for_the_rest(tmp_path: Path) -> None:
    path = write(tmp_path, "starts.prism", STARTS)
    # a value filter is the distributed checker's too: it has every initial state's value
    prop = 'filter(max, R=? [F "stable"], "init")'
    got = verify(path, prop, workers=2, driver="ray", checker="distributed")
    assert got.checker == "distributed"  # type: ignore[union-attr]
    values = exact(path, 'R=? [F "stable"]')
    assert close(got.result, max(values))  # type: ignore[union-attr,arg-type]
    lo, hi = got.bounds  # type: ignore[misc,union-attr]
    assert Fraction(lo) <= max(values) <= Fraction(hi)
    walk = write(tmp_path, "walk.prism", WALK)
    for prop, what in [
        ('S=? ["near"]', "long-run averages"),
        ("P=? [G<=8 !hit]", "step bounds"),
        ('P=? [F{"time"}<=5 hit]', "step bounds"),
    ]:
        with pytest.raises(PropertyError, match=f"--checker distributed cannot check .*{what}"):
            verify(walk, prop, workers=2, driver="ray", checker="distributed")
    with pytest.raises(PropertyError, match="is answered by Storm"):
        verify(path, 'filter(count, P>=0.5 [F<=3 "stable"], "init")', workers=2, driver="ray", checker="distributed")
