"""MOSAIC benchmark: ``distmc abstract`` on the pendulum (horizon 7, 50 refinement steps), 1 and 2 workers, both
abstractions (the lattice and the tree of image boxes); optionally MOSAIC's cart-pole experiment.

Usage: ``python benchmarks/mosaic.py [--horizon 7] [--refine 50] [--fault sticky:0.2] [--cartpole]``.
Prints one JSON line per run (time, abstract states, safe fraction, split-phase time) and writes the heatmap
``benchmarks/mosaic_pendulum.png`` (the tree's). The 1- and 2-worker runs of one abstraction must give identical
bounds (checked). ``--cartpole`` also runs ``cartpole-mosaic`` (horizon 7, sticky 0.2, refine 50 within 14 minutes,
8 exact points per box) and writes ``mosaic_cartpole.png``; the CLI command in RESULTS.md does the same.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from distmc.abstract.envs import get_env
from distmc.abstract.faults import parse_fault
from distmc.abstract.network import load_network
from distmc.abstract.refine import analyse
from distmc.abstract.report import plot

HERE = Path(__file__).parent


def run(
    env_name: str,
    horizon: int,
    refine: int,
    fault: str,
    workers: int,
    png: str | None,
    driver: str = "local",
    abstraction: str = "tree",
    **kw: object,
) -> dict:
    env, net = get_env(env_name), load_network(HERE / "policies" / f"{env_name.split('-')[0]}.json")
    t = time.perf_counter()
    a = analyse(
        env,
        net,
        parse_fault(fault),
        horizon=horizon,
        refine=refine,
        workers=workers,
        driver=driver,
        abstraction=abstraction,
        **kw,
    )  # type: ignore[arg-type]
    wall = time.perf_counter() - t
    if png:
        plot(a, env, HERE / png)
    return {
        "env": env_name,
        "abstraction": abstraction,
        "horizon": horizon,
        "refine_requested": refine,
        "refine_done": len(a.history) - 1,
        "fault": fault,
        "driver": driver,
        "workers": workers,
        "wall_s": round(wall, 2),
        "split_s": a.stats["split_s"],
        "initial_boxes": int(a.lo.shape[0]),
        "abstract_states": a.stats["abstract_states"],
        "safe_fraction": round(a.safe_fraction(), 4),
        "unsafe_fraction": round(a.unsafe_fraction(), 4),
        "loosened": a.stats["loosened"],
        "history": a.history if "validate" in kw else None,
        "_bounds": (a.lo, a.upper, a.lower),
    }


def split_phase(workers: int, n_theta: int = 64, n_speed: int = 64) -> dict:
    """The split phase alone: every lattice cell of theta in [-pi/4, pi/4], theta_dot in [-4, 4], no cache."""
    from distmc.abstract.split import Splitter

    env, net = get_env("pendulum"), load_network(HERE / "policies" / "pendulum.json")
    cell = env.arrays()["cell"]
    i, j = np.meshgrid(np.arange(-n_theta // 2, n_theta // 2), np.arange(-n_speed // 2, n_speed // 2), indexing="ij")
    idx = np.stack([i.ravel(), j.ravel()], axis=1)
    lo, hi = idx * cell, (idx + 1) * cell
    with Splitter(net, cell, 4, workers=workers, use_cache=False) as s:
        s.start()  # pool start-up (spawned processes importing torch) is not part of the measured phase
        t = time.perf_counter()
        p = s.split(lo, hi)
        dt = time.perf_counter() - t
    return {
        "phase": "split",
        "boxes": int(lo.shape[0]),
        "pieces": int(p.owner.shape[0]),
        "workers": workers,
        "split_s": round(dt, 3),
        "_pieces": p,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--horizon", type=int, default=7)
    ap.add_argument("--refine", type=int, default=50)
    ap.add_argument("--fault", default="sticky:0.2")
    ap.add_argument("--cartpole", action="store_true", help="also run MOSAIC's cart-pole experiment (~15 min)")
    ap.add_argument("--ray", action="store_true", help="also explore on the Ray driver with 1 and 2 actors")
    args = ap.parse_args()
    torch.set_num_threads(1)  # one core per worker: the 1-worker run does not get torch's intra-op threads
    print(json.dumps({"machine": f"{platform.node()} {platform.processor() or platform.machine()}, shared"}))
    for abstraction in ("lattice", "tree"):
        results = []
        for workers in (1, 2):
            png = "mosaic_pendulum.png" if workers == 1 and abstraction == "tree" else None
            r = run("pendulum", args.horizon, args.refine, args.fault, workers, png, abstraction=abstraction)
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if not k.startswith("_") and v is not None}))
        same = all(np.array_equal(x, y) for x, y in zip(results[0]["_bounds"], results[1]["_bounds"], strict=True))
        print(json.dumps({"abstraction": abstraction, "identical_bounds_1_vs_2_workers": same}))
    if args.ray:
        import ray

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        for workers in (1, 2):
            r = run(
                "pendulum", args.horizon, args.refine, args.fault, workers, None, driver="ray", abstraction="lattice"
            )
            print(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}))
        ray.shutdown()
    phases = [split_phase(w) for w in (1, 2)]
    for ph in phases:
        print(json.dumps({k: v for k, v in ph.items() if not k.startswith("_")}))
    a, b = phases[0]["_pieces"], phases[1]["_pieces"]
    print(
        json.dumps(
            {
                "identical_pieces_1_vs_2_workers": all(
                    np.array_equal(getattr(a, f), getattr(b, f)) for f in ("owner", "lo", "hi", "mask")
                )
            }
        )
    )
    if args.cartpole:
        r = run("cartpole-mosaic", 7, 50, "sticky:0.2", 2, "mosaic_cartpole.png", validate=8, time_limit=14 * 60)
        print(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}))


if __name__ == "__main__":
    main()
