"""distmc shield: the shielded policy verifies within delta in an independent run, round-trips, masks in Gymnasium."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from distmc.api import verify
from distmc.errors import DistmcError, PropertyError
from distmc.model.program import load_model
from distmc.policy import detect_format, load_policy
from distmc.policy.shielded import ShieldedPolicy, ShieldTable
from distmc.shield import shield

EXAMPLES = resources.files("distmc") / "examples"
MODEL = str(EXAMPLES / "gridworld.prism")
POLICY = str(EXAMPLES / "gridworld_policy.pt")
PROP = 'P=? [F "crash"]'
CONST = "N=5"


@pytest.fixture(scope="module")
def shielded(tmp_path_factory: pytest.TempPathFactory):
    base = verify(MODEL, PROP, constants=CONST, policy=POLICY)
    delta = float(base.result) / 4
    out = tmp_path_factory.mktemp("shield")
    report = shield(MODEL, PROP, delta, constants=CONST, policy=POLICY, out=out, reward="steps", reward_steps=20)
    return base, delta, report


def test_shield_value_within_delta_verified_by_an_independent_run(shielded) -> None:
    base, delta, report = shielded
    assert report.value_before == pytest.approx(float(base.result), abs=1e-12)
    assert report.met and report.value_after <= delta < report.value_before
    again = verify(MODEL, PROP, constants=CONST, policy=report.policy_path)
    assert abs(float(again.result) - report.value_after) <= 1e-12
    assert again.states == report.states_after
    assert report.changed_states > 0 and report.mass_removed > 0 and report.shielded_states > 0
    assert report.reward_before is not None and report.reward_after is not None
    rew = verify(MODEL, 'R{"steps"}=? [C<=20]', constants=CONST, policy=report.policy_path)
    assert float(rew.result) == pytest.approx(report.reward_after, abs=1e-9)
    assert report.top_states and report.top_states[0]["mass"] >= report.top_states[-1]["mass"]


def test_exported_policy_round_trips(shielded) -> None:
    _, _, report = shielded
    model = load_model(Path(MODEL), CONST)
    assert detect_format(report.policy_path) == "shielded"
    pol = load_policy(report.policy_path, model)
    assert isinstance(pol, ShieldedPolicy)
    table = ShieldTable.read(report.shield_path, model, pol.actions)
    assert table.states.shape[0] == report.shielded_states
    import pyarrow.parquet as pq

    cols = pq.read_table(report.shield_path).column_names
    assert cols[:5] == ["x", "y", "px", "py", "allowed"] and {f"risk_{a}" for a in pol.actions} <= set(cols)
    np.testing.assert_array_equal(pol.table.allowed, table.allowed)
    out = pol.forward(table.states)
    assert np.all(out[~table.allowed] == 0.0)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-12)
    # outside the table: the base policy's own distribution
    base = load_policy(POLICY, model)
    outside = model.initial_states
    if pol.index.find(pol.codec.pack(outside))[0] < 0:
        # (two loaded copies of a float32 network may differ in the last bits: another helper's issue)
        np.testing.assert_allclose(pol.forward(outside), base.forward(outside), rtol=1e-6)


def test_wrapper_masks_exactly_the_shields_actions(shielded) -> None:
    pytest.importorskip("gymnasium")
    from distmc.gym import PrismEnv
    from distmc.shield.gym import ShieldedEnv

    _, _, report = shielded
    env = ShieldedEnv(PrismEnv(MODEL, CONST, interface=str(EXAMPLES / "gridworld_policy.json")), report.policy_path)
    table = ShieldTable.read(report.shield_path, env.prism.model, env.prism.actions)
    for state, allowed in zip(table.states, table.allowed, strict=True):
        _, info = env.reset(options={"state": state})
        enabled = env.prism.action_masks()
        np.testing.assert_array_equal(env.action_masks(), enabled & allowed)
        np.testing.assert_array_equal(info["action_mask"], enabled & allowed)
        assert (enabled & ~allowed).any()  # the table holds only states where the shield removes something
    _, info = env.reset(options={"state": {"x": 0, "y": 0, "px": 0, "py": 0}})  # a crash state: not in the table
    np.testing.assert_array_equal(env.action_masks(), env.prism.action_masks())


def test_nothing_to_do_gives_an_empty_shield(tmp_path: Path) -> None:
    r = shield(MODEL, PROP, 1.0, constants=CONST, policy=POLICY, out=tmp_path)
    assert r.met and r.shielded_states == 0 and r.rounds == []
    assert abs(r.value_after - r.value_before) <= 1e-12


def test_shield_refuses_what_it_cannot_lower(tmp_path: Path) -> None:
    with pytest.raises(PropertyError):
        shield(MODEL, 'R{"steps"}=? [F "goal"]', 0.1, constants=CONST, policy=POLICY, out=tmp_path)
    with pytest.raises(DistmcError):
        shield(MODEL, PROP, 0.1, constants=CONST, policy=POLICY, out=tmp_path, mode="monolithic")


def test_cli_shield(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from distmc.cli import main

    code = main(
        [
            "shield",
            "example",
            "--const",
            CONST,
            "--policy",
            "example",
            "--prop",
            PROP,
            "--delta",
            "0.001",
            "--out",
            str(tmp_path / "s"),
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "with the shield" in out and (tmp_path / "s" / "shielded.json").is_file()
    assert (
        main(
            [
                "run",
                "example",
                "--const",
                CONST,
                "--policy",
                str(tmp_path / "s" / "shielded.json"),
                "--prop",
                PROP,
                "--quiet",
            ]
        )
        == 0
    )


@pytest.mark.slow
def test_shield_on_ray_workers_with_the_distributed_checker(shielded, local_ray, tmp_path: Path) -> None:
    _, delta, report = shielded
    ray_report = shield(
        MODEL, PROP, delta, constants=CONST, policy=POLICY, out=tmp_path, driver="ray", workers=2, checker="distributed"
    )
    assert abs(ray_report.value_after - report.value_after) <= 1e-12
    assert ray_report.shielded_states == report.shielded_states
    again = verify(MODEL, PROP, constants=CONST, policy=ray_report.policy_path)
    assert abs(float(again.result) - ray_report.value_after) <= 1e-12


def test_maskable_ppo_trains_under_the_shield(shielded) -> None:
    sb3c = pytest.importorskip("sb3_contrib")
    from distmc.gym import PrismEnv
    from distmc.shield.gym import ShieldedEnv

    _, _, report = shielded
    env = ShieldedEnv(
        PrismEnv(
            MODEL,
            CONST,
            reward="steps",
            reward_scale=-1,
            done_label=["crash", "goal"],
            max_steps=20,
            interface=str(EXAMPLES / "gridworld_policy.json"),
        ),
        report.policy_path,
    )
    taken: list[tuple[np.ndarray, int]] = []
    step = env.step

    def spy(action):  # record (allowed mask, action) of every step MaskablePPO takes
        taken.append((env.action_masks(), int(action)))
        return step(action)

    env.step = spy  # type: ignore[method-assign]
    sb3c.MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu").learn(128)
    assert len(taken) >= 128 and all(mask[a] for mask, a in taken)


def test_relaxing_keeps_delta_and_removes_no_more(shielded, tmp_path: Path) -> None:
    _, delta, report = shielded
    strict = shield(MODEL, PROP, delta, constants=CONST, policy=POLICY, out=tmp_path, relax=0)
    assert strict.value_after <= delta and report.value_after <= delta
    assert report.mass_removed <= strict.mass_removed + 1e-9
    assert len(report.rounds) >= len(strict.rounds)


class _Logits:
    """A base policy of logits over 3 actions, the same in every state."""

    actions = ["a", "b", "c"]
    output = "logits"
    name = "fixed"

    def forward(self, states: np.ndarray) -> np.ndarray:
        return np.tile([2.0, -1.0, 0.5], (states.shape[0], 1))


def test_shielded_logits_are_the_base_distribution_restricted() -> None:
    from distmc.policy.base import action_distribution

    model = load_model(Path(MODEL), "N=3")
    states = model.initial_states.repeat(2, axis=0)
    states[1, 0] = 1  # another state (x=1), outside the table
    table = ShieldTable(_Logits.actions, states[:1], np.array([[False, True, True]]))
    pol = ShieldedPolicy(_Logits(), table, model)  # type: ignore[arg-type]
    enabled = np.ones((2, 3), dtype=bool)
    got = action_distribution(pol, states, enabled)
    base = action_distribution(_Logits(), states, enabled)  # type: ignore[arg-type]
    want = np.exp([-1.0, 0.5]) / np.exp([-1.0, 0.5]).sum()
    np.testing.assert_allclose(got[0], [0.0, *want], rtol=1e-15)
    assert got[0, 0] == 0.0
    np.testing.assert_array_equal(got[1], base[1])  # outside the table: the base's row, bit for bit
