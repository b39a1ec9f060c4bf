"""Issue 24's benchmarks: the shield on two environments, and a training run's curve (shared vs separate).

Usage (from the repository root; about 15-25 minutes on 2 cores)::

    nice -n 5 python benchmarks/shield_curve.py [--skip-shield] [--skip-train] [--big N]

1. ``distmc.shield.shield`` on avoid (N=5, the shipped policy, ``P=? [F<=30 "crash"]``, delta 0.05, reward
   ``survive``) and freeway (W=6, the shipped policy, ``P=? [F<=20 "crash"]``, delta 0.05, reward ``score``); the
   exported shielded policy is verified again by a separate ``verify`` (the value must agree to 1e-12).
2. PPO (seed 0) trained on the bundled gridworld (N=6) with :class:`distmc.integrations.sb3.VerifyCallback` every
   2,048 steps: 12 checkpoints, each verified during training; the picture ``benchmarks/curve_gridworld.png``.
3. The same 12 checkpoints on gridworld N=``--big`` (32: 1,048,576 states): a separate ``verify`` of each, then
   ``distmc.curve.curve`` (one shared exploration), side by side in this process, with ``--checker`` (default
   native) on both sides; the values must agree to 1e-12.

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


def big_curve(policies: list[str], n: int, checker: str) -> dict:
    """Every checkpoint by a separate run and all of them on one shared exploration, side by side."""
    const = f"N={n}"
    verify(GRID, CURVE_PROP, constants="N=4", policy=policies[0], checker=checker)  # imports and compilation
    separate = []
    for policy in policies:
        t0 = time.perf_counter()
        r = verify(GRID, CURVE_PROP, constants=const, policy=policy, checker=checker)
        separate.append(
            {
                "policy": policy,
                "value": float(r.result),
                "seconds": time.perf_counter() - t0,
                "states": r.states,
                "transitions": r.transitions,
                "timings": r.timings,
            }
        )
        print(
            f"separate run: {r.states} states, {r.transitions} transitions, {separate[-1]['seconds']:.2f} s "
            f"{r.timings}",
            flush=True,
        )
    t0 = time.perf_counter()
    shared = curve(GRID, CURVE_PROP, policies, constants=const, checker=checker)
    shared_s = time.perf_counter() - t0
    full_s = separate[0]["seconds"]
    sep_s = sum(x["seconds"] for x in separate)
    diff = max(abs(x["value"] - p.value) for x, p in zip(separate, shared.points, strict=True))
    print(shared.table(), flush=True)
    print(
        f"  {len(policies)} checkpoints shared: {shared_s:.2f} s = {shared_s / full_s:.2f} x one full run "
        f"({full_s:.2f} s); separate runs {sep_s:.2f} s; largest |shared - separate| {diff:.1e}",
        flush=True,
    )
    return {
        "constants": const,
        "checker": checker,
        "full_run_s": full_s,
        "separate_s": sep_s,
        "separate": separate,
        "shared_s": shared_s,
        "ratio_to_one_run": shared_s / full_s,
        "ratio_to_separate": shared_s / sep_s,
        "max_difference": diff,
        "curve": json.loads(shared.to_json()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-shield", action="store_true")
    ap.add_argument("--skip-train", action="store_true", help="reuse the checkpoints of a previous run")
    ap.add_argument("--skip-curve", action="store_true", help="no training and no curve: the shields only")
    ap.add_argument("--big", type=int, default=32, help="gridworld N of the timing comparison (N^4 states)")
    ap.add_argument("--steps", type=int, default=12 * 2048)
    ap.add_argument("--every", type=int, default=2048)
    ap.add_argument("--out", default="/tmp/distmc-shield-curve")
    ap.add_argument("--checker", default="native", help="checker of the timing comparison (both sides)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result_path = REPO / "benchmarks" / "shield_curve.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    result["machine"] = f"{os.cpu_count()} CPUs, shared with other jobs (loaded)"
    if not args.skip_shield:
        result["shields"] = run_shields(out)
        result_path.write_text(json.dumps(result, indent=2))
    if args.skip_curve:
        return
    if args.skip_train:
        policies = sorted(
            (str(p) for p in (out / "checkpoints").glob("step-*.pt2")), key=lambda s: int(Path(s).stem.split("-")[1])
        )
    else:
        policies, result["training_curve"] = train(out, args.steps, args.every)
        result_path.write_text(json.dumps(result, indent=2))
    result[f"big_curve_{args.checker}"] = big_curve(policies, args.big, args.checker)
    result_path.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
