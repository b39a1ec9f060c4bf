"""Property-based differential tests on generated PRISM programs and policies (hypothesis, Storm as reference).

A strategy writes small random ``mdp``/``dtmc`` programs (1-3 modules, bounded int and bool variables, an
optional global variable, guards and updates over a wide range of PRISM operators, synchronising and
unlabelled commands, state-dependent probabilities, a "goal" label, an optional reward structure with state and
action rewards; ``init ... endinit`` blocks behind :data:`INIT_BLOCKS`). Against Storm:

* A: the successor kernel, state by state, on Storm's full reachable MDP (no property, nothing terminal);
* B: monolithic :func:`verify` against :func:`storm_reference` (states, transitions, choices, values);
* C: random TorchScript policies in stochastic and deterministic mode against :func:`storm_policy_reference`.

Every test is derandomised (``derandomize=True``) so CI sees the same examples on every run. A failing example
prints the whole PRISM program; ``DISTMC_NO_SHRINK=1`` skips shrinking while investigating.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import stormpy
from hypothesis import HealthCheck, Phase, assume, event, given, settings
from hypothesis import strategies as st

from distmc.api import Report, verify
from distmc.errors import DistmcError
from distmc.model.kernel import Kernel
from distmc.model.program import load_model
from tests.reference import storm_policy_reference, storm_reference

ACTIONS = ("a", "b", "c")
#: Largest product of the variables' domain sizes of a generated program (keeps state spaces small).
DOMAIN_BUDGET = 600
#: Generate ``init ... endinit`` blocks (once crashed load_model; see tests/test_regressions.py).
INIT_BLOCKS = True
#: Use ``mod`` in reward structures and labels (distmc re-parses Storm's printout of those, where ``mod`` once came
#: out applied twice; see tests/test_regressions.py).
PRINTED_MOD = True
SETTINGS: dict[str, Any] = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
if os.environ.get("DISTMC_NO_SHRINK"):  # quicker iterations while investigating a failure
    SETTINGS["phases"] = [Phase.explicit, Phase.generate]
else:  # no "explain" phase: it reruns a failing example hundreds of times
    SETTINGS["phases"] = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]
_COUNTER = [0]


# -- the program generator ---------------------------------------------------------------------------------------


@dataclass
class GVar:
    name: str
    lo: int
    hi: int
    init: int
    is_bool: bool
    module: int | None  # None: global


@dataclass
class GProgram:
    text: str
    model_type: str
    variables: list[GVar]
    has_rewards: bool
    has_init_block: bool
    distinct: bool
    actions: list[str] = field(default_factory=list)

    def write(self, folder: Path) -> Path:
        _COUNTER[0] += 1
        path = folder / f"gen{_COUNTER[0]}.{'nm' if self.model_type == 'mdp' else 'pm'}"
        path.write_text(self.text)
        return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the generated programs and networks go (module scoped: hypothesis reruns the test body)."""
    return tmp_path_factory.mktemp("generated")


def _lit(k: int) -> str:
    return f"({k})" if k < 0 else str(k)


def _int_expr(draw: Any, ivars: list[GVar], bvars: list[GVar], depth: int, mod: bool = True) -> str:
    if depth <= 0 or draw(st.integers(0, 2)) == 0:
        if ivars and not draw(st.booleans()):
            return draw(st.sampled_from(ivars)).name
        return _lit(draw(st.integers(-1, 3)))
    ops = ["+", "-", "*", "min", "max", "mod", "floor", "ceil", "ite"]
    op = draw(st.sampled_from(ops if mod else [o for o in ops if o != "mod"]))
    sub = lambda: _int_expr(draw, ivars, bvars, depth - 1, mod)  # noqa: E731
    if op in "+-*":
        return f"({sub()} {op} {sub()})"
    if op in ("min", "max"):
        args = [sub() for _ in range(draw(st.integers(2, 3)))]
        return f"{op}({', '.join(args)})"
    if op in ("mod", "floor", "ceil"):  # often of a negative number, where the rounding conventions differ
        arg = sub()
        shift = draw(st.integers(0, 2))
        arg = f"({arg} - {shift})" if shift else arg
        k = draw(st.integers(2, 3))
        return f"mod({arg}, {k})" if op == "mod" else f"{op}({arg}/{k})"
    return f"({_bool_expr(draw, ivars, bvars, depth - 1, mod)} ? {sub()} : {sub()})"


def _bool_expr(draw: Any, ivars: list[GVar], bvars: list[GVar], depth: int, mod: bool = True) -> str:
    if depth <= 0 or draw(st.integers(0, 2)) == 0:
        kind = draw(st.integers(0, 10))
        if kind in (0, 10):
            return "true" if kind == 0 else "false"
        if kind <= 2 and bvars:
            return draw(st.sampled_from(bvars)).name
        rel = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]))
        if kind <= 6 and ivars:  # a variable against a constant of its range: true in some states only
            v = draw(st.sampled_from(ivars))
            return f"({v.name} {rel} {_lit(draw(st.integers(v.lo, v.hi)))})"
        return f"({_int_expr(draw, ivars, bvars, 1, mod)} {rel} {_int_expr(draw, ivars, bvars, 1, mod)})"
    # Storm's PRISM parser has no "<=>"; "=" and "!=" between booleans are iff and xor.
    op = draw(st.sampled_from(["&", "|", "!", "=>", "=", "!="]))
    sub = lambda: _bool_expr(draw, ivars, bvars, depth - 1, mod)  # noqa: E731
    if op == "!":
        return f"!{sub()}"
    return f"({sub()} {op} {sub()})"


def _assignment(draw: Any, v: GVar, ivars: list[GVar], bvars: list[GVar]) -> str:
    if v.is_bool:
        return f"({v.name}'={_bool_expr(draw, ivars, bvars, 2)})"
    e = _int_expr(draw, ivars, bvars, 2)
    # (Hypothesis's simplest draw is the first option, so the first ones are the most useful.)
    style = draw(st.integers(0, 4))
    if style == 0:  # a step up or down
        new = f"min(max({v.name} {draw(st.sampled_from(['+', '-']))} 1, {_lit(v.lo)}), {v.hi})"
    elif style == 4:  # ternary between in-range constants
        c1, c2 = draw(st.integers(v.lo, v.hi)), draw(st.integers(v.lo, v.hi))
        new = f"({_bool_expr(draw, ivars, bvars, 1)} ? {_lit(c1)} : {_lit(c2)})"
    elif style == 1:  # range check with a ternary
        new = f"((({e}) >= {_lit(v.lo)} & ({e}) <= {v.hi}) ? ({e}) : {v.name})"
    else:  # clamp
        new = f"min(max({e}, {_lit(v.lo)}), {v.hi})"
    return f"({v.name}'={new})"


_FIXED_DISTRIBUTIONS = [
    ["1/2", "1/2"],
    ["1"],
    ["0.25", "0.75"],
    ["1/3", "2/3"],
    ["1/3", "1/3", "1/3"],
    ["0.2", "0.3", "0.5"],
    ["1/4", "1/4", "1/2"],
    ["1/6", "1/2", "1/3"],
]


def _distribution(draw: Any, ivars: list[GVar]) -> list[str]:
    if ivars and draw(st.integers(0, 3)) == 3:  # state dependent, zero at the lower bound
        v = draw(st.sampled_from(ivars))
        p = f"(({v.name} - {_lit(v.lo)})/{v.hi - v.lo + 1})"
        if draw(st.booleans()):
            return [p, f"1 - {p}"]
        return [f"{p}/2", f"{p}/2", f"1 - {p}"]
    return draw(st.sampled_from(_FIXED_DISTRIBUTIONS))


def _variable(draw: Any, name: str, is_bool: bool, module: int | None) -> GVar:
    if is_bool:
        return GVar(name, 0, 1, int(draw(st.booleans())), True, module)
    lo = draw(st.sampled_from([0, 0, 0, -1, 1]))
    hi = lo + draw(st.integers(1, 3))
    return GVar(name, lo, hi, draw(st.integers(lo, hi)), False, module)


def _decl(v: GVar, with_init: bool) -> str:
    init = f" init {('true' if v.init else 'false') if v.is_bool else _lit(v.init)}" if with_init else ""
    return f"{v.name} : {'bool' if v.is_bool else f'[{_lit(v.lo)}..{v.hi}]'}{init};"


def _size(vs: list[GVar]) -> int:
    return math.prod(v.hi - v.lo + 1 for v in vs)


@st.composite
def programs(draw: Any, model_type: str | None = None, distinct: bool = False, init_block: bool = True) -> GProgram:
    """A small valid PRISM program.

    ``distinct``: no state enables two choices with the same label (commands sharing a label within a module
    have mutually exclusive guards; unlabelled commands occur in one module only), as policy tests need.
    """
    if model_type is None:
        model_type = draw(st.sampled_from(["mdp", "mdp", "mdp", "dtmc"]))
    n_mod = draw(st.integers(1, 3))
    variables: list[GVar] = []
    glob: list[GVar] = []
    if draw(st.booleans()):
        glob.append(_variable(draw, "g", draw(st.integers(0, 3)) == 0, None))
    variables += glob
    mod_vars: list[list[GVar]] = []
    for m in range(n_mod):
        mine = [_variable(draw, f"x{m}", False, m)]  # at least one int variable per module
        if _size(variables + mine) * 4 <= DOMAIN_BUDGET and draw(st.booleans()):
            mine.append(_variable(draw, f"y{m}", False, m))
        if _size(variables + mine) * 2 <= DOMAIN_BUDGET and draw(st.booleans()):
            mine.append(_variable(draw, f"b{m}", True, m))
        if _size(variables + mine) > DOMAIN_BUDGET:
            mine = mine[:1]
        variables += mine
        mod_vars.append(mine)
    ivars = [v for v in variables if not v.is_bool]
    bvars = [v for v in variables if v.is_bool]
    use_init_block = INIT_BLOCKS and init_block and draw(st.integers(0, 7)) == 0

    lines = [model_type, ""]
    for v in glob:
        lines.append(f"global {_decl(v, not use_init_block)}")
    used_actions: list[str] = []
    unlabelled_owner: int | None = None
    for m in range(n_mod):
        lines += ["", f"module M{m}"]
        if draw(st.booleans()):
            mod_vars[m].reverse()  # e.g. bool before int in the file: Storm still lists ints first
        lines += [f"  {_decl(v, not use_init_block)}" for v in mod_vars[m]]
        n_cmd = draw(st.integers(1, 3))
        labels = []
        for _ in range(n_cmd):
            choices = ["", *ACTIONS]
            if distinct and unlabelled_owner is not None and unlabelled_owner != m:
                choices = list(ACTIONS)
            lab = draw(st.sampled_from(choices))
            if lab == "" and unlabelled_owner is None:
                unlabelled_owner = m
            labels.append(lab)
        first = next(v for v in mod_vars[m] if not v.is_bool)
        for ci, lab in enumerate(labels):
            guard = "true" if draw(st.integers(0, 4)) == 0 else _bool_expr(draw, ivars, bvars, draw(st.integers(0, 2)))
            same = [j for j, other in enumerate(labels) if other == lab]
            if distinct and len(same) > 1:
                k = same.index(ci)
                guard = f"({guard} & mod({first.name} - {_lit(first.lo)}, {len(same)}) = {k})"
            writable = mod_vars[m] + (glob if lab == "" else [])
            dist = _distribution(draw, ivars)
            branches = []
            for bi, p in enumerate(dist):
                targets = [v for v in writable if draw(st.booleans())]
                if ci == 0 and bi == 0 and first not in targets:
                    # Every module writes a variable: Storm turns a variable no command writes into a constant,
                    # and distmc fails on a program left with no state variable at all (reported).
                    targets.insert(0, first)
                assigns = " & ".join(_assignment(draw, v, ivars, bvars) for v in targets) or "true"
                branches.append(f"{p} : {assigns}" if len(dist) > 1 or draw(st.booleans()) else assigns)
            lines.append(f"  [{lab}] {guard} -> {' + '.join(branches)};")
            if lab not in used_actions:
                used_actions.append(lab)
        lines.append("endmodule")
    if use_init_block:
        pinned = " & ".join(
            f"{v.name}" if v.is_bool and v.init else f"!{v.name}" if v.is_bool else f"{v.name}={_lit(v.init)}"
            for v in variables
        )
        lines += ["", f"init ({pinned}) | {_bool_expr(draw, ivars, bvars, 2)} endinit"]
    # "goal": mostly false initially (else the property makes the initial state terminal and the model trivial).
    v = draw(st.sampled_from(variables))
    if v.is_bool:
        atom = f"!{v.name}" if v.init else v.name
    else:
        atom = f"({v.name} = {_lit(draw(st.sampled_from([c for c in range(v.lo, v.hi + 1) if c != v.init])))})"
    goal = draw(st.sampled_from(["{a}", "({a} & {b})", "({a} | {b})", "{b}"]))
    goal = goal.format(a=atom, b=_bool_expr(draw, ivars, bvars, 2, PRINTED_MOD) if "{b}" in goal else "")
    lines += ["", f'label "goal" = {goal};']
    if draw(st.booleans()):
        lines.append(f'label "other" = {_bool_expr(draw, ivars, bvars, 1, PRINTED_MOD)};')
    has_rewards = draw(st.integers(0, 2)) > 0
    if has_rewards:
        name = draw(st.sampled_from(['"r"', '"cost"', ""]))
        lines += ["", f"rewards {name}".rstrip()]
        for _ in range(draw(st.integers(0, 2))):
            value = draw(st.sampled_from(["1", "0.5", "max(VAL, 0)", "(VAL >= 0 ? VAL : 0)/2"]))
            value = value.replace("VAL", _int_expr(draw, ivars, bvars, 1, PRINTED_MOD))
            lines.append(f"  {_bool_expr(draw, ivars, bvars, 1, PRINTED_MOD)} : {value};")
        for _ in range(draw(st.integers(1, 3))):
            lab = draw(st.sampled_from(used_actions))
            value = draw(st.sampled_from(["1", "0.25", "max(VAL, 0) + 1/3"]))
            value = value.replace("VAL", _int_expr(draw, ivars, bvars, 1, PRINTED_MOD))
            lines.append(f"  [{lab}] {_bool_expr(draw, ivars, bvars, 1, PRINTED_MOD)} : {value};")
        lines.append("endrewards")
    text = "\n".join(lines) + "\n"
    variables = glob + [v for mine in mod_vars for v in mine]  # in declaration order
    prog = GProgram(text, model_type, variables, has_rewards, use_init_block, distinct, used_actions)
    return prog


def _storm_accepts(path: Path) -> Any:
    """The parsed program, or ``assume(False)`` when Storm refuses it (rare by construction)."""
    try:
        prog = stormpy.parse_prism_program(str(path), prism_compatibility=True)
    except RuntimeError:
        assume(False)
    # Storm's parser simplifies: a command that can never fire goes, a variable no command writes becomes a
    # constant; programs left without any state variable are kept (see tests/test_regressions.py).
    return prog


def _storm_full(prog: Any) -> Any:
    opts = stormpy.BuilderOptions()
    opts.set_build_state_valuations()
    opts.set_build_choice_labels()
    opts.set_build_all_labels()
    try:
        return stormpy.build_model(prog, options=opts)
    except RuntimeError:  # e.g. an init block that admits no state
        assume(False)


def _valuation(mdp: Any, s: int, names: list[str]) -> tuple[int, ...]:
    val = json.loads(str(mdp.state_valuations.to_json(s))) or {}  # null when the program has no variables
    return tuple(int(val[n]) for n in names)


# -- A: the kernel against Storm's builder -----------------------------------------------------------------------


def _same_distribution(a: dict[tuple[int, ...], float], b: dict[tuple[int, ...], float]) -> bool:
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) <= 1e-12 for k in a)


def _kernel(model: Any, compiled: bool) -> Kernel:
    """The numpy kernel, or the numba-compiled one (``Kernel(model, compiled=True)``) where this version has it."""
    try:
        k = Kernel(model, compiled=compiled)
    except TypeError:  # a version without the compiled kernel
        if compiled:
            pytest.skip("this version of distmc has no compiled kernel")
        return Kernel(model)
    if compiled:
        assert getattr(k, "is_compiled", True), "the compiled kernel does not apply to a small one-word model"
    return k


@contextlib.contextmanager
def _numpy_kernel() -> Iterator[None]:
    """verify() with the numpy kernel (setting up the compiled kernel costs more than these tiny models take)."""
    old = os.environ.get("DISTMC_KERNEL")
    os.environ["DISTMC_KERNEL"] = "numpy"
    try:
        yield
    finally:
        if old is None:
            del os.environ["DISTMC_KERNEL"]
        else:
            os.environ["DISTMC_KERNEL"] = old


@pytest.mark.slow  # 22 s; the compiled kernel's state-by-state test stays
@settings(max_examples=300, **SETTINGS)
@given(programs())
def test_kernel_matches_storm_state_by_state(folder: Path, gp: GProgram) -> None:
    _check_kernel(gp.write(folder), gp, compiled=False)


@settings(max_examples=100, **SETTINGS)
@given(programs())
def test_compiled_kernel_matches_storm_state_by_state(folder: Path, gp: GProgram) -> None:
    _check_kernel(gp.write(folder), gp, compiled=True)


def _check_kernel(path: Path, gp: GProgram, compiled: bool) -> None:
    prog = _storm_accepts(path)
    full = _storm_full(prog)
    model = load_model(path)
    names = [v.name for v in model.variables]
    # Layout: globals, then each module's variables, ints before bools within a module. (Storm turns a variable
    # that no command writes, and no init block constrains, into a constant: it is then in neither layout.)
    expected = [v.name for v in gp.variables if v.module is None]
    for m in sorted({v.module for v in gp.variables if v.module is not None}):
        mine = [v for v in gp.variables if v.module == m]
        expected += [v.name for v in mine if not v.is_bool] + [v.name for v in mine if v.is_bool]
    assert set(json.loads(str(full.state_valuations.to_json(0))) or {}) == set(names), gp.text
    assert names == [x for x in expected if x in names], gp.text

    n = full.nr_states
    vals = [_valuation(full, s, names) for s in range(n)]
    assert sorted(map(tuple, model.initial_states.tolist())) == sorted(vals[s] for s in full.initial_states), gp.text
    states = np.array(vals, dtype=np.int64).reshape(n, len(names))
    exp = _kernel(model, compiled).expand(states)
    ours: list[list[tuple[str, dict[tuple[int, ...], float]]]] = [[] for _ in range(n)]
    for c in range(exp.n_choices):
        d: dict[tuple[int, ...], float] = {}
        for t in range(exp.branch_offsets[c], exp.branch_offsets[c + 1]):
            key = tuple(exp.succ[t].tolist())
            d[key] = d.get(key, 0.0) + float(exp.prob[t])
        ours[int(exp.choice_state[c])].append((model.actions[int(exp.choice_action[c])], d))
    matrix = full.transition_matrix
    event(f"{gp.model_type}, states: {'1' if n == 1 else '2-9' if n < 10 else '10-99' if n < 100 else '100+'}")
    event(f"synchronised choices: {any(len(model.sync[a]) > 1 for a in model.sync if a)}")
    event(f"deadlock states: {any('deadlock' in full.labeling.get_labels_of_state(s) for s in range(n))}")
    for s in range(n):
        where = f"state {dict(zip(names, vals[s], strict=True))} of\n{gp.text}"
        theirs = []
        for c in range(matrix.get_row_group_start(s), matrix.get_row_group_end(s)):
            labs = full.choice_labeling.get_labels_of_choice(c)
            d = {}
            for e in matrix.get_row(c):
                d[vals[e.column]] = d.get(vals[e.column], 0.0) + e.value
            theirs.append((next(iter(labs), ""), d))
        if "deadlock" in full.labeling.get_labels_of_state(s):
            assert ours[s] == [], where
            assert len(theirs) == 1 and theirs[0][1] == {vals[s]: 1.0}, where
            continue
        assert ours[s], where
        if gp.model_type == "dtmc":  # Storm fuses the choices of a state uniformly, as distmc's explorer does
            fused: dict[tuple[int, ...], float] = {}
            for _, d in ours[s]:
                for k, p in d.items():
                    fused[k] = fused.get(k, 0.0) + p / len(ours[s])
            assert len(theirs) == 1 and _same_distribution(fused, theirs[0][1]), (where, fused, theirs)
            continue
        rest = list(theirs)
        for lab, d in ours[s]:
            match = [i for i, (l2, d2) in enumerate(rest) if l2 == lab and _same_distribution(d, d2)]
            assert match, (where, (lab, d), theirs)
            rest.pop(match[0])
        assert not rest, (where, ours[s], theirs)


# -- B: monolithic values against Storm's checker ----------------------------------------------------------------


def _close(a: Any, b: Any, tol: float = 1e-9) -> bool:
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and _close(a["min"], b["min"], tol)
            and _close(a["max"], b["max"], tol)
        )
    a, b = float(a), float(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tol * max(1.0, abs(b))


@settings(max_examples=60, **SETTINGS)
@given(programs())
def test_monolithic_values_match_storm(folder: Path, gp: GProgram) -> None:
    path = gp.write(folder)
    prog = _storm_accepts(path)
    assume(_storm_full(prog).nr_states > 1)  # one-state models say little about values
    props = ['P=? [F "goal"]', 'P=? [F<=5 "goal"]']
    if 'label "other"' in gp.text:  # until with an atomic left side (terminal states on both sides) and without
        props += ['P=? ["other" U "goal"]', 'P=? [!"other" U<=4 "goal"]']
    if gp.has_rewards:
        props += ['R=? [F "goal"]', "R=? [C<=4]"]
    for j, prop in enumerate(props):
        try:
            ref = storm_reference(path, None, prop)
        except RuntimeError:  # e.g. a reward model that is empty once Storm has dropped its never-enabled commands
            event(f"{prop}: Storm refuses it")
            with pytest.raises(DistmcError):
                verify(path, prop, mode="monolithic")
            continue
        event(
            f"{prop}: {'nondeterministic' if isinstance(ref['result'], dict) else 'one value'}"
            + (", in (0, 1)" if isinstance(ref["result"], float) and 0 < ref["result"] < 1 else "")
            + (", min < max" if isinstance(ref["result"], dict) and ref["result"]["min"] < ref["result"]["max"] else "")
        )
        # The first property with distmc's default kernel, the others with the numpy kernel (quicker to set up).
        with contextlib.nullcontext() if j == 0 else _numpy_kernel():
            got = verify(path, prop, mode="monolithic")
        assert isinstance(got, Report)
        where = f"{prop} on\n{gp.text}"
        assert (got.states, got.transitions, got.choices) == (ref["states"], ref["transitions"], ref["choices"]), (
            where,
            (got.states, got.transitions, got.choices),
            ref,
        )
        assert _close(got.result, ref["result"]), (where, got.result, ref["result"])


# -- C: network policies against Storm's MDP weighted in Python --------------------------------------------------


def _policy_files(
    gp_path: Path, features: list[str], actions: list[str], seed: int, output: str
) -> tuple[Any, Path, Path]:
    import torch

    class Net(torch.nn.Module):
        def __init__(self, softmax: bool) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(
                torch.nn.Linear(len(features), 8), torch.nn.Tanh(), torch.nn.Linear(8, len(actions))
            )
            self.softmax = softmax

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = self.body(x)
            return torch.softmax(z, dim=-1) if self.softmax else z

    torch.manual_seed(seed)
    net = Net(output == "probabilities")
    net.eval()
    f = gp_path.with_suffix(".pt")
    torch.jit.script(net).save(str(f))
    i = gp_path.with_suffix(".json")
    i.write_text(json.dumps({"features": features, "actions": actions, "output": output}))
    return net, f, i


@pytest.mark.slow  # 13 s
@settings(max_examples=50, **SETTINGS)
@given(
    programs(model_type="mdp", distinct=True, init_block=False),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["probabilities", "logits"]),
)
def test_network_policy_matches_storm(folder: Path, gp: GProgram, seed: int, output: str) -> None:
    import torch

    path = gp.write(folder)
    prog = _storm_accepts(path)
    full = _storm_full(prog)
    assume(full.nr_states > 1)
    # The generator guarantees distinct labels per state (storm_policy_reference relies on it); check it.
    m = full.transition_matrix
    for s in range(full.nr_states):
        labs = [
            next(iter(full.choice_labeling.get_labels_of_choice(c)), "")
            for c in range(m.get_row_group_start(s), m.get_row_group_end(s))
        ]
        assert len(set(labs)) == len(labs), (s, labs, gp.text)
    model = load_model(path)
    features = [v.name for v in model.variables]
    actions = list(model.actions)
    # A model without any action (Storm dropped every command) is kept (see tests/test_regressions.py).
    event(f"policy over {len(actions)} action(s)")
    net, f, i = _policy_files(path, features, actions, seed, output)
    gaps: list[float] = []

    def pi(val: dict[str, Any]) -> np.ndarray:
        x = torch.tensor([[float(val[n]) for n in features]])
        with torch.no_grad():
            y = net(x)[0].double().numpy()
        top = np.sort(y)[::-1]
        if top.size > 1:
            gaps.append(float(top[0] - top[1]))
        return np.exp(y - y.max()) if output == "logits" else y

    for mode, prop in itertools.product(("stochastic", "deterministic"), ('P=? [F "goal"]', 'P=? [F<=3 "goal"]')):
        gaps.clear()
        ref = storm_policy_reference(path, None, prop, pi, actions, deterministic=mode == "deterministic")
        if mode == "deterministic":
            # float32 rounding differs between batched and one-state evaluation: skip near-ties of the argmax.
            assume(not gaps or min(gaps) > 1e-5)
        got = verify(path, prop, policy=str(f), interface=i, mode=mode)
        assert isinstance(got, Report)
        where = f"{mode}, {output}, seed {seed}, {prop} on\n{gp.text}"
        event(f"{mode}: {ref['states']} states" if ref["states"] < 3 else f"{mode}: 3+ states")
        event(f"{mode}, {prop}: value in (0, 1): {0 < ref['result'] < 1}")
        assert got.induced == "dtmc", where
        assert (got.states, got.transitions) == (ref["states"], ref["transitions"]), (where, got, ref)
        assert _close(got.result, ref["result"], 1e-6), (where, got.result, ref["result"])


def test_generator_covers_the_operators() -> None:
    """The strategy reaches every construct it is meant to exercise (guards against a silently narrow generator)."""
    seen: set[str] = set()

    @settings(max_examples=150, **SETTINGS)
    @given(programs())
    def collect(gp: GProgram) -> None:
        t = gp.text
        for needle in (
            "global ",
            "mod(",
            "floor(",
            "ceil(",
            "min(",
            "max(",
            " ? ",
            "=>",
            ") = (",
            ") != (",
            " | ",
            " * ",
            "[a]",
            "[]",
            "dtmc",
            "mdp",
            "rewards",
            "init (",
            "bool",
            "[(-1)..",
        ):
            if needle in t:
                seen.add(needle)
        if sum(1 for k in range(3) if f"module M{k}" in t) > 1 and any(t.count(f"[{a}]") > 1 for a in ACTIONS):
            seen.add("sync")

    collect()
    missing = {
        "global ",
        "mod(",
        "floor(",
        "ceil(",
        "min(",
        "max(",
        " ? ",
        "=>",
        ") = (",
        ") != (",
        " | ",
        " * ",
        "[a]",
        "[]",
        "dtmc",
        "mdp",
        "rewards",
        "bool",
        "[(-1)..",
        "sync",
    } - seen
    if INIT_BLOCKS:
        missing |= {"init ("} - seen
    assert not missing
