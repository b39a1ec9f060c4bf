"""The visited set of a partition: packed keys -> local state ids, numbered in order of discovery.

One-word (uint64) keys live in a compiled open-addressing hash table (:class:`distmc._internal.jit.KeyTable`,
O(1) per key). Wider keys (numpy ``void``) use a sorted key array with a parallel id array: a batch is looked up
with one ``searchsorted`` and the new keys are merged in with one ``np.insert`` (O(N + batch) per call). Both
number new keys in order of first occurrence, so the two give identical ids.
"""

from __future__ import annotations

import numpy as np

from distmc._internal.jit import HAVE_NUMBA, KeyTable

__all__ = ["VisitedSet"]


class VisitedSet:
    """Keys ``[N]`` (uint64 or fixed-size void) with ids ``0..N-1`` in order of first insertion."""

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype
        self._table = KeyTable() if HAVE_NUMBA and np.dtype(dtype) == np.dtype(np.uint64) else None
        self._sorted = np.zeros(0, dtype=dtype)  # [N] keys, sorted
        self._ids = np.zeros(0, dtype=np.int64)  # [N] id of each sorted key
        self._by_id: list[np.ndarray] = []  # keys in id order, in chunks
        self.size = 0

    def clear(self) -> None:
        """Empty the set; a hash table keeps its capacity (for a set refilled every level)."""
        if self._table is not None:
            self._table.clear(self.keys_by_id())
        self._sorted, self._ids, self._by_id = self._sorted[:0], self._ids[:0], []
        self.size = 0

    def insert(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Look up ``keys`` ``[K]``, adding the unseen ones in order of first occurrence.

        Returns:
            ids ``[K]`` int64 and the keys that were new ``[K_new]`` (in id order).
        """
        if keys.shape[0] == 0:
            return np.zeros(0, dtype=np.int64), keys
        if self._table is not None:
            ids, new_keys = self._table.insert(keys)
            if new_keys.shape[0]:
                self._by_id.append(new_keys)
                self.size += new_keys.shape[0]
            return ids, new_keys
        uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        pos = np.searchsorted(self._sorted, uniq)
        found = pos < self._sorted.shape[0]
        found[found] = self._sorted[pos[found]] == uniq[found]
        uid = np.empty(uniq.shape[0], dtype=np.int64)
        uid[found] = self._ids[pos[found]]
        new = np.flatnonzero(~found)
        if new.size:
            # Discovery order: by first occurrence in this batch.
            order = new[np.argsort(first[new], kind="stable")]
            new_ids = self.size + np.arange(order.size, dtype=np.int64)
            uid[order] = new_ids
            self._sorted = np.insert(self._sorted, pos[new], uniq[new])
            self._ids = np.insert(self._ids, pos[new], uid[new])
            new_keys = uniq[order]
            self._by_id.append(new_keys)
            self.size += order.size
        else:
            new_keys = uniq[:0]
        return uid[inverse.reshape(-1)], new_keys

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Ids of ``keys`` ``[K]``; -1 for keys not in the set."""
        if self._table is not None:
            return self._table.lookup(keys)
        pos = np.searchsorted(self._sorted, keys)
        ok = pos < self._sorted.shape[0]
        ok[ok] = self._sorted[pos[ok]] == keys[ok]
        out = np.full(keys.shape[0], -1, dtype=np.int64)
        out[ok] = self._ids[pos[ok]]
        return out

    def keys_by_id(self) -> np.ndarray:
        """All keys ``[N]`` in id order."""
        if len(self._by_id) > 1:
            self._by_id = [np.concatenate(self._by_id)]
        return self._by_id[0] if self._by_id else np.zeros(0, dtype=self.dtype)

    @property
    def nbytes(self) -> int:
        table = self._table.nbytes if self._table is not None else 0
        return int(table + self._sorted.nbytes + self._ids.nbytes + sum(k.nbytes for k in self._by_id))
