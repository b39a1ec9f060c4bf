"""--traces, --values and --plot (issue 13) against independent computations.

Traces: every first-visit path is listed by a plain depth-first enumeration over the Gymnasium environment's
one-step tables and the policy (no explorer, reducer or search involved), and the K most probable are compared.
Replay: every trace is stepped through `PrismEnv` action by action. Values: Storm's own builder and result vector
on Storm's bundled DTMCs (matched by state valuation), the native checker's vector, an explicit BFS for depths.
"""

from __future__ import annotations

import json
import math
from collections import deque
from pathlib import Path

import numpy as np
import pytest
import stormpy

from distmc.api import verify
from distmc.assemble.reducer import InducedModel
from distmc.check.checker import environment
from distmc.cli import main
from distmc.explain.traces import format_trace
from distmc.explain.values import bfs_depth, depth_from_levels, read_values, riskiest
from distmc.model.program import load_model
from distmc.policy import action_distribution, load_policy
from tests.conftest import STORM_FILES, coolmc

pytest.importorskip("gymnasium")

from distmc.gym import PrismEnv  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LOOPS = REPO / "tests" / "data" / "explain" / "loops.prism"
EX = REPO / "distmc" / "examples"
GRID, GRID_PT, GRID_IF = EX / "gridworld.prism", EX / "gridworld_policy.pt", EX / "gridworld_policy.json"


# -- an independent enumeration of paths ------------------------------------------------------------------------


class Rows:
    """The induced DTMC's row of a state, from the environment's one-step tables and the policy (or uniform)."""

    def __init__(self, path: Path, constants: str | None, policy: str = "uniform", interface: Path | None = None):
        self.model = load_model(path, constants)
        self.env = PrismEnv(self.model, interface=interface)
        self.policy = None if policy == "uniform" else load_policy(policy, self.model, interface)
        if self.policy is not None:
            assert self.policy.actions == self.env.actions
        self.cache: dict[tuple[int, ...], dict[tuple[int, ...], float]] = {}
        self.truth: dict[tuple[str, tuple[int, ...]], bool] = {}

    def pi(self, state: tuple[int, ...]) -> np.ndarray:
        self.env.reset(options={"state": np.array(state)})
        mask = self.env.action_masks()
        if self.policy is None:
            return mask / mask.sum()
        return action_distribution(self.policy, np.array([state]), mask[None, :])[0]

    def row(self, state: tuple[int, ...]) -> dict[tuple[int, ...], float]:
        if state not in self.cache:
            pi = self.pi(state)
            out: dict[tuple[int, ...], float] = {}
            for a in np.flatnonzero(pi > 0).tolist():
                succ, prob = self.env.outcomes(a)
                for s, p in zip(map(tuple, succ.tolist()), prob.tolist(), strict=True):
                    out[s] = out.get(s, 0.0) + float(pi[a]) * p
            self.cache[state] = out
        return self.cache[state]

    def holds(self, expr: str, state: tuple[int, ...]) -> bool:
        if expr == "true":
            return True
        if expr.startswith("!"):
            return not self.holds(expr[1:], state)
        if (expr, state) not in self.truth:
            self.truth[expr, state] = bool(self.model.labels[expr](np.array([state]))[0])
        return self.truth[expr, state]


def enumerate_paths(
    rows: Rows, psi: str, phi: str, max_steps: int | None, min_prob: float
) -> list[tuple[float, tuple[tuple[int, ...], ...]]]:
    """Every path from the initial state that first reaches phi (within max_steps), staying in psi & !phi before,
    with probability at least min_prob (a prefix below it is dropped: extending it only lowers its probability)."""
    init = tuple(rows.model.initial_states[0].tolist())
    out = []
    stack = [((init,), 1.0)]
    while stack:
        path, prob = stack.pop()
        s = path[-1]
        if rows.holds(phi, s):
            out.append((prob, path))
            continue
        if not rows.holds(psi, s) or len(path) - 1 == max_steps:
            continue
        for t, p in rows.row(s).items():
            if t == s and p == 1.0:  # an absorbing state outside the target: no path goes on from it
                continue
            if p > 0 and prob * p >= min_prob:
                stack.append(((*path, t), prob * p))
    out.sort(key=lambda x: -x[0])
    return out


def _tuple(state: dict[str, int | bool], model: object) -> tuple[int, ...]:
    return tuple(int(state[v.name]) for v in model.variables)  # type: ignore[attr-defined]


def _compare(traces: list[dict], listed: list[tuple[float, tuple]], rows: Rows, k: int, min_prob: float) -> None:
    # every path of probability >= min_prob is listed, so the k most probable are when the k-th is above it
    assert len(listed) >= k and listed[k - 1][0] > min_prob * (1 + 1e-9)
    assert len(traces) == k
    probs = [t["probability"] for t in traces]
    assert probs == sorted(probs, reverse=True)
    np.testing.assert_allclose(probs, [p for p, _ in listed[: len(traces)]], rtol=1e-12, atol=0)
    known = {path: p for p, path in listed}
    seen = set()
    for t in traces:
        path = tuple(_tuple(step["state"], rows.model) for step in t["path"])
        assert path in known, "a trace that is not a path of the model"
        assert math.isclose(known[path], t["probability"], rel_tol=1e-12)
        assert path not in seen, "a trace listed twice"
        seen.add(path)
        steps = [step["p"] for step in t["path"][:-1]]
        assert math.isclose(math.prod(steps), t["probability"], rel_tol=1e-12)
        assert t["path"][-1]["action"] is None and t["path"][-1]["pi"] is None and t["path"][-1]["p"] is None


@pytest.mark.parametrize(
    ("prop", "psi", "phi", "steps"),
    [
        ('P=? [F<=7 "bad"]', "true", "bad", 7),
        ('P=? [!"trap" U<=9 "bad"]', "!trap", "bad", 9),
        ('P=? [F<3 "bad"]', "true", "bad", 2),
    ],
)
def test_bounded_traces_are_the_most_probable_listed_paths(prop: str, psi: str, phi: str, steps: int) -> None:
    rows = Rows(LOOPS, None)
    listed = enumerate_paths(rows, psi, phi, steps, 0.0)  # every path
    k = min(25, len(listed))
    report = verify(LOOPS, prop, traces=k)
    _compare(report.traces, listed, rows, k, 0.0)  # type: ignore[arg-type]
    assert report.traces_mass is not None
    assert report.traces_mass <= report.result + 1e-12  # type: ignore[operator]
    if k == len(listed):  # every path: their mass is the value
        assert math.isclose(report.traces_mass, report.result, rel_tol=1e-12)  # type: ignore[arg-type]
        assert len(verify(LOOPS, prop, traces=k + 5).traces) == k  # type: ignore[arg-type, union-attr]


def test_unbounded_traces_are_the_most_probable_paths() -> None:
    """Paths of any length (the model has cycles): every one of probability >= 5e-4 is listed."""
    rows = Rows(LOOPS, None)
    listed = enumerate_paths(rows, "true", "bad", None, 5e-4)
    k = 30
    report = verify(LOOPS, 'P=? [F "bad"]', traces=k)
    _compare(report.traces, listed, rows, k, 5e-4)  # type: ignore[arg-type]
    assert max(len(t["path"]) for t in report.traces) > 6  # type: ignore[union-attr]  # walks round the cycles


@pytest.mark.parametrize(
    ("policy", "n", "prop", "steps", "min_prob"),
    [
        ("trained", 6, 'P=? [F<=9 "crash"]', 9, 1e-5),
        ("uniform", 4, 'P=? [F<=4 "crash"]', 4, 1e-3),
        ("trained", 6, 'P=? [F "crash"]', None, 1e-5),
    ],
)
def test_gridworld_traces_against_enumeration(
    policy: str, n: int, prop: str, steps: int | None, min_prob: float
) -> None:
    kw = {"policy": str(GRID_PT), "interface": GRID_IF} if policy == "trained" else {}
    rows = Rows(GRID, f"N={n}", str(GRID_PT) if policy == "trained" else "uniform", GRID_IF if kw else None)
    listed = enumerate_paths(rows, "true", "crash", steps, min_prob)
    report = verify(GRID, prop, constants=f"N={n}", traces=10, **kw)  # type: ignore[arg-type]
    _compare(report.traces, listed, rows, 10, min_prob)  # type: ignore[arg-type]


# -- replay in the environment ------------------------------------------------------------------------------------


def test_every_trace_replays_in_the_environment() -> None:
    model = load_model(GRID, "N=6")
    policy = load_policy(str(GRID_PT), model, GRID_IF)
    report = verify(GRID, 'P=? [F "crash"]', constants="N=6", policy=str(GRID_PT), interface=GRID_IF, traces=10)
    assert report.traces is not None and len(report.traces) == 10
    env = PrismEnv(GRID, "N=6", interface=GRID_IF, done_label="crash")
    for trace in report.traces:
        path = trace["path"]
        env.reset(options={"state": path[0]["state"]})
        prob = 1.0
        for n, (step, nxt) in enumerate(zip(path[:-1], path[1:], strict=True)):
            assert env.state.tolist() == list(_tuple(step["state"], model))
            mask = env.action_masks()
            pi = action_distribution(policy, env.state[None, :], mask[None, :])[0]
            a = env.actions.index(step["action"])
            assert mask[a]
            assert step["pi"] == pytest.approx(pi[a], rel=1e-12)
            # the induced probability of the step, from the environment: sum over actions of pi * P(s, a, s')
            target = np.array(_tuple(nxt["state"], model))
            total = 0.0
            for b in np.flatnonzero(mask).tolist():
                succ, p = env.outcomes(b)
                total += pi[b] * float(p[(succ == target).all(axis=1)].sum())
            assert step["p"] == pytest.approx(total, rel=1e-12)
            # the named action is the one contributing most
            _, _, terminated, _, info = env.step_to(a, nxt["state"])
            assert info["probability"] > 0 and pi[a] * info["probability"] <= total * (1 + 1e-12)
            prob *= total
            assert terminated == (n == len(path) - 2)  # crash first reached at the last step
        assert env.state.tolist() == list(_tuple(path[-1]["state"], model))
        assert prob == pytest.approx(trace["probability"], rel=1e-12)


def test_step_to_refuses_an_impossible_outcome() -> None:
    from distmc.errors import PolicyError

    env = PrismEnv(LOOPS)
    env.reset()
    with pytest.raises(PolicyError, match="cannot lead to"):
        env.step_to(env.actions.index("a"), {"s": 3})
    succ, prob = env.outcomes(env.actions.index("a"))
    assert sorted(map(tuple, succ.tolist())) == [(0, 1), (1, 0), (2, 0)] and prob.sum() == pytest.approx(1.0)


# -- errors -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prop", 'R{"steps"}=? [F "goal"]', "--const", "N=4"], "reward property"),
        (["--prop", 'P=? [G !"crash"]', "--const", "N=4"], "not a reachability property"),
        (["--prop", 'P=? [F "crash"]', "--const", "N=4", "--mode", "monolithic"], "is an MDP"),
    ],
)
def test_traces_refused_with_exit_5(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(GRID), *args, "--traces", "3", "--quiet"]) == 5
    assert message in capsys.readouterr().err


def test_plot_vars_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["run", str(GRID), "--const", "N=4", "--prop", 'P=? [F "crash"]', "--quiet"]
    assert main([*base, "--plot", str(tmp_path / "a.png"), "--plot-vars", "x,q"]) == 1
    assert "q is not a variable" in capsys.readouterr().err
    assert main([*base, "--plot-vars", "x,y"]) == 1
    assert "give --plot too" in capsys.readouterr().err
    assert main([*base, "--traces", "2", "--checker", "distributed", "--workers", "2"]) == 1
    assert "gathered to this process" in capsys.readouterr().err


# -- values -------------------------------------------------------------------------------------------------------


def _storm_values(path: Path, constants: str | None, prop: str) -> dict[tuple[int, ...], float]:
    """Storm's own builder and result vector: valuation (layout order) -> value."""
    prog = stormpy.parse_prism_program(str(path), prism_compatibility=True)
    if constants:
        prog, _ = stormpy.instantiate_constants(prog, constants)
    props = stormpy.parse_properties(prop, prog)
    opts = stormpy.BuilderOptions(props)
    opts.set_build_state_valuations()
    m = stormpy.build_model(prog, options=opts)
    res = stormpy.model_checking(m, props[0].get_raw_formula(), only_initial_states=False, environment=environment())
    model = load_model(path, constants)
    out = {}
    for s in range(m.nr_states):
        val = json.loads(str(m.state_valuations.to_json(s)))
        out[tuple(int(val[v.name]) for v in model.variables)] = float(res.get_value(s))
    return out


@pytest.mark.parametrize(
    ("name", "prop", "checker"),
    [
        ("dtmc/die.pm", 'P=? [F "one"]', "storm"),
        ("dtmc/die.pm", 'P=? [F<=3 "done"]', "native"),
        ("dtmc/brp-16-2.pm", "P=? [F s=5]", "storm"),
        ("dtmc/crowds-5-5.pm", "P=? [F<=20 observe0>1]", "native"),
        ("dtmc/die.pm", 'R=? [F "done"]', "storm"),
    ],
)
def test_values_match_storms_own_vector(name: str, prop: str, checker: str, tmp_path: Path) -> None:
    path = STORM_FILES / name
    out = tmp_path / "v.parquet"
    report = verify(path, prop, values=out, checker=checker)
    table = read_values(out).to_pylist()
    model = load_model(path, None)
    ref = _storm_values(path, None, prop)
    assert len(table) == report.states == len(ref)
    for row in table:
        v = ref[tuple(int(row[x.name]) for x in model.variables)]
        assert row["value"] == pytest.approx(v, abs=2e-12), row
    bools = [x.name for x in model.variables if x.is_bool]
    assert all(isinstance(table[0][b], bool) for b in bools)
    assert report.riskiest_states is not None and len(report.riskiest_states) == min(5, report.states)
    vals = [s["value"] for s in report.riskiest_states]
    assert vals == sorted(vals, reverse=True)


def test_values_and_result_agree_with_the_plain_check(tmp_path: Path) -> None:
    kw = {"constants": "N=6", "policy": str(GRID_PT), "interface": GRID_IF}
    for checker in ("storm", "native"):
        plain = verify(GRID, 'P=? [F "crash"]', checker=checker, **kw)  # type: ignore[arg-type]
        r = verify(GRID, 'P=? [F "crash"]', values=tmp_path / f"{checker}.parquet", checker=checker, **kw)  # type: ignore[arg-type]
        assert r.result == plain.result  # type: ignore[union-attr]  # the same solver run: the same bits
    s = read_values(tmp_path / "storm.parquet").to_pydict()
    n = read_values(tmp_path / "native.parquet").to_pydict()
    np.testing.assert_allclose(s["value"], n["value"], atol=2e-12, rtol=0)
    assert s["depth"] == n["depth"]


def _python_bfs(m: InducedModel) -> np.ndarray:
    targets, off, groups = m.targets, m.row_offsets, m.row_groups
    depth = np.full(m.n_states, -1)
    queue = deque(int(s) for s in m.initial)
    for s in m.initial:
        depth[s] = 0
    while queue:
        u = queue.popleft()
        for r in range(groups[u], groups[u + 1]):
            for v in targets[off[r] : off[r + 1]].tolist():
                if depth[v] < 0:
                    depth[v] = depth[u] + 1
                    queue.append(v)
    return depth


@pytest.mark.parametrize(
    ("path", "constants", "prop", "kw"),
    [
        (GRID, "N=5", 'P=? [F "crash"]', {}),
        (GRID, "N=4", 'P=? [F "crash"]', {"mode": "monolithic"}),
        (STORM_FILES / "dtmc/brp-16-2.pm", None, "P=? [F s=5]", {}),
    ],
)
def test_depth_is_the_bfs_level(path: Path, constants: str | None, prop: str, kw: dict) -> None:
    report, m = verify(path, prop, constants=constants, keep_model=True, **kw)  # type: ignore[misc]
    depth = bfs_depth(m)
    np.testing.assert_array_equal(depth, _python_bfs(m))
    assert (np.diff(depth) >= 0).all()  # ids are numbered level by level
    assert int(depth.max()) + 1 == report.depth  # the explorer counts the last level, which finds no new state
    starts = np.searchsorted(depth, np.arange(int(depth.max()) + 1))
    np.testing.assert_array_equal(depth_from_levels(np.arange(m.n_states), starts), depth)


def test_riskiest_orders_and_breaks_ties_by_id() -> None:
    v = np.array([0.5, 0.9, 0.9, np.nan, 1.0, 0.2, 0.9])
    ok = np.array([True, True, True, True, False, True, True])
    assert riskiest(v, ok, 3).tolist() == [1, 2, 6]
    assert riskiest(v, ok, 10).tolist() == [1, 2, 6, 0, 5]


# -- the report, the summary and the picture ----------------------------------------------------------------------


def test_cli_writes_traces_values_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    js, pq, png = tmp_path / "r.json", tmp_path / "v.parquet", tmp_path / "g.png"
    code = main(
        [
            "run",
            "example",
            "--const",
            "N=4",
            "--policy",
            "example",
            "--prop",
            'P=? [F "crash"]',
            "--traces",
            "4",
            "--values",
            str(pq),
            "--plot",
            str(png),
            "--json",
            str(js),
            "--quiet",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "most probable path (1 of 4 traces" in out and "states most at risk" in out
    d = json.loads(js.read_text())
    assert len(d["traces"]) == 4 and 0 < d["traces_mass"] <= d["result"]
    assert set(d["traces"][0]["path"][0]) == {"state", "action", "pi", "p"}
    assert len(d["riskiest_states"]) == 5 and {"state", "value", "depth"} <= set(d["riskiest_states"][0])
    assert {"traces_s", "values_s", "plot_s"} <= set(d["timings"])
    table = read_values(pq)
    assert table.column_names == ["x", "y", "px", "py", "value", "depth"] and table.num_rows == d["states"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plain_report_has_no_explain_fields() -> None:
    d = json.loads(verify(LOOPS, 'P=? [F "bad"]').to_json())  # type: ignore[union-attr]
    assert not {"traces", "traces_mass", "riskiest_states"} & set(d)


def test_format_trace_elides_long_paths() -> None:
    step = {"state": {"x": 0, "b": True}, "action": "go", "pi": 0.5, "p": 0.25}
    trace = {
        "probability": 1.0,
        "path": [step] * 30 + [{"state": {"x": 1, "b": False}, "action": None, "pi": None, "p": None}],
    }
    lines = format_trace(trace)
    assert len(lines) == 20 and "12 steps elided" in lines[10]
    assert lines[0] == "x=0 b=true  -> go (pi 0.5, p 0.25)" and lines[-1] == "x=1 b=false"


def test_aggregate_mean_and_max() -> None:
    from distmc.explain.plot import aggregate

    states = np.array([[0, 0, 1], [0, 0, 2], [1, 0, 0], [1, 1, 5]])
    mean, top, count = aggregate(states, np.array([0.2, 0.6, 0.1, 1.0]), 0, 1, np.zeros(3, int), np.array([1, 1, 5]))
    assert count.tolist() == [[2, 1], [0, 1]]
    assert mean[0, 0] == pytest.approx(0.4) and top[0, 0] == 0.6 and np.isnan(mean[1, 0]) and top[1, 1] == 1.0


@pytest.mark.slow
def test_avoid_traces_are_consistent() -> None:
    """avoid 4x4: the traces' steps are the model's, in order, and their mass is below the value."""
    path = coolmc("avoid.prism")
    report = verify(path, "P=? [F<=100 COLLISION=true]", constants="xMax=4,yMax=4,slickness=0.1", traces=10)
    assert report.traces is not None and len(report.traces) == 10
    probs = [t["probability"] for t in report.traces]
    assert probs == sorted(probs, reverse=True) and sum(probs) <= report.result  # type: ignore[operator]
    for t in report.traces:
        assert math.isclose(math.prod(s["p"] for s in t["path"][:-1]), t["probability"], rel_tol=1e-12)
        assert len(t["path"]) - 1 <= 100
