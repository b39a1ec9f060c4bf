"""The property's value in every explored state: BFS depths, the states most at risk, Parquet output.

A values table has one row per state: one column per model variable (named as in the model; ``int`` variables
as int64, ``bool`` ones as bool), ``value`` (float64; ``value_min``/``value_max`` for an induced MDP queried
without ``min``/``max``) and ``depth`` (int32, the breadth-first level the explorer found the state in). It is
written as one Parquet file (:func:`write_values`) or, by a distributed run, as one part per worker in a
directory (:func:`write_values_part`); :func:`read_values` reads either as one table
(``pyarrow.dataset.dataset(path)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numba as nb
import numpy as np

from distmc._internal.atomic import atomic_path
from distmc.assemble.reducer import InducedModel
from distmc.check.native import matrix_of
from distmc.errors import UsageError
from distmc.model.program import Model

__all__ = [
    "RISKIEST",
    "bfs_depth",
    "depth_from_levels",
    "read_values",
    "riskiest",
    "value_columns",
    "write_values",
    "write_values_part",
]

#: States listed as most at risk in the summary and the JSON report.
RISKIEST = 5


@nb.njit(cache=True, nogil=True)
def _bfs(row_groups, row_offsets, first_row, chunk_base, t_list, initial):  # pragma: no cover - compiled
    n = row_groups.shape[0] - 1
    depth = np.full(n, -1, np.int32)
    queue = np.empty(n, np.int64)
    tail = 0
    for s in initial:
        if depth[s] < 0:
            depth[s] = 0
            queue[tail] = s
            tail += 1
    head = 0
    while head < tail:
        u = queue[head]
        head += 1
        for r in range(row_groups[u], row_groups[u + 1]):
            c = np.searchsorted(first_row, r, side="right") - 1
            t = t_list[c]
            for j in range(row_offsets[r] - chunk_base[c], row_offsets[r + 1] - chunk_base[c]):
                v = t[j]
                if depth[v] < 0:
                    depth[v] = depth[u] + 1
                    queue[tail] = v
                    tail += 1
    return depth


def bfs_depth(m: InducedModel) -> np.ndarray:
    """``[N]`` int32: each state's breadth-first level from the initial states (0 for them).

    A breadth-first search over the induced model's rows, which are exactly the explorer's expansions (terminal
    states' self-loops add nothing), so the level is the one the explorer found the state in, for every driver.
    The explorers number states level by level, so the result is non-decreasing in the state id.
    """
    a = matrix_of(m)
    return _bfs(
        m.row_groups,
        a.row_offsets,
        a.first_row,
        a.chunk_base,
        a.t_list,
        np.ascontiguousarray(m.initial, dtype=np.int64),
    )


def depth_from_levels(ids: np.ndarray, level_starts: np.ndarray) -> np.ndarray:
    """``[K]`` int32 depths of global state ids ``ids`` ``[K]`` from the first id of every level ``[D]``.

    For a worker that holds only its own states: ids are numbered level by level, so a state's level is the last
    level starting at or before its id.
    """
    return (np.searchsorted(level_starts, ids, side="right") - 1).astype(np.int32)


def value_columns(
    model: Model, states: np.ndarray, values: dict[str, np.ndarray], depth: np.ndarray
) -> dict[str, np.ndarray]:
    """The columns of a values table for ``states`` ``[N, V]`` int64 (layout order), ``values`` and ``depth`` ``[N]``.

    ``values``: ``{"value": [N]}`` or ``{"value_min": [N], "value_max": [N]}`` float64.
    """
    clash = sorted({v.name for v in model.variables} & ({"depth"} | set(values)))
    if clash:
        raise UsageError(
            f"--values: the model has variable(s) {', '.join(clash)}, which the values table uses for "
            "its own columns; rename them in the model"
        )
    cols: dict[str, np.ndarray] = {}
    for i, v in enumerate(model.variables):
        cols[v.name] = states[:, i].astype(bool) if v.is_bool else states[:, i].astype(np.int64)
    for name, vec in values.items():
        cols[name] = np.asarray(vec, dtype=np.float64)
    cols["depth"] = np.asarray(depth, dtype=np.int32)
    return cols


def _pyarrow() -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa, pq


def write_values(path: str | Path, columns: dict[str, np.ndarray]) -> Path:
    """Write one values table (``columns``, as :func:`value_columns` makes them) as a Parquet file ``path``."""
    pa, pq = _pyarrow()
    p = Path(path)
    if p.parent != Path(""):
        p.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({k: pa.array(v) for k, v in columns.items()})
    with atomic_path(p) as tmp:  # a reader never sees half a file (pyarrow.dataset skips the hidden temporary one)
        pq.write_table(table, tmp)
    return p


def write_values_part(directory: str | Path, part: int, columns: dict[str, np.ndarray]) -> Path:
    """Write a worker's share of the values table as ``directory/part-PPPPP.parquet``.

    Each worker of a distributed check calls it for the states it owns; ``pyarrow.dataset.dataset(directory)``
    (:func:`read_values`) then reads the parts as one table (rows in no particular order: sort by ``depth`` or
    the variables when order matters).
    """
    return write_values(Path(directory) / f"part-{int(part):05d}.parquet", columns)


def read_values(path: str | Path) -> Any:
    """A values table (a ``pyarrow.Table``) from one Parquet file or a directory of parts."""
    import pyarrow.dataset as ds

    return ds.dataset(str(path), format="parquet").to_table()


def riskiest(values: np.ndarray, eligible: np.ndarray, n: int = RISKIEST) -> np.ndarray:
    """Ids ``[<= n]`` of the ``eligible`` ``[N]`` states with the highest ``values`` ``[N]`` (ties: smaller id first).

    NaN values are skipped; infinite ones (a reward that is never collected to the end) count as highest.
    """
    ids = np.flatnonzero(eligible & ~np.isnan(values))
    if ids.size > n:
        part = np.argpartition(-values[ids], n - 1)[:n]
        cut = values[ids[part]].min()
        ids = ids[values[ids] >= cut]  # every tie of the n-th value, then ordered and cut below
    order = np.lexsort((ids, -values[ids]))
    return ids[order][:n]
