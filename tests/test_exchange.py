"""The Ray workers' compact exchange: key batches and answers narrowed to the bytes they need, read back exactly."""

from __future__ import annotations

import numpy as np
import pytest

from distmc.distributed.exchange import (
    OCC_SHIFT,
    _from_arrow,
    _to_arrow,
    narrow,
    pack_ids,
    pack_increasing,
    unpack_ids,
    unpack_increasing,
    widen,
)
from distmc.model.packing import StateCodec


@pytest.mark.parametrize("values", [[], [0], [5, 5, 5], [3, 300, 70_000], [0, 2**63 + 5], [2**64 - 1, 0]])
def test_narrow_round_trip(values: list[int]) -> None:
    v = np.array(values, dtype=np.uint64)
    base, raw = narrow(v)
    assert raw.dtype == np.uint8 and raw.shape[0] == v.shape[0]
    assert np.array_equal(widen(base, raw), v)
    if v.shape[0]:
        assert raw.shape[1] == max(1, (int(v.max() - v.min()).bit_length() + 7) // 8)


@pytest.mark.parametrize("hi", [[10] * 6 + [1], [2**40, 2**40, 7]])  # one word (25 bits), three words
def test_key_batch_round_trip(hi: list[int]) -> None:
    rng = np.random.default_rng(1)
    codec = StateCodec(np.zeros(len(hi), dtype=np.int64), np.array(hi, dtype=np.int64))
    states = np.stack([rng.integers(0, h + 1, 5000) for h in hi], axis=1)
    keys = codec.pack(states)
    src = np.sort(rng.integers(10**6, 10**6 + 3000, 5000))
    occ = (src << OCC_SHIFT) + rng.integers(0, 200, 5000)
    occ = np.unique(occ)[: len(keys)]
    keys = keys[: occ.shape[0]]
    batch = _to_arrow(keys, occ, codec)
    k2, o2 = _from_arrow(batch, codec)
    assert np.array_equal(np.asarray(k2).view(np.uint8), np.asarray(keys).view(np.uint8))
    assert np.array_equal(o2, occ) and o2.dtype == np.int64
    if codec.words == 1:  # a 25-bit key, one-byte steps between sources, one-byte branches
        assert batch.nbytes <= 6 * keys.shape[0] + 64
    empty = _to_arrow(keys[:0], occ[:0], codec)
    k0, o0 = _from_arrow(empty, codec)
    assert k0.shape == (0,) and o0.shape == (0,)


def test_answers_round_trip() -> None:
    ids = np.array([1_000_000, 1_000_007, 1_065_000], dtype=np.int64)
    packed = pack_ids(ids)
    assert packed[1].nbytes == 3 * 2  # the differences from the smallest fit two bytes
    assert np.array_equal(unpack_ids(packed), ids) and unpack_ids(packed).dtype == np.int64


@pytest.mark.parametrize("values", [[], [7], [3, 3, 4, 900, 2**40]])
def test_increasing_round_trip(values: list[int]) -> None:
    v = np.array(values, dtype=np.int64)
    packed = pack_increasing(v)
    got = unpack_increasing(packed)
    assert np.array_equal(got, v) and got.dtype == np.int64
