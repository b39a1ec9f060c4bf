"""Policy formats and the Gymnasium environment: what each costs, measured side by side in one process.

Run: ``python benchmarks/gym_policy.py [--n 12] [--steps 20000]`` (needs the rl extra). Prints Markdown tables:

1. ``PrismEnv`` steps per second on gridworld (random enabled actions), with the per-state cache and with a
   cache of one state (every step asks the compiled kernel), and SB3 PPO's training throughput on it.
2. ``verify`` of one 4-64-64-4 network saved in every format (TorchScript, state_dict, SB3 PPO .zip, a
   ``module:function``), against the uniform policy: times, states evaluated, network calls.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from distmc.api import verify  # noqa: E402
from distmc.gym import PrismEnv  # noqa: E402

GRID = REPO / "distmc" / "examples" / "gridworld.prism"
FEATURES = ["x", "y", "px", "py"]
ACTIONS = ["up", "down", "left", "right"]


def env_steps(n: int, steps: int, cache_size: int) -> list[tuple[float, int]]:
    """Steps/s and kernel expansions of two consecutive runs of ``steps`` random steps in one environment."""
    env = PrismEnv(GRID, f"N={n}", reward="steps", done_label=["crash", "goal"], max_steps=500, cache_size=cache_size)
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    out = []
    for _ in range(2):
        before = env.dynamics.expanded
        t = time.perf_counter()
        for _ in range(steps):
            a = int(rng.choice(np.flatnonzero(info["action_mask"])))
            _, _, te, tr, info = env.step(a)
            if te or tr:
                _, info = env.reset()
        out.append((steps / (time.perf_counter() - t), env.dynamics.expanded - before))
    return out


def ppo_throughput(n: int, steps: int) -> float:
    from stable_baselines3 import PPO

    env = PrismEnv(
        GRID, f"N={n}", reward="steps", reward_scale=-1, done_label=["crash", "goal"], max_steps=500, normalize=True
    )
    model = PPO("MlpPolicy", env, n_steps=1024, batch_size=256, n_epochs=1, seed=0, device="cpu")
    t = time.perf_counter()
    model.learn(steps)
    return steps / (time.perf_counter() - t)


def save_formats(tmp: Path) -> dict[str, tuple[str, str | None, bool]]:
    from stable_baselines3 import PPO

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4)
    ).eval()
    iface = {"features": FEATURES, "actions": ACTIONS, "output": "logits"}
    torch.jit.script(net).save(str(tmp / "ts.pt"))
    (tmp / "ts.json").write_text(json.dumps(iface))
    torch.save(net.state_dict(), tmp / "sd.pt")
    (tmp / "sd.json").write_text(json.dumps({**iface, "architecture": {"layers": [64, 64], "activation": "tanh"}}))
    (tmp / "bench_callable_policy.py").write_text(
        f"import torch\nNET = torch.jit.load({str(tmp / 'ts.pt')!r})\n"
        "def policy(obs):\n    with torch.no_grad():\n        return NET(torch.from_numpy(obs))\n"
    )
    sys.path.insert(0, str(tmp))
    env = PrismEnv(GRID, "N=4")
    ppo = PPO("MlpPolicy", env, n_steps=8, device="cpu", policy_kwargs={"net_arch": [64, 64]})
    pn = ppo.policy.mlp_extractor.policy_net
    with torch.no_grad():
        for dst, src in zip([pn[0], pn[2], ppo.policy.action_net], [net[0], net[2], net[4]], strict=True):
            dst.weight.copy_(src.weight)
            dst.bias.copy_(src.bias)
    ppo.save(str(tmp / "ppo.zip"))
    env.save_interface(tmp / "ppo.json")
    return {
        "uniform": ("uniform", None, False),
        "TorchScript": (str(tmp / "ts.pt"), None, False),
        "state_dict": (str(tmp / "sd.pt"), None, False),
        "SB3 PPO .zip": (str(tmp / "ppo.zip"), None, True),
        "module:function": ("bench_callable_policy:policy", str(tmp / "ts.json"), False),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12, help="gridworld size of the verify runs")
    ap.add_argument("--steps", type=int, default=20_000, help="environment steps per measurement")
    args = ap.parse_args()
    verify(GRID, 'P=? [F "crash"]', constants="N=3")  # warm-up: numba routines from their disk cache
    print("### PrismEnv steps (gridworld N=8, random enabled actions)\n")
    print(f"Two consecutive runs of {args.steps} steps in one environment (4096 states).\n")
    print(
        "| cache | run 1 steps/s | run 1 kernel expansions | run 2 steps/s | run 2 kernel expansions |\n"
        "|---|---|---|---|---|"
    )
    for label, size in (("per-state cache (default)", 200_000), ("one state (every step expands)", 1)):
        (r1, e1), (r2, e2) = env_steps(8, args.steps, size)
        print(f"| {label} | {r1:,.0f} | {e1} | {r2:,.0f} | {e2} |")
    print(
        f"\nSB3 PPO (MlpPolicy 64-64, n_steps 1024, 1 epoch) on it: {ppo_throughput(8, 4096):,.0f} env steps/s "
        "including training\n"
    )
    with tempfile.TemporaryDirectory() as d:
        formats = save_formats(Path(d))
        print(f'### verify gridworld N={args.n}, P=? [F "crash"], stochastic, one 4-64-64-4 network per format\n')
        print(
            "| policy | value | states | policy_states | policy_calls | explore s | total s |\n|---|---|---|---|---|---|---|"
        )
        for name, (spec, iface, trust) in formats.items():
            r = verify(
                GRID, 'P=? [F "crash"]', constants=f"N={args.n}", policy=spec, interface=iface, trust_policy=trust
            )
            print(
                f"| {name} | {r.result:.12f} | {r.states} | {r.policy_states} | {r.policy_calls} | "
                f"{r.timings['explore_s']:.3f} | {r.timings['total_s']:.3f} |"
            )


if __name__ == "__main__":
    main()
