"""Concrete rollouts of a controller under a fault model (the ground truth the abstraction's bounds must bracket)."""

from __future__ import annotations

import numpy as np

from distmc.abstract.envs import ContinuousEnv
from distmc.abstract.faults import FaultModel
from distmc.abstract.network import Network

__all__ = ["failure_frequency"]


def failure_frequency(env: ContinuousEnv, net: Network, faults: FaultModel, lo: np.ndarray, hi: np.ndarray,
                      horizon: int, samples: int, rng: np.random.Generator) -> np.ndarray:
    """Fraction ``[I]`` of ``samples`` runs per box ``[I, d]`` (uniform start in the box) that fail within ``horizon``.

    Failure is checked after every physical step, as in :mod:`distmc.abstract.faults`; a run stops when it fails.
    """
    i, d = lo.shape
    x = (lo[:, None, :] + (hi - lo)[:, None, :] * rng.uniform(size=(i, samples, d))).reshape(-1, d)
    failed = env.failed(x)
    outcomes = faults.outcomes()
    actions = np.asarray(env.actions)
    for _ in range(horizon):
        alive = np.flatnonzero(~failed)
        if not alive.size:
            break
        a = net.act(x[alive])
        pick = faults.sample(rng, alive.size)
        for o, (_, executed) in enumerate(outcomes):
            sel = alive[pick == o]
            if not sel.size:
                continue
            xs = x[sel]
            hit = np.zeros(sel.size, dtype=bool)
            for ex in executed:
                u = actions[a[pick == o]] if ex else np.full(sel.size, env.noop)
                xs = env.step(xs, u)
                hit |= env.failed(xs)
            x[sel] = xs
            failed[sel] |= hit
    return failed.reshape(i, samples).mean(axis=1)
