"""The abstract MDP on distmc's Ray driver: every actor builds its own box expander and owns states by key hash.

:class:`BoxJob` plays the part of :class:`distmc.pipeline.Job` for :func:`distmc.explore.ray.explore_ray`:
it carries what an actor needs to expand any key (the environment's name, the network's weights, the fault
model, the registered initial boxes, the splitting settings) and builds a :class:`BoxExpander` with it. Image and
cell keys say what their state is (:mod:`distmc.abstract.mdp`), so no registry is shared. The actors split boxes
without the R*-tree cache (its answers would depend on which actor saw which box first), so the model is the
same for any number of workers. The Ray driver explores to the fixpoint (every reachable lattice cell, not only
those within the horizon); the bounded properties read the same values.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from distmc.abstract.envs import get_env
from distmc.abstract.faults import FaultModel
from distmc.abstract.mdp import BoxExpander, KeyCodec
from distmc.abstract.network import Network
from distmc.abstract.split import Splitter

__all__ = ["BoxJob", "KeyCodec"]


@dataclass(frozen=True)
class BoxJob:
    """What a Ray actor needs to build the box expander (see the module docstring)."""

    env: str
    layers: list[tuple[str, np.ndarray | None, np.ndarray | None]]
    faults: FaultModel
    init_lo: np.ndarray
    init_hi: np.ndarray
    max_splits: int
    method: str

    def build(self, *, explorer: bool = True) -> Any:
        """The actor's parts: ``expander`` and ``codec``."""
        env = get_env(self.env)
        splitter = Splitter(Network.from_arrays(self.layers), env.arrays()["cell"], self.max_splits,
                            method=self.method, use_cache=False)
        expander = BoxExpander(env, splitter, self.faults)
        expander.add_initial(self.init_lo, self.init_hi)
        return SimpleNamespace(expander=expander if explorer else None, codec=KeyCodec())
