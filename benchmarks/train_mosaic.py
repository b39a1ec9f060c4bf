"""Train the pendulum and cart-pole controllers of ``distmc abstract`` (DQN, 2 hidden layers of 64).

Usage: ``nice -n 10 python benchmarks/train_mosaic.py pendulum --steps 40000`` (and ``cartpole``). Writes
``benchmarks/policies/ENV.pt`` (torch state_dict of the Q-network) and ``ENV.json`` (layer spec, actions, training
metadata). The training environment uses the very dynamics that are verified (:mod:`distmc.abstract.envs`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN

from distmc.abstract.envs import ContinuousEnv, get_env


class TrainEnv(gym.Env):
    """Start uniformly in the initial region; reward 1 per step alive (minus a small cost of leaning); end on failure."""

    def __init__(self, env: ContinuousEnv, seed: int) -> None:
        self.env = env
        a = env.arrays()
        self.lo, self.hi, self.safe_hi = a["init_lo"], a["init_hi"], a["safe_hi"]
        self.action_space = gym.spaces.Discrete(len(env.actions))
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(env.dim,), dtype=np.float32)
        self.rng = np.random.default_rng(seed)
        self.x = self.lo.copy()
        self.t = 0

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.x = self.rng.uniform(self.lo, self.hi)
        self.t = 0
        return self.x.astype(np.float32), {}

    def step(self, action):
        self.x = self.env.step(self.x[None, :], np.array([self.env.actions[int(action)]]))[0]
        self.t += 1
        failed = bool(self.env.failed(self.x[None, :])[0])
        finite = np.isfinite(self.safe_hi)
        lean = float(np.sum((self.x[finite] / self.safe_hi[finite]) ** 2))
        reward = 0.0 if failed else 1.0 - 0.1 * lean
        return self.x.astype(np.float32), reward, failed, self.t >= self.env.episode_steps, {}


def evaluate(model: DQN, env: ContinuousEnv, episodes: int, seed: int) -> tuple[float, float]:
    """Mean episode reward and failure rate of the greedy policy."""
    e = TrainEnv(env, seed)
    rewards, fails = [], 0
    for i in range(episodes):
        obs, _ = e.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            a, _ = model.predict(obs, deterministic=True)
            obs, r, term, trunc, _ = e.step(a)
            total += r
            done = term or trunc
            fails += int(term)
        rewards.append(total)
    return float(np.mean(rewards)), fails / episodes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("env", choices=["pendulum", "cartpole"])
    ap.add_argument("--steps", type=int, default=40_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "policies"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    env = get_env(args.env)
    model = DQN(
        "MlpPolicy",
        TrainEnv(env, args.seed),
        policy_kwargs=dict(net_arch=[64, 64]),
        seed=args.seed,
        learning_rate=1e-3,
        buffer_size=50_000,
        learning_starts=1000,
        exploration_fraction=0.3,
        target_update_interval=500,
        train_freq=4,
        verbose=0,
    )
    t0 = time.time()
    model.learn(total_timesteps=args.steps)
    train_s = time.time() - t0
    mean_reward, fail_rate = evaluate(model, env, 50, 10_000 + args.seed)
    q = model.q_net.q_net  # Sequential(Linear, ReLU, Linear, ReLU, Linear)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().clone() for k, v in q.state_dict().items()}
    torch.save(state, out / f"{args.env}.pt")
    layers = []
    for m in q:
        if isinstance(m, torch.nn.Linear):
            layers.append({"type": "linear", "in": m.in_features, "out": m.out_features})
        else:
            layers.append({"type": type(m).__name__.lower()})
    spec = {
        "format": "distmc-mlp/1",
        "env": args.env,
        "weights": f"{args.env}.pt",
        "layers": layers,
        "actions": list(env.actions),
        "output": "Q-values (action = argmax)",
        "training": {
            "algorithm": "DQN (stable-baselines3)",
            "steps": args.steps,
            "seed": args.seed,
            "train_seconds": round(train_s, 1),
            "eval_episodes": 50,
            "mean_reward": round(mean_reward, 2),
            "eval_failure_rate": fail_rate,
            "episode_steps": env.episode_steps,
            "command": f"python benchmarks/train_mosaic.py {args.env} --steps {args.steps} --seed {args.seed}",
        },
    }
    (out / f"{args.env}.json").write_text(json.dumps(spec, indent=2) + "\n")
    print(json.dumps(spec["training"]))


if __name__ == "__main__":
    main()
