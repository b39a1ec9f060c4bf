"""Train the benchmark policies with Stable-Baselines3 PPO and save them where distmc and the tests find them.

For each environment of ``benchmarks/envs/envs.toml`` (or those named with ``--env``):

1. :class:`KernelEnv`, a Gymnasium environment over the PRISM model, driven by distmc's kernel: the observation is
   the state vector (distmc's state layout, booleans 0/1, as float32), the discrete actions are the model's action
   labels, the step reward is the state reward of the state left plus the action reward of the action taken from
   the manifest's reward structure, and an episode ends when the manifest's ``done`` label holds (terminated) or
   after ``max_steps`` steps (truncated). An action the state does not enable leaves the state unchanged with
   reward 0 (training only: when verifying, distmc renormalises the policy over the enabled actions).
2. PPO (``MlpPolicy``) with the paper's shapes: two hidden layers of the manifest's ``hidden`` width (64 for Freeway
   and Avoidance, 1024 for Crazy Climber) for the policy, two of 64 for the value function; ``train_steps``
   environment steps, seeded.
3. The actor (hidden layers + action head, logits) is exported as TorchScript ``benchmarks/policies/<env>/policy.pt``
   with distmc's interface file ``policy.json`` (features = the state variables in layout order, actions = the
   labels, ``output: logits``), and ``meta.json``: steps, seed, mean and std of the episode reward of the
   stochastic policy over ``--eval-episodes`` episodes, training seconds, architecture and versions.

Usage (from the repository root; long: run it under ``nice``)::

    nice -n 10 python benchmarks/train.py                  # every environment
    nice -n 10 python benchmarks/train.py --env avoid --steps 20000

Why not ``distmc.gym``: this script was written before that environment existed (issue 4, item 2); it needs only
distmc's kernel.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.suite import BenchEnv, Simulator, load_envs  # noqa: E402
from distmc.errors import DistmcError  # noqa: E402
from distmc.model.program import Model  # noqa: E402


class KernelEnv(gym.Env):
    """A PRISM MDP as a Gymnasium environment, stepped by distmc's kernel (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, model: Model, reward: str, done: str, max_steps: int) -> None:
        super().__init__()
        if done not in model.labels:
            raise DistmcError(f"{model.path}: no label '{done}' to end episodes (have {sorted(model.labels)})")
        self.model = model
        self.actions = [a for a in model.actions if a != ""]
        if len(self.actions) != len(model.actions):
            raise DistmcError(f"{model.path}: unlabelled commands cannot be chosen by a policy; label them")
        self.reward = model.reward(reward)
        self.done = model.labels[done]
        self.max_steps = max_steps
        self.sim = Simulator(model, compiled=False)
        self._cache: dict[bytes, tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]] = {}
        self.action_space = gym.spaces.Discrete(len(self.actions))
        lo = model.lo.astype(np.float32)
        hi = model.hi.astype(np.float32)
        self.observation_space = gym.spaces.Box(lo, hi, dtype=np.float32)
        self.state = model.initial_states[0].copy()
        self.t = 0

    def _reward(self, state: np.ndarray, action: str) -> float:
        s = state[None, :]
        r = 0.0
        for guard, value in self.reward.state_items:
            if bool(guard(s)[0]):
                r += float(value(s)[0])
        for a, guard, value in self.reward.action_items:
            if a == action and bool(guard(s)[0]):
                r += float(value(s)[0])
        return r

    def _expand(self, state: np.ndarray) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
        """Per action: the step reward, and the successors with their probabilities (cached per state)."""
        key = state.tobytes()
        hit = self._cache.get(key)
        if hit is None:
            table, exp = self.sim.choices(state[None, :])
            rewards = np.zeros(len(self.actions))
            branches = []
            for a, c in enumerate(table[0].tolist()):
                if c < 0:
                    branches.append((np.zeros((0, state.shape[0]), dtype=np.int64), np.zeros(0)))
                    continue
                lo, hi = int(exp.branch_offsets[c]), int(exp.branch_offsets[c + 1])
                p = exp.prob[lo:hi]
                branches.append((self.sim.codec.unpack(exp.succ_keys[lo:hi]), p / p.sum()))
                rewards[a] = self._reward(state, self.actions[a])
            hit = (rewards, branches)
            self._cache[key] = hit
        return hit

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.state = self.model.initial_states[0].copy()
        self.t = 0
        return self.state.astype(np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        rewards, branches = self._expand(self.state)
        reward = 0.0
        if branches[int(action)][0].shape[0] > 0:
            reward = rewards[int(action)]
            succ, prob = branches[int(action)]
            self.state = succ[int(self.np_random.choice(prob.shape[0], p=prob))]
        self.t += 1
        terminated = bool(self.done(self.state[None, :])[0])
        truncated = self.t >= self.max_steps and not terminated
        return self.state.astype(np.float32), reward, terminated, truncated, {}


def actor(model: Any) -> nn.Module:
    """The PPO policy's actor as a plain module: observation -> action logits."""
    return nn.Sequential(*model.policy.mlp_extractor.policy_net, model.policy.action_net).cpu().eval()


def evaluate(env: KernelEnv, net: nn.Module, episodes: int, seed: int) -> tuple[float, float]:
    """Mean and std of the episode reward of the stochastic policy (softmax of the logits over all actions)."""
    rng = np.random.default_rng(seed)
    totals = []
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        total, done = 0.0, False
        while not done:
            with torch.inference_mode():
                p = torch.softmax(net(torch.from_numpy(obs)[None, :]), dim=-1)[0].double().numpy()
            a = int(rng.choice(len(p), p=p / p.sum()))
            obs, r, term, trunc, _ = env.step(a)
            total += r
            done = term or trunc
        totals.append(total)
    return float(np.mean(totals)), float(np.std(totals))


def train(bench: BenchEnv, steps: int, seed: int, eval_episodes: int, out: Path) -> dict[str, Any]:
    """Train one environment's policy, export it into ``out`` and return its metadata."""
    import stable_baselines3 as sb3
    from stable_baselines3 import PPO

    model = bench.load_model()
    env = KernelEnv(model, bench.reward, bench.done, bench.max_steps)
    arch = {"pi": [bench.hidden, bench.hidden], "vf": [64, 64]}
    hyper: dict[str, Any] = {"n_steps": 1024, "batch_size": 128, "learning_rate": 3e-4, "gamma": 0.99, "ent_coef": 0.01}
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    ppo = PPO("MlpPolicy", env, seed=seed, policy_kwargs={"net_arch": arch}, device="cpu", verbose=0, **hyper)
    ppo.learn(total_timesteps=steps)
    seconds = time.perf_counter() - t0
    net = actor(ppo)
    mean, std = evaluate(KernelEnv(model, bench.reward, bench.done, bench.max_steps), net, eval_episodes, seed + 1000)
    out.mkdir(parents=True, exist_ok=True)
    torch.jit.script(net).save(str(out / "policy.pt"))
    features = [v.name for v in model.variables]
    (out / "policy.json").write_text(
        json.dumps({"features": features, "actions": env.actions, "output": "logits"}, indent=2) + "\n"
    )
    meta = {
        "env": bench.name,
        "model": str(bench.file.relative_to(REPO)),
        "constants": bench.constants,
        "reward": bench.reward,
        "done": bench.done,
        "max_steps": bench.max_steps,
        "algorithm": "PPO (stable-baselines3 MlpPolicy, Tanh)",
        "net_arch": arch,
        "hyperparameters": hyper,
        "steps": steps,
        "seed": seed,
        "eval_episodes": eval_episodes,
        "mean_reward": mean,
        "std_reward": std,
        "train_seconds": round(seconds, 1),
        "versions": {"stable_baselines3": sb3.__version__, "torch": torch.__version__, "python": platform.python_version()},
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--env", action="append", help="environment of the manifest (repeatable; default: all)")
    ap.add_argument("--steps", type=int, default=None, help="PPO steps (default: the manifest's train_steps)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-episodes", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    ap.add_argument("--out", default=None, help="policy folder (default: benchmarks/policies/<env>)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    envs = load_envs()
    names = args.env or list(envs)
    for name in names:
        if name not in envs:
            ap.error(f"unknown environment '{name}' (have {list(envs)})")
        bench = envs[name]
        out = Path(args.out) / name if args.out else bench.policy_dir
        meta = train(bench, args.steps or bench.train_steps, args.seed, args.eval_episodes, out)
        print(f"{name}: {meta['steps']} steps in {meta['train_seconds']} s, mean reward {meta['mean_reward']:.3f} "
              f"+- {meta['std_reward']:.3f} ({meta['eval_episodes']} episodes) -> {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
