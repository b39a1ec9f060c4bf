"""The reducer: explored partitions -> one induced model (CSR rows, merged duplicates, labels, rewards).

Duplicate targets within a row are merged (their probabilities added), which is what makes the transition
count comparable with Storm's. State labels are the PRISM labels, ``init``, ``deadlock`` and every atom of the
property; rewards are the property's reward structure (state rewards, and policy-weighted action rewards).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from distmc._internal.jit import HAVE_NUMBA, merge_rows
from distmc.explore.partition import Explored
from distmc.model.expr import CompiledExpr
from distmc.model.packing import StateCodec
from distmc.model.program import Model

__all__ = ["InducedModel", "absorbing", "assemble", "label_states", "merge_csr_rows"]

#: States decoded at a time when labelling (bounds the memory of the decoded block).
LABEL_CHUNK = 1 << 18


@dataclass
class InducedModel:
    """A sparse DTMC or MDP ready for Storm.

    Attributes:
        kind: ``"dtmc"`` or ``"mdp"``.
        row_groups: ``[N + 1]`` int64, rows of state ``s`` are ``row_groups[s]:row_groups[s+1]``.
        row_offsets: ``[R + 1]`` int64, branches of row ``r``.
        target_chunks: the ``[T]`` int64 targets (sorted within each row, no duplicates), in chunks of whole rows
            (``targets`` concatenates them, at the cost of a copy).
        prob_chunks: the ``[T]`` float64 probabilities, chunked like ``target_chunks``.
        row_action: ``[R]`` int64 model action id or -1.
        initial: ``[I]`` int64.
        labels: name -> ``[N]`` bool.
        rewards: name -> (state rewards ``[N]`` or None, action rewards ``[R]`` or None).
        keys: ``[N]`` packed keys (state valuations, decoded on demand).
    """

    kind: str
    row_groups: np.ndarray
    row_offsets: np.ndarray
    target_chunks: list[np.ndarray]
    prob_chunks: list[np.ndarray]
    row_action: np.ndarray
    initial: np.ndarray
    labels: dict[str, np.ndarray]
    rewards: dict[str, tuple[np.ndarray | None, np.ndarray | None]]
    keys: np.ndarray
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def n_states(self) -> int:
        return int(self.row_groups.shape[0] - 1)

    @property
    def n_rows(self) -> int:
        return int(self.row_offsets.shape[0] - 1)

    @property
    def n_transitions(self) -> int:
        return int(self.row_offsets[-1])

    @property
    def targets(self) -> np.ndarray:
        """``[T]`` int64 targets in one array (a copy)."""
        return np.concatenate(self.target_chunks) if self.target_chunks else np.zeros(0, dtype=np.int64)

    @property
    def prob(self) -> np.ndarray:
        """``[T]`` float64 probabilities in one array (a copy)."""
        return np.concatenate(self.prob_chunks) if self.prob_chunks else np.zeros(0)


def merge_csr_rows(
    row_offsets: np.ndarray, targets: np.ndarray, prob: np.ndarray, lut: np.ndarray | None = None
) -> tuple[np.ndarray, ...]:
    """Sort each row's branches by target and add up duplicates (in arrival order); in place when it may.

    The compiled :func:`~distmc._internal.jit.merge_rows`, or a numpy version without numba. Returns the merged
    rows' offsets (from 0), targets and probabilities. ``lut``: the targets are ``lut[targets]``.
    """
    if HAVE_NUMBA:
        return merge_rows(row_offsets, targets, prob, lut)
    if lut is not None:
        targets = lut[targets]
    n = int(targets.max(initial=-1)) + 1  # the numpy version sorts (row, target) pairs as row * n + target
    r = np.repeat(np.arange(row_offsets.shape[0] - 1, dtype=np.int64), np.diff(row_offsets))
    composite = r * np.int64(n) + targets
    order = np.argsort(composite, kind="stable")
    composite = composite[order]
    start = np.ones(composite.shape[0], dtype=bool)
    start[1:] = composite[1:] != composite[:-1]
    idx = np.flatnonzero(start)
    merged_prob = np.add.reduceat(prob[order], idx) if idx.size else prob[:0]
    merged_targets = targets[order][idx]
    merged_rows = r[order][idx]
    counts = np.bincount(merged_rows, minlength=row_offsets.shape[0] - 1)
    offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, merged_targets, merged_prob


def _merge_chunks(parts: Explored, n: int) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """:func:`merge_csr_rows` chunk by chunk (rows never cross a chunk); returns global offsets and merged chunks."""
    counts = np.empty(parts.branch_offsets.shape[0] - 1, dtype=np.int64)
    t_chunks, p_chunks = [], []
    r0 = 0
    for rows, t, p in zip(parts.chunk_rows.tolist(), parts.target_chunks, parts.prob_chunks, strict=True):
        local = parts.branch_offsets[r0 : r0 + rows + 1] - parts.branch_offsets[r0]
        off, mt, mp = merge_csr_rows(local, t, p)
        counts[r0 : r0 + rows] = np.diff(off)
        t_chunks.append(mt)
        p_chunks.append(mp)
        r0 += rows
    offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, t_chunks, p_chunks


def label_states(
    keys: np.ndarray,
    model: Model,
    codec: StateCodec,
    atoms: Mapping[str, CompiledExpr],
    reward_names: list[str],
    init: np.ndarray,
    deadlock: np.ndarray,
    loop: np.ndarray,
    action_rewards: Mapping[str, np.ndarray],
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray | None, np.ndarray | None]]]:
    """Labels (the model's, the property's atoms, ``init``, ``deadlock``) and rewards of the states ``keys``.

    Args:
        keys: ``[N]`` packed states (the reducer's whole model, or one worker's states for the distributed check).
        model: the model (its labels and reward structures).
        codec: the packing of ``keys``.
        atoms: the property's atoms, labelled under their names.
        reward_names: the reward structures to give.
        init: ``[N]`` bool, the initial states.
        deadlock: ``[N]`` bool, the deadlock states.
        loop: ``[N]`` bool, terminal or deadlock states: they get zero state rewards, as in Storm.
        action_rewards: name -> ``[N]`` policy-weighted action rewards of each state's row (a DTMC's one row per
            state), or ``[R]`` per row.

    Returns:
        (name -> ``[N]`` bool, name -> (state rewards ``[N]`` or None, action rewards or None)).
    """
    n = keys.shape[0]
    labels: dict[str, np.ndarray] = {name: np.zeros(n, dtype=bool) for name in model.labels}
    for name in atoms:
        labels[name] = np.zeros(n, dtype=bool)
    state_rew = {name: np.zeros(n) for name in reward_names}
    for start in range(0, n, LABEL_CHUNK):
        states = codec.unpack(keys[start : start + LABEL_CHUNK])
        sl = slice(start, start + states.shape[0])
        for name, e in model.labels.items():
            labels[name][sl] = e(states)
        for name, atom in atoms.items():
            labels[name][sl] = atom(states)
        for name in reward_names:
            state_rew[name][sl] = model.reward(name).state_rewards(states)
    labels["init"] = init
    labels["deadlock"] = deadlock.copy()
    rewards: dict[str, tuple[np.ndarray | None, np.ndarray | None]] = {}
    for name in reward_names:
        structure = model.reward(name)
        s = state_rew[name]
        s[loop] = 0.0  # Storm gives terminal and deadlock states zero rewards
        rewards[name] = (s if structure.state_items else None, action_rewards[name] if structure.action_items else None)
    return labels, rewards


def assemble(
    parts: Explored,
    model: Model,
    codec: StateCodec,
    atoms: Mapping[str, CompiledExpr],
    reward_names: list[str],
    *,
    force_mdp: bool = False,
) -> InducedModel:
    """Assemble the induced model of one explored partition set (ids already global)."""
    n = parts.n_states
    row_state = parts.row_state
    if row_state.size and (np.diff(row_state) < 0).any():
        raise AssertionError("rows must arrive grouped by source state")
    per_state = np.bincount(row_state, minlength=n)
    row_groups = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(per_state, out=row_groups[1:])
    if parts.merged:  # the workers merged their rows: the chunks are taken as they are (no copy)
        offsets, target_chunks, prob_chunks = parts.branch_offsets, list(parts.target_chunks), list(parts.prob_chunks)
    else:
        offsets, target_chunks, prob_chunks = _merge_chunks(parts, n)
    kind = "mdp" if force_mdp or (per_state > 1).any() else "dtmc"

    init = np.zeros(n, dtype=bool)
    init[parts.initial] = True
    labels, rewards = label_states(
        parts.keys, model, codec, atoms, reward_names, init, parts.deadlock, parts.loop, parts.rewards
    )
    return InducedModel(
        kind=kind,
        row_groups=row_groups,
        row_offsets=offsets,
        target_chunks=target_chunks,
        prob_chunks=prob_chunks,
        row_action=parts.row_action,
        initial=parts.initial,
        labels=labels,
        rewards=rewards,
        keys=parts.keys,
    )


def absorbing(m: InducedModel, stop: np.ndarray) -> InducedModel | None:
    """A copy of ``m`` in which the states of ``stop`` ``[N]`` bool are absorbing; None if they all are already.

    Each stop state keeps one row, a self-loop of probability 1 with no action and zero rewards; the other rows are
    copied as they are. For a property whose value does not depend on what happens after these states (the
    target and the left side's violations of a reward-bounded until), the value is the same on the copy; Storm's
    reward-bounded method needs it so (``distmc.check.properties``).
    """
    n_rows_of = np.diff(m.row_groups)  # [N]
    branches = np.diff(m.row_offsets)  # [R]
    first = m.row_groups[:-1]  # [N] first row of each state
    targets = m.targets
    idx = np.flatnonzero(stop)
    if (
        np.all(n_rows_of[idx] == 1)
        and np.all(branches[first[idx]] == 1)
        and np.array_equal(targets[m.row_offsets[first[idx]]], idx)
    ):
        return None
    prob = m.prob
    row_stop = np.repeat(stop, n_rows_of)  # [R]
    is_first = np.zeros(m.n_rows, dtype=bool)
    is_first[first] = True
    synthetic = row_stop & is_first  # [R] rows turned into the stop states' self-loops
    emit = ~row_stop | is_first  # [R] rows the copy has
    new_index = np.cumsum(emit) - 1  # [R] the copy's row of each emitted row
    counts = np.where(synthetic, 1, branches)[emit]
    offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    new_t = np.empty(int(offsets[-1]), dtype=np.int64)
    new_p = np.empty(int(offsets[-1]), dtype=np.float64)
    keep = np.repeat(~row_stop, branches)  # [T] branches of the rows copied as they are
    src = np.flatnonzero(keep)
    row_of = np.repeat(np.arange(m.n_rows, dtype=np.int64), branches)[src]
    dest = offsets[new_index[row_of]] + (src - m.row_offsets[row_of])
    new_t[dest], new_p[dest] = targets[src], prob[src]
    syn = np.flatnonzero(synthetic)
    new_t[offsets[new_index[syn]]] = np.repeat(np.arange(m.n_states, dtype=np.int64), n_rows_of)[syn]
    new_p[offsets[new_index[syn]]] = 1.0
    groups = np.zeros(m.n_states + 1, dtype=np.int64)
    np.cumsum(np.where(stop, 1, n_rows_of), out=groups[1:])
    rewards: dict[str, tuple[np.ndarray | None, np.ndarray | None]] = {}
    for name, (state, action) in m.rewards.items():
        rewards[name] = (
            None if state is None else np.where(stop, 0.0, state),
            None if action is None else np.where(synthetic, 0.0, action)[emit],
        )
    return InducedModel(
        kind=m.kind,
        row_groups=groups,
        row_offsets=offsets,
        target_chunks=[new_t],
        prob_chunks=[new_p],
        row_action=np.where(synthetic, -1, m.row_action)[emit],
        initial=m.initial,
        labels=m.labels,
        rewards=rewards,
        keys=m.keys,
    )
