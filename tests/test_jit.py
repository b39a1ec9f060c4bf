"""The compiled helpers of the explorers and the Ray driver against plain numpy versions of the same thing."""

from __future__ import annotations

import numpy as np
import pytest

from distmc._internal.jit import HAVE_NUMBA, first_occurrences
from distmc.explore.visited import VisitedSet

pytestmark = pytest.mark.skipif(not HAVE_NUMBA, reason="the compiled helpers need numba")


def _random_batch(rng: np.random.Generator, states: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A batch of ``states`` source states with 0-3 rows of 1-6 branches each, successor keys from a small range."""
    rows_per_state = rng.integers(0, 4, size=states)
    row_state = np.repeat(np.arange(states, dtype=np.int64), rows_per_state)
    counts = rng.integers(1, 7, size=row_state.shape[0])
    offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    keys = rng.integers(0, 60, size=int(offsets[-1])).astype(np.uint64)
    source = rng.permutation(1000)[:states].astype(np.int64)  # the states' global ids
    return row_state, offsets, keys, source


@pytest.mark.parametrize("seed", range(5))
def test_first_occurrences_against_a_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    seen = VisitedSet(np.dtype(np.uint64))
    seen.insert(rng.integers(0, 60, size=10).astype(np.uint64))  # ids from an earlier batch of the level
    row_state, offsets, keys, source = _random_batch(rng, 40)
    size0 = seen.size
    uid, _ = seen.insert(keys)
    got, widest = first_occurrences(uid, size0, offsets, row_state, source, 20)
    # the brute force: walk the branches; a new id is first met where it has not been met before
    want, met, index_max = [], set(), 0
    state_start = {}
    for r in range(row_state.shape[0]):
        state_start.setdefault(int(row_state[r]), int(offsets[r]))
    for r in range(row_state.shape[0]):
        s = int(row_state[r])
        for j in range(int(offsets[r]), int(offsets[r + 1])):
            i = int(uid[j])
            if i >= size0 and i not in met:
                met.add(i)
                want.append((int(source[s]) << 20) + j - state_start[s])
                index_max = max(index_max, j - state_start[s])
    assert got.tolist() == want
    assert len(want) == seen.size - size0 and widest == index_max


def test_visited_set_clear_keeps_numbering_from_zero() -> None:
    for dtype in (np.dtype(np.uint64), np.dtype("V16")):
        s = VisitedSet(dtype)
        keys = np.arange(2000, dtype=np.uint64).view(np.uint8).reshape(2000, 8)
        keys = np.ascontiguousarray(np.tile(keys, (1, dtype.itemsize // 8))).view(dtype).reshape(-1)
        ids, new = s.insert(keys[::-1])
        assert s.size == 2000 and ids.tolist() == list(range(2000))
        s.clear()
        assert s.size == 0 and s.lookup(keys[:3]).tolist() == [-1, -1, -1]
        ids, new = s.insert(keys[5:8])
        assert ids.tolist() == [0, 1, 2] and new.shape[0] == 3 and s.keys_by_id().tolist() == keys[5:8].tolist()


def test_key_table_clear_by_keys_empties_every_slot() -> None:
    """Clearing only the held keys' slots (in any order, past slots emptied already) leaves a fresh table."""
    from distmc._internal.jit import KeyTable

    rng = np.random.default_rng(0)
    table = KeyTable(1 << 16)
    for _ in range(3):
        keys = rng.integers(0, 1 << 62, 7000, dtype=np.uint64)
        keys = np.concatenate([keys, keys[:50]])  # repeats: ids of the first
        ids, new = table.insert(keys)
        assert table.size == new.shape[0] == np.unique(keys).shape[0] and ids[-50:].tolist() == ids[:50].tolist()
        table.clear(rng.permutation(new))
        assert table.size == 0 and (table._id == -1).all()  # every slot empty, as a new table's


@pytest.mark.parametrize("seed", range(3))
def test_first_occurrences_numpy_fallback_agrees(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from distmc.distributed import exchange as ray_driver

    rng = np.random.default_rng(seed)
    row_state, offsets, keys, source = _random_batch(rng, 50)
    uid, _ = VisitedSet(np.dtype(np.uint64)).insert(keys)
    compiled = ray_driver._first_occurrences(uid, 0, offsets, row_state, source)
    monkeypatch.setattr(ray_driver, "HAVE_NUMBA", False)
    fallback = ray_driver._first_occurrences(uid, 0, offsets, row_state, source)
    assert compiled[0].tolist() == fallback[0].tolist() and compiled[1] == fallback[1]


@pytest.mark.parametrize("writeable", [True, False])
def test_merge_rows_against_numpy(writeable: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows with duplicate targets, merged in parallel (in place, or from read-only arrays) as numpy merges them."""
    from distmc._internal.jit import merge_rows
    from distmc.assemble import reducer

    rng = np.random.default_rng(7)
    counts = rng.integers(0, 30, size=5000)
    offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    targets = rng.integers(0, 25, size=int(offsets[-1])).astype(np.int64)  # many duplicates per row
    prob = rng.random(int(offsets[-1]))
    # the reference: each row's targets in increasing order, each probability the sum in arrival order
    want_t: list[int] = []
    want_p: list[float] = []
    want_off = [0]
    for r in range(counts.shape[0]):
        sums: dict[int, float] = {}
        for j in range(int(offsets[r]), int(offsets[r + 1])):
            sums[int(targets[j])] = sums.get(int(targets[j]), 0.0) + float(prob[j])
        want_t += sorted(sums)
        want_p += [sums[k] for k in sorted(sums)]
        want_off.append(len(want_t))
    t, p = targets.copy(), prob.copy()
    if not writeable:
        t.flags.writeable = p.flags.writeable = False
    got = merge_rows(offsets, t, p)
    assert got[0].tolist() == want_off and got[1].tolist() == want_t
    assert got[2].tolist() == want_p  # the same sums in the same order: the same bits
    assert writeable == (got[1].base is t or got[1] is t)  # in place only when it may write
    monkeypatch.setattr(reducer, "HAVE_NUMBA", False)  # the numpy version (reduceat may sum in another order)
    np_off, np_t, np_p = reducer.merge_csr_rows(offsets, targets, prob)
    assert np.array_equal(np_off, got[0]) and np.array_equal(np_t, got[1])
    np.testing.assert_allclose(np_p, got[2], rtol=1e-14)


def test_gather_index_equals_numpy() -> None:
    from distmc._internal.jit import gather_index

    rng = np.random.default_rng(3)
    counts = rng.integers(0, 7, size=500)
    new_off = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=new_off[1:])
    starts = rng.integers(0, 10_000, size=counts.shape[0]).astype(np.int64)
    expected = np.repeat(starts - new_off[:-1], counts) + np.arange(int(new_off[-1]), dtype=np.int64)
    assert np.array_equal(gather_index(starts, new_off), expected)
    assert gather_index(starts[:0], new_off[:1]).shape == (0,)
