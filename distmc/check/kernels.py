"""The compiled kernels of distmc's own checkers: one set for the native and the distributed checker.

Both checkers see the matrix of an induced DTMC the same way, as a :class:`ChunkedCSR`: ``R`` rows (one per state
the caller owns), branches in chunks of whole rows, each branch a column index into a vector of ``C >= R`` values.
For the native checker ``C = R`` and a column is a state id (the reducer's chunks, int64 targets, taken as they
are). For the distributed checker a worker's rows are its own states and a column is an index into its
*extended* vector: its own states first, then copies of the other workers' states its rows point to (int32
columns, see :mod:`distmc.check.distributed`). The kernels do not know the difference.

Sums run over a row's branches in stored order and rows are independent, so a value does not depend on the
thread count or on how the states are spread over workers (the distributed checker gives the native checker's
bits, ``tests/test_distributed_checker.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numba as nb
import numpy as np

__all__ = [
    "COMPACT_LIMIT",
    "ChunkedCSR",
    "Compact",
    "compact_probabilities",
    "expand_probabilities",
    "prob_nbytes",
    "reach_back_from",
]


@nb.njit(cache=True, nogil=True, parallel=True)
def _sweep(row_offsets, first_row, chunk_base, t_list, p_list, i_list, x, add, active, fixed, out):  # pragma: no cover
    # out[r] = add[r] + sum_j P[r, j] x[j] (summed in row order) for the active rows, fixed[r] for the others. Chunk c
    # holds rows first_row[c]:first_row[c + 1], row r's branches at t_list[c][row_offsets[r] - chunk_base[c]:]; its
    # probabilities are p_list[c][j], or p_list[c][i_list[c][j]] where the chunk is compact (i_list[c] not empty).
    for c in range(len(t_list)):
        t = t_list[c]
        p = p_list[c]
        ix = i_list[c]
        b = chunk_base[c]
        if ix.shape[0] > 0:
            for r in nb.prange(first_row[c], first_row[c + 1]):
                if active[r]:
                    acc = 0.0
                    for j in range(row_offsets[r] - b, row_offsets[r + 1] - b):
                        acc += p[ix[j]] * x[t[j]]
                    out[r] = add[r] + acc
                else:
                    out[r] = fixed[r]
        else:
            for r in nb.prange(first_row[c], first_row[c + 1]):
                if active[r]:
                    acc = 0.0
                    for j in range(row_offsets[r] - b, row_offsets[r + 1] - b):
                        acc += p[j] * x[t[j]]
                    out[r] = add[r] + acc
                else:
                    out[r] = fixed[r]


@nb.njit(cache=True, nogil=True)
def _distinct(bits, limit, table_bits, idx):  # pragma: no cover - compiled
    # Number the distinct values of `bits` (float64 bit patterns) by first occurrence into idx; -1 past `limit`.
    size = 1
    while size < 4 * limit:
        size *= 2
    mask = np.uint64(size - 1)
    slot_val = np.zeros(size, np.uint64)
    slot_id = np.full(size, -1, np.int64)
    n = 0
    for j in range(bits.shape[0]):
        k = bits[j]
        h = ((k ^ (k >> np.uint64(29))) * np.uint64(0xBF58476D1CE4E5B9)) & mask
        while True:
            sid = slot_id[h]
            if sid == -1:
                if n == limit:
                    return -1
                slot_val[h] = k
                slot_id[h] = n
                table_bits[n] = k
                idx[j] = n
                n += 1
                break
            if slot_val[h] == k:
                idx[j] = sid
                break
            h = (h + np.uint64(1)) & mask
    return n


#: A compact chunk of probabilities: (table ``[D]`` float64 of the distinct values, ``[T]`` uint16 index into it).
Compact = tuple[np.ndarray, np.ndarray]

#: At most this many distinct probabilities in a compact chunk (a uint16 index).
COMPACT_LIMIT = 1 << 16


def compact_probabilities(prob: np.ndarray) -> Compact | np.ndarray:
    """``prob`` as a table of its distinct values and a uint16 index (2 B a branch, not 8), or itself.

    Exact: the table holds the values' own bits. A chunk with more than :data:`COMPACT_LIMIT` distinct values, or
    more than one for every 8 branches (a trained network's probabilities differ from state to state), stays as
    it is. The rows of a policy-induced model are products of a few policy and model probabilities, so
    a chunk of a million branches typically has a few hundred (``benchmarks/RESULTS.md``).
    """
    bits = np.ascontiguousarray(prob, dtype=np.float64).view(np.uint64)
    # worth it only with few distinct values: a trained network's probabilities differ from state to state
    table = np.empty(min(COMPACT_LIMIT, max(bits.shape[0] // 8, 1)), dtype=np.uint64)
    idx = np.empty(bits.shape[0], dtype=np.uint16)
    n = _distinct(bits, table.shape[0], table, idx)
    if n < 0:
        return prob
    return table[:n].copy().view(np.float64), idx


def expand_probabilities(prob: Compact | np.ndarray) -> np.ndarray:
    """The ``[T]`` float64 probabilities of a chunk, compact or not."""
    if isinstance(prob, tuple):
        table, idx = prob
        return table[idx]
    return prob


def prob_nbytes(prob: Compact | np.ndarray) -> int:
    """Bytes a chunk of probabilities holds."""
    return int(sum(a.nbytes for a in prob)) if isinstance(prob, tuple) else int(prob.nbytes)


@nb.njit(cache=True, nogil=True)
def _count_in(targets, counts):  # pragma: no cover - compiled
    for j in range(targets.shape[0]):
        counts[targets[j] + 1] += 1


@nb.njit(cache=True, nogil=True)
def _fill_in(offsets, targets, base, fill, sources):  # pragma: no cover - compiled
    for i in range(offsets.shape[0] - 1):
        for j in range(offsets[i], offsets[i + 1]):
            t = targets[j]
            sources[fill[t]] = base + i
            fill[t] += 1


@nb.njit(cache=True, nogil=True)
def _reach_back_from(in_off, sources, seen, through, seeds, newly):  # pragma: no cover - compiled
    # Depth-first from the seed columns along reversed branches: a row (source) not yet seen, in `through`, with a
    # branch to a seen column becomes seen. Marks `seen` in place; writes the rows it marked to `newly`, returns
    # how many. Rows are columns 0..R-1, so a marked row is followed further.
    stack = np.empty(seen.shape[0], np.int64)
    top = 0
    for i in range(seeds.shape[0]):
        stack[top] = seeds[i]
        top += 1
    count = 0
    while top > 0:
        top -= 1
        t = stack[top]
        for k in range(in_off[t], in_off[t + 1]):
            s = sources[k]
            if not seen[s] and through[s]:
                seen[s] = True
                newly[count] = s
                count += 1
                stack[top] = s
                top += 1
    return count


def reach_back_from(
    in_off: np.ndarray, sources: np.ndarray, seen: np.ndarray, through: np.ndarray, seeds: np.ndarray
) -> np.ndarray:
    """Mark (in ``seen``, ``[C]`` bool) every row that reaches a seed column through ``through`` rows.

    ``in_off`` ``[C + 1]`` and ``sources`` are the reversed branches (:meth:`ChunkedCSR.transpose`); ``through``
    is ``[R]`` bool over the rows; ``seeds`` ``[S]`` int64 are columns already marked in ``seen``. Returns the rows
    marked by this call, ``[M]`` int64 (the distributed search sends those its peers hold copies of).
    """
    newly = np.empty(through.shape[0], dtype=np.int64)
    count = _reach_back_from(in_off, sources, seen, through, seeds.astype(np.int64, copy=False), newly)
    return newly[:count]


class ChunkedCSR:
    """Rows in chunks as numba sees them: typed lists of the chunks, each chunk's first row and first branch.

    Args:
        row_offsets: ``[R + 1]`` int64 branch offsets over all chunks.
        target_chunks: column indices (int32 or int64), chunks of whole rows, ``sum = row_offsets[-1]`` entries.
        prob_chunks: float64 probabilities, chunked like ``target_chunks``, or compact chunks
            (:func:`compact_probabilities`).
        n_cols: ``C``, the length of the vectors the rows are multiplied with (columns ``0..C-1``; ``C >= R``).
    """

    def __init__(
        self,
        row_offsets: np.ndarray,
        target_chunks: Sequence[np.ndarray],
        prob_chunks: Sequence[Compact | np.ndarray],
        n_cols: int,
    ) -> None:
        self.row_offsets = row_offsets
        self.t_list, self.p_list, self.i_list = nb.typed.List(), nb.typed.List(), nb.typed.List()
        n_chunks = len(target_chunks)
        bases = np.zeros(n_chunks + 1, dtype=np.int64)
        no_index = np.zeros(0, dtype=np.uint16)
        # the chunks' bytes, counted here: reading a typed list back from Python costs numba a compile of its
        # methods in every new process (0.8 s measured in a Ray worker's part, avoid 10x10)
        self._chunk_bytes = 0
        for i, (t, p) in enumerate(zip(target_chunks, prob_chunks, strict=True)):
            self._chunk_bytes += int(t.nbytes) + prob_nbytes(p)
            self.t_list.append(t)
            if isinstance(p, tuple):  # compact: a table and an index
                self.p_list.append(p[0])
                self.i_list.append(p[1])
            else:
                self.p_list.append(p)
                self.i_list.append(no_index)
            bases[i + 1] = bases[i] + t.shape[0]
        if bases[-1] != row_offsets[-1]:
            raise AssertionError("the chunks do not hold every transition")
        self.chunk_base = bases[:-1]
        self.n = int(row_offsets.shape[0] - 1)
        self.n_cols = n_cols
        if n_chunks == 0:  # numba cannot type an empty list: one empty chunk
            self.t_list.append(np.zeros(0, dtype=np.int64))
            self.p_list.append(np.zeros(0))
            self.i_list.append(no_index)
            self.chunk_base = np.zeros(1, dtype=np.int64)
            bases = np.zeros(2, dtype=np.int64)
        # Chunks hold whole rows, and every row of an induced DTMC has a branch: chunk c starts at the row whose
        # first branch is bases[c].
        self.first_row = np.searchsorted(row_offsets, bases, side="left")
        self.first_row[-1] = self.n
        if not np.array_equal(row_offsets[self.first_row[:-1]], bases[:-1]):
            raise AssertionError("a chunk does not start at a row boundary")
        self._transposed: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of the rows (offsets, columns, probabilities)."""
        return int(self.row_offsets.nbytes) + self._chunk_bytes

    def sweep(self, x: np.ndarray, add: np.ndarray, active: np.ndarray, fixed: np.ndarray, out: np.ndarray) -> None:
        """``out[r] = add[r] + P[r] . x`` on the active rows, ``fixed[r]`` on the others (``x`` is ``[C]``)."""
        _sweep(
            self.row_offsets,
            self.first_row,
            self.chunk_base,
            self.t_list,
            self.p_list,
            self.i_list,
            x,
            add,
            active,
            fixed,
            out,
        )

    def transpose(self) -> tuple[np.ndarray, np.ndarray]:
        """Predecessor lists: ``sources[in_off[c]:in_off[c + 1]]`` are the rows with a branch to column ``c``.

        Computed once and kept (4 B per transition for int32 rows).
        """
        if self._transposed is not None:
            return self._transposed
        counts = np.zeros(self.n_cols + 1, dtype=np.int64)
        for t in self.t_list:
            _count_in(t, counts)
        in_off = np.cumsum(counts)
        sources = np.empty(int(in_off[-1]), dtype=np.int32 if self.n < 2**31 else np.int64)
        fill = in_off[:-1].copy()
        for c, t in enumerate(self.t_list):
            r0, r1 = int(self.first_row[c]), int(self.first_row[c + 1])
            _fill_in(self.row_offsets[r0 : r1 + 1] - self.chunk_base[c], t, r0, fill, sources)
        self._transposed = (in_off, sources)
        return self._transposed
