"""Bit-packing of states into fixed-width keys, as Storm does, for hashing and the visited set.

Variable ``i`` takes ``bits_i = ceil(log2(hi_i - lo_i + 1))`` bits (at least one) and is stored as
``x_i - lo_i``. Variables are laid into 64-bit words greedily without straddling a word boundary. A model whose
packed state fits one word (the common case) gets ``uint64`` keys ``[N]``; wider models get a fixed-size byte
string per state (numpy ``void`` of ``8 * words`` bytes) ``[N]``, which sorts and compares as a unit.
"""

from __future__ import annotations

import numpy as np

from distmc.errors import UnsupportedError

__all__ = ["StateCodec"]


class StateCodec:
    """Packs ``[N, V]`` int64 states into keys ``[N]`` and back."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray) -> None:
        self.lo = np.asarray(lo, dtype=np.int64)
        self.hi = np.asarray(hi, dtype=np.int64)
        span = (self.hi - self.lo).astype(np.uint64)
        self.bits = np.array([max(1, int(s).bit_length()) for s in span.tolist()], dtype=np.int64)
        if (self.bits > 63).any():
            wide = int(np.argmax(self.bits))
            raise UnsupportedError(
                f"variable {wide} (in the state layout's order) has a range of more than 2^63 values: "
                "give it tighter bounds"
            )
        self.word = np.zeros(len(self.bits), dtype=np.int64)
        self.shift = np.zeros(len(self.bits), dtype=np.int64)
        w, used = 0, 0
        for i, b in enumerate(self.bits.tolist()):
            if used + b > 64:
                w, used = w + 1, 0
            self.word[i], self.shift[i] = w, used
            used += b
        self.words = int(w + 1)
        self.mask = ((np.uint64(1) << self.bits.astype(np.uint64)) - np.uint64(1)).astype(np.uint64)
        self.dtype = np.dtype(np.uint64) if self.words == 1 else np.dtype((np.void, 8 * self.words))

    @property
    def key_bytes(self) -> int:
        """Size of one packed key in bytes."""
        return 8 * self.words

    def pack(self, states: np.ndarray) -> np.ndarray:
        """``[N, V]`` int64 -> keys ``[N]`` (uint64, or void for multi-word states)."""
        n = states.shape[0]
        out = np.zeros((n, self.words), dtype=np.uint64)
        off = (states - self.lo).astype(np.uint64)
        for i in range(states.shape[1]):  # loop over variables, not states
            out[:, self.word[i]] |= off[:, i] << np.uint64(self.shift[i])
        # Multi-word keys: big-endian words, so that byte order equals numeric order of (word0, word1, ...).
        return self.from_words(out)

    def to_words(self, keys: np.ndarray) -> np.ndarray:
        """Keys ``[N]`` -> their 64-bit words ``[N, words]`` uint64 (native byte order)."""
        n = keys.shape[0]
        if self.words == 1:
            return np.ascontiguousarray(keys, dtype=np.uint64).reshape(n, 1)
        return np.ascontiguousarray(keys).view(">u8").reshape(n, self.words).astype(np.uint64)

    def from_words(self, words: np.ndarray) -> np.ndarray:
        """Words ``[N, words]`` uint64 -> keys ``[N]`` (the inverse of :meth:`to_words`)."""
        n = words.shape[0]
        if self.words == 1:
            return np.ascontiguousarray(words[:, 0])
        return np.ascontiguousarray(words.astype(">u8")).view(self.dtype).reshape(n)

    def unpack(self, keys: np.ndarray) -> np.ndarray:
        """Keys ``[N]`` -> ``[N, V]`` int64."""
        n = keys.shape[0]
        words = self.to_words(keys)
        out = np.empty((n, len(self.bits)), dtype=np.int64)
        for i in range(len(self.bits)):
            out[:, i] = ((words[:, self.word[i]] >> np.uint64(self.shift[i])) & self.mask[i]).astype(np.int64)
        return out + self.lo
