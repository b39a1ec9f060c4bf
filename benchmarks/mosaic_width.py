"""Where the width of the cart-pole bounds comes from (issue 18): ``python benchmarks/mosaic_width.py [--k 4]``.

On ``cartpole-mosaic`` (horizon 7, sticky 0.2, ``benchmarks/policies/cartpole.json``) over the k^4 grid of the initial
region, with the exact point probabilities of 20,000 uniform points as the truth:

1. lattice vs tree: the same boxes bounded by the lattice abstraction (images covered by lattice cells) and by the tree
   of image boxes;
2. the network's undecided pieces: the tree with 0, 1 and 2 bisections per box when splitting by action;
3. the dynamics' interval step: how much wider one interval step is than the sampled image of the same box
   (the dependency problem of interval arithmetic), for boxes of the sizes the tree holds.

Prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from distmc.abstract.check import check_bounds
from distmc.abstract.envs import get_env
from distmc.abstract.faults import parse_fault
from distmc.abstract.mdp import BoxExpander
from distmc.abstract.network import load_network
from distmc.abstract.simulate import point_probability
from distmc.abstract.split import Splitter
from distmc.abstract.tree import TreeBounds
from distmc.errors import ResourceLimitError

HERE = Path(__file__).parent


def grid(env, k: int) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    a = env.arrays()
    g = np.stack(np.meshgrid(*[np.arange(k)] * env.dim, indexing="ij"), -1).reshape(-1, env.dim)
    w = (a["init_hi"] - a["init_lo"]) / k
    return a["init_lo"] + g * w, a["init_lo"] + (g + 1) * w


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=4, help="grid cells per dimension")
    ap.add_argument("--horizon", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    env, net, faults = (
        get_env("cartpole-mosaic"),
        load_network(HERE / "policies" / "cartpole.json"),
        parse_fault("sticky:0.2"),
    )
    a = env.arrays()
    k, h = args.k, args.horizon
    lo, hi = grid(env, k)
    rng = np.random.default_rng(0)
    x = a["init_lo"] + (a["init_hi"] - a["init_lo"]) * rng.uniform(size=(20000, 4))
    p = point_probability(env, net, faults, x, h)
    cell = np.floor((x - a["init_lo"]) / ((a["init_hi"] - a["init_lo"]) / k)).astype(int).clip(0, k - 1)
    box = np.ravel_multi_index(cell.T, (k,) * 4)
    pmax = np.zeros(k**4)
    np.maximum.at(pmax, box, p)

    def report(what: str, up: np.ndarray, low: np.ndarray, t: float, **extra: object) -> None:
        assert (p <= up[box] + 1e-12).all() and (p >= low[box] - 1e-12).all()
        print(
            json.dumps(
                {
                    "measure": what,
                    "k": k,
                    "boxes": k**4,
                    "safe_fraction": float((up <= 0.05).mean()),
                    "pointwise_safe_boxes": float((pmax <= 0.05).mean()),
                    "mean_gap": float((up - pmax).mean()),
                    "s": round(t, 1),
                    **extra,
                }
            ),
            flush=True,
        )

    for ms in (0, 1, 2):
        with Splitter(net, a["cell"], ms, use_cache=False) as sp:
            tb = TreeBounds(env, sp, faults)
            t = time.perf_counter()
            up, low = tb.bounds(lo, hi, h)
            report(
                "tree",
                up,
                low,
                time.perf_counter() - t,
                max_splits=ms,
                nodes=tb.stats["nodes"],
                pieces=tb.stats["pieces"],
            )
    with Splitter(net, a["cell"], 1) as sp:
        t = time.perf_counter()
        try:
            r = check_bounds(BoxExpander(env, sp, faults), lo, hi, h)
            report("lattice", r.upper, r.lower, time.perf_counter() - t, max_splits=1, states=r.stats["states"])
        except ResourceLimitError as exc:
            print(json.dumps({"measure": "lattice", "k": k, "error": str(exc)}), flush=True)
    # 3. One interval step against the sampled image, per dimension, for boxes of width w (fraction of the region).
    for frac in (1 / 8, 1 / 32, 1 / 128):
        c = a["init_lo"] + (a["init_hi"] - a["init_lo"]) * rng.uniform(size=(200, 4))
        w = (a["init_hi"] - a["init_lo"]) * frac
        blo, bhi = c - w / 2, c + w / 2
        u = np.asarray(env.actions)[rng.integers(0, 2, size=200)]
        ilo, ihi = env.step_box(blo, bhi, u)
        pts = blo[:, None, :] + w * rng.uniform(size=(200, 2000, 4))
        corners = np.array(np.meshgrid(*[[0, 1]] * 4, indexing="ij")).reshape(4, -1).T
        pts = np.concatenate([pts, blo[:, None, :] + w * corners[None]], axis=1)
        img = env.step(pts.reshape(-1, 4), np.repeat(u, pts.shape[1])).reshape(200, -1, 4)
        ratio = (ihi - ilo) / (img.max(axis=1) - img.min(axis=1))
        print(
            json.dumps(
                {
                    "measure": "interval_step_vs_sampled_image",
                    "box_fraction": frac,
                    "median_width_ratio": np.median(ratio, axis=0).round(4).tolist(),
                    "max_width_ratio": ratio.max(axis=0).round(4).tolist(),
                    "dims": list(env.state_names),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
