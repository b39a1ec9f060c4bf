"""Issue 24's benchmarks: the shield on two environments, and a training run's curve (shared vs separate).

Usage (from the repository root; about 15-25 minutes on 2 cores)::

    nice -n 5 python benchmarks/shield_curve.py [--skip-shield] [--skip-train] [--big N]

1. ``distmc.shield.shield`` on avoid (N=5, the shipped policy, ``P=? [F<=30 "crash"]``, delta 0.05, reward
   ``survive``) and freeway (W=6, the shipped policy, ``P=? [F<=20 "crash"]``, delta 0.05, reward ``score``); the
   exported shielded policy is verified again by a separate ``verify`` (the value must agree to 1e-12).
2. PPO (seed 0) trained on the bundled gridworld (N=6) with :class:`distmc.integrations.sb3.VerifyCallback` every
   2,048 steps: 12 checkpoints, each verified during training; the picture ``benchmarks/curve_gridworld.png``.
3. The same 12 checkpoints on gridworld N=``--big`` (32: 1,048,576 states): ``distmc.curve.curve`` (one shared
   exploration) against one full ``verify`` of the first checkpoint, measured side by side in this process, and
   two checkpoints' separate runs to check the values (1e-12).

Writes ``benchmarks/shield_curve.json`` and prints the tables for RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from importlib import resources
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from distmc.api import verify  # noqa: E402
from distmc.curve import curve, plot_curve  # noqa: E402
from distmc.shield import shield  # noqa: E402

ENVS = REPO / "benchmarks" / "envs"
POLICIES = REPO / "benchmarks" / "policies"
GRID = str(resources.files("distmc") / "examples" / "gridworld.prism")
CURVE_PROP = 'P=? [F<=30 "crash"]'

SHIELDS = [
    ("avoid", "avoid.prism", "N=5,slickness=0.1", 'P=? [F<=30 "crash"]', 0.05, "survive"),
    ("freeway", "freeway.prism", "W=6", 'P=? [F<=20 "crash"]', 0.05, "score"),
]


def run_shields(out: Path) -> list[dict]:
    rows = []
    for name, file, const, prop, delta, reward in SHIELDS:
        t0 = time.perf_counter()
        r = shield(
            ENVS / file,
            prop,
            delta,
            constants=const,
            policy=str(POLICIES / name / "policy.pt"),
            out=out / f"shield-{name}",
            reward=reward,
        )
        seconds = time.perf_counter() - t0
        again = verify(ENVS / file, prop, constants=const, policy=r.policy_path)
        row = {
            "env": name,
            "constants": const,
            "property": prop,
            "delta": delta,
            "seconds": seconds,
            "separate_run": float(again.result),
            "difference": abs(float(again.result) - r.value_after),
            **json.loads(r.to_json()),
        }
        rows.append(row)
        print(
            r.summary(),
            f"\n  separate run of the exported policy: {float(again.result)!r} "
            f"(|diff| {row['difference']:.1e}); {seconds:.1f} s",
            flush=True,
        )
    return rows


def train(out: Path, steps: int, every: int) -> tuple[list[str], dict]:
    from stable_baselines3 import PPO

    from distmc.gym import PrismEnv
    from distmc.integrations.sb3 import VerifyCallback

    env = PrismEnv(GRID, "N=6", reward="steps", reward_scale=-1, done_label=["crash", "goal"], max_steps=60)
    ppo = PPO(
        "MlpPolicy",
        env,
        seed=0,
        n_steps=1024,
        batch_size=128,
        device="cpu",
        verbose=0,
        policy_kwargs={"net_arch": [64, 64]},
    )
    cb = VerifyCallback(GRID, CURVE_PROP, every=every, directory=out / "checkpoints", constants="N=6")
    t0 = time.perf_counter()
    ppo.learn(steps, callback=cb)
    report = cb.curve
    plot_curve(report, REPO / "benchmarks" / "curve_gridworld.png")
    print(report.table(), f"\n  training with the callback: {time.perf_counter() - t0:.1f} s", flush=True)
    return [p.policy for p in report.points], json.loads(report.to_json())


def big_curve(policies: list[str], n: int) -> dict:
    const = f"N={n}"
    t0 = time.perf_counter()
    full = verify(GRID, CURVE_PROP, constants=const, policy=policies[0])
    full_s = time.perf_counter() - t0
    print(
        f"one full run (N={n}, first checkpoint): {full.states} states, {full.transitions} transitions, "
        f"{full_s:.2f} s, value {float(full.result)!r}",
        flush=True,
    )
    t0 = time.perf_counter()
    shared = curve(GRID, CURVE_PROP, policies, constants=const)
    shared_s = time.perf_counter() - t0
    print(
        shared.table(),
        f"\n  {len(policies)} checkpoints shared: {shared_s:.2f} s = {shared_s / full_s:.2f} x one full run",
        flush=True,
    )
    checks = []
    for i in (0, len(policies) - 1):
        sep = full if i == 0 else verify(GRID, CURVE_PROP, constants=const, policy=policies[i])
        checks.append(
            {
                "policy": policies[i],
                "separate": float(sep.result),
                "shared": shared.points[i].value,
                "difference": abs(float(sep.result) - shared.points[i].value),
            }
        )
        print(f"  checkpoint {i}: separate {float(sep.result)!r}, shared {shared.points[i].value!r}", flush=True)
    return {
        "constants": const,
        "full_run_s": full_s,
        "full_states": full.states,
        "full_transitions": full.transitions,
        "full_timings": full.timings,
        "shared_s": shared_s,
        "ratio": shared_s / full_s,
        "curve": json.loads(shared.to_json()),
        "checks": checks,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-shield", action="store_true")
    ap.add_argument("--skip-train", action="store_true", help="reuse the checkpoints of a previous run")
    ap.add_argument("--big", type=int, default=32, help="gridworld N of the timing comparison (N^4 states)")
    ap.add_argument("--steps", type=int, default=12 * 2048)
    ap.add_argument("--every", type=int, default=2048)
    ap.add_argument("--out", default="/tmp/distmc-shield-curve")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result_path = REPO / "benchmarks" / "shield_curve.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    result["machine"] = f"{os.cpu_count()} CPUs, shared with other jobs (loaded)"
    if not args.skip_shield:
        result["shields"] = run_shields(out)
        result_path.write_text(json.dumps(result, indent=2))
    if args.skip_train:
        policies = sorted(
            (str(p) for p in (out / "checkpoints").glob("step-*.pt2")), key=lambda s: int(Path(s).stem.split("-")[1])
        )
    else:
        policies, result["training_curve"] = train(out, args.steps, args.every)
        result_path.write_text(json.dumps(result, indent=2))
    result["big_curve"] = big_curve(policies, args.big)
    result_path.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
