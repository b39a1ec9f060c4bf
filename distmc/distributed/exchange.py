"""The exchange between the Ray workers: owners by hash, keys as Arrow batches, rows placed in global order.

See :mod:`distmc.distributed` for the protocol of one level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from distmc._internal.jit import HAVE_NUMBA, first_occurrences, place_rows
from distmc.check.kernels import compact_probabilities, expand_probabilities
from distmc.explore.contracts import KeyCodec
from distmc.explore.partition import Explored

__all__ = [
    "OCC_SHIFT",
    "RowBlock",
    "gather",
    "narrow",
    "order_rows",
    "owner_of",
    "pack_ids",
    "pack_increasing",
    "unpack_ids",
    "unpack_increasing",
    "widen",
]

#: Branches of one state must stay below this (the first-occurrence position packs the branch index in 20 bits).
OCC_SHIFT = 20


def owner_of(words: np.ndarray, w: int) -> np.ndarray:
    """Owner ``[N]`` int64 in ``0..w-1`` of packed keys given as their words ``[N, W]`` uint64."""
    h = np.zeros(words.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(words.shape[1]):
            k = h ^ words[:, j]
            k = (k ^ (k >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            k = (k ^ (k >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            h = k ^ (k >> np.uint64(31))
    return (h % np.uint64(w)).astype(np.int64)


def narrow(values: np.ndarray) -> tuple[int, np.ndarray]:
    """Non-negative integers ``[N]`` as (base, ``[N, w]`` uint8): ``value - base`` in its ``w`` low bytes.

    ``base`` is the smallest value and ``w`` the fewest bytes that hold the largest difference (at least one), so
    a column of global ids of one level, source positions or branch indices travels in 1-4 bytes an entry instead
    of 8. :func:`widen` is the inverse.
    """
    v = np.ascontiguousarray(values).astype(np.uint64, copy=False)
    if v.shape[0] == 0:
        return 0, np.zeros((0, 1), dtype=np.uint8)
    base = int(v.min())
    d = (v - np.uint64(base)).astype("<u8", copy=False)
    w = max(1, (int(d.max()).bit_length() + 7) // 8)
    return base, np.ascontiguousarray(d.view(np.uint8).reshape(-1, 8)[:, :w])


def widen(base: int, raw: np.ndarray) -> np.ndarray:
    """``[N]`` uint64 from :func:`narrow`'s ``(base, [N, w] uint8)``."""
    n, w = raw.shape
    full = np.zeros((n, 8), dtype=np.uint8)
    full[:, :w] = raw
    return full.view("<u8").reshape(n).astype(np.uint64) + np.uint64(base)


def pack_ids(ids: np.ndarray) -> tuple[int, np.ndarray]:
    """Global ids ``[N]`` (an owner's answer to a source) narrowed for the trip (:func:`narrow`)."""
    return narrow(ids)


def unpack_ids(packed: tuple[int, np.ndarray]) -> np.ndarray:
    """The int64 ids of :func:`pack_ids`."""
    return widen(*packed).astype(np.int64)


def pack_increasing(values: np.ndarray) -> tuple[int, int, np.ndarray]:
    """An increasing int64 sequence ``[N]`` as (first, :func:`narrow` of its steps).

    1-2 bytes an entry for the level's first occurrences an owner reports, and for the global ids the driver hands
    back (both increase).
    """
    v = np.ascontiguousarray(values, dtype=np.int64)
    first = int(v[0]) if v.shape[0] else 0
    return (first, *narrow(np.diff(v, prepend=v[:1])))


def unpack_increasing(packed: tuple[int, int, np.ndarray]) -> np.ndarray:
    """The int64 sequence of :func:`pack_increasing`."""
    first, base, raw = packed
    return first + np.cumsum(widen(base, raw).astype(np.int64))


def _binary(raw: np.ndarray) -> Any:
    import pyarrow as pa

    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(raw.shape[1]), raw.shape[0], [None, pa.py_buffer(raw)])


def _raw(col: Any) -> np.ndarray:
    w, n = col.type.byte_width, len(col)
    buf = col.buffers()[1]
    if buf is None or n == 0:
        return np.zeros((0, w), dtype=np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)[col.offset * w : (col.offset + n) * w].reshape(n, w)


def _to_arrow(keys: np.ndarray, occ: np.ndarray, codec: KeyCodec) -> Any:
    """One source's keys for one owner, with their first occurrences ``occ`` (increasing), as a compact batch.

    Columns (``fixed_size_binary``, :func:`narrow`; the bases in the schema's metadata): ``k0``.. the key's words,
    ``src`` the source's global id as a step from the previous key's (occurrences increase, so steps are small),
    ``branch`` the branch index. 6 bytes a key on avoid 10x10 (a 25-bit key, one-byte steps and branches), where
    the plain columns took 16.
    """
    import pyarrow as pa

    words = codec.to_words(keys)
    src = occ >> OCC_SHIFT
    cols = [narrow(words[:, j]) for j in range(words.shape[1])]
    cols.append(narrow(np.diff(src, prepend=src[:1])))
    cols.append(narrow(occ & ((1 << OCC_SHIFT) - 1)))
    names = [f"k{j}" for j in range(words.shape[1])] + ["src", "branch"]
    first = int(src[0]) if src.shape[0] else 0
    meta = {"base": " ".join(str(b) for b, _ in cols), "src0": str(first)}
    arrays = [_binary(raw) for _, raw in cols]
    schema = pa.schema([pa.field(n, a.type) for n, a in zip(names, arrays, strict=True)], metadata=meta)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _first_occurrences(
    uid: np.ndarray, size0: int, branch_offsets: np.ndarray, row_state: np.ndarray, source: np.ndarray
) -> tuple[np.ndarray, int]:
    """:func:`~distmc._internal.jit.first_occurrences` with the shift of ``occ``, also without numba."""
    if HAVE_NUMBA:
        return first_occurrences(uid, size0, branch_offsets, row_state, source, OCC_SHIFT)
    pos = np.flatnonzero(uid >= size0)  # without numba (tests/test_jit.py checks it against the compiled pass)
    ids = uid[pos]
    pos = pos[ids > np.maximum.accumulate(np.concatenate([[size0 - 1], ids]))[:-1]]  # a new id's first place
    counts = np.diff(branch_offsets)
    per_state = np.bincount(row_state, weights=counts, minlength=source.shape[0]).astype(np.int64)
    branch_src = np.repeat(row_state, counts)[pos]
    index = pos - (np.cumsum(per_state) - per_state)[branch_src]
    return (source[branch_src] << OCC_SHIFT) + index, int(index.max(initial=0))


def _from_arrow(batch: Any, codec: KeyCodec) -> tuple[np.ndarray, np.ndarray]:
    """The keys ``[K]`` and first occurrences ``[K]`` int64 of a batch of :func:`_to_arrow`."""
    meta = batch.schema.metadata
    bases = [int(b) for b in meta[b"base"].split()]
    cols = [widen(b, _raw(batch.column(j))) for j, b in enumerate(bases)]
    words = np.stack(cols[: codec.words], axis=1) if cols[0].shape[0] else np.zeros((0, codec.words), np.uint64)
    src = int(meta[b"src0"]) + np.cumsum(cols[-2].astype(np.int64))
    occ = (src << OCC_SHIFT) + cols[-1].astype(np.int64)
    return codec.from_words(words), occ


def _at_least(ids: np.ndarray, size: int) -> np.ndarray:
    """``ids`` grown (by doubling, new entries -1) to hold at least ``size`` entries; itself if it does already."""
    if size <= ids.shape[0]:
        return ids
    grown = np.full(max(size, 2 * ids.shape[0]), -1, dtype=np.int64)
    grown[: ids.shape[0]] = ids
    return grown


def _chunks(r: dict[str, Any]) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """A result's branches as (rows, targets, prob) chunks of whole rows (a result may hold one array or a list).

    An actor's chunks travel compact (int32 targets, probabilities as a table and an index: the actor's ``_keep``);
    here they become the reducer's int64 targets and float64 probabilities.
    """
    if isinstance(r["targets"], list):
        return [
            (k, t.astype(np.int64, copy=False), expand_probabilities(p))
            for k, t, p in zip(r["chunk_rows"], r["targets"], r["prob"], strict=True)
        ]
    return [(int(r["counts"].shape[0]), r["targets"], r["prob"])]


@dataclass
class RowBlock:
    """Rows in global order: their sources, actions, branch counts, action rewards, and branches in chunks."""

    row_state: np.ndarray
    row_action: np.ndarray
    counts: np.ndarray
    rewards: dict[str, np.ndarray]
    chunks: list[tuple[int, np.ndarray, np.ndarray]]  # (rows, targets, prob), whole rows each


def order_rows(pieces: list[dict[str, Any]]) -> RowBlock:
    """The rows of ``pieces`` (each in increasing global id) in global order, as one :class:`RowBlock`.

    When the pieces' rows, taken in turn, are in global order already (one worker, or one worker's levels read
    from a checkpoint), the chunks are handed on chunk by chunk, as they are (the files' arrays) or widened from
    the compact form they travelled in (an actor's). Else every row is copied once to its global position (one
    chunk).
    """
    names = next((list(r["rewards"]) for r in pieces if r["counts"].shape[0]), [])
    row_state = np.concatenate([r["row_state"] for r in pieces]) if pieces else np.zeros(0, dtype=np.int64)
    row_action = np.concatenate([r["row_action"] for r in pieces]) if pieces else np.zeros(0, dtype=np.int64)
    counts = np.concatenate([r["counts"] for r in pieces]) if pieces else np.zeros(0, dtype=np.int64)
    rewards = {k: np.concatenate([r["rewards"].get(k, np.zeros(0)) for r in pieces]) for k in names}
    chunks = [c for r in pieces for c in _chunks(r) if c[0]]
    if row_state.shape[0] > 1 and (np.diff(row_state) < 0).any():
        order = np.argsort(row_state, kind="stable")  # every piece's rows are in increasing global id already
        row_state, row_action, counts = row_state[order], row_action[order], counts[order]
        rewards = {k: v[order] for k, v in rewards.items()}
        row_pos = np.empty(order.shape[0], dtype=np.int64)
        row_pos[order] = np.arange(order.shape[0], dtype=np.int64)  # global row of each (piece, row)
        del order
        offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        chunks = [(counts.shape[0], *_place(chunks, row_pos, counts, offsets))]
    return RowBlock(row_state, row_action, counts, rewards, chunks)


def gather(
    results: list[dict[str, Any]], n_initial: int, merged: bool = False, blocks: list[RowBlock] | None = None
) -> Explored:
    """The reducer's first step: the partitions' states, and all rows in global-id order.

    ``blocks``: rows ordered already (:func:`order_rows`, the driver does it level by level while the next level
    runs); they come first, then the rows still in ``results`` (:func:`order_rows`). ``merged``: the rows are
    merged already (the actors' own rows); the reducer then takes the chunks as they are, where it would otherwise
    merge them into new arrays (rows read from a checkpoint, which a run of an older version may have written
    unmerged; merging is idempotent).
    """
    n = int(sum(r["gids"].shape[0] for r in results))
    key_dtype = results[0]["keys"].dtype
    keys = np.empty(n, dtype=key_dtype)
    loop = np.zeros(n, dtype=bool)
    deadlock = np.zeros(n, dtype=bool)
    for r in results:
        keys[r["gids"]] = r["keys"]
        loop[r["flag_gids"]] = r["loop"]
        deadlock[r["flag_gids"]] = r["deadlock"]
    parts = [*(blocks or []), order_rows(results)]
    row_state = np.concatenate([b.row_state for b in parts])
    if row_state.shape[0] > 1 and (np.diff(row_state) < 0).any():
        raise AssertionError("the row blocks are not in global order")
    counts = np.concatenate([b.counts for b in parts])
    offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    chunks = [c for b in parts for c in b.chunks]
    names = next((list(b.rewards) for b in parts if b.row_state.shape[0]), [])  # a part without rows may lack them
    return Explored(
        keys=keys,
        loop=loop,
        deadlock=deadlock,
        row_state=row_state,
        row_action=np.concatenate([b.row_action for b in parts]),
        branch_offsets=offsets,
        target_chunks=[c[1] for c in chunks],
        prob_chunks=[c[2] for c in chunks],
        chunk_rows=np.array([c[0] for c in chunks], dtype=np.int64),
        rewards={k: np.concatenate([b.rewards.get(k, np.zeros(0)) for b in parts]) for k in names},
        initial=np.arange(n_initial, dtype=np.int64),
        merged=merged,
    )


def _place(
    chunks: list[tuple[int, np.ndarray, np.ndarray]], row_pos: np.ndarray, counts: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The chunks' branches copied to their global positions.

    Row ``i`` of the chunks, taken in turn, is global row ``row_pos[i]``, of ``counts`` branches per global row at
    CSR ``offsets``.
    """
    targets = np.empty(int(offsets[-1]), dtype=np.int64)
    prob = np.empty(int(offsets[-1]), dtype=np.float64)
    r0 = 0
    for rows, t, p in chunks:
        pos = row_pos[r0 : r0 + rows]
        local = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(counts[pos], out=local[1:])
        if HAVE_NUMBA:
            place_rows(local, pos, offsets, t, p, targets, prob)
        else:  # pragma: no cover - exercised only without numba
            dest = np.repeat(offsets[pos] - local[:-1], np.diff(local)) + np.arange(int(local[-1]), dtype=np.int64)
            targets[dest], prob[dest] = t, p
        r0 += rows
    return targets, prob


def compact_rows(target: np.ndarray, prob: np.ndarray) -> tuple[np.ndarray, Any]:
    """A kept row chunk's branches as the actor holds them until the end: 4 + 2 B a branch where it may.

    Targets are global ids: int32 while they fit. Probabilities: :func:`~distmc.check.kernels.compact_probabilities`.
    """
    if target.shape[0] and int(target.max()) < 2**31:
        target = target.astype(np.int32)
    return target, compact_probabilities(prob)


def widened_rows(row: tuple[Any, ...]) -> tuple[np.ndarray, ...]:
    """A kept row chunk with int64 targets and float64 probabilities (for the files and the driver)."""
    return (*row[:3], row[3].astype(np.int64, copy=False), expand_probabilities(row[4]))
