"""Bounds from a tree of image boxes: each reachable set is kept as its own box, not covered by lattice cells.

**Why.** The lattice abstraction (:mod:`distmc.abstract.mdp`) replaces every image box by the lattice cells it
overlaps. When the cells are not much smaller than the region (MOSAIC's cart-pole fails at |x| > 0.05, four cells
of the default lattice), that snapping dominates the width: measured on ``cartpole-mosaic`` (``benchmarks/
mosaic_width.py``), the lattice gives upper bound 1 on every box, while the images themselves stay narrow.

**The abstraction.** A node is a box of states at a decision step (all of its concrete states unfailed so far:
images are clipped to the safe box, the part outside is accounted for by the flags below). A node is split by the
network's action (:class:`~distmc.abstract.split.Splitter`); for each action ``a`` that some piece may choose and
each fault outcome ``o``, the child ``(a, o)`` is the hull of the interval images of those pieces under ``a`` and
``o`` (each clipped to the safe box), with two flags: *maybe* (some piece's image overlaps the failure region,
after any physical step of the outcome) and *surely* (every piece's image lies in it). So a node has at most
``actions x outcomes`` children, whatever the number of pieces: the tree grows by that factor a step, not by the
number of pieces.

**Values.** With ``p_o`` the outcome probabilities, ``U(leaf) = L(leaf) = 0`` at the horizon, and for a node::

    U(node) = max_a sum_o p_o * (1 if maybe(a, o) else U(child(a, o)))
    L(node) = min_a sum_o p_o * (1 if surely(a, o) else L(child(a, o)))

This is Pmax/Pmin of bounded reachability on the tree read as an MDP (one nondeterministic choice per action),
computed by a backward pass over the levels (``tests/test_abstract_tree.py`` checks it against Storm on the same
tree written as an MDP).

**Why it is sound.** Take a concrete run from ``x`` in an initial box. At each decision its state ``y`` lies in the
current node (induction: it lies in a piece ``P``; the network's action ``a`` at ``y`` is in ``P``'s mask, so
``(P, a)`` is in group ``a``; the outcome ``o`` has probability ``p_o`` in both; the successor lies in ``P``'s
interval image under ``(a, o)``, so it failed, which needs ``maybe(a, o)``, or it lies in the clipped image, inside
the hull). Hence the concrete failure probability of ``x`` is at most ``U`` (every failing branch is counted as 1
where it can happen, the rest bounded by the child's ``U``, the max covering whichever action the network takes)
and at least ``L`` (a branch counts 1 only if every piece of its group surely fails, and a child's ``L`` bounds
every state in it, a superset of the concrete successors). Hulls and clipping only enlarge sets, which raises
``U`` and lowers ``L``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from distmc.abstract.envs import ContinuousEnv
from distmc.abstract.faults import FaultModel
from distmc.abstract.split import Splitter
from distmc.errors import ResourceLimitError

__all__ = ["Level", "TreeBounds"]

#: Most nodes one level of one batch of initial boxes may hold (the batch is halved when it would hold more).
MAX_LEVEL_NODES = 2_000_000


@dataclass
class Level:
    """One decision step of the tree: the choices ``(parent node, action)`` and their children per outcome.

    Attributes:
        parent: ``[C]`` node (at this level) of each choice.
        action: ``[C]`` its action.
        maybe, surely: ``[C, O]`` flags of each child (see the module docstring).
        child: ``[C, O]`` index of the child node at the next level, or -1 (surely failed, or the horizon).
        nodes: nodes at this level.
    """

    parent: np.ndarray
    action: np.ndarray
    maybe: np.ndarray
    surely: np.ndarray
    child: np.ndarray
    nodes: int


class TreeBounds:
    """Builds the tree level by level for a batch of initial boxes and reduces it to bounds (module docstring)."""

    def __init__(self, env: ContinuousEnv, splitter: Splitter, faults: FaultModel) -> None:
        self.env, self.splitter, self.faults = env, splitter, faults
        a = env.arrays()
        self.safe_lo, self.safe_hi = a["safe_lo"], a["safe_hi"]
        self.actions = np.asarray(env.actions, dtype=np.float64)
        self.outcomes = faults.outcomes()
        self.probs = np.array([p for p, _ in self.outcomes])
        self.stats: dict[str, Any] = {"nodes": 0, "choices": 0, "pieces": 0, "split_s": 0.0, "step_s": 0.0}

    def level(self, lo: np.ndarray, hi: np.ndarray, last: bool) -> tuple[Level, np.ndarray, np.ndarray]:
        """Expand the nodes ``[N, d]`` one decision step; returns the level and the next level's node boxes."""
        n, d = lo.shape
        n_act, n_out = self.actions.shape[0], len(self.outcomes)
        t = time.perf_counter()
        pieces = self.splitter.split(lo, hi)
        self.stats["split_s"] += time.perf_counter() - t
        t = time.perf_counter()
        mask = pieces.mask.copy()
        mask[~mask.any(axis=1)] = True  # no action provably possible (cannot happen with sound bounds): keep all
        pr, pa = np.nonzero(mask)
        group = pieces.owner[pr] * n_act + pa  # the choice (node, action) of each (piece, action)
        order = np.argsort(group, kind="stable")
        pr, pa, group = pr[order], pa[order], group[order]
        starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        choice_group = group[starts]
        c = starts.shape[0]
        maybe = np.zeros((c, n_out), dtype=bool)
        surely = np.zeros((c, n_out), dtype=bool)
        hull_lo = np.empty((c, n_out, d))
        hull_hi = np.empty((c, n_out, d))
        for o, (_, executed) in enumerate(self.outcomes):
            blo, bhi = pieces.lo[pr], pieces.hi[pr]
            pm = np.zeros(pr.shape[0], dtype=bool)
            ps = np.zeros(pr.shape[0], dtype=bool)
            for ex in executed:  # failure is checked after every physical step
                u = self.actions[pa] if ex else np.full(pr.shape[0], self.env.noop)
                blo, bhi = self.env.step_box(blo, bhi, u)
                m, s = self.env.box_flags(blo, bhi)
                pm |= m
                ps |= s
            # The hull of the clipped images of the pieces that do not surely fail (a surely failed piece has no
            # unfailed state); +-inf where every piece of the group surely fails (then the child is dropped).
            clo = np.where(ps[:, None], np.inf, np.maximum(blo, self.safe_lo))
            chi = np.where(ps[:, None], -np.inf, np.minimum(bhi, self.safe_hi))
            hull_lo[:, o] = np.minimum.reduceat(clo, starts, axis=0)
            hull_hi[:, o] = np.maximum.reduceat(chi, starts, axis=0)
            maybe[:, o] = np.logical_or.reduceat(pm, starts)
            surely[:, o] = np.logical_and.reduceat(ps, starts)
        child = np.full((c, n_out), -1, dtype=np.int64)
        keep = ~surely if not last else np.zeros_like(surely)
        child[keep] = np.arange(int(keep.sum()))
        self.stats["step_s"] += time.perf_counter() - t
        self.stats["nodes"] += n
        self.stats["choices"] += c
        self.stats["pieces"] += int(pieces.owner.shape[0])
        lv = Level(choice_group // n_act, choice_group % n_act, maybe, surely, child, n)
        return lv, hull_lo[keep], hull_hi[keep]

    def reduce(self, levels: list[Level]) -> tuple[np.ndarray, np.ndarray]:
        """Upper and lower bounds ``[N0]`` of the first level's nodes (the backward pass of the module docstring)."""
        nxt_u = nxt_l = np.zeros(1)  # past the horizon: value 0 (the last level's children are all -1)
        for lv in reversed(levels):
            has, child = lv.child >= 0, np.maximum(lv.child, 0)
            cu = np.where(lv.maybe, 1.0, np.where(has, nxt_u[child], 0.0))
            cl = np.where(lv.surely, 1.0, np.where(has, nxt_l[child], 0.0))
            vu, vl = cu @ self.probs, cl @ self.probs
            nxt_u = np.full(lv.nodes, -np.inf)
            nxt_l = np.full(lv.nodes, np.inf)
            np.maximum.at(nxt_u, lv.parent, vu)
            np.minimum.at(nxt_l, lv.parent, vl)
        return nxt_u, nxt_l

    def build(self, lo: np.ndarray, hi: np.ndarray, horizon: int) -> list[Level]:
        """The levels of the tree from initial boxes ``[I, d]`` (all of them safe boxes, see :meth:`bounds`)."""
        levels = []
        for step in range(horizon):
            lv, lo, hi = self.level(lo, hi, last=step == horizon - 1)
            levels.append(lv)
            if lo.shape[0] > MAX_LEVEL_NODES:
                raise _TooBig
        return levels

    def measured(self, lo: np.ndarray, hi: np.ndarray, horizon: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """:meth:`bounds`, and what this call added to :attr:`stats`."""
        before = dict(self.stats)
        up, low = self.bounds(lo, hi, horizon)
        return up, low, {k: v - before[k] for k, v in self.stats.items()}

    def bounds(self, lo: np.ndarray, hi: np.ndarray, horizon: int, batch: int = 4096) -> tuple[np.ndarray, np.ndarray]:
        """Upper and lower bounds on failure within ``horizon`` decisions from each initial box ``[I, d]``.

        An initial box that overlaps the failure region gets upper bound 1 (its states there have failed at
        step 0), and lower bound 1 if it lies inside it; the rest are clipped to the safe box first.
        """
        maybe, surely = self.env.box_flags(lo, hi)
        upper = np.where(maybe, 1.0, 0.0)
        lower = np.where(surely, 1.0, 0.0)
        todo = np.flatnonzero(~surely)
        clo, chi = np.maximum(lo[todo], self.safe_lo), np.minimum(hi[todo], self.safe_hi)
        s = 0
        while s < todo.shape[0]:
            e = min(s + batch, todo.shape[0])
            try:
                levels = self.build(clo[s:e], chi[s:e], horizon)
            except _TooBig:
                if batch == 1:
                    raise ResourceLimitError(
                        f"the tree of one initial box holds more than {MAX_LEVEL_NODES} "
                        "nodes in a level; use a shorter horizon or refine"
                    ) from None
                batch = max(1, batch // 4)
                continue
            u, low = self.reduce(levels)
            idx = todo[s:e]
            upper[idx] = np.maximum(upper[idx], u)
            lower[idx] = low
            s = e
        return np.clip(upper, 0.0, 1.0), np.clip(lower, 0.0, 1.0)


class _TooBig(Exception):
    pass
