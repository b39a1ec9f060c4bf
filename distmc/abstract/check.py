"""The bounds of the abstract MDP: explore it (in-process or on Ray actors) and let Storm give Pmax and Pmin.

Apart from :mod:`distmc.abstract.mdp` (the abstraction) so that the abstraction does not import the Ray job that
is built from it (:mod:`distmc.abstract.distributed`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import stormpy

from distmc.abstract.distributed import BoxJob, KeyCodec
from distmc.abstract.mdp import AbstractResult, BoxExpander, explore_bounded
from distmc.assemble.reducer import InducedModel, _merge_chunks
from distmc.assemble.storm import to_storm
from distmc.check.checker import value_vector
from distmc.errors import PropertyError
from distmc.options import RaySettings

__all__ = ["check_bounds"]


def _induced(expander: BoxExpander, parts: Any) -> InducedModel:
    n = parts.n_states
    per_state = np.bincount(parts.row_state, minlength=n)
    row_groups = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(per_state, out=row_groups[1:])
    offsets, t_chunks, p_chunks = _merge_chunks(parts, n)
    labels = expander.labels(parts.keys)
    init = np.zeros(n, dtype=bool)
    init[parts.initial] = True
    labels["init"] = init
    return InducedModel(
        "mdp", row_groups, offsets, t_chunks, p_chunks, parts.row_action, parts.initial, labels, {}, parts.keys
    )


def _values(model: Any, formula: str) -> np.ndarray:
    return value_vector(model, stormpy.parse_properties(formula)[0].get_raw_formula())


def check_bounds(
    expander: BoxExpander,
    lo: np.ndarray,
    hi: np.ndarray,
    horizon: int,
    *,
    driver: str = "local",
    workers: int = 1,
    address: str | None = None,
) -> AbstractResult:
    """Upper and lower bounds on failure within ``horizon`` decisions from each initial box ``[I, d]``.

    ``driver="ray"`` explores on ``workers`` Ray actors (:mod:`distmc.abstract.distributed`) instead of in-process.
    """
    if horizon < 1:
        raise PropertyError(f"--horizon {horizon}: the horizon must be at least 1 step")
    t0 = time.perf_counter()
    split0 = expander.stats["split_s"]
    keys = expander.add_initial(lo, hi)
    steps = 2 * horizon - 1
    if driver == "ray":
        from distmc.distributed import explore_ray

        sp = expander.splitter
        job = BoxJob(
            expander.env,
            sp.net.to_arrays(),
            expander.faults,
            expander.init_lo,
            expander.init_hi,
            sp.max_splits,
            sp.method,
        )
        parts = explore_ray(job, KeyCodec(), keys, RaySettings(workers, address))
        ids = parts.initial
    else:
        parts, ids = explore_bounded(expander, keys, steps)
    t1 = time.perf_counter()
    model = to_storm(_induced(expander, parts))
    upper = _values(model, f'Pmax=? [F<={steps} "possibly_fail"]')[ids]
    lower = _values(model, f'Pmin=? [F<={steps} "fail"]')[ids]
    t2 = time.perf_counter()
    stats = {
        "states": parts.n_states,
        "choices": int(parts.row_state.shape[0]),
        "transitions": int(parts.branch_offsets[-1]),
        "explore_s": t1 - t0,
        "split_s": expander.stats["split_s"] - split0,
        "check_s": t2 - t1,
    }
    return AbstractResult(np.clip(upper, 0, 1), np.clip(lower, 0, 1), stats)
