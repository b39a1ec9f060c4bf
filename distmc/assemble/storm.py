"""Hand-off of an :class:`~distmc.assemble.reducer.InducedModel` to Storm, and export.

Two ways in: a UMB archive written straight from the numpy arrays (a tar of little-endian arrays plus
``index.json``, read by ``stormpy.build_model_from_umb``), or ``SparseMatrixBuilder.add_next_values``.
``benchmarks/handoff.py`` measures both; :func:`to_storm` uses the faster (see ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import stormpy
from stormpy.developer import storage as sst

from distmc._internal.atomic import atomic_path, storage_error
from distmc._internal.stderr import storm_quiet
from distmc.assemble.reducer import InducedModel
from distmc.errors import UsageError

__all__ = ["export", "to_storm", "to_storm_builder", "to_storm_umb", "write_umb"]


def _bits(mask: np.ndarray) -> bytes:
    """Bit-pack booleans LSB-first into little-endian uint64 words (UMB's boolean layout)."""
    n = mask.shape[0]
    padded = np.zeros(((n + 63) // 64) * 64, dtype=bool)
    padded[:n] = mask
    return np.packbits(padded, bitorder="little").tobytes()


def _safe(name: str) -> str:
    # UMB annotation ids are path components; the alias keeps the real label name.
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in name) or "_"


class _Reader:
    """A read-only file over an array's bytes, so that ``tarfile`` streams it without a copy of the array."""

    def __init__(self, data: np.ndarray | bytes | list[np.ndarray]) -> None:
        parts = data if isinstance(data, list) else [data]
        self._views = [
            np.ascontiguousarray(d).data.cast("B") if isinstance(d, np.ndarray) else memoryview(d) for d in parts
        ]
        self.size = sum(v.nbytes for v in self._views)
        self._i = 0
        self._at = 0

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.size
        out = []
        while n > 0 and self._i < len(self._views):
            v = self._views[self._i]
            take = min(n, v.nbytes - self._at)
            out.append(v[self._at : self._at + take].tobytes())
            self._at += take
            n -= take
            if self._at == v.nbytes:
                self._i, self._at = self._i + 1, 0
        return b"".join(out)


def _le(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` as little-endian ``dtype`` (``"<u8"``, ``"<f8"``): a view when the bits already match, else a copy."""
    want = np.dtype(dtype)
    if a.dtype == want or (
        a.dtype.kind == "i"
        and want.kind == "u"
        and a.dtype.itemsize == want.itemsize
        and a.dtype.byteorder in ("=", "<")
        and (a.shape[0] == 0 or a.min() >= 0)
    ):
        return a.view(want)
    return a.astype(want)


def write_umb(m: InducedModel, path: str | Path) -> None:
    """Write ``m`` as a UMB archive Storm can read (the large arrays are streamed, not copied)."""
    files: dict[str, np.ndarray | bytes | list[np.ndarray]] = {}
    mdp = m.kind == "mdp"
    ts = {
        "#branch-actions": 0,
        "#branches": m.n_transitions,
        "#choice-actions": 0,
        "#choices": m.n_rows,
        "#initial-states": int(m.initial.shape[0]),
        "#observations": 0,
        "#players": 1 if mdp else 0,
        "#states": m.n_states,
        "branch-probability-type": {"size": 64, "type": "double"},
        "time": "discrete",
    }
    init = np.zeros(m.n_states, dtype=bool)
    init[m.initial] = True
    files["state-is-initial.bin"] = _bits(init)
    if mdp:
        files["state-to-choices.bin"] = _le(m.row_groups, "<u8")
    files["choice-to-branches.bin"] = _le(m.row_offsets, "<u8")
    files["branch-to-target.bin"] = [_le(t, "<u8") for t in m.target_chunks]
    files["branch-to-probability.bin"] = [_le(p, "<f8") for p in m.prob_chunks]
    aps: dict[str, Any] = {}
    used: set[str] = set()
    for name, mask in m.labels.items():
        if name == "init":  # Storm derives "init" from state-is-initial
            continue
        key = _safe(name)
        while key in used:
            key += "_"
        used.add(key)
        aps[key] = {"alias": name, "applies-to": ["states"], "type": {"size": 1, "type": "bool"}}
        files[f"annotations/aps/{key}/states/values.bin"] = _bits(mask)
    rewards: dict[str, Any] = {}
    for name, (state, action) in m.rewards.items():
        key = _safe(name or "default")
        applies = []
        if state is not None:
            applies.append("states")
            files[f"annotations/rewards/{key}/states/values.bin"] = state.astype("<f8").tobytes()
        if action is not None:
            applies.append("choices")
            files[f"annotations/rewards/{key}/choices/values.bin"] = action.astype("<f8").tobytes()
        rewards[key] = {"alias": name, "applies-to": applies, "type": {"size": 64, "type": "double"}}
    index = {
        "annotations": {"aps": aps, **({"rewards": rewards} if rewards else {})},
        "file-data": {"tool": "distmc"},
        "format-revision": 0,
        "format-version": 1,
        "transition-system": ts,
    }
    with tarfile.open(path, "w") as tar:
        for name, data in [("index.json", json.dumps(index).encode()), *files.items()]:
            reader = _Reader(data)
            info = tarfile.TarInfo(name)
            info.size = reader.size
            tar.addfile(info, reader)


def to_storm_umb(m: InducedModel, release: bool = False, exact: bool = False) -> Any:
    """Storm model via a temporary UMB archive; with ``release``, ``m``'s transitions are dropped once written.

    ``exact``: a model over Storm's rationals, each probability and reward the rational its float is.
    """
    fd, tmp = tempfile.mkstemp(suffix=".umb")
    os.close(fd)
    try:
        try:
            write_umb(m, tmp)
        except OSError as exc:
            raise storage_error(
                tmp, exc, "the model goes to Storm through this temporary file: point TMPDIR at a directory with room"
            ) from exc
        if release:  # 16 B per transition less while Storm reads the archive and builds its own matrix
            m.target_chunks, m.prob_chunks = [], []
        options = sst.UmbImportOptions()
        options.build_state_valuations = False
        options.build_choice_labeling = False
        if exact:
            options.value_type = sst.UmbImportValueType.RATIONAL
        with storm_quiet():  # the rational import warns, on descriptor 1, that doubles become rationals
            return stormpy.build_model_from_umb(tmp, options=options)
    finally:
        os.unlink(tmp)


def to_storm_builder(m: InducedModel) -> Any:
    """Storm model via ``SparseMatrixBuilder.add_next_values`` and ``SparseModelComponents``."""
    mdp = m.kind == "mdp"
    builder = sst.SparseMatrixBuilder(
        rows=m.n_rows,
        columns=m.n_states,
        entries=m.n_transitions,
        force_dimensions=True,
        has_custom_row_grouping=mdp,
        row_groups=m.n_states if mdp else 0,
    )
    rows = np.repeat(np.arange(m.n_rows, dtype=np.int64), np.diff(m.row_offsets))
    builder.add_next_values(rows, m.targets, m.prob, m.row_groups[:-1] if mdp else [])
    matrix = builder.build(m.n_rows, m.n_states, m.n_states if mdp else 0)
    labeling = sst.StateLabeling(m.n_states)
    for name, mask in m.labels.items():
        labeling.add_label(name)
        labeling.set_states(name, sst.BitVector(m.n_states, np.flatnonzero(mask).tolist()))
    reward_models = {}
    for name, (state, action) in m.rewards.items():
        reward_models[name] = sst.SparseRewardModel(
            optional_state_reward_vector=None if state is None else state.tolist(),
            optional_state_action_reward_vector=None if action is None else action.tolist(),
        )
    components = sst.SparseModelComponents(
        transition_matrix=matrix, state_labeling=labeling, reward_models=reward_models
    )
    return sst.SparseMdp(components) if mdp else sst.SparseDtmc(components)


def to_storm(m: InducedModel, release: bool = False, exact: bool = False) -> Any:
    """Hand ``m`` to Storm by the measured-faster path (UMB).

    With ``release`` the transitions of ``m`` are freed as soon as they are written, before Storm takes the model
    in (``m`` can then no longer be exported or handed over again): the peak is the larger of the two copies, not
    their sum. ``exact``: over rationals (:func:`to_storm_umb`).
    """
    t = time.perf_counter()
    out = to_storm_umb(m, release, exact)
    m.stats["handoff_s"] = time.perf_counter() - t
    return out


def export(m: InducedModel, path: str | Path) -> None:
    """Write ``m`` as ``.umb`` or ``.drn`` (:mod:`distmc.assemble.drn`: exact numbers, unlike Storm's exporter)."""
    from distmc.assemble.drn import write_drn

    p = Path(path)
    if p.suffix == ".umb":
        with atomic_path(p) as tmp:
            write_umb(m, tmp)
    elif p.suffix == ".drn":
        write_drn(m, p)
    else:
        raise UsageError(f"cannot export to '{p.suffix}': use .umb or .drn")
