"""distmc curve and the SB3 callback: shared-exploration values equal separate runs to 1e-12."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from distmc.api import verify
from distmc.curve import curve
from distmc.curve.engine import checkpoint_step

EXAMPLES = resources.files("distmc") / "examples"
MODEL = str(EXAMPLES / "gridworld.prism")
POLICY = str(EXAMPLES / "gridworld_policy.pt")
CONST = "N=4"

_W = np.random.default_rng(7).normal(size=(4, 4))


def softmax_policy(obs: np.ndarray) -> np.ndarray:
    """A fixed linear policy over the gridworld's 4 features (logits: every action has probability > 0)."""
    return np.tanh(obs.astype(np.float64) / 3.0) @ _W


def zero_policy(obs: np.ndarray) -> np.ndarray:
    """Probabilities that put no mass on 'left' (a smaller reachable set than the shared MDP's)."""
    p = np.tile([0.5, 0.2, 0.0, 0.3], (obs.shape[0], 1))
    p[obs[:, 0] > 1] = [0.1, 0.1, 0.0, 0.8]
    return p


@pytest.fixture(scope="module")
def interfaces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("iface")
    out = {}
    for name, output in (("logits", "logits"), ("probs", "probabilities")):
        p = d / f"{name}.json"
        p.write_text(
            f'{{"features": ["x", "y", "px", "py"], "actions": ["up", "down", "left", "right"], "output": "{output}"}}'
        )
        out[name] = str(p)
    return out


@pytest.mark.parametrize("prop", ['P=? [F<=12 "crash"]', 'P=? [F "crash"]', 'R{"steps"}=? [C<=8]'])
@pytest.mark.parametrize("mode", ["stochastic", "deterministic"])
def test_curve_values_equal_separate_runs(prop: str, mode: str, interfaces: dict[str, str]) -> None:
    r = curve(MODEL, prop, [POLICY, "uniform"], constants=CONST, mode=mode)
    assert r.method == "shared"
    for p in r.points:
        sep = verify(MODEL, prop, constants=CONST, policy=p.policy, mode=mode)
        assert abs(p.value - float(sep.result)) <= 1e-12, p.policy
        assert p.states == sep.states and p.transitions == sep.transitions
    for spec, iface in (("tests.test_curve:softmax_policy", "logits"), ("tests.test_curve:zero_policy", "probs")):
        r = curve(MODEL, prop, [spec], constants=CONST, mode=mode, interface=interfaces[iface])
        sep = verify(MODEL, prop, constants=CONST, policy=spec, mode=mode, interface=interfaces[iface])
        assert abs(r.points[0].value - float(sep.result)) <= 1e-12
        assert r.points[0].states == sep.states


def test_curve_separate_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from distmc.cli import main

    r = curve(MODEL, 'P=? [F<=12 "crash"]', [POLICY, "uniform"], constants=CONST, separate=True, steps=[5, 9])
    assert r.method == "separate" and [p.step for p in r.points] == [5, 9]
    code = main(
        [
            "curve",
            "example",
            "--const",
            CONST,
            "--prop",
            'P=? [F<=12 "crash"]',
            "--policies",
            POLICY,
            "uniform",
            "--plot",
            str(tmp_path / "c.png"),
            "--json",
            str(tmp_path / "c.json"),
        ]
    )
    assert code == 0 and (tmp_path / "c.png").stat().st_size > 0
    out = capsys.readouterr().out
    assert f"{r.points[0].value:.12g}" in out and f"{r.points[1].value:.12g}" in out
    assert checkpoint_step("run/ppo_20000_steps.pt2", 3) == 20000 and checkpoint_step("final.pt", 3) == 3


def test_verify_callback_logs_and_stops(tmp_path: Path) -> None:
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import configure

    from distmc.gym import PrismEnv
    from distmc.integrations.sb3 import VerifyCallback

    env = PrismEnv(MODEL, CONST, reward="steps", reward_scale=-1, done_label=["crash", "goal"], max_steps=20)
    model = PPO(
        "MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu", policy_kwargs={"net_arch": [16]}
    )
    model.set_logger(configure(str(tmp_path / "log"), ["csv"]))
    cb = VerifyCallback(MODEL, 'P=? [F<=12 "crash"]', every=64, directory=tmp_path / "ck", constants=CONST)
    model.learn(192, callback=cb)
    assert len(cb.curve.points) >= 3
    for p in cb.curve.points:
        sep = verify(MODEL, 'P=? [F<=12 "crash"]', constants=CONST, policy=p.policy)
        assert abs(p.value - float(sep.result)) <= 1e-12
    import csv

    rows = list(csv.DictReader((tmp_path / "log" / "progress.csv").open()))
    logged = [float(r["distmc/value"]) for r in rows if r.get("distmc/value")]
    assert logged and all(any(abs(v - p.value) < 1e-9 for p in cb.curve.points) for v in logged)
    # a threshold property that fails stops training at the first check
    model2 = PPO(
        "MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu", policy_kwargs={"net_arch": [16]}
    )
    stop = VerifyCallback(
        MODEL, 'P<=0 [F<=12 "crash"]', every=64, directory=tmp_path / "ck2", constants=CONST, stop_on_fail=True
    )
    model2.learn(640, callback=stop)
    assert stop.failed and len(stop.curve.points) == 1 and model2.num_timesteps < 640


SAME_LABEL = """mdp
module m
  s : [0..3] init 0;
  [a] s=0 -> 0.5:(s'=1) + 0.5:(s'=2);
  [a] s=0 -> (s'=3);
  [b] s=0 -> (s'=2);
  [a] s>0 -> true;
  [b] s>0 -> true;
endmodule
label "bad" = s=3;
"""


def test_same_label_choices_fall_back_to_separate_runs(tmp_path: Path) -> None:
    from distmc.errors import DistmcError

    model = tmp_path / "same.prism"
    model.write_text(SAME_LABEL)
    r = curve(model, 'P=? [F "bad"]', ["uniform"], resolve="uniform")
    assert r.method == "separate" and "action label" in r.note
    assert abs(r.points[0].value - float(verify(model, 'P=? [F "bad"]', resolve="uniform").result)) <= 1e-12
    with pytest.raises(DistmcError, match="resolve uniform"):
        curve(model, 'P=? [F "bad"]', ["uniform"])
    with pytest.raises(DistmcError, match="--steps"):
        curve(model, 'P=? [F "bad"]', ["uniform"], steps=[1, 2])


@pytest.mark.parametrize("prop", ['P=? [F<=12 "crash"]', 'R{"steps"}=? [C<=8]', 'P>=0.1 [F<=6 "crash"]'])
def test_batched_check_equals_one_at_a_time(prop: str, interfaces: dict[str, str], monkeypatch) -> None:
    """check_many: batches of softmax policies give the values of one-at-a-time checks (to rounding); a
    row-dropping policy between them is checked alone, in its place; a batch limited by memory splits."""
    from distmc.curve import engine
    from distmc.options import VerifyOptions

    o = VerifyOptions(constants=CONST, checker="native", interface=interfaces["logits"])
    sm = engine.SharedModel(MODEL, prop, o)
    pols = [
        ("tests.test_curve:softmax_policy", 1),
        ("uniform", 2),
        ("tests.test_curve:zero_policy", 3),
        ("tests.test_curve:softmax_policy", 4),
        ("uniform", 5),
        ("uniform", 6),
    ]
    # the zero policy reads probabilities: its own interface, through a second shared model
    alone = [sm.check(p, s) for p, s in pols if "zero" not in p]
    # a column of a batch takes 8 bytes per MDP row and 6 x 8 per state: a limit of 2 columns splits 5 into 2 + 2 + 1
    monkeypatch.setattr(engine, "BATCH_BYTES", 2 * 8 * (sm.mdp.n_rows + 6 * sm.n_states))
    sm_zero = engine.SharedModel(MODEL, prop, VerifyOptions.build(o, interface=interfaces["probs"]))
    calls = []
    real = engine.steps_many
    monkeypatch.setattr(engine, "steps_many", lambda *a, **k: calls.append(a[4].shape[1]) or real(*a, **k))
    many = sm.check_many([p for p in pols if "zero" not in p[0]])
    assert calls == [2, 2, 1]
    assert [p.step for p in many] == [1, 2, 4, 5, 6]
    for a, b in zip(alone, many, strict=True):  # the same sums in another order: equal to rounding
        assert abs(a.value - b.value) <= 1e-14 * max(1.0, abs(a.value)) and a.truth == b.truth and a.states == b.states
        assert a.transitions == b.transitions
    # a policy that drops rows interrupts a batch and keeps its place
    calls.clear()
    mixed = sm_zero.check_many([("uniform", 1), ("tests.test_curve:zero_policy", 2), ("uniform", 3)])
    assert [p.step for p in mixed] == [1, 2, 3] and calls == [1, 1]
    z = sm_zero.check("tests.test_curve:zero_policy", 2)
    assert mixed[1].value == z.value and mixed[1].transitions == z.transitions < sm.fused_transitions
    assert mixed[0].value == mixed[2].value and abs(mixed[0].value - alone[1].value) <= 1e-14 * max(1.0, alone[1].value)


def test_batched_steps_within_reach_equal_full_sweeps() -> None:
    """Step i updating only the states within k - i steps of the initial ones: the initial values, bit for bit."""
    from dataclasses import replace

    from distmc.check.forms import step_recurrence
    from distmc.curve.batched import steps_many
    from distmc.curve.engine import SharedModel
    from distmc.options import VerifyOptions

    for prop in ('P=? [F<=12 "crash"]', 'R{"steps"}=? [C<=9]'):
        sm = SharedModel(MODEL, prop, VerifyOptions(constants="N=5", checker="native"))
        assert sm.levels[0] == 1 and sm.levels[-1] == sm.n_states and (np.diff(sm.levels) >= 0).all()
        assert sm.levels[sm.levels.shape[0] // 2] < sm.n_states  # the late steps skip states
        m = sm.mdp
        w = np.stack([sm.weights(sm._load(p)) for p in (POLICY, "uniform")], axis=1)
        recs = [step_recurrence(sm.parts.spec, replace(m, rewards=sm.row_rewards(w[:, j]))) for j in range(2)]
        args = (m.row_groups, m.row_offsets, sm.targets, sm.prob, np.ascontiguousarray(w), recs)
        full, cut = steps_many(*args), steps_many(*args, levels=sm.levels)
        assert np.array_equal(full[m.initial], cut[m.initial])
