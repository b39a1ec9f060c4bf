"""Concrete rollouts of a controller under a fault model (the ground truth the abstraction's bounds must bracket)."""

from __future__ import annotations

import numpy as np

from distmc.abstract.envs import ContinuousEnv
from distmc.abstract.faults import FaultModel
from distmc.abstract.network import Network

__all__ = ["failure_frequency", "point_probability", "validate"]


def failure_frequency(
    env: ContinuousEnv,
    net: Network,
    faults: FaultModel,
    lo: np.ndarray,
    hi: np.ndarray,
    horizon: int,
    samples: int,
    rng: np.random.Generator,
) -> np.ndarray:
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


#: Start points per batch of :func:`point_probability` (a batch holds up to ``outcomes ** horizon`` runs of each).
POINT_BATCH = 2048


def point_probability(env: ContinuousEnv, net: Network, faults: FaultModel, x: np.ndarray, horizon: int) -> np.ndarray:
    """Exact failure probability ``[N]`` within ``horizon`` decisions of each start point ``x`` ``[N, d]``.

    Every fault outcome of every step is enumerated (not sampled): a run is deterministic given its outcomes, so
    the probability is the sum over outcome sequences that fail of their probabilities. Failed runs stop, so the
    work is at most ``N * outcomes ** horizon`` steps. Failure is checked after every physical step, as in
    :mod:`distmc.abstract.faults` and the abstraction.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.shape[0] > POINT_BATCH:  # batches of points: the runs of one batch grow as outcomes ** step
        return np.concatenate(
            [
                point_probability(env, net, faults, x[s : s + POINT_BATCH], horizon)
                for s in range(0, x.shape[0], POINT_BATCH)
            ]
        )
    fail = np.where(env.failed(x), 1.0, 0.0)
    alive = np.flatnonzero(fail == 0)
    xs, w, idx = x[alive], np.ones(alive.shape[0]), alive
    actions = np.asarray(env.actions)
    for _ in range(horizon):
        if not idx.size:
            break
        a = actions[net.act(xs)]
        nx, nw, ni = [], [], []
        for p, executed in faults.outcomes():
            y = xs
            hit = np.zeros(y.shape[0], dtype=bool)
            for ex in executed:
                y = env.step(y, a if ex else np.full(y.shape[0], env.noop))
                hit |= env.failed(y)
            np.add.at(fail, idx[hit], w[hit] * p)
            nx.append(y[~hit])
            nw.append(w[~hit] * p)
            ni.append(idx[~hit])
        xs, w, idx = np.concatenate(nx), np.concatenate(nw), np.concatenate(ni)
    return fail


def validate(
    env: ContinuousEnv,
    net: Network,
    faults: FaultModel,
    lo: np.ndarray,
    hi: np.ndarray,
    upper: np.ndarray,
    lower: np.ndarray,
    horizon: int,
    samples: int,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """Exact point probabilities of ``samples`` uniform points per box ``[I, d]``, against the boxes' bounds.

    Returns per box the largest and smallest sampled probability (``point_max``, ``point_min``) and whether every
    sample lay within ``[lower, upper]`` (``inside``; up to 1e-12 of rounding in the sums).
    """
    i, d = lo.shape
    x = (lo[:, None, :] + (hi - lo)[:, None, :] * rng.uniform(size=(i, samples, d))).reshape(-1, d)
    p = point_probability(env, net, faults, x, horizon).reshape(i, samples)
    inside = ((p <= upper[:, None] + 1e-12) & (p >= lower[:, None] - 1e-12)).all(axis=1)
    return {"point_max": p.max(axis=1), "point_min": p.min(axis=1), "inside": inside}
