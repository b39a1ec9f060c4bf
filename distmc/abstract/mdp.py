"""The abstract MDP of a box abstraction, explored by distmc's explorer and checked with Storm.

**States.** Keys are uint64 with a 2-bit tag: ``FAIL`` (the failure sink); *cells* of a lattice of boxes of
widths ``env.cell`` (each clipped to the safe box); *initial boxes* (a registry); and *image states*: the
interval image of a box under one fault outcome, encoded in its key as the index ranges of the lattice cells it
overlaps plus two flags (it overlaps the failure region, it lies inside it). Every key but an initial box's says
what its state is, so any process can expand it: the Ray driver explores this MDP like any model.

**Transitions.** A box state (initial box or cell) is split by the network's action
(:mod:`distmc.abstract.split`); every (piece, action the piece may choose) is one nondeterministic row, a
distribution over the image states of the piece under each fault outcome (:mod:`distmc.abstract.faults`). An
image state has one Dirac row per cell it overlaps (clipped to the safe box), plus one to ``FAIL`` if it
overlaps the failure region (only that one if it lies inside it). ``FAIL`` is absorbing. One decision step is
two MDP steps, so failure within ``k`` decisions is reaching, within ``2k - 1`` steps, an image state labelled
``possibly_fail`` (it overlaps the failure region) or ``fail`` (it lies inside it).

**Why the bounds are sound.** Take a concrete run from ``x0`` in an initial box ``B``. At every decision the
concrete state lies in the current box state; the network's action at it is in the mask of the piece holding it
(bounds are sound); the fault outcome has the same probability in both; the concrete successor lies in the
piece's interval image (outward-rounded interval arithmetic), hence in ``FAIL`` (if it failed, also after the
first physical step of a sticky step) or in one of the cells the image overlaps. So a scheduler that resolves
each nondeterministic choice as the concrete run does (history-dependent schedulers are allowed for bounded
reachability) yields a probability measure on abstract paths that matches the concrete one, outcome by outcome,
and the concrete run fails only if its abstract path reaches a ``possibly_fail`` image state: P(fail) <= Pmax.
Conversely an abstract path reaching a ``fail`` image state corresponds to a concrete failure: Pmin <= P(fail).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distmc.abstract.envs import ContinuousEnv, _down, _up
from distmc.abstract.faults import FaultModel
from distmc.abstract.split import Splitter
from distmc.errors import ResourceLimitError
from distmc.explore.contracts import Rows
from distmc.explore.expander import gather_rows
from distmc.explore.local import explore_local
from distmc.explore.partition import Explored
from distmc.model.kernel import NO_ACTION

__all__ = ["AbstractResult", "BoxExpander", "KeyCodec", "explore_bounded"]

TAG_SHIFT = np.uint64(62)
TAG_SPECIAL, TAG_CELL, TAG_INIT, TAG_IMAGE = (np.uint64(t) for t in range(4))
FAIL = np.uint64(0)
PAYLOAD = (np.uint64(1) << TAG_SHIFT) - np.uint64(1)
#: Most lattice cells one image may overlap.
MAX_CELLS_PER_IMAGE = 100_000


@dataclass
class AbstractResult:
    """Bounds per initial box and the size of the abstract MDP."""

    upper: np.ndarray
    lower: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)


class KeyCodec:
    """The keys of the abstract MDP (:class:`~distmc.explore.contracts.KeyCodec`): one uint64 word each."""

    dtype = np.dtype(np.uint64)
    words = 1
    key_bytes = 8

    def to_words(self, keys: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(keys, dtype=np.uint64).reshape(keys.shape[0], 1)

    def from_words(self, words: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(words[:, 0], dtype=np.uint64)


class BoxExpander:
    """The box abstraction as a successor generator (:class:`~distmc.explore.contracts.SuccessorGenerator`)."""

    def __init__(self, env: ContinuousEnv, splitter: Splitter, faults: FaultModel) -> None:
        self.env, self.splitter, self.faults = env, splitter, faults
        a = env.arrays()
        self.safe_lo, self.safe_hi, self.cell = a["safe_lo"], a["safe_hi"], a["cell"]
        self.actions = np.asarray(env.actions, dtype=np.float64)
        self.d = env.dim
        self.bits = 62 // self.d
        self.half = 1 << (self.bits - 1)
        self.outcomes = faults.outcomes()
        self.init_lo = np.zeros((0, self.d))
        self.init_hi = np.zeros((0, self.d))
        self.ibits = 60 // self.d  # image keys: per dimension, first cell index and span; then two flags
        self.sbits = self.ibits // 3
        self.obits = self.ibits - self.sbits
        self.image_keys: set[int] = set()  # seen here (statistics only)
        self._memo: dict[int, np.ndarray] = {}  # box-state key -> [rows, outcomes] image keys
        self.cutoff = False  # expand everything as a self-loop (the last BFS level)
        self.codec = KeyCodec()
        self.stats = {"box_states": 0, "image_states": 0, "split_s": 0.0}

    # -- keys --------------------------------------------------------------------------------------------------

    def add_initial(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Register initial boxes ``[I, d]``; returns their keys."""
        start = self.init_lo.shape[0]
        self.init_lo = np.concatenate([self.init_lo, lo])
        self.init_hi = np.concatenate([self.init_hi, hi])
        return (TAG_INIT << TAG_SHIFT) | np.arange(start, start + lo.shape[0], dtype=np.uint64)

    def _cell_keys(self, idx: np.ndarray) -> np.ndarray:
        """Keys of lattice cells with integer coordinates ``[N, d]``."""
        if (np.abs(idx) >= self.half - 1).any():
            raise ResourceLimitError(f"an image left the lattice's range of +-{self.half} cells per dimension")
        key = np.zeros(idx.shape[0], dtype=np.uint64)
        for j in range(self.d):
            key |= (idx[:, j] + self.half).astype(np.uint64) << np.uint64(j * self.bits)
        return key | (TAG_CELL << TAG_SHIFT)

    def cell_boxes(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Boxes ``[N, d]`` of cell keys (the closed lattice cell, widened by an ulp, clipped to the safe box)."""
        mask = np.uint64((1 << self.bits) - 1)
        idx = np.stack(
            [((keys >> np.uint64(j * self.bits)) & mask).astype(np.int64) - self.half for j in range(self.d)], axis=1
        )
        lo, hi = _down(idx * self.cell), _up((idx + 1) * self.cell)
        return np.maximum(lo, self.safe_lo), np.minimum(hi, self.safe_hi)

    def boxes(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Boxes of box-state keys (cells and initial boxes)."""
        tag = keys >> TAG_SHIFT
        lo, hi = np.zeros((keys.shape[0], self.d)), np.zeros((keys.shape[0], self.d))
        cells = tag == TAG_CELL
        lo[cells], hi[cells] = self.cell_boxes(keys[cells])
        ids = (keys[~cells] & PAYLOAD).astype(np.int64)
        lo[~cells], hi[~cells] = self.init_lo[ids], self.init_hi[ids]
        return lo, hi

    def _image_keys(self, lo: np.ndarray, hi: np.ndarray, maybe: np.ndarray, surely: np.ndarray) -> np.ndarray:
        """Keys of the image states of boxes ``[N, d]`` (``maybe``/``surely``: failed at an earlier physical step)."""
        m, s = self.env.box_flags(lo, hi)
        maybe, surely = maybe | m, surely | s
        clo, chi = np.maximum(lo, self.safe_lo), np.minimum(hi, self.safe_hi)
        span = np.where(surely[:, None], 0.0, np.maximum(np.abs(clo), np.abs(chi)) / self.cell)
        if not (span < self.half - 1).all():  # also catches inf and nan
            raise ResourceLimitError(
                f"an image box reached {np.nanmax(np.abs(np.concatenate([clo, chi])))}: beyond "
                f"the lattice's +-{self.half} cells per dimension; use a shorter horizon"
            )
        ilo = np.floor(clo / self.cell - 1e-9).astype(np.int64)
        ihi = np.floor(chi / self.cell + 1e-9).astype(np.int64)
        ilo[surely], ihi[surely] = 0, -1
        span = ihi - ilo + 1  # 0 for a surely failed box
        off = ilo + (1 << (self.obits - 1))
        if (span >= 1 << self.sbits).any() or (off < 0).any() or (off >= 1 << self.obits).any():
            raise ResourceLimitError(
                f"an image spans {int(span.max())} lattice cells in one dimension or lies beyond "
                f"+-{1 << (self.obits - 1)} cells (the most an image key holds); use a shorter "
                "horizon"
            )
        key = np.zeros(lo.shape[0], dtype=np.uint64)
        for j in range(self.d):
            key |= (off[:, j].astype(np.uint64) | (span[:, j].astype(np.uint64) << np.uint64(self.obits))) << np.uint64(
                j * self.ibits
            )
        key |= maybe.astype(np.uint64) << np.uint64(60)
        key |= surely.astype(np.uint64) << np.uint64(61)
        key |= TAG_IMAGE << TAG_SHIFT
        self.image_keys.update(np.unique(key).tolist())
        return key

    def _decode_images(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(first cell index ``[N, d]``, span ``[N, d]``, overlaps failure ``[N]``, inside it ``[N]``)."""
        omask, smask = np.uint64((1 << self.obits) - 1), np.uint64((1 << self.sbits) - 1)
        fields = [keys >> np.uint64(j * self.ibits) for j in range(self.d)]
        ilo = np.stack([(f & omask).astype(np.int64) - (1 << (self.obits - 1)) for f in fields], axis=1)
        span = np.stack([((f >> np.uint64(self.obits)) & smask).astype(np.int64) for f in fields], axis=1)
        one = np.uint64(1)
        return ilo, span, ((keys >> np.uint64(60)) & one).astype(bool), ((keys >> np.uint64(61)) & one).astype(bool)

    def image_flags(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(overlaps the failure region, lies inside it) of image-state keys."""
        _, _, maybe, surely = self._decode_images(keys)
        return maybe, surely

    # -- expansion ---------------------------------------------------------------------------------------------

    def _expand_boxes(self, keys: np.ndarray) -> list[np.ndarray]:
        """``[rows, outcomes]`` image keys of each box-state key (memoised)."""
        new = [k for k in keys.tolist() if k not in self._memo]
        if new:
            t = time.perf_counter()
            nk = np.array(new, dtype=np.uint64)
            lo, hi = self.boxes(nk)
            pieces = self.splitter.split(lo, hi)
            self.stats["split_s"] += time.perf_counter() - t
            mask = pieces.mask.copy()
            mask[~mask.any(axis=1)] = True
            pr, pa = np.nonzero(mask)
            cols = []
            for _, executed in self.outcomes:
                blo, bhi = pieces.lo[pr], pieces.hi[pr]
                maybe = np.zeros(pr.shape[0], dtype=bool)
                surely = np.zeros(pr.shape[0], dtype=bool)
                for i, ex in enumerate(executed):
                    if i:  # failure after an earlier physical step of a sticky step
                        m, s = self.env.box_flags(blo, bhi)
                        maybe |= m
                        surely |= s
                    u = self.actions[pa] if ex else np.full(pr.shape[0], self.env.noop)
                    blo, bhi = self.env.step_box(blo, bhi, u)
                cols.append(self._image_keys(blo, bhi, maybe, surely))
            targets = np.stack(cols, axis=1) if cols else np.zeros((pr.shape[0], 0), dtype=np.uint64)
            row_owner = pieces.owner[pr]
            bounds = np.searchsorted(row_owner, np.arange(len(new) + 1))
            for i, k in enumerate(new):
                self._memo[k] = targets[bounds[i] : bounds[i + 1]]
            self.stats["box_states"] += len(new)
        return [self._memo[k] for k in keys.tolist()]

    def _expand_images(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Dirac rows of image states: (row source index ``[R]``, target key ``[R]``)."""
        ilo, span, maybe, _ = self._decode_images(keys)
        count = span.prod(axis=1)
        if (count > MAX_CELLS_PER_IMAGE).any():
            raise ResourceLimitError(
                f"an image overlaps {int(count.max())} lattice cells (more than "
                f"{MAX_CELLS_PER_IMAGE}); use a shorter horizon or a finer --max-splits"
            )
        src = np.repeat(np.arange(keys.shape[0]), count)
        offset = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        idx = np.empty((src.shape[0], self.d), dtype=np.int64)
        rem = offset
        for j in range(self.d - 1, -1, -1):
            idx[:, j] = ilo[src, j] + rem % span[src, j]
            rem = rem // span[src, j]
        cell_keys = self._cell_keys(idx)
        fail_src = np.flatnonzero(maybe)
        src = np.concatenate([src, fail_src])
        tgt = np.concatenate([cell_keys, np.full(fail_src.shape[0], FAIL, dtype=np.uint64)])
        order = np.argsort(src, kind="stable")
        return src[order], tgt[order]

    def expand(self, keys: np.ndarray) -> Rows:
        """Rows for the states with keys ``[B]`` (see the module docstring)."""
        b = keys.shape[0]
        tag = keys >> TAG_SHIFT
        loop = np.zeros(b, dtype=bool) | self.cutoff | (tag == TAG_SPECIAL)
        boxes = np.flatnonzero(~loop & ((tag == TAG_CELL) | (tag == TAG_INIT)))
        images = np.flatnonzero(~loop & (tag == TAG_IMAGE))
        srcs, tgts, probs, counts = [], [], [], []
        if boxes.size:
            probs_o = np.array([p for p, _ in self.outcomes])
            ts = self._expand_boxes(keys[boxes])  # per box: [choices, outcomes] target keys
            n = np.array([t.shape[0] for t in ts], dtype=np.int64)
            srcs.append(np.repeat(boxes, n))
            tgts.append(np.concatenate([t.reshape(-1) for t in ts]))
            probs.append(np.tile(probs_o, int(n.sum())))
            counts.append(np.full(int(n.sum()), probs_o.shape[0], dtype=np.int64))
        if images.size:
            s, t = self._expand_images(keys[images])
            srcs.append(images[s])
            tgts.append(t)
            probs.append(np.ones(t.shape[0]))
            counts.append(np.ones(t.shape[0], dtype=np.int64))
        lp = np.flatnonzero(loop)
        srcs.append(lp)
        tgts.append(keys[lp])
        probs.append(np.ones(lp.shape[0]))
        counts.append(np.ones(lp.shape[0], dtype=np.int64))
        row_state = np.concatenate(srcs)
        unsorted = np.zeros(row_state.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.concatenate(counts), out=unsorted[1:])
        order = np.argsort(row_state, kind="stable")  # rows grouped by source state, as Rows requires
        gather, offsets = gather_rows(order, unsorted)
        return Rows(
            row_state[order],
            np.full(row_state.shape[0], NO_ACTION, dtype=np.int64),
            offsets,
            np.concatenate(tgts)[gather],
            np.concatenate(probs)[gather],
            {},
            loop,
            np.zeros(b, dtype=bool),
            0,
        )

    def policy_counters(self) -> tuple[int, float]:
        """No policy network runs here (the splitter bounds the network's actions over boxes)."""
        return 0, 0.0

    def labels(self, keys: np.ndarray) -> dict[str, np.ndarray]:
        """``fail`` and ``possibly_fail`` of explored keys."""
        fail = keys == FAIL
        maybe = fail.copy()
        img = np.flatnonzero((keys >> TAG_SHIFT) == TAG_IMAGE)
        m, s = self.image_flags(keys[img])
        maybe[img] |= m
        fail[img] |= s
        return {"fail": fail, "possibly_fail": maybe}


def explore_bounded(
    expander: BoxExpander, initial_keys: np.ndarray, levels: int, batch: int = 20_000
) -> tuple[Explored, np.ndarray]:
    """BFS to depth ``levels`` (states at that depth get a self-loop); returns (Explored, ids of the initial keys).

    The initial keys are distinct (:meth:`BoxExpander.add_initial`), so their ids are ``0..I-1`` in order.
    """

    def cut(depth: int) -> None:
        expander.cutoff = depth >= levels

    try:
        parts = explore_local(expander, initial_keys, batch_states=batch, before_level=cut)
    finally:
        expander.cutoff = False
    return parts, parts.initial
