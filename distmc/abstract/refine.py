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
from distmc.abstract.distributed import TreePool
from distmc.abstract.envs import ContinuousEnv
from distmc.abstract.faults import FaultModel
from distmc.abstract.mdp import AbstractResult, BoxExpander
from distmc.abstract.network import Network
from distmc.abstract.options import ABSTRACTIONS, AbstractOptions
from distmc.abstract.simulate import validate as validate_boxes
from distmc.abstract.split import Splitter
from distmc.abstract.tree import TreeBounds
from distmc.errors import PolicyError, PropertyError

__all__ = ["ABSTRACTIONS", "AbstractOptions", "Analysis", "analyse", "bisect"]


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
    regions: dict[str, Any] = field(default_factory=dict)
    #: With ``validate``: the largest exact probability of a sampled point per box, and whether every sample of the
    #: box lay within its bounds.
    point_max: np.ndarray | None = None
    inside: np.ndarray | None = None

    def volumes(self) -> np.ndarray:
        return np.prod(self.hi - self.lo, axis=1)

    def safe_fraction(self) -> float:
        """Volume fraction of the initial region whose upper bound is at most the threshold."""
        v = self.volumes()
        return float(v[self.upper <= self.threshold].sum() / v.sum())

    def fraction(self, which: np.ndarray) -> float:
        """Volume fraction of the boxes selected by ``which`` ``[I]`` bool."""
        v = self.volumes()
        return float(v[which].sum() / v.sum())

    def mean_gap(self) -> float:
        """Volume-weighted mean of ``upper - point_max`` (needs ``validate``): how far above the truth the bounds are."""
        assert self.point_max is not None
        v = self.volumes()
        return float((v * (self.upper - self.point_max)).sum() / v.sum())

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
    if net.env and net.env not in (env.name, getattr(env, "dynamics", env.name)):
        raise PolicyError(f"policy '{source}' was trained for '{net.env}', not '{env.name}'")
    if net.n_inputs != env.dim or net.n_outputs != len(env.actions):
        raise PolicyError(
            f"policy '{source}' maps {net.n_inputs} inputs to {net.n_outputs} outputs; {env.name} "
            f"has {env.dim} state variables and {len(env.actions)} actions"
        )


class _Bounds:
    """One way to bound a batch of initial boxes: the tree (in-process or on a :class:`TreePool`), or the lattice."""

    def __init__(
        self,
        env: ContinuousEnv,
        net: Network,
        faults: FaultModel,
        abstraction: str,
        max_splits: int,
        method: str,
        workers: int,
        driver: str,
        address: str | None,
    ) -> None:
        a = env.arrays()
        self.abstraction, self.driver, self.workers, self.address = abstraction, driver, workers, address
        ray = driver == "ray"
        # The lattice's R*-tree cache pays off (its cells recur); the tree's boxes do not recur, and inserting
        # millions of pieces one by one would cost more than it saves.
        self.splitter = Splitter(
            net,
            a["cell"],
            max_splits,
            method=method,
            workers=1 if ray else workers,
            use_cache=abstraction == "lattice" and not ray,
        )
        self.pool: TreePool | None = None
        self.split_s = 0.0  # the pool's actors' split time
        if abstraction == "tree":
            self.tree = TreeBounds(env, self.splitter, faults)
            if ray:
                self.pool = TreePool(env, net, faults, max_splits, method, workers, address)
        else:
            self.expander = BoxExpander(env, self.splitter, faults)

    def __call__(self, lo: np.ndarray, hi: np.ndarray, horizon: int) -> AbstractResult:
        if self.abstraction == "lattice":
            return check_bounds(
                self.expander, lo, hi, horizon, driver=self.driver, workers=self.workers, address=self.address
            )
        if horizon < 1:
            raise PropertyError(f"--horizon {horizon}: the horizon must be at least 1 step")
        t = time.perf_counter()
        if self.pool is not None:
            up, low, st = self.pool.bounds(lo, hi, horizon)
            self.split_s += float(st.get("split_s", 0.0))
        else:
            up, low, st = self.tree.measured(lo, hi, horizon)
        return AbstractResult(
            up,
            low,
            {
                "states": int(st.get("nodes", 0)),
                "split_s": float(st.get("split_s", 0.0)),
                "pieces": int(st.get("pieces", 0)),
                "explore_s": time.perf_counter() - t,
            },
        )

    def stats(self) -> dict[str, Any]:
        if self.abstraction == "lattice":
            e = self.expander
            return {
                "box_states": e.stats["box_states"],
                "image_states": len(e.image_keys),
                "split_s": round(e.stats["split_s"], 3),
            }
        return {"split_s": round(self.tree.stats["split_s"] + self.split_s, 3)}

    def close(self) -> None:
        self.splitter.close()
        if self.pool is not None:
            self.pool.close()


def analyse(
    env: ContinuousEnv, net: Network, faults: FaultModel, options: AbstractOptions | None = None, /, **kw: Any
) -> Analysis:
    """Bounds for the initial region, refined ``options.refine`` times (see the module docstring).

    ``options`` (:class:`~distmc.abstract.options.AbstractOptions`), keywords over them, or keywords alone
    (``analyse(env, net, faults, horizon=3, refine=5)``); an unknown keyword is a TypeError.

    ``abstraction="tree"`` bounds each initial box by its tree of image boxes (:mod:`distmc.abstract.tree`),
    ``"lattice"`` by the abstract MDP over lattice cells checked by Storm (:mod:`distmc.abstract.mdp`).
    With ``driver="local"`` everything runs in this process and ``workers`` processes split boxes by action; with
    ``driver="ray"`` ``workers`` Ray actors do the work (the lattice: explore the abstract MDP; the tree: each
    takes a share of the initial boxes). ``validate=N`` computes the exact failure probability of ``N`` uniform
    points of every new box (:func:`~distmc.abstract.simulate.validate`) after each step: the history then has the
    volume-weighted mean gap ``upper - largest point probability``, and the result the worst gap and whether
    every point lay within its box's bounds.

    ``time_limit`` (seconds): refinement stops before a step that would end past it, estimated from the previous
    step's time per box (the steps' costs grow with their number of new boxes); the report says so.
    """
    o = AbstractOptions.build(options, **kw)
    horizon, refine, threshold, min_size, validate = o.horizon, o.refine, o.threshold, o.min_size, o.validate
    abstraction, driver, method, progress, time_limit = o.abstraction, o.driver, o.method, o.progress, o.time_limit
    max_splits, workers = o.splits, o.n_workers
    a = env.arrays()
    width = a["init_hi"] - a["init_lo"]
    t0 = time.perf_counter()
    rng = np.random.default_rng(o.seed)
    bounder = _Bounds(env, net, faults, abstraction, max_splits, method, workers, driver, o.address)
    try:
        lo, hi = a["init_lo"][None, :], a["init_hi"][None, :]
        res = bounder(lo, hi, horizon)
        out = Analysis(env.name, horizon, threshold, faults.describe(), lo, hi, res.upper, res.lower)
        out.regions = env.regions()
        loosened = 0

        def check_points(first: int, point_max: np.ndarray, inside: np.ndarray) -> None:
            """Validate the boxes from index ``first`` on (the new ones); the older boxes keep theirs."""
            v = validate_boxes(
                env,
                net,
                faults,
                out.lo[first:],
                out.hi[first:],
                out.upper[first:],
                out.lower[first:],
                horizon,
                validate,
                rng,
            )
            out.point_max = np.concatenate([point_max, v["point_max"]])
            out.inside = np.concatenate([inside, v["inside"]])

        def record(step: int, stats: dict[str, Any]) -> None:
            h = {
                "step": step,
                "boxes": int(out.lo.shape[0]),
                "safe_fraction": out.safe_fraction(),
                "unsafe_fraction": out.unsafe_fraction(),
                "lower_half_fraction": out.fraction(out.lower >= 0.5),
                "new_states": stats["states"],
                "split_s": round(stats["split_s"], 3),
                "elapsed_s": round(time.perf_counter() - t0, 3),
            }
            if out.inside is not None:
                h["mean_gap"] = out.mean_gap()
                h["outside"] = int((~out.inside).sum())
            out.history.append(h)
            if progress is not None:
                progress(out.history[-1])

        if validate:
            check_points(0, np.zeros(0), np.zeros(0, dtype=bool))
        record(0, res.stats)
        stopped = None
        last_step_s, last_boxes = time.perf_counter() - t0, 1
        for step in range(1, refine + 1):
            big = ((out.hi - out.lo) / width > min_size + 1e-12).any(axis=1)
            todo = (out.upper > threshold) & (out.lower <= threshold) & big
            if not todo.any():
                stopped = f"refinement stopped after step {step - 1} of {refine}: " + _why_done(out, big, min_size)
                break
            idx = np.flatnonzero(todo)
            if time_limit is not None and step > 1:
                elapsed = time.perf_counter() - t0
                estimate = last_step_s / max(last_boxes, 1) * 2 * idx.shape[0]
                if elapsed + estimate > time_limit:
                    stopped = (
                        f"refinement stopped after step {step - 1} of {refine}: step {step} ({2 * idx.shape[0]} "
                        f"new boxes, about {estimate:.0f} s) would end past the time limit of {time_limit:g} s "
                        f"({elapsed:.0f} s spent)"
                    )
                    break
            clo, chi = bisect(out.lo[idx], out.hi[idx], width)
            t_step = time.perf_counter()
            res = bounder(clo, chi, horizon)
            parent = np.concatenate([idx, idx])
            up = np.minimum(res.upper, out.upper[parent])
            low = np.maximum(res.lower, out.lower[parent])
            loosened += int((res.upper > out.upper[parent]).sum() + (res.lower < out.lower[parent]).sum())
            keep = ~todo
            first = int(keep.sum())
            out.lo, out.hi = np.concatenate([out.lo[keep], clo]), np.concatenate([out.hi[keep], chi])
            out.upper, out.lower = np.concatenate([out.upper[keep], up]), np.concatenate([out.lower[keep], low])
            if out.point_max is not None and out.inside is not None:
                check_points(first, out.point_max[keep], out.inside[keep])
            last_step_s, last_boxes = time.perf_counter() - t_step, clo.shape[0]
            record(step, res.stats)
        ray = driver == "ray"
        # The tree's nodes of every step; the lattice on Ray: the largest abstract MDP built (its states live in the
        # actors), in-process: the states of the one growing abstract MDP (set below).
        out.stats = {
            "abstract_states": max(h["new_states"] for h in out.history)
            if ray and abstraction == "lattice"
            else sum(h["new_states"] for h in out.history),
            **bounder.stats(),
            "elapsed_s": round(time.perf_counter() - t0, 3),
            "loosened": loosened,
            "workers": workers,
            "driver": driver,
            "abstraction": abstraction,
            "method": method,
            "max_splits": max_splits,
            "min_size": min_size,
            **{f"splitter_{k}": v for k, v in bounder.splitter.stats.items()},
        }
        if abstraction == "lattice" and not ray:
            out.stats["abstract_states"] = out.stats["box_states"] + out.stats["image_states"] + 1
        if stopped is not None:
            out.stats["stopped"] = stopped
    finally:
        bounder.close()
    return out


def _why_done(a: Analysis, big: np.ndarray, min_size: float) -> str:
    """Why no box is left to refine: every box is safe, surely unsafe, or at ``--min-size``."""
    above = a.upper > a.threshold
    if not above.any():
        return f"every box is safe (upper bound <= {a.threshold:g})"
    unsafe = int((above & (a.lower > a.threshold)).sum())
    small = int((above & (a.lower <= a.threshold) & ~big).sum())
    return (
        f"of the {int(above.sum())} boxes above the threshold {a.threshold:g}, {unsafe} are surely unsafe (lower "
        f"bound above it) and {small} are at --min-size {min_size:g}; a smaller --min-size refines further"
    )
