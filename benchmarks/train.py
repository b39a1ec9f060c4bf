"""Train the benchmark policies with Stable-Baselines3 PPO and save them where distmc and the tests find them.

For each environment of ``benchmarks/envs/envs.toml`` (or those named with ``--env``):

1. :class:`distmc.gym.PrismEnv` over the PRISM model (the observation is the state vector in distmc's state layout,
   the discrete actions are the model's action labels, the step reward is the manifest's reward structure, an
   episode ends at the manifest's ``done`` label or after ``max_steps`` steps; a disabled action is a no-op with
   reward 0 while training: when verifying, distmc renormalises the policy over the enabled actions).
2. PPO (``MlpPolicy``, Tanh) with the paper's shapes: two hidden layers of the manifest's ``hidden`` width (64 for
   Freeway and Avoidance, 1024 for Crazy Climber) for the policy, two of 64 for the value function;
   ``train_steps`` environment steps, seeded.
3. :func:`distmc.gym.export_policy` writes the actor (logits) as TorchScript ``benchmarks/policies/<env>/policy.pt``
   with its interface file ``policy.json``; ``meta.json`` records the steps, the seed, the mean and std of the
   episode return of the exported policy (stochastic, masked as distmc verifies it) over ``--eval-episodes``
   episodes, the training time, the architecture and the versions.

Usage (from the repository root; minutes per environment: run it under ``nice``)::

    nice -n 10 python benchmarks/train.py                  # every environment
    nice -n 10 python benchmarks/train.py --env avoid --steps 20000
    nice -n 10 python benchmarks/train.py --env delivery --normalize   # observations scaled to [-1, 1]

``--normalize`` scales each observation by its variable's range (the scale goes into ``policy.json``): on large
grids, where raw coordinates reach the hundreds (``benchmarks/partial_efficiency.py`` trains that way).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

# PrismEnv steps one state at a time; numba's parallel chunks then fight torch's threads on the cores (measured on
# 2 cores: 2,048 PPO steps on avoid took 43 s with numba's default threads, 5.3 s with one). Set before numba loads.
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.suite import BenchEnv, load_envs  # noqa: E402


def make_env(bench: BenchEnv, normalize: bool = False) -> Any:
    """The environment's :class:`distmc.gym.PrismEnv` (reward, done label and step limit from the manifest).

    ``normalize``: observations scaled to [-1, 1] by the variables' ranges (the scale goes into the interface file).
    """
    from distmc.gym import PrismEnv

    return PrismEnv(
        bench.file,
        bench.constants or None,
        reward=bench.reward,
        done_label=bench.done,
        max_steps=bench.max_steps,
        normalize=normalize,
    )


def evaluate(bench: BenchEnv, policy_file: Path, episodes: int, seed: int) -> tuple[float, float]:
    """Mean and std of the episode return of the exported policy (stochastic, masked as distmc verifies it)."""
    from distmc.gym import rollout
    from distmc.policy import load_policy

    env = make_env(bench)
    res = rollout(env, load_policy(str(policy_file), env.model), episodes, seed=seed, mode="stochastic", labels=[])
    return float(res.returns.mean()), float(res.returns.std())


def train(
    bench: BenchEnv, steps: int, seed: int, eval_episodes: int, out: Path, normalize: bool = False
) -> dict[str, Any]:
    """Train one environment's policy, export it into ``out`` and return its metadata (``normalize``: :func:`make_env`)."""
    import stable_baselines3 as sb3
    from stable_baselines3 import PPO

    from distmc.gym import export_policy

    env = make_env(bench, normalize)
    arch = {"pi": [bench.hidden, bench.hidden], "vf": [64, 64]}
    hyper: dict[str, Any] = {"n_steps": 1024, "batch_size": 128, "learning_rate": 3e-4, "gamma": 0.99, "ent_coef": 0.01}
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    ppo = PPO("MlpPolicy", env, seed=seed, policy_kwargs={"net_arch": arch}, device="cpu", verbose=0, **hyper)
    ppo.learn(total_timesteps=steps)
    seconds = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    export_policy(ppo, out / "policy.pt", env)
    mean, std = evaluate(bench, out / "policy.pt", eval_episodes, seed + 1000)
    meta = {
        "env": bench.name,
        "model": str(bench.file.relative_to(REPO)),
        "constants": bench.constants,
        "reward": bench.reward,
        "done": bench.done,
        "max_steps": bench.max_steps,
        "normalize": normalize,
        "algorithm": "PPO (stable-baselines3 MlpPolicy, Tanh)",
        "net_arch": arch,
        "hyperparameters": hyper,
        "steps": steps,
        "seed": seed,
        "eval_episodes": eval_episodes,
        "mean_reward": mean,
        "std_reward": std,
        "train_seconds": round(seconds, 1),
        "versions": {
            "stable_baselines3": sb3.__version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
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
    ap.add_argument("--normalize", action="store_true", help="scale observations by the variables' ranges")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    envs = load_envs()
    names = args.env or list(envs)
    for name in names:
        if name not in envs:
            ap.error(f"unknown environment '{name}' (have {list(envs)})")
        bench = envs[name]
        out = Path(args.out) / name if args.out else bench.policy_dir
        meta = train(bench, args.steps or bench.train_steps, args.seed, args.eval_episodes, out, args.normalize)
        print(
            f"{name}: {meta['steps']} steps in {meta['train_seconds']} s, mean reward {meta['mean_reward']:.3f} "
            f"+- {meta['std_reward']:.3f} ({meta['eval_episodes']} episodes) -> {out}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
