"""Refinement of the initial region: split the boxes whose upper bound exceeds the threshold, re-analyse them.

Each refinement step bisects every initial box whose upper bound exceeds the threshold, whose lower bound does
not (a box surely above the threshold cannot become safe), and which is still wider than ``min_size`` (a fraction
of the initial region's width) in some dimension; bisection is along the widest dimension relative to the
initial region, at the middle. Only the new boxes are checked; the abstract states below them (lattice cells,
image states, their splits by action) are reused from the previous steps.

A child's bounds are intersected with its parent's (``upper = min(child, parent)``, ``lower = max(...)``): both
are sound for every point of the child, so the intersection is too, and refinement never raises an upper bound
or lowers a lower bound. How often the child's own bound was looser is reported (``loosened``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distmc.abstract.check import check_bounds
from distmc.abstract.envs import ContinuousEnv
from distmc.abstract.faults import FaultModel
from distmc.abstract.mdp import BoxExpander
from distmc.abstract.network import Network
from distmc.abstract.split import Splitter
from distmc.errors import DistmcError, PolicyError

__all__ = ["Analysis", "analyse", "bisect"]


@dataclass
class Analysis:
    """Initial boxes with their bounds, and what each refinement step achieved."""

    env: str
    horizon: int
    threshold: float
    fault: str
    lo: np.ndarray
    hi: np.ndarray
    upper: np.ndarray
    lower: np.ndarray
    history: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    def volumes(self) -> np.ndarray:
        return np.prod(self.hi - self.lo, axis=1)

    def safe_fraction(self) -> float:
        """Volume fraction of the initial region whose upper bound is at most the threshold."""
        v = self.volumes()
        return float(v[self.upper <= self.threshold].sum() / v.sum())

    def unsafe_fraction(self) -> float:
        """Volume fraction whose lower bound exceeds the threshold (surely unsafe)."""
        v = self.volumes()
        return float(v[self.lower > self.threshold].sum() / v.sum())


def bisect(lo: np.ndarray, hi: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two halves of each box ``[N, d]`` along its widest dimension relative to ``scale``: ``[2N, d]``."""
    dim = np.argmax((hi - lo) / scale, axis=1)
    rows = np.arange(lo.shape[0])
    mid = (lo[rows, dim] + hi[rows, dim]) / 2
    hi1, lo2 = hi.copy(), lo.copy()
    hi1[rows, dim] = mid
    lo2[rows, dim] = mid
    return np.concatenate([lo, lo2]), np.concatenate([hi1, hi])


def check_fit(env: ContinuousEnv, net: Network, source: str) -> None:
    """Raise :class:`PolicyError` unless the network fits the environment."""
    if net.env and net.env != env.name:
        raise PolicyError(f"policy '{source}' was trained for '{net.env}', not '{env.name}'")
    if net.n_inputs != env.dim or net.n_outputs != len(env.actions):
        raise PolicyError(f"policy '{source}' maps {net.n_inputs} inputs to {net.n_outputs} outputs; {env.name} "
                          f"has {env.dim} state variables and {len(env.actions)} actions")


def analyse(env: ContinuousEnv, net: Network, faults: FaultModel, *, horizon: int, refine: int,
            threshold: float = 0.05, min_size: float = 1 / 64, max_splits: int = 4, workers: int = 1,
            method: str = "crown", driver: str = "local", address: str | None = None,
            progress: Any = None) -> Analysis:
    """Bounds for the initial region, refined ``refine`` times (see the module docstring).

    With ``driver="local"`` the abstract MDP is explored in-process and ``workers`` processes split boxes by
    action; with ``driver="ray"`` it is explored (and split) by ``workers`` Ray actors.
    """
    if driver not in ("local", "ray"):
        raise DistmcError(f"driver must be 'local' or 'ray', not '{driver}'")
    if refine < 0 or not 0.0 <= threshold <= 1.0 or not 0.0 < min_size <= 1.0 or max_splits < 0:
        raise DistmcError("need --refine >= 0, 0 <= --threshold <= 1, 0 < --min-size <= 1 and --max-splits >= 0")
    a = env.arrays()
    width = a["init_hi"] - a["init_lo"]
    t0 = time.perf_counter()
    ray = driver == "ray"
    with Splitter(net, a["cell"], max_splits, method=method, workers=1 if ray else workers,
                  use_cache=not ray) as splitter:
        expander = BoxExpander(env, splitter, faults)
        lo, hi = a["init_lo"][None, :], a["init_hi"][None, :]
        res = check_bounds(expander, lo, hi, horizon, driver=driver, workers=workers, address=address)
        out = Analysis(env.name, horizon, threshold, faults.describe(), lo, hi, res.upper, res.lower)
        loosened = 0

        def record(step: int, stats: dict[str, Any]) -> None:
            out.history.append({"step": step, "boxes": int(out.lo.shape[0]), "safe_fraction": out.safe_fraction(),
                                "unsafe_fraction": out.unsafe_fraction(), "new_states": stats["states"],
                                "split_s": round(stats["split_s"], 3), "elapsed_s": round(time.perf_counter() - t0, 3)})
            if progress is not None:
                progress(out.history[-1])

        record(0, res.stats)
        stopped = None
        for step in range(1, refine + 1):
            big = ((out.hi - out.lo) / width > min_size + 1e-12).any(axis=1)
            todo = (out.upper > threshold) & (out.lower <= threshold) & big
            if not todo.any():
                stopped = f"refinement stopped after step {step - 1} of {refine}: " + _why_done(out, big, min_size)
                break
            idx = np.flatnonzero(todo)
            clo, chi = bisect(out.lo[idx], out.hi[idx], width)
            res = check_bounds(expander, clo, chi, horizon, driver=driver, workers=workers, address=address)
            parent = np.concatenate([idx, idx])
            up = np.minimum(res.upper, out.upper[parent])
            low = np.maximum(res.lower, out.lower[parent])
            loosened += int((res.upper > out.upper[parent]).sum() + (res.lower < out.lower[parent]).sum())
            keep = ~todo
            out.lo, out.hi = np.concatenate([out.lo[keep], clo]), np.concatenate([out.hi[keep], chi])
            out.upper, out.lower = np.concatenate([out.upper[keep], up]), np.concatenate([out.lower[keep], low])
            record(step, res.stats)
        # With Ray the states live in the actors: report the largest abstract MDP built instead.
        local_states = expander.stats["box_states"] + len(expander.image_keys) + 1
        out.stats = {"abstract_states": max(h["new_states"] for h in out.history) if ray else local_states,
                     "box_states": expander.stats["box_states"], "image_states": len(expander.image_keys),
                     "split_s": round(expander.stats["split_s"], 3), "elapsed_s": round(time.perf_counter() - t0, 3),
                     "loosened": loosened, "workers": workers, "driver": driver, "method": method, "max_splits": max_splits,
                     "min_size": min_size, **{f"splitter_{k}": v for k, v in splitter.stats.items()}}
        if stopped is not None:
            out.stats["stopped"] = stopped
    return out


def _why_done(a: Analysis, big: np.ndarray, min_size: float) -> str:
    """Why no box is left to refine: every box is safe, surely unsafe, or at ``--min-size``."""
    above = a.upper > a.threshold
    if not above.any():
        return f"every box is safe (upper bound <= {a.threshold:g})"
    unsafe = int((above & (a.lower > a.threshold)).sum())
    small = int((above & (a.lower <= a.threshold) & ~big).sum())
    return (f"of the {int(above.sum())} boxes above the threshold {a.threshold:g}, {unsafe} are surely unsafe (lower "
            f"bound above it) and {small} are at --min-size {min_size:g}; a smaller --min-size refines further")
