"""Issue 24: what a training run's curve costs against one full run of one checkpoint, on >= 1 M states.

For each environment (the bundled gridworld at N=32: 1,048,576 states; the avoid grid at N=10: 1,000,000 states):

1. ten PPO checkpoints (seed 0, trained on the small instance with :class:`distmc.integrations.sb3.VerifyCallback`,
   one every 2,048 steps; cached under ``/tmp/distmc-curve-cost/<env>``);
2. the command line, as a user runs it, alternated ``--repeat`` times: ``distmc run`` of one checkpoint, then
   ``distmc curve`` of all ten (wall-clock of each process, start-up included);
3. in one process (start-up and compilation paid before): one full ``verify`` of a checkpoint after a warm-up
   run, then :class:`~distmc.curve.engine.SharedModel` and ``check_many`` for the ten, with the phases apart;
   every shared value against the checkpoint's own full run (at most 1e-12 apart).

Both sides use ``--checker native`` (distmc's own kernels; Storm's hand-off of 10^7 transitions would dominate
either side). Writes ``benchmarks/curve_cost_<envs>.json`` and prints the lines for ``benchmarks/RESULTS.md``.

Usage: ``nice -n 5 python benchmarks/curve_cost.py [--env grid avoid] [--repeat 2]`` (minutes; the avoid grid's
MDP has 117 M transitions and its run needs about 10 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GRID = str(resources.files("distmc") / "examples" / "gridworld.prism")
AVOID = str(REPO / "benchmarks" / "envs" / "avoid.prism")
PROP = 'P=? [F<=30 "crash"]'
CACHE = Path("/tmp/distmc-curve-cost")

#: name -> (model, training constants, the big constants, training reward and labels)
ENVS = {
    "grid": (GRID, "N=6", "N=32", {"reward": "steps", "reward_scale": -1, "done_label": ["crash", "goal"]}),
    "avoid": (AVOID, "N=5,slickness=0.1", "N=10,slickness=0.1", {"reward": "survive", "done_label": "crash"}),
}


def checkpoints(env: str, count: int = 10, every: int = 2048) -> list[str]:
    """``count`` PPO checkpoints of ``env`` (trained once, then cached)."""
    model, small, _, kw = ENVS[env]
    out = CACHE / env
    found = sorted(out.glob("step-*.pt2"), key=lambda p: int(p.stem.split("-")[1]))
    if len(found) >= count:
        return [str(p) for p in found[:count]]
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")  # PrismEnv steps one state at a time (see train.py)
    from stable_baselines3 import PPO

    from distmc.gym import PrismEnv
    from distmc.integrations.sb3 import VerifyCallback

    penv = PrismEnv(model, small, max_steps=60, **kw)
    ppo = PPO(
        "MlpPolicy",
        penv,
        seed=0,
        n_steps=1024,
        batch_size=128,
        device="cpu",
        verbose=0,
        policy_kwargs={"net_arch": [64, 64]},
    )
    cb = VerifyCallback(model, PROP, every=every, directory=out, constants=small)
    t0 = time.perf_counter()
    ppo.learn(count * every, callback=cb)
    print(f"{env}: {count} checkpoints trained in {time.perf_counter() - t0:.1f} s", flush=True)
    found = sorted(out.glob("step-*.pt2"), key=lambda p: int(p.stem.split("-")[1]))
    return [str(p) for p in found[:count]]


def cli(args: list[str]) -> float:
    """Seconds of one ``distmc`` process (exit code checked)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "distmc.cli", *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def in_process(env: str, pols: list[str], compare: int) -> dict:
    from distmc.api import verify
    from distmc.curve.engine import SharedModel
    from distmc.options import VerifyOptions

    model, _, big, _ = ENVS[env]
    o = VerifyOptions(constants=big, checker="native")
    verify(model, PROP, o, policy=pols[0])  # imports, compilation, caches
    full = []
    for p in pols[:compare]:
        t0 = time.perf_counter()
        r = verify(model, PROP, o, policy=p)
        full.append(
            {
                "seconds": time.perf_counter() - t0,
                "value": float(r.result),
                "timings": r.timings,
                "states": r.states,
                "transitions": r.transitions,
            }
        )
    t0 = time.perf_counter()
    sm = SharedModel(model, PROP, o)
    explore_s = time.perf_counter() - t0
    pts = sm.check_many([(p, i) for i, p in enumerate(pols)])
    shared_s = time.perf_counter() - t0
    diff = max(abs(f["value"] - p.value) for f, p in zip(full, pts, strict=False))
    same = all(f["states"] == p.states and f["transitions"] == p.transitions for f, p in zip(full, pts, strict=False))
    one = full[1]["seconds"]
    return {
        "full_runs_s": [f["seconds"] for f in full],
        "full_timings": full[1]["timings"],
        "one_run_s": one,
        "states": full[0]["states"],
        "transitions": full[0]["transitions"],
        "mdp_transitions": sm.mdp.n_transitions,
        "shared_explore_s": explore_s,
        "per_checkpoint_s": [p.seconds for p in pts],
        "shared_s": shared_s,
        "ratio": shared_s / one,
        "separate_s": sum(f["seconds"] for f in full),
        "compared": len(full),
        "max_difference": diff,
        "same_counts": same,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", nargs="+", default=list(ENVS), choices=list(ENVS))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--compare", type=int, default=10, help="checkpoints also run separately in the process (>= 2)")
    ap.add_argument("--no-cli", action="store_true", help="skip the command-line comparison")
    args = ap.parse_args()
    out: dict = {
        "command": " ".join(["python", "benchmarks/curve_cost.py", *sys.argv[1:]]),
        "machine": f"{platform.node()} {os.cpu_count()} cores",
        "load_before": os.getloadavg(),
        "envs": {},
    }
    for env in args.env:
        pols = checkpoints(env)
        model, _, big, _ = ENVS[env]
        run_s, curve_s = [], []
        for _ in range(0 if args.no_cli else args.repeat):
            run_s.append(
                cli(["run", model, "--const", big, "--policy", pols[1], "--prop", PROP, "--checker", "native"])
            )
            curve_s.append(
                cli(["curve", model, "--const", big, "--policies", *pols, "--prop", PROP, "--checker", "native"])
            )
            print(
                f"{env} CLI: run {run_s[-1]:.1f} s, curve of {len(pols)} {curve_s[-1]:.1f} s "
                f"({curve_s[-1] / run_s[-1]:.2f} x)",
                flush=True,
            )
        res = {
            "checkpoints": pols,
            "cli_run_s": run_s,
            "cli_curve_s": curve_s,
            "cli_ratio": min(curve_s) / min(run_s) if run_s else None,
            "in_process": in_process(env, pols, max(2, args.compare)),
        }
        ip = res["in_process"]
        print(
            f"{env} in one process: full run {ip['one_run_s']:.2f} s {ip['full_timings']}; shared exploration "
            f"{ip['shared_explore_s']:.2f} s, per checkpoint {[round(s, 2) for s in ip['per_checkpoint_s']]}, "
            f"all {ip['shared_s']:.2f} s = {ip['ratio']:.2f} x; {ip['compared']} separate {ip['separate_s']:.1f} s; "
            f"largest difference {ip['max_difference']:.1e}, same counts {ip['same_counts']}",
            flush=True,
        )
        out["envs"][env] = res
    out["load_after"] = os.getloadavg()
    path = REPO / "benchmarks" / f"curve_cost_{'_'.join(args.env)}.json"
    path.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
