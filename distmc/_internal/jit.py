"""numba routines for the hot paths outside the kernel: row merging and an open-addressing hash set of keys.

Why numba here: the numpy versions sort the whole batch (``np.unique``, a stable ``argsort`` of composite keys),
O(T log T) over every transition; measured on avoid.prism 7x7 they took most of exploration and assembly time
once the kernel was compiled. A hash table is O(1) per lookup, and rows are short, so sorting each row on its own
is cheap. Results are those of the numpy versions: the same ids, rows and targets; a row's duplicate probabilities
are added in arrival order (numpy's ``add.reduceat`` may group the sum otherwise, so its last bit can differ).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

try:
    import numba as _nb

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only without numba
    HAVE_NUMBA = False

__all__ = [
    "HAVE_NUMBA",
    "KeyTable",
    "budget_env",
    "first_occurrences",
    "gather_index",
    "merge_rows",
    "place_rows",
    "set_thread_budget",
    "thread_budget",
    "thread_cap",
    "thread_settings",
]

_EMPTY = np.int64(-1)

if HAVE_NUMBA:
    _jit = _nb.njit(cache=True, nogil=True)

    @_jit
    def _merge_row(seg_t, seg_p, a, targets, prob):
        # one row's branches (a copy) sorted by target into targets/prob[a:], duplicates added up; its merged length
        order = np.argsort(seg_t, kind="mergesort")  # stable: duplicates add up in arrival order
        w, last = a, -1
        for i in range(seg_t.shape[0]):
            t = seg_t[order[i]]
            if t == last:
                prob[w - 1] += seg_p[order[i]]
            else:
                targets[w] = t
                prob[w] = seg_p[order[i]]
                last = t
                w += 1
        return w - a

    @_nb.njit(cache=True, nogil=True, parallel=True)
    def _merge_rows_jit(offsets, src_t, src_p, targets, prob, counts):
        # Row r is sorted and merged into targets/prob[offsets[r]:], its own place (rows in parallel: they touch
        # only their own entries; measured 2.1x on 2 threads, avoid 8x8); counts[r]: its merged length. In place
        # when src is the output: a row is copied out before it is written.
        for r in _nb.prange(offsets.shape[0] - 1):
            a, b = offsets[r], offsets[r + 1]
            if b - a == 1:
                targets[a] = src_t[a]
                prob[a] = src_p[a]
                counts[r] = 1
            elif b > a:
                counts[r] = _merge_row(src_t[a:b].copy(), src_p[a:b].copy(), a, targets, prob)
            else:
                counts[r] = 0

    @_nb.njit(cache=True, nogil=True, parallel=True)
    def _merge_rows_lut_jit(offsets, src_t, lut, src_p, targets, prob, counts):
        # _merge_rows_jit of the targets lut[src_t] (no array of them made first)
        for r in _nb.prange(offsets.shape[0] - 1):
            a, b = offsets[r], offsets[r + 1]
            if b - a == 1:
                targets[a] = lut[src_t[a]]
                prob[a] = src_p[a]
                counts[r] = 1
            elif b > a:
                seg_t = np.empty(b - a, np.int64)
                for i in range(b - a):
                    seg_t[i] = lut[src_t[a + i]]
                counts[r] = _merge_row(seg_t, src_p[a:b].copy(), a, targets, prob)
            else:
                counts[r] = 0

    @_jit
    def _close_rows_jit(offsets, counts, targets, prob):
        # the merged rows moved down to follow each other (w never passes a row's start: in place, in order)
        out_off = np.zeros(offsets.shape[0], np.int64)
        w = 0
        for r in range(offsets.shape[0] - 1):
            a, c = offsets[r], counts[r]
            if w != a:
                for i in range(c):
                    targets[w + i] = targets[a + i]
                    prob[w + i] = prob[a + i]
            w += c
            out_off[r + 1] = w
        return out_off, w

    @_jit
    def _place_rows_jit(src_off, rows, dst_off, src_t, src_p, targets, prob):
        # row i of a piece (branches src_off[i]:src_off[i+1]) becomes global row rows[i] (branches from dst_off[..]);
        # one thread: measured 7x faster than a prange over the rows (avoid 8x8, 2 cores)
        for i in range(rows.shape[0]):
            a, d = src_off[i], dst_off[rows[i]]
            m = src_off[i + 1] - a
            targets[d : d + m] = src_t[a : a + m]
            prob[d : d + m] = src_p[a : a + m]

    @_jit
    def _first_occurrences_jit(uid, size0, branch_offsets, row_state, source, shift, out):
        # uid: each branch's id in a set whose new ids size0, size0 + 1, ... are given in order of first occurrence
        nxt, k, widest = size0, 0, 0
        state, start = -1, 0
        for r in range(branch_offsets.shape[0] - 1):
            s = row_state[r]
            if s != state:  # a state's rows are contiguous: its branches count from its first row's first branch
                state, start = s, branch_offsets[r]
            for j in range(branch_offsets[r], branch_offsets[r + 1]):
                if uid[j] == nxt:
                    widest = max(widest, j - start)
                    out[k] = (source[s] << shift) + (j - start)
                    k += 1
                    nxt += 1
        return k, widest

    @_jit
    def _mix(k):
        # splitmix64 finaliser: packed keys are far from uniform in their low bits
        k = (k ^ (k >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        k = (k ^ (k >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return k ^ (k >> np.uint64(31))

    @_jit
    def _insert_jit(slots_k, slots_id, size, keys, ids_out, new_keys):
        mask = np.uint64(slots_k.shape[0] - 1)
        n_new = 0
        for i in range(keys.shape[0]):
            k = keys[i]
            h = _mix(k) & mask
            while True:
                sid = slots_id[h]
                if sid == -1:
                    slots_k[h] = k
                    slots_id[h] = size + n_new
                    ids_out[i] = size + n_new
                    new_keys[n_new] = k
                    n_new += 1
                    break
                if slots_k[h] == k:
                    ids_out[i] = sid
                    break
                h = (h + np.uint64(1)) & mask
        return n_new

    @_jit
    def _lookup_jit(slots_k, slots_id, keys, ids_out):
        mask = np.uint64(slots_k.shape[0] - 1)
        for i in range(keys.shape[0]):
            k = keys[i]
            h = _mix(k) & mask
            ids_out[i] = -1
            while True:
                sid = slots_id[h]
                if sid == -1:
                    break
                if slots_k[h] == k:
                    ids_out[i] = sid
                    break
                h = (h + np.uint64(1)) & mask

    @_jit
    def _clear_keys_jit(slots_k, slots_id, keys):
        # empties the slots of keys (every key the table holds): each is found by probing from its hash past any
        # slot emptied already (its own slot never moves), so the order of the keys does not matter
        mask = np.uint64(slots_k.shape[0] - 1)
        for i in range(keys.shape[0]):
            k = keys[i]
            h = _mix(k) & mask
            while slots_id[h] == -1 or slots_k[h] != k:
                h = (h + np.uint64(1)) & mask
            slots_id[h] = -1

    @_jit
    def _rehash_jit(old_k, old_id, slots_k, slots_id):
        mask = np.uint64(slots_k.shape[0] - 1)
        for i in range(old_k.shape[0]):
            if old_id[i] != -1:
                h = _mix(old_k[i]) & mask
                while slots_id[h] != -1:
                    h = (h + np.uint64(1)) & mask
                slots_k[h] = old_k[i]
                slots_id[h] = old_id[i]


if HAVE_NUMBA:

    @_nb.njit(cache=True, nogil=True)
    def _gather_index_jit(starts, new_off, gather):  # pragma: no cover - compiled
        for i in range(starts.shape[0]):
            s, d = starts[i], new_off[i]
            for j in range(new_off[i + 1] - d):
                gather[d + j] = s + j


def gather_index(starts: np.ndarray, new_off: np.ndarray) -> np.ndarray:
    """``[new_off[-1]]`` int64: ``starts[i], starts[i] + 1, ...`` for each run ``i`` of ``new_off[i + 1] - new_off[i]``.

    The branch gather of rows taken out of a CSR in another order (one pass, no temporaries; numpy's ``repeat`` +
    ``arange`` without numba).
    """
    n = int(new_off[-1])
    if not HAVE_NUMBA:
        return np.repeat(starts - new_off[:-1], np.diff(new_off)) + np.arange(n, dtype=np.int64)
    gather = np.empty(n, dtype=np.int64)
    _gather_index_jit(np.ascontiguousarray(starts, dtype=np.int64), new_off, gather)
    return gather


def merge_rows(
    offsets: np.ndarray, targets: np.ndarray, prob: np.ndarray, lut: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort each CSR row ``offsets`` ``[R + 1]`` by target and add up duplicate targets (in arrival order).

    Works in place when it may: writeable ``targets`` and ``prob`` (int64, float64, contiguous) are overwritten, and
    the returned arrays are views of their first entries. Read-only ones (a Ray worker's rows in the object store,
    an Arrow file) are merged into new arrays instead, in the same pass. ``lut``: the targets are
    ``lut[targets]`` (int64), looked up in the same pass (``targets`` is then overwritten by the merged rows).
    """
    assert HAVE_NUMBA
    if (
        targets.dtype != np.int64
        or prob.dtype != np.float64
        or not (targets.flags.c_contiguous and prob.flags.c_contiguous)
    ):
        targets, prob = np.ascontiguousarray(targets, dtype=np.int64), np.ascontiguousarray(prob, dtype=np.float64)
    src_t, src_p = targets, prob
    if not (targets.flags.writeable and prob.flags.writeable):
        targets, prob = np.empty_like(src_t), np.empty_like(src_p)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    counts = np.empty(offsets.shape[0] - 1, dtype=np.int64)
    if lut is None:
        _merge_rows_jit(offsets, src_t, src_p, targets, prob, counts)
    else:
        _merge_rows_lut_jit(offsets, src_t, np.ascontiguousarray(lut, dtype=np.int64), src_p, targets, prob, counts)
    out_off, w = _close_rows_jit(offsets, counts, targets, prob)
    return out_off, targets[:w], prob[:w]


def first_occurrences(
    uid: np.ndarray, size0: int, branch_offsets: np.ndarray, row_state: np.ndarray, source: np.ndarray, shift: int
) -> tuple[np.ndarray, int]:
    """Where the new ids of a batch first occur, as ``source[state] << shift`` + the branch's index in its state.

    ``uid`` ``[B]`` holds each branch's id in a set that numbers new keys ``size0, size0 + 1, ...`` in order of
    first occurrence (:meth:`KeyTable.insert`); the branches are the CSR rows ``branch_offsets`` of the states
    ``row_state`` (a state's rows contiguous), and ``source`` maps a state to the number that leads its code.
    Returns the codes of the new ids, in id order, and the largest branch index among them (to check against
    ``shift``). One pass, no array of ``B`` temporaries.
    """
    assert HAVE_NUMBA
    out = np.empty(max(0, int(uid.max(initial=size0 - 1)) + 1 - size0), dtype=np.int64)
    k, widest = _first_occurrences_jit(
        np.ascontiguousarray(uid, dtype=np.int64),
        np.int64(size0),
        np.ascontiguousarray(branch_offsets, dtype=np.int64),
        np.ascontiguousarray(row_state, dtype=np.int64),
        np.ascontiguousarray(source, dtype=np.int64),
        np.int64(shift),
        out,
    )
    assert k == out.shape[0]
    return out, int(widest)


def place_rows(
    src_off: np.ndarray,
    rows: np.ndarray,
    dst_off: np.ndarray,
    src_t: np.ndarray,
    src_p: np.ndarray,
    targets: np.ndarray,
    prob: np.ndarray,
) -> None:
    """Copy the CSR rows ``src_off`` ``[K + 1]`` of a piece to global rows ``rows`` ``[K]`` of ``dst_off``.

    One pass over the piece's branches (``src_t``, ``src_p``) into ``targets`` and ``prob``, no index array.
    """
    assert HAVE_NUMBA
    _place_rows_jit(
        np.ascontiguousarray(src_off, dtype=np.int64),
        np.ascontiguousarray(rows, dtype=np.int64),
        dst_off,
        np.ascontiguousarray(src_t, dtype=np.int64),
        np.ascontiguousarray(src_p, dtype=np.float64),
        targets,
        prob,
    )


class KeyTable:
    """Open-addressing hash table of uint64 keys -> ids ``0..N-1`` in order of first insertion (load <= 1/2)."""

    def __init__(self, capacity: int = 1 << 16) -> None:
        assert HAVE_NUMBA
        cap = 1 << max(4, int(capacity - 1).bit_length())
        self._k = np.zeros(cap, dtype=np.uint64)
        self._id = np.full(cap, -1, dtype=np.int64)
        self.size = 0

    @property
    def nbytes(self) -> int:
        return int(self._k.nbytes + self._id.nbytes)

    def _reserve(self, extra: int) -> None:
        need = 2 * (self.size + extra)
        if need <= self._k.shape[0]:
            return
        cap = self._k.shape[0]
        while cap < need:
            cap *= 2
        k, ids = np.zeros(cap, dtype=np.uint64), np.full(cap, -1, dtype=np.int64)
        _rehash_jit(self._k, self._id, k, ids)
        self._k, self._id = k, ids

    def clear(self, keys: np.ndarray | None = None) -> None:
        """Empty the table, keeping its capacity (a table refilled every level is not allocated again).

        ``keys``: every key the table holds (its new keys so far); then only their slots are emptied when they are
        few against the capacity (a level's set sized for its largest batch: measured 0.1 s a run on avoid 10x10).
        """
        if keys is not None and 8 * keys.shape[0] < self._id.shape[0]:
            assert keys.shape[0] == self.size
            _clear_keys_jit(self._k, self._id, np.ascontiguousarray(keys, dtype=np.uint64))
        else:
            self._id.fill(-1)
        self.size = 0

    def insert(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ids ``[K]`` of ``keys`` ``[K]`` uint64, adding unseen ones; also the new keys ``[K_new]`` in id order."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        self._reserve(keys.shape[0])
        ids = np.empty(keys.shape[0], dtype=np.int64)
        new = np.empty(keys.shape[0], dtype=np.uint64)
        n_new = int(_insert_jit(self._k, self._id, self.size, keys, ids, new))
        self.size += n_new
        return ids, new[:n_new].copy()

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Ids of ``keys`` ``[K]``; -1 for keys not in the table."""
        out = np.empty(keys.shape[0], dtype=np.int64)
        _lookup_jit(self._k, self._id, np.ascontiguousarray(keys, dtype=np.uint64), out)
        return out


# -- the thread budget -------------------------------------------------------------------------------------------
#
# A worker given N threads must keep at most N cores busy. Its compute pools, and how each is bounded:
# - numba's (the kernel, the row merge, the checker's sweeps; OpenMP here): numba.set_num_threads is local to the
#   calling thread, and a Ray actor with a concurrency group runs its calls on executor threads of Ray's, not on the
#   thread that ran __init__; there numba used every core (measured: a 1-thread worker kept 2 threads busy).
#   NUMBA_NUM_THREADS at the process's start sizes the pool itself, for every thread.
# - torch's intra-op pool (a network policy): process-wide, torch.set_num_threads; its inter-op pool stays idle
#   (no torch.jit.fork), and can only be sized before its first use.
# - OpenBLAS / MKL / OpenMP of other libraries: sized by their variables when they load.
# - Arrow's CPU pool (pyarrow.set_cpu_count; Arrow also reads OMP_NUM_THREADS).


def budget_env(threads: int) -> dict[str, str]:
    """Environment variables that size a new process's compute pools to ``threads`` (a Ray worker's, at its start).

    ``OMP_WAIT_POLICY`` is passed on as :mod:`distmc` sets it (passive, unless the user set it).
    """
    n = str(max(1, int(threads)))
    env = {k: n for k in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    env["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
    return env


def thread_settings() -> dict[str, int]:
    """The thread counts of this process's compute pools as the calling thread sees them (numba's is per thread)."""
    out: dict[str, int] = {}
    if HAVE_NUMBA:
        out["numba"] = int(_nb.get_num_threads())
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = int(torch.get_num_threads())
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        out["arrow"] = int(pa.cpu_count())
    return out


_cap: int | None = None  # the budget set_thread_budget last set in this process


def thread_cap() -> int:
    """The most threads a pool of this process may use: the budget set last, else every core."""
    return _cap if _cap is not None else (os.cpu_count() or 1)


def set_thread_budget(threads: int) -> dict[str, int]:
    """Bound the compute pools to ``threads``: numba's for the calling thread, torch's and Arrow's for the process.

    torch's count is only lowered (a policy chooses its own count within :func:`thread_cap` by measurement), and
    set only when torch is loaded already (importing it costs a second). Returns :func:`thread_settings`.
    """
    global _cap
    threads = _cap = max(1, int(threads))
    if HAVE_NUMBA:
        # numba's config sets its names from the environment at import, out of mypy's sight: read them from its dict
        _nb.set_num_threads(min(threads, int(vars(_nb.config)["NUMBA_NUM_THREADS"])))
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() > threads:
        torch.set_num_threads(threads)
    pa = sys.modules.get("pyarrow")
    if pa is not None and pa.cpu_count() != threads:
        pa.set_cpu_count(threads)
    return thread_settings()


@contextmanager
def thread_budget(threads: int | None) -> Iterator[None]:
    """:func:`set_thread_budget` for a block of this thread's work, then the previous counts (None: no change)."""
    global _cap
    if threads is None:
        yield
        return
    before, cap = thread_settings(), _cap
    set_thread_budget(threads)
    try:
        yield
    finally:
        _cap = cap
        if "numba" in before:
            _nb.set_num_threads(before["numba"])
        torch = sys.modules.get("torch")
        if torch is not None and "torch" in before:
            torch.set_num_threads(before["torch"])
        pa = sys.modules.get("pyarrow")
        if pa is not None and "arrow" in before:
            pa.set_cpu_count(before["arrow"])
