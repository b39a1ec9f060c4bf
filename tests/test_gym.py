"""distmc.gym.PrismEnv: Gymnasium's checker, transition probabilities against the kernel, rewards against the
model text, Monte Carlo rollouts against verified values, the interface a trained policy verifies with."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from distmc.api import verify  # noqa: E402
from distmc.errors import ModelError, PolicyError  # noqa: E402
from distmc.gym import PrismEnv, rollout  # noqa: E402
from distmc.model.kernel import Kernel  # noqa: E402
from distmc.policy import load_interface, load_policy  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GRID = REPO / "distmc" / "examples" / "gridworld.prism"
CHOICES = REPO / "tests" / "data" / "gym" / "choices.prism"
CHAIN = REPO / "tests" / "data" / "gym" / "chain.prism"

#: Per-successor two-sided bound of the binomial tests (|z| > 5.5 has probability ~4e-8 under the null).
Z = 5.5


def grid_env(**kw: object) -> PrismEnv:
    return PrismEnv(GRID, "N=4", reward="steps", done_label=["crash", "goal"], **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "make",
    [
        lambda: grid_env(),
        lambda: grid_env(normalize=True),
        lambda: PrismEnv(CHOICES, reward="cost", done_label="end", max_steps=20),
        lambda: PrismEnv(CHAIN, reward="r", done_label="done"),
    ],
)
def test_env_checker_clean(make: object) -> None:
    env = make()  # type: ignore[operator]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, skip_render_check=True)


def test_registered_with_gymnasium() -> None:
    import gymnasium

    env = gymnasium.make("distmc/Prism-v0", model_path=GRID, constants="N=4", done_label="crash")
    assert isinstance(env.unwrapped, PrismEnv)
    obs, info = env.reset(seed=0)
    assert obs in env.observation_space and info["action_mask"].dtype == bool


def kernel_distribution(model_path: Path, state: np.ndarray, label: str | None) -> dict[tuple[int, ...], float]:
    """The successor distribution of taking ``label`` in ``state`` (same-label choices uniformly; None: dtmc)."""
    from distmc.model.program import load_model

    model = load_model(model_path)
    exp = Kernel(model).expand(state[None, :])
    sel = [c for c in range(exp.n_choices) if label is None or model.actions[exp.choice_action[c]] == label]
    succ = exp.succ
    out: dict[tuple[int, ...], float] = {}
    for c in sel:
        for t in range(exp.branch_offsets[c], exp.branch_offsets[c + 1]):
            k = tuple(succ[t].tolist())
            out[k] = out.get(k, 0.0) + exp.prob[t] / len(sel)
    return out


def assert_matches(counts: dict[tuple[int, ...], int], expected: dict[tuple[int, ...], float], n: int) -> None:
    assert set(counts) <= set(expected), f"successors {set(counts) - set(expected)} have probability 0"
    for k, p in expected.items():
        c = counts.get(k, 0)
        sd = np.sqrt(n * p * (1 - p))
        assert abs(c - n * p) <= Z * sd + 1e-9, f"successor {k}: {c} of {n}, expected {n * p:.1f} (sd {sd:.1f})"


def sample_steps(
    env: PrismEnv, state: np.ndarray, action: int, n: int
) -> tuple[dict[tuple[int, ...], int], set[float]]:
    counts: dict[tuple[int, ...], int] = {}
    rewards = set()
    env.reset(seed=1234)
    for _ in range(n):
        env.reset(options={"state": state})
        _, r, _, _, info = env.step(action)
        assert not info["invalid_action"]
        k = tuple(info["state"].tolist())
        counts[k] = counts.get(k, 0) + 1
        rewards.add(r)
    return counts, rewards


def test_transition_probabilities_match_kernel_mdp() -> None:
    env = PrismEnv(CHOICES, reward="cost", done_label="end")
    # Expected rewards straight from the model text: state reward of the state left + action reward.
    text_reward = {(0, "a"): 2 + 1, (0, "b"): 2 + 5, (1, "b"): 0, (2, ""): 0.5, (3, "a"): 1}
    n = 4000
    checked = 0
    for state in ([0, 0], [1, 1], [2, 0], [3, 0], [3, 1], [0, 2]):
        s = np.array(state, dtype=np.int64)
        env.reset(options={"state": s})
        mask = env.action_masks()
        for a in np.flatnonzero(mask).tolist():
            label = env.actions[a]
            counts, rewards = sample_steps(env, s, a, n)
            assert_matches(counts, kernel_distribution(CHOICES, s, label), n)
            assert rewards == {text_reward[(state[0], label)]}
            checked += 1
    # (0,0): a (two same-label choices, mixed uniformly), b; (1,1): b; (2,0): ""; (3,0): a; (3,1): a; (0,2): a, b
    assert checked == 8


def test_transition_probabilities_match_kernel_dtmc() -> None:
    env = PrismEnv(CHAIN, reward="r", done_label="done")
    assert env.action_space.n == 1 and env.actions == ["<step>"]
    s = np.array([1], dtype=np.int64)
    counts, rewards = sample_steps(env, s, 0, 6000)
    expected = kernel_distribution(CHAIN, s, None)
    assert expected == pytest.approx({(3,): 0.45, (0,): 0.05, (2,): 0.5})
    assert_matches(counts, expected, 6000)
    assert rewards == {1.0}


def test_same_seed_same_episode() -> None:
    def episode(seed: int) -> list[tuple[int, ...]]:
        env = grid_env(max_steps=50)
        _, info = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(50):
            a = int(rng.choice(np.flatnonzero(info["action_mask"])))
            _, _, te, tr, info = env.step(a)
            out.append(tuple(info["state"].tolist()))
            if te or tr:
                break
        return out

    assert episode(7) == episode(7)
    assert episode(7) != episode(8)


def test_episode_end_and_invalid_actions() -> None:
    env = PrismEnv(CHOICES, reward="cost", done_label="end", max_steps=3, invalid_penalty=-7.0)
    env.reset(options={"state": {"s": 1, "k": 0}})
    assert env.action_masks().tolist() == [False, True, False]  # actions a, b, ""
    obs, r, te, tr, info = env.step(0)  # 'a' is disabled in s=1: no-op with the penalty
    assert (r, te, tr, info["invalid_action"]) == (-7.0, False, False, True)
    assert obs.tolist() == [1.0, 0.0]
    env.step(1)  # s=1 -b-> s=2
    _, _, te, tr, _ = env.step(0)  # third step, disabled again: truncated
    assert (te, tr) == (False, True)
    # A deadlock ends the episode (s=3, k=2 enables nothing).
    env.reset(options={"state": {"s": 3, "k": 1}})
    for _ in range(200):
        _, _, te, _, info = env.step(0)
        if te:
            break
        env.reset(options={"state": {"s": 3, "k": 1}})
    assert te and (info["state"].tolist() == [3, 2] or info["state"][0] == 4)
    strict = PrismEnv(CHOICES, done_label="end", invalid_action="raise")
    strict.reset(options={"state": {"s": 1}})
    with pytest.raises(PolicyError, match="'a' is not enabled in state"):
        strict.step(0)
    with pytest.raises(ModelError, match="no label"):
        PrismEnv(CHOICES, done_label="nope")


def test_rollout_matches_verified_values() -> None:
    env = grid_env(max_steps=10_000)
    res = rollout(env, None, 20_000, seed=3, labels=["crash"])
    est, se = res.probability("crash")
    exact = verify(GRID, 'P=? [F "crash"]', constants="N=4").result
    assert abs(est - exact) <= Z * se
    ret, se = res.mean_return()
    exact_r = verify(GRID, 'R{"steps"}=? [F "crash" | "goal"]', constants="N=4").result
    assert abs(ret - exact_r) <= Z * se
    assert res.terminated.all()
    chain = PrismEnv(CHAIN, reward="r", done_label="done")
    res = rollout(chain, None, 20_000, seed=4)
    ret, se = res.mean_return()
    assert abs(ret - verify(CHAIN, 'R=? [F "done"]').result) <= Z * se


def test_rollout_with_network_policy_counts_each_state_once() -> None:

    pt = REPO / "distmc" / "examples" / "gridworld_policy.pt"
    env = PrismEnv(
        GRID, "N=6", done_label=["crash", "goal"], interface=REPO / "distmc" / "examples" / "gridworld_policy.json"
    )
    policy = load_policy(str(pt), env.model)  # finds gridworld_policy.json beside it
    res = rollout(env, policy, 5000, seed=5, labels=["crash"])
    est, se = res.probability("crash")
    exact = verify(GRID, 'P=? [F "crash"]', constants="N=6", policy=str(pt)).result
    assert abs(est - exact) <= Z * se
    assert policy.states_evaluated == res.policy_states  # type: ignore[attr-defined]
    assert res.policy_states == env.dynamics.expanded - sum(  # every visited non-final state asked exactly once
        1 for t in env.dynamics._cache.values() if t.done or t.deadlock
    )


def test_interface_round_trip(tmp_path: Path) -> None:
    env = grid_env(normalize=True)
    path = env.save_interface(tmp_path / "trained.json")
    saved = json.loads(path.read_text())
    assert saved["features"] == ["x", "y", "px", "py"] and saved["actions"] == ["up", "down", "left", "right"]
    assert saved["output"] == "logits" and saved["scale"] == {"x": 1 / 3, "y": 1 / 3, "px": 1 / 3, "py": 1 / 3}
    assert load_interface(path, env.model) == env.interface
    again = PrismEnv(GRID, "N=4", interface=path)
    assert again.observation_space == env.observation_space
    with pytest.raises(PolicyError, match="dtmc"):
        PrismEnv(CHAIN).save_interface(tmp_path / "x.json")


def test_trained_ppo_verifies_without_handwritten_interface(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    sb3 = pytest.importorskip("stable_baselines3")
    from distmc.gym import export_policy

    torch.manual_seed(0)
    env = PrismEnv(
        GRID, "N=3", reward="steps", done_label=["crash", "goal"], reward_scale=-1.0, max_steps=30, normalize=True
    )
    model = sb3.PPO(
        "MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=2, seed=0, device="cpu", policy_kwargs={"net_arch": [16]}
    )
    model.learn(128)
    pt, iface = export_policy(model, tmp_path / "trained.pt", env)
    assert iface == tmp_path / "trained.json"
    prop = 'P=? [F "goal"]'
    auto = verify(GRID, prop, constants="N=3", policy=str(pt))
    explicit = verify(GRID, prop, constants="N=3", policy=str(pt), interface=iface)
    assert auto.result == explicit.result and auto.states == explicit.states
    # The exported network's distribution is SB3's own (masked to the enabled actions, renormalised).
    states = env.model.initial_states
    obs = torch.from_numpy(env.observe(states))
    with torch.no_grad():
        sb3_probs = model.policy.get_distribution(obs).distribution.probs.double().numpy()
    pol = load_policy(str(pt), env.model)
    from distmc.policy import action_distribution

    env.reset()
    mask = env.action_masks()[None, :]
    got = action_distribution(pol, states, mask)
    want = np.where(mask, sb3_probs, 0) / np.where(mask, sb3_probs, 0).sum(axis=1, keepdims=True)
    assert np.abs(got - want).max() <= 1e-6
    # Monte Carlo of the trained policy agrees with the verified value.
    res = rollout(env, pol, 4000, seed=6, labels=["goal"])
    est, se = res.probability("goal")
    bounded = verify(GRID, 'P=? [F<=30 "goal"]', constants="N=3", policy=str(pt)).result
    assert abs(est - bounded) <= Z * max(se, 1e-3)


def test_maskable_ppo_trains_on_masks_and_verifies_from_zip(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    contrib = pytest.importorskip("sb3_contrib")
    from distmc.gym import export_policy

    torch.manual_seed(0)
    env = PrismEnv(
        GRID,
        "N=3",
        reward="steps",
        done_label=["crash", "goal"],
        reward_scale=-1.0,
        max_steps=30,
        invalid_action="raise",
    )  # MaskablePPO never picks a disabled action: raising proves it
    model = contrib.MaskablePPO(
        "MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=2, seed=0, device="cpu", policy_kwargs={"net_arch": [16]}
    )
    model.learn(128)
    model.save(str(tmp_path / "trained.zip"))
    env.save_interface(tmp_path / "trained.json")
    prop = 'P=? [F "goal"]'
    from_zip = verify(GRID, prop, constants="N=3", policy=str(tmp_path / "trained.zip"), trust_policy=True)
    pt, _ = export_policy(model, tmp_path / "exported.pt", env)
    from_pt = verify(GRID, prop, constants="N=3", policy=str(pt))
    assert from_zip.states == from_pt.states
    assert abs(from_zip.result - from_pt.result) <= 1e-9
    assert "MaskablePPO" in from_zip.policy


def test_small_cache_keeps_a_batch_whole() -> None:
    # A batch that overflows the cache clears it; the batch's own cached states were lost with it (KeyError on
    # avoid 12x12 with 20,000 episodes, found 2026-12-03). Same episodes with a tiny and a large cache.
    small, large = grid_env(cache_size=8, max_steps=50), grid_env(max_steps=50)
    a = rollout(small, None, 300, seed=9, labels=["crash"])
    b = rollout(large, None, 300, seed=9, labels=["crash"])
    assert np.array_equal(a.reached["crash"], b.reached["crash"])
    assert np.array_equal(a.lengths, b.lengths)
