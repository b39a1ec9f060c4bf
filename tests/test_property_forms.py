"""Property forms beyond reachability, against Storm's exact engine on chains written here (issue 25).

Long-run averages on chains whose bottom SCCs are not single states (an ergodic queue, a tandem queue, a chain with
a periodic and an aperiodic bottom SCC behind transient states, an MDP under the uniform policy), step-bounded
``G`` over PRISM ``formula`` names, reward-bounded path formulas, filters over the initial states, and constants of
a properties file given with ``--const``. The reference is Storm's exact engine on Storm's own build of the same
program; a policy-induced chain's reference is the program with ``mdp`` written ``dtmc``, which Storm fuses with
weight 1/(number of choices): the uniform policy's chain.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import stormpy

from benchmarks.long_run import TANDEM  # the two-queue tandem, also the benchmark's model
from distmc.api import verify
from distmc.check import checker
from distmc.errors import DistmcError, PropertyError
from tests.conftest import STORM_FILES

QUEUE = """dtmc
const int K;
module queue
  q : [0..K] init 0;
  [] q=0 -> 0.4 : (q'=1) + 0.6 : (q'=0);
  [] q>0 & q<K -> 0.4 : (q'=q+1) + 0.5 : (q'=q-1) + 0.1 : (q'=q);
  [] q=K -> 0.5 : (q'=q-1) + 0.5 : (q'=q);
endmodule
label "full" = q=K;
rewards "len"
  true : q;
endrewards
"""


# transient start, then a periodic bottom SCC {1, 2} or an aperiodic one {3, 4, 5, 6}
BRANCHES = """dtmc
module m
  s : [0..6] init 0;
  [] s=0 -> 0.3 : (s'=1) + 0.5 : (s'=3) + 0.2 : (s'=0);
  [] s=1 -> 1 : (s'=2);
  [] s=2 -> 1 : (s'=1);
  [] s=3 -> 0.25 : (s'=4) + 0.75 : (s'=5);
  [] s=4 -> 0.5 : (s'=5) + 0.5 : (s'=6);
  [] s=5 -> 1/3 : (s'=3) + 2/3 : (s'=6);
  [] s=6 -> 0.9 : (s'=4) + 0.1 : (s'=6);
endmodule
label "a" = s=2 | s=4;
rewards "r"
  s=1 : 2;
  s=5 : 1.5;
  [] s=6 : 1;
endrewards
"""

# an MDP with a PRISM formula, two reward structures, and a cycle: ergodic under the uniform policy
WALK = """mdp
formula hit = x=3 | (x=2 & y=1);
module m
  x : [0..3] init 0;
  y : [0..1] init 0;
  [a] x<3 -> 0.7 : (x'=x+1) + 0.3 : (y'=1-y);
  [b] x<3 -> 0.5 : (x'=min(x+2,3)) + 0.5 : true;
  [] x=3 -> 1 : (x'=0) & (y'=0);
endmodule
label "near" = x>=2;
rewards "time"
  true : 1;
endrewards
rewards "cost"
  [a] true : 2;
  [b] true : 1;
endrewards
"""

# several initial states, for filters over them
STARTS = """dtmc
module m
  s : [0..4];
  d : bool;
  [] s<4 -> 0.5 : (s'=s+1) + 0.25 : (s'=0) + 0.25 : (d'=!d);
  [] s=4 -> 1 : true;
endmodule
init s<=2 & !d endinit
label "stable" = s=4;
rewards "steps"
  true : 1;
endrewards
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def exact(path: Path, prop: str, constants: str | None = None, dtmc: bool = False) -> list[Fraction]:
    """Storm's exact values of ``prop`` at the initial states (in Storm's state order); ``dtmc``: the program
    read as a DTMC (the uniform policy's chain)."""
    if dtmc:
        text = path.read_text().replace("mdp", "dtmc", 1)
        path = path.with_name(path.stem + "_dtmc.prism")
        path.write_text(text)
    prog = stormpy.parse_prism_program(str(path), prism_compatibility=True)
    if constants:
        prog, _ = stormpy.instantiate_constants(prog, constants)
    (p,) = stormpy.parse_properties(prop, prog)
    model = stormpy.build_model[stormpy.Rational](prog, [p])
    r = stormpy.model_checking(
        model, p.get_raw_formula(), only_initial_states=True, environment=stormpy.environments.exact()
    )
    return [Fraction(str(r.get_value(s))) for s in model.initial_states]


def close(value: Any, q: Fraction, rel: float = 1e-9) -> bool:
    return abs(Fraction(value) - q) <= Fraction(rel) * max(1, abs(q))


@pytest.mark.parametrize(
    ("text", "constants", "props"),
    [
        (QUEUE, "K=5", ['S=? ["full"]', 'LRA=? ["full"]', 'R{"len"}=? [S]', 'R{"len"}=? [LRA]']),
        (QUEUE, "K=60", ["S=? [q>=30]", 'R{"len"}=? [S]']),
        (TANDEM, "C=6", ['S=? ["full"]', 'R{"len"}=? [S]']),
        (BRANCHES, None, ['S=? ["a"]', 'R{"r"}=? [S]', "S=? [s=1]"]),
    ],
    ids=["queue", "queue60", "tandem", "branches"],
)
def test_long_run_on_chains_with_nontrivial_bottom_sccs(
    tmp_path: Path, text: str, constants: str | None, props: list[str]
) -> None:
    # Storm's interval iteration cannot solve these chains' long-run equations (it raised UnmetRequirementException)
    path = write(tmp_path, "chain.prism", text)
    report = verify(path, None, props=props, constants=constants)
    for prop, entry in zip(props, report.results, strict=True):  # type: ignore[union-attr]
        (q,) = exact(path, prop, constants)
        assert entry["method"] == "other" and entry["bounds"] is None
        assert close(entry["value"], q), (prop, entry["value"], float(q))
    # a threshold on the long-run value, and --values (every state's value, from the same method)
    (q,) = exact(path, props[0], constants)
    assert close(verify(path, props[0], constants=constants, values=str(tmp_path / "v.parquet")).result, q)  # type: ignore[union-attr,arg-type]
    got = verify(path, props[0].replace("=?", f">={float(q) * 0.99}"), constants=constants)
    assert got.truth is True  # type: ignore[union-attr]


def test_long_run_under_a_policy(tmp_path: Path) -> None:
    path = write(tmp_path, "walk.prism", WALK)
    for prop in ('S=? ["near"]', 'R{"cost"}=? [S]', 'R{"time"}=? [S]', "LRA=? [hit]"):
        report = verify(path, prop)  # uniform policy: an ergodic induced chain
        (q,) = exact(path, prop, dtmc=True)
        assert report.induced == "dtmc" and close(report.result, q), (prop, report.result, float(q))  # type: ignore[union-attr,arg-type]


def test_long_run_beyond_elimination_uses_storms_long_run_iteration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # larger chains are solved by Storm's sound long-run value iteration, which stops at 1e-6 relative
    monkeypatch.setattr(checker, "LRA_ELIMINATION_MAX_STATES", 10)
    path = write(tmp_path, "tandem.prism", TANDEM)
    for prop in ('S=? ["full"]', 'R{"len"}=? [S]'):
        report = verify(path, prop, constants="C=6")
        (q,) = exact(path, prop, "C=6")
        assert close(report.result, q, rel=1e-6), (prop, report.result, float(q))  # type: ignore[union-attr,arg-type]


def test_long_run_on_a_bundled_model(tmp_path: Path) -> None:
    # leader election restarts rounds until elected: the bottom SCCs are the elected states
    path = STORM_FILES / "dtmc" / "leader-3-5.pm"
    report = verify(path, 'S=? ["elected"]')
    (q,) = exact(path, 'S=? ["elected"]')
    assert close(report.result, q)  # type: ignore[union-attr,arg-type]


@pytest.mark.parametrize(
    ("prop", "reference", "mode"),
    [
        ("P=? [G<=8 !(hit=true)]", ("P=? [F<=8 hit]", True), "stochastic"),
        ("P=? [G<=8 !hit]", ("P=? [F<=8 hit]", True), "stochastic"),
        ("P=? [G<5 !hit]", ("P=? [F<=4 hit]", True), "stochastic"),
        ("P=? [G[0,6] x<3]", ("P=? [F<=6 x=3]", True), "stochastic"),
        ("P>=0.01 [G<=8 !hit]", ("P=? [F<=8 hit]", True), "stochastic"),
        ("Pmin=? [G<=8 !hit]", ("Pmax=? [F<=8 hit]", True), "monolithic"),
        ("Pmax=? [G<=3 !hit]", ("Pmin=? [F<=3 hit]", True), "monolithic"),
        ("Pmin=? [G[2,6] !hit]", ("Pmin=? [!(F[2,6] hit)]", False), "monolithic"),
    ],
)
def test_bounded_globally_over_prism_formulas(
    tmp_path: Path, prop: str, reference: tuple[str, bool], mode: str
) -> None:
    # Storm's parser has no step-bounded G, and `hit` is a PRISM formula, not a variable
    path = write(tmp_path, "walk.prism", WALK)
    report = verify(path, prop, mode=mode)
    ref, complement = reference
    (q,) = exact(path, ref, dtmc=mode == "stochastic")
    want = 1 - q if complement else q
    (entry,) = report.results  # type: ignore[union-attr]
    if ">=" in prop:
        assert entry["truth"] == (want >= Fraction("0.01"))
    assert close(entry["value"], want), (entry["value"], float(want))


def test_unknown_names_beside_formulas_are_named(tmp_path: Path) -> None:
    path = write(tmp_path, "walk.prism", WALK)
    with pytest.raises(PropertyError, match="names nothere: not a variable or constant"):
        verify(path, "P=? [G<=8 !(hit | nothere)]")


@pytest.mark.parametrize(
    ("prop", "reference"),
    [
        ('Pmin=? [F{"time"}<=5 hit]', None),
        ('Pmin=? [F^{rew{"time"}<=5} hit]', 'Pmin=? [F{"time"}<=5 hit]'),
        ('Pmax=? [F{"cost"}<=4 "near"]', None),
        ('Pmax=? [x<2 U{"cost"}<=3 hit]', None),
    ],
)
def test_reward_bounded_path_formulas(tmp_path: Path, prop: str, reference: str | None) -> None:
    path = write(tmp_path, "walk.prism", WALK)
    # monolithic: the MDP itself, with the structure only the bound names
    (entry,) = verify(path, prop, mode="monolithic").results  # type: ignore[union-attr]
    (q,) = exact(path, reference or prop)
    assert close(entry["value"], q), (entry["value"], float(q))
    # under the uniform policy, beside an R property of another structure with the same target
    plain = (reference or prop).replace("Pmin", "P").replace("Pmax", "P")
    target = plain.rsplit("]", 1)[0].split("<=")[-1].split(" ", 1)[1]
    other = f'R{{"cost"}}=? [F {target}]' if " U" not in plain else 'R{"time"}=? [C<=3]'
    props = [plain, other] if " U" not in plain else [plain]
    report = verify(path, None, props=props)
    for text, entry in zip(props, report.results, strict=True):  # type: ignore[union-attr]
        (q,) = exact(path, text, dtmc=True)
        assert close(entry["value"], q), (text, entry["value"], float(q))


def test_reward_bounds_beside_properties_that_keep_the_target_expanded(tmp_path: Path) -> None:
    # Storm's reward-bounded method crashed the process, or answered 0.929 for 0.907, where the targets are not
    # absorbing: beside S=? and G (no terminal states) it is checked on a copy with its targets absorbing
    path = write(tmp_path, "walk.prism", WALK)
    props = ['S=? ["near"]', 'P=? [F{"time"}<=5 hit]', "P=? [G !hit]", 'P=? [x<2 U{"cost"}<=3 hit]']
    for mode in ("stochastic", "monolithic"):
        report = verify(path, None, props=props, mode=mode)
        for text, entry in zip(props[1:4:2], report.results[1:4:2], strict=True):  # type: ignore[union-attr]
            for direction in ("min", "max") if mode == "monolithic" else ("",):
                ref = text.replace("P=?", f"P{direction}=?")
                (q,) = exact(path, ref, dtmc=mode == "stochastic")
                got = entry["value"][direction] if direction else entry["value"]
                assert close(got, q), (mode, ref, got, float(q))
    # a negated side: Storm's builder (and distmc's exploration) keep every state expanded; checked on the copy
    for mode in ("stochastic", "monolithic"):
        prop = 'Pmax=? [!"near" U{"time"}<=4 hit]' if mode == "monolithic" else 'P=? [!"near" U{"time"}<=4 hit]'
        # Storm's own check of it crashes (its model keeps the targets expanded): x<2 is !"near", an atomic side
        (q,) = exact(path, prop.replace('!"near"', "x<2"), dtmc=mode == "stochastic")
        assert close(verify(path, prop, mode=mode).result, q)  # type: ignore[union-attr,arg-type]
    with pytest.raises(PropertyError, match="needs sides that are labels or expressions"):
        verify(path, 'P=? [F{"time"}<=4 (P>0.5 [X hit])]')


def test_reward_bounded_reachability_on_a_bundled_mdp() -> None:
    # csma2-2's "time" is a reward structure only the bound names
    path = STORM_FILES / "mdp" / "csma2-2.nm"
    for prop in ('Pmin=? [F{"time"}<=100 "all_delivered"]', 'Pmax=? [F^{rew{"time"}<=100} "all_delivered"]'):
        report = verify(path, prop, mode="monolithic")
        (q,) = exact(path, prop)
        assert close(report.result, q), (prop, report.result, float(q))  # type: ignore[union-attr,arg-type]


def test_reward_bound_of_an_unknown_structure_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "walk.prism", WALK)
    with pytest.raises(PropertyError):
        verify(path, 'P=? [F{"fuel"}<=5 hit]')


def test_filters_over_the_initial_states(tmp_path: Path) -> None:
    path = write(tmp_path, "starts.prism", STARTS)
    values = exact(path, 'R=? [F "stable"]')
    assert len(values) == 3
    plain = verify(path, 'R=? [F "stable"]')
    assert plain.result == pytest.approx({"min": float(min(values)), "max": float(max(values))})  # type: ignore[union-attr]
    # "first": the first initial state in the state layout's order (s, then d): s=0, !d
    (first,) = exact(write(tmp_path, "first.prism", STARTS.replace("s<=2 & !d", "s=0 & !d")), 'R=? [F "stable"]')
    want = {"max": max(values), "min": min(values), "avg": sum(values) / 3, "sum": sum(values), "first": first}
    for op, q in want.items():
        report = verify(path, f'filter({op}, R=? [F "stable"], "init")')
        assert close(report.result, q), (op, report.result, float(q))  # type: ignore[union-attr,arg-type]
        lo, hi = report.bounds  # type: ignore[misc,union-attr]
        assert Fraction(lo) <= q <= Fraction(hi)
        assert report.results[0]["property"] == f'filter({op}, R=? [F "stable"], "init")'  # type: ignore[union-attr]
    values_run = verify(path, 'filter(avg, R=? [F "stable"], "init")', values=str(tmp_path / "v.parquet"))
    assert close(values_run.result, want["avg"])  # type: ignore[union-attr,arg-type]
    r = verify(path, 'filter(range, R=? [F "stable"], "init")')
    assert r.result == plain.result  # type: ignore[union-attr]
    # truth values over the initial states: Storm's P>=p per initial state
    probs = exact(path, 'P=? [F<=3 "stable"]')
    for bound in sorted(probs):
        t = f'P>={float(bound)} [F<=3 "stable"]'
        holds = [q >= Fraction(float(bound)) for q in probs]
        assert verify(path, f'filter(forall, {t}, "init")').truth is all(holds)  # type: ignore[union-attr]
        assert verify(path, f'filter(exists, {t}, "init")').truth is any(holds)  # type: ignore[union-attr]
        assert verify(path, f'filter(count, {t}, "init")').result == sum(holds)  # type: ignore[union-attr]
    # the exact engine aggregates the rationals
    (entry,) = verify(path, 'filter(avg, R=? [F "stable"], "init")', exact=True).results  # type: ignore[union-attr]
    assert Fraction(entry["exact"]) == sum(values) / 3


def test_filters_distmc_does_not_answer_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "starts.prism", STARTS)
    with pytest.raises(PropertyError, match="filter function 'argmax' is not supported"):
        verify(path, 'filter(argmax, R=? [F "stable"], "init")')
    with pytest.raises(PropertyError, match="over the initial states only"):
        verify(path, 'filter(max, R=? [F "stable"], s=1)')
    with pytest.raises(PropertyError, match="give it a threshold property"):
        verify(path, 'filter(forall, R=? [F "stable"], "init")')
    with pytest.raises(PropertyError, match="use forall"):
        verify(path, 'filter(max, P>=0.5 [F "stable"], "init")')


def test_constants_of_a_properties_file(tmp_path: Path) -> None:
    path = write(tmp_path, "walk.prism", WALK)
    props = [
        "const int B;",
        "const double q = 0.5;",
        '"g": P=? [G<=B !hit]',
        'P>=q [F<=B "near"]',
        'filter(max, P=? [F<=B hit], "init")',
    ]
    report = verify(path, None, props=props, constants="B=5")
    g, near, hit = report.results  # type: ignore[union-attr]
    (q,) = exact(path, "P=? [F<=5 hit]", dtmc=True)
    assert g["name"] == "g" and close(g["value"], 1 - q) and close(hit["value"], q)
    (q,) = exact(path, 'P=? [F<=5 "near"]', dtmc=True)
    assert near["truth"] is (q >= Fraction(1, 2))
    with pytest.raises(PropertyError, match=r"without a value \(B\): give it with --const B=VALUE"):
        verify(path, None, props=props)
    with pytest.raises(DistmcError, match="'Z', which neither the model nor the properties declare"):
        verify(path, None, props=props, constants="B=5,Z=1")
    # the model's constants and the properties' together
    qpath = write(tmp_path, "queue.prism", QUEUE)
    report = verify(qpath, None, props=["const int M;", "S=? [q>=M]"], constants="K=5,M=4")
    (q,) = exact(qpath, "S=? [q>=4]", "K=5")
    assert close(report.result, q)  # type: ignore[union-attr,arg-type]
