"""Monte Carlo rollouts of a distmc :class:`~distmc.policy.Policy` in a :class:`~distmc.gym.PrismEnv`.

Episodes run in lockstep: each step, the states of the running episodes whose action distribution is not known
yet go through the policy in one batch (:func:`~distmc.policy.action_distribution`: the same masking and
renormalisation as verification), and every distinct state is asked of the policy once per rollout. The
environment's own step semantics apply (same-label choices uniformly, ``done_label`` / deadlock ends an episode,
``max_steps`` truncates). The fraction of episodes in which a label held estimates ``P=? [F label]`` of the
verified induced model (``--resolve uniform`` where same-label choices exist; ``max_steps`` bounds the horizon).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from distmc.errors import PolicyError, UsageError
from distmc.gym.env import PrismEnv
from distmc.policy.base import Policy, action_distribution

__all__ = ["RolloutResult", "rollout"]


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    """Sample mean and its standard error (NaN for one sample)."""
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else float("nan")


@dataclass
class RolloutResult:
    """Per-episode outcomes of :func:`rollout`.

    Attributes:
        returns: ``[E]`` sum of the environment's rewards.
        lengths: ``[E]`` steps taken.
        terminated: ``[E]`` ended by a done label or a deadlock.
        truncated: ``[E]`` ended by ``max_steps``.
        reached: label -> ``[E]`` bool, the label held in some state of the episode (the initial one included).
        policy_calls: batched calls of the policy.
        policy_states: distinct states whose distribution was asked of the policy.
    """

    returns: np.ndarray
    lengths: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    reached: dict[str, np.ndarray] = field(default_factory=dict)
    policy_calls: int = 0
    policy_states: int = 0

    def probability(self, label: str) -> tuple[float, float]:
        """Estimate and standard error of the probability that ``label`` is reached."""
        return _mean_se(self.reached[label].astype(np.float64))

    def mean_return(self) -> tuple[float, float]:
        """Mean return and its standard error."""
        return _mean_se(self.returns)


def rollout(
    env: PrismEnv,
    policy: Policy | None,
    episodes: int,
    *,
    seed: int = 0,
    mode: str = "stochastic",
    labels: list[str] | None = None,
) -> RolloutResult:
    """Run ``episodes`` episodes of ``policy`` (None: uniform over the enabled actions) in ``env``.

    Args:
        env: the environment (its dynamics, rewards, done labels and ``max_steps`` apply; its own episode state
            is left alone).
        policy: a distmc policy (e.g. from :func:`distmc.policy.load_policy`); ignored for a dtmc.
        episodes: number of episodes.
        seed: seed of the rollout's random generator (same seed, same episodes).
        mode: ``"stochastic"`` (sample pi) or ``"deterministic"`` (argmax pi, ties to the first action).
        labels: labels to record in :attr:`RolloutResult.reached` (default: every label of the model).
    """
    if mode not in ("stochastic", "deterministic"):
        raise UsageError(f"mode must be 'stochastic' or 'deterministic', not '{mode}'")
    if episodes < 1:
        raise UsageError(f"episodes must be at least 1, not {episodes}")
    dyn, model = env.dynamics, env.model
    labels = list(model.labels) if labels is None else labels
    bad = [lab for lab in labels if lab not in model.labels]
    if bad:
        raise UsageError(f"{model.path}: no label(s) {bad} (labels: {sorted(model.labels)})")
    rng = np.random.default_rng(seed)
    n_act = len(dyn.actions)
    use_policy = policy is not None and not dyn.is_dtmc
    if use_policy:
        assert policy is not None
        env_index = {a: i for i, a in enumerate(dyn.actions)}
        missing = [a for a in policy.actions if a not in env_index]
        if missing:
            raise PolicyError(
                f"policy {policy.name} has actions {missing} that the environment does not ({dyn.actions})"
            )
        pol_to_env = np.array([env_index[a] for a in policy.actions], dtype=np.int64)
    init = model.initial_states
    states = init[rng.integers(init.shape[0], size=episodes)] if init.shape[0] > 1 else np.repeat(init, episodes, 0)
    returns = np.zeros(episodes)
    lengths = np.zeros(episodes, dtype=np.int64)
    terminated = np.zeros(episodes, dtype=bool)
    truncated = np.zeros(episodes, dtype=bool)
    reached = {lab: np.zeros(episodes, dtype=bool) for lab in labels}
    dist: dict[bytes, np.ndarray] = {}  # state key -> pi over env actions
    calls = 0
    active = np.arange(episodes)
    while active.size:
        cur = states[active]
        for lab in labels:
            reached[lab][active] |= model.labels[lab](cur)
        tables = dyn.tables(cur)
        ended = np.array([t.done or t.deadlock for t in tables], dtype=bool)
        terminated[active[ended]] = True
        truncated[active[~ended & (lengths[active] >= env.max_steps)]] = True
        go = ~ended & (lengths[active] < env.max_steps)
        active, cur, tables = active[go], cur[go], [t for t, g in zip(tables, go, strict=True) if g]
        if not active.size:
            break
        masks = np.array([t.mask for t in tables], dtype=bool).reshape(active.size, n_act)
        if use_policy:
            assert policy is not None
            keys = [dyn.key(s) for s in cur]
            todo = {k: i for i, k in enumerate(keys) if k not in dist}
            if todo:
                idx = np.array(list(todo.values()), dtype=np.int64)
                enabled = masks[idx][:, pol_to_env]
                stray = masks[idx].sum(axis=1) != enabled.sum(axis=1)
                if stray.any():
                    i = int(idx[np.flatnonzero(stray)[0]])
                    raise PolicyError(
                        f"state {model.describe_state(cur[i])} enables an action the policy's list {policy.actions} "
                        "does not contain"
                    )
                pi = action_distribution(policy, cur[idx], enabled, model.describe_state)
                calls += 1
                full = np.zeros((idx.size, n_act))
                full[:, pol_to_env] = pi
                for k, row in zip(todo, full, strict=True):
                    dist[k] = row
            probs = np.array([dist[k] for k in keys])
            if mode == "deterministic":
                order = pol_to_env  # argmax in the policy's order, ties to its first action
                choice = order[np.argmax(probs[:, order], axis=1)]
        else:
            probs = masks / masks.sum(axis=1, keepdims=True)
        if not use_policy or mode == "stochastic":
            u = rng.random(active.size)
            cum = np.cumsum(probs, axis=1)
            choice = np.minimum((cum < (u * cum[:, -1])[:, None]).sum(axis=1), n_act - 1)
            # never land on a zero-probability action through rounding
            bad_pick = probs[np.arange(active.size), choice] <= 0
            if bad_pick.any():
                choice[bad_pick] = np.argmax(probs[bad_pick], axis=1)
        for j, e in enumerate(active.tolist()):
            succ, r = dyn.sample(tables[j], int(choice[j]), rng)
            states[e] = succ
            returns[e] += r * env.reward_scale
        lengths[active] += 1
    return RolloutResult(returns, lengths, terminated, truncated, reached, calls, len(dist))
