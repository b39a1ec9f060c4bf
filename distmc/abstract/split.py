"""Splitting boxes by the network's action: branch and bound, an R*-tree cache, and parallel workers.

:func:`split_boxes` bisects each box until every piece provably chooses one action (its action mask, from
:func:`~distmc.abstract.bounds.action_masks`, has one entry) or the piece has been bisected ``max_splits`` times;
such an undecided piece keeps every action it may choose (nondeterminism of the abstract MDP: sound, unlike
picking one). Bisection is canonical: along the dimension of largest width relative to ``scale``, at the middle.

:class:`Splitter` adds an R*-tree (``rtree``) of the pieces found so far: a box inside a cached piece whose
action is decided needs no bounds at all, and any box inside a cached piece gets the intersection of the masks
(both are sound). Lookups and inserts happen in the calling process, per batch, before and after the misses are
split by ``workers`` processes, so the result does not depend on the number of workers.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
from rtree import index

from distmc.abstract.bounds import action_masks
from distmc.abstract.network import Network
from distmc.errors import ResourceLimitError

__all__ = ["Pieces", "Splitter", "split_boxes"]

#: Most pieces one call may produce (guards against a runaway ``max_splits``).
MAX_PIECES = 5_000_000
#: Fewest boxes (per worker) worth sending to the worker processes; smaller batches are split in-process.
MIN_PARALLEL = 64


@dataclass
class Pieces:
    """Pieces of a batch of boxes: ``owner [P]`` (index of the box), ``lo, hi [P, d]``, ``mask [P, A]``."""

    owner: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    mask: np.ndarray

    @staticmethod
    def concat(parts: list[Pieces]) -> Pieces:
        return Pieces(
            np.concatenate([p.owner for p in parts]),
            np.concatenate([p.lo for p in parts]),
            np.concatenate([p.hi for p in parts]),
            np.concatenate([p.mask for p in parts]),
        )


def split_boxes(
    net: Network, lo: np.ndarray, hi: np.ndarray, scale: np.ndarray, max_splits: int, method: str = "crown"
) -> Pieces:
    """Branch and bound over boxes ``[B, d]``; pieces come out sorted by owner, then in depth-first order."""
    b, d = lo.shape
    owner = np.arange(b, dtype=np.int64)
    path = np.zeros(b, dtype=np.int64)  # bisection path bits (0 = lower half), for the canonical order
    depth = np.zeros(b, dtype=np.int64)
    out: list[tuple[np.ndarray, ...]] = []
    total = 0
    while owner.size:
        mask = action_masks(net, lo, hi, method)
        done = (mask.sum(axis=1) <= 1) | (depth >= max_splits)
        out.append((owner[done], path[done] << (max_splits - depth[done]), lo[done], hi[done], mask[done]))
        total += int(done.sum())
        if total > MAX_PIECES:
            raise ResourceLimitError(f"splitting by action made more than {MAX_PIECES} pieces; lower --max-splits")
        keep = ~done
        owner, path, depth, lo, hi = owner[keep], path[keep], depth[keep], lo[keep], hi[keep]
        dim = np.argmax((hi - lo) / scale, axis=1)
        rows = np.arange(owner.size)
        mid = (lo[rows, dim] + hi[rows, dim]) / 2
        lo2, hi1 = lo.copy(), hi.copy()
        hi1[rows, dim] = mid
        lo2[rows, dim] = mid
        owner = np.concatenate([owner, owner])
        path = np.concatenate([path * 2, path * 2 + 1])
        depth = np.concatenate([depth + 1, depth + 1])
        lo, hi = np.concatenate([lo, lo2]), np.concatenate([hi1, hi])
    o, p, plo, phi, pm = (np.concatenate([x[i] for x in out]) for i in range(5))
    order = np.lexsort((p, o))
    return Pieces(o[order], plo[order], phi[order], pm[order])


_WORKER_NET: Network | None = None


def _init_worker(layers: list, threads: int) -> None:
    global _WORKER_NET
    import torch

    torch.set_num_threads(threads)
    _WORKER_NET = Network.from_arrays(layers)


def _split_job(lo: np.ndarray, hi: np.ndarray, scale: np.ndarray, max_splits: int, method: str) -> Pieces:
    assert _WORKER_NET is not None
    return split_boxes(_WORKER_NET, lo, hi, scale, max_splits, method)


class Splitter:
    """Splits batches of boxes by action, with an R*-tree cache and ``workers`` processes (1: in-process)."""

    def __init__(
        self,
        net: Network,
        scale: np.ndarray,
        max_splits: int,
        *,
        method: str = "crown",
        workers: int = 1,
        use_cache: bool = True,
    ) -> None:
        self.net, self.scale, self.max_splits, self.method = net, np.asarray(scale, float), max_splits, method
        self.workers = max(1, int(workers))
        self.dim = self.scale.shape[0]
        self.use_cache = use_cache
        props = index.Property()
        props.dimension = self.dim
        props.variant = index.RT_Star
        self._tree = index.Index(properties=props) if use_cache else None
        # The cached pieces, row j = the tree's entry j (grown by doubling; the first `_n` rows are in use).
        self._lo = np.zeros((0, self.dim))
        self._hi = np.zeros((0, self.dim))
        self._mask = np.zeros((0, net.n_outputs), dtype=bool)
        self._n = 0
        self._pool: ProcessPoolExecutor | None = None
        self.stats = {"boxes": 0, "cache_hits": 0, "pieces": 0, "undecided_pieces": 0}

    def _pool_get(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(self.net.to_arrays(), 1),
            )
        return self._pool

    def start(self) -> None:
        """Start the worker processes now (and wait until each has loaded the network), not at the first batch."""
        if self.workers > 1:
            pool = self._pool_get()
            lo = np.zeros((1, self.dim))
            for f in [pool.submit(_split_job, lo, lo, self.scale, 0, "ibp") for _ in range(self.workers)]:
                f.result()

    def close(self) -> None:
        """Stop the worker processes."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> Splitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _cached(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """``[B, A]`` intersection of the masks of cached pieces that contain each box (all True if none)."""
        out = np.ones((lo.shape[0], self.net.n_outputs), dtype=bool)
        if self._tree is None or self._n == 0 or lo.shape[0] == 0:
            return out
        # One query for the whole batch: the ids of the overlapping pieces, box after box, and their counts.
        ids, counts = self._tree.intersection_v(np.ascontiguousarray(lo), np.ascontiguousarray(hi))
        if ids.size == 0:
            return out
        ids = ids.astype(np.int64)
        box = np.repeat(np.arange(lo.shape[0]), counts.astype(np.int64))
        # The tree answers overlaps; containment is checked exactly on the stored float64 boxes.
        inside = (self._lo[ids] <= lo[box]).all(axis=1) & (self._hi[ids] >= hi[box]).all(axis=1)
        forbids = ~self._mask[ids] & inside[:, None]  # [hits, A]: a containing piece rules the action out
        for k in range(out.shape[1]):
            out[:, k] &= np.bincount(box, weights=forbids[:, k], minlength=lo.shape[0]) == 0
        return out

    def _insert(self, pieces: Pieces) -> None:
        if self._tree is None:
            return
        n, k = self._n, pieces.lo.shape[0]
        if n + k > self._lo.shape[0]:
            cap = max(2 * self._lo.shape[0], n + k, 1024)
            self._lo = np.concatenate([self._lo[:n], np.zeros((cap - n, self.dim))])
            self._hi = np.concatenate([self._hi[:n], np.zeros((cap - n, self.dim))])
            self._mask = np.concatenate([self._mask[:n], np.zeros((cap - n, self._mask.shape[1]), dtype=bool)])
        self._lo[n : n + k], self._hi[n : n + k], self._mask[n : n + k] = pieces.lo, pieces.hi, pieces.mask
        for j, (lo, hi) in enumerate(zip(pieces.lo, pieces.hi, strict=True)):
            self._tree.insert(n + j, (*lo, *hi))
        self._n = n + k

    def split(self, lo: np.ndarray, hi: np.ndarray) -> Pieces:
        """Pieces of the boxes ``[B, d]`` with their action masks (see the module docstring)."""
        b = lo.shape[0]
        self.stats["boxes"] += b
        known = self._cached(lo, hi)
        hit = known.sum(axis=1) == 1
        self.stats["cache_hits"] += int(hit.sum())
        miss = np.flatnonzero(~hit)
        parts: list[Pieces] = [Pieces(np.flatnonzero(hit), lo[hit], hi[hit], known[hit])]
        if miss.size:
            if self.workers == 1 or miss.size < MIN_PARALLEL * self.workers:
                chunks = [miss]
                results = [split_boxes(self.net, lo[miss], hi[miss], self.scale, self.max_splits, self.method)]
            else:
                chunks = np.array_split(miss, 4 * self.workers)
                chunks = [c for c in chunks if c.size]
                pool = self._pool_get()
                futures = [
                    pool.submit(_split_job, lo[c], hi[c], self.scale, self.max_splits, self.method) for c in chunks
                ]
                results = [f.result() for f in futures]
            for c, r in zip(chunks, results, strict=True):
                r.mask &= known[c][r.owner]
                parts.append(Pieces(c[r.owner], r.lo, r.hi, r.mask))
            self._insert(Pieces.concat(parts[1:]))
        out = Pieces.concat(parts)
        order = np.argsort(out.owner, kind="stable")
        out = Pieces(out.owner[order], out.lo[order], out.hi[order], out.mask[order])
        self.stats["pieces"] += int(out.owner.size)
        self.stats["undecided_pieces"] += int((out.mask.sum(axis=1) > 1).sum())
        return out
