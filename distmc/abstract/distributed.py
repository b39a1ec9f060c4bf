"""The abstract MDP on distmc's Ray driver: every actor builds its own box expander and owns states by key hash.

:class:`BoxJob` plays the part of :class:`distmc.pipeline.Job` for :func:`distmc.distributed.explore_ray`:
it carries what an actor needs to expand any key (the environment with its regions, the network's weights, the fault
model, the registered initial boxes, the splitting settings) and builds a :class:`BoxExpander` with it. Image and
cell keys say what their state is (:mod:`distmc.abstract.mdp`), so no registry is shared. The actors split boxes
without the R*-tree cache (its answers would depend on which actor saw which box first), so the model is the
same for any number of workers. The Ray driver explores to the fixpoint (every reachable lattice cell, not only
those within the horizon); the bounded properties read the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distmc.abstract.envs import ContinuousEnv
from distmc.abstract.faults import FaultModel
from distmc.abstract.mdp import BoxExpander, KeyCodec
from distmc.abstract.network import Network
from distmc.abstract.split import Splitter

__all__ = ["BoxJob", "BoxParts", "KeyCodec", "TreePool"]


@dataclass(frozen=True)
class BoxParts:
    """What a :class:`BoxJob` builds (:class:`~distmc.explore.contracts.WorkerParts`); its rows carry no rewards."""

    expander: BoxExpander | None
    codec: KeyCodec
    reward_names: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BoxJob:
    """What a Ray actor needs to build the box expander (see the module docstring).

    The environment travels whole, with its regions (which ``--init``/``--safe`` may have changed).
    """

    env: ContinuousEnv
    layers: list[tuple[str, np.ndarray | None, np.ndarray | None]]
    faults: FaultModel
    init_lo: np.ndarray
    init_hi: np.ndarray
    max_splits: int
    method: str

    def build(self, *, explorer: bool = True) -> BoxParts:
        """The actor's parts: the box expander (with the initial boxes registered) and the key codec."""
        env = self.env
        splitter = Splitter(
            Network.from_arrays(self.layers), env.arrays()["cell"], self.max_splits, method=self.method, use_cache=False
        )
        expander = BoxExpander(env, splitter, self.faults)
        expander.add_initial(self.init_lo, self.init_hi)
        return BoxParts(expander if explorer else None, KeyCodec())


class _TreeWorker:
    """A Ray actor that computes tree bounds (:mod:`distmc.abstract.tree`) for the initial boxes it is sent."""

    def __init__(
        self, env: ContinuousEnv, layers: list, faults: FaultModel, max_splits: int, method: str, threads: int
    ) -> None:
        import torch

        from distmc.abstract.tree import TreeBounds

        torch.set_num_threads(threads)
        splitter = Splitter(
            Network.from_arrays(layers), env.arrays()["cell"], max_splits, method=method, use_cache=False
        )
        self.tree = TreeBounds(env, splitter, faults)

    def bounds(self, lo: np.ndarray, hi: np.ndarray, horizon: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        return self.tree.measured(lo, hi, horizon)


class TreePool:
    """``workers`` Ray actors sharing the initial boxes of each call: each computes whole trees for its share.

    The trees of different initial boxes are independent, so nothing is exchanged but the boxes and the bounds;
    the bounds are the in-process ones (the same computation, box by box). The actors live as long as the pool
    (all refinement steps of one analysis).
    """

    def __init__(
        self,
        env: ContinuousEnv,
        net: Network,
        faults: FaultModel,
        max_splits: int,
        method: str,
        workers: int,
        address: str | None = None,
    ) -> None:
        import os

        os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
        import ray

        if not ray.is_initialized():  # as distmc.distributed does: our own Ray unless an address is given
            address = address or os.environ.get("RAY_ADDRESS") or "local"
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        from distmc.distributed.pool import release_workers

        release_workers()  # explorer actors kept from an earlier run would hold the CPUs these actors need
        self.ray = ray
        actor = ray.remote(num_cpus=1)(_TreeWorker)
        self.actors: list[Any] = [
            actor.remote(env, net.to_arrays(), faults, max_splits, method, 1) for _ in range(workers)
        ]

    def bounds(self, lo: np.ndarray, hi: np.ndarray, horizon: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """Upper and lower bounds per initial box ``[I, d]``, and the summed statistics of the actors."""
        # Interleaved shares (box j to actor j mod W): neighbouring boxes have similar trees, so the load evens out.
        w = len(self.actors)
        refs = [a.bounds.remote(lo[k::w], hi[k::w], horizon) for k, a in enumerate(self.actors)]
        up, low = np.empty(lo.shape[0]), np.empty(lo.shape[0])
        stats: dict[str, Any] = {}
        for k, (u, lw, st) in enumerate(self.ray.get(refs)):
            up[k::w], low[k::w] = u, lw
            for name, v in st.items():
                stats[name] = stats.get(name, 0) + v
        return up, low, stats

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
