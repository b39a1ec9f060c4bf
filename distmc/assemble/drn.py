"""Storm's explicit ``.drn`` text format, written from an :class:`~distmc.assemble.reducer.InducedModel`.

Why not Storm's own exporter: it prints numbers with a fixed number of significant digits (10), so a model read
back from its file is another model (on avoid it gave values 2e-10 off). Here every probability and reward is
written as Python's ``repr`` of the double, the shortest text that reads back as the same double, so Storm on the
file builds the very model distmc checked. The layout is the one Storm writes and reads::

    @type: DTMC                      (or MDP)
    @reward_models
    steps                            (the reward structures' names)
    @nr_states / @nr_choices / @model
    state 3 [0.0] init crash         (state rewards, then its labels; "init" for initial states)
        action 0 [1.0]               (one per row: its index in the state, its action rewards)
            7 : 0.225                (target : probability)

Lines are built for blocks of states with numpy index arithmetic (where each state's, row's and branch's line
goes), not by walking the states one by one.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from distmc._internal.atomic import atomic_path
from distmc.assemble.reducer import InducedModel

__all__ = ["write_drn"]

#: States per block of lines: bounds the memory of the line strings (about 100 bytes a line).
BLOCK = 1 << 16

_PLAIN_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _label(name: str) -> str:
    return name if _PLAIN_LABEL.fullmatch(name) else f'"{name}"'


def _brackets(columns: list[np.ndarray], k: int) -> np.ndarray:
    """``[k]`` strings ``" [a, b]"`` of the values of ``columns`` (each ``[k]`` float64), shortest round-trip text."""
    if not columns:
        return np.full(k, "", dtype=object)
    return np.array(
        [" [" + ", ".join(map(repr, vals)) + "]" for vals in zip(*(c.tolist() for c in columns), strict=True)],
        dtype=object,
    )


def write_drn(m: InducedModel, path: str | Path) -> None:
    """Write ``m`` to ``path`` in Storm's ``.drn`` format, every number exact (see the module docstring)."""
    n, n_rows = m.n_states, m.n_rows
    names = list(m.rewards)
    zeros_s, zeros_r = np.zeros(n), np.zeros(n_rows)
    state_rew = [zeros_s if (r := m.rewards[k][0]) is None else r for k in names]
    action_rew = [zeros_r if (r := m.rewards[k][1]) is None else r for k in names]
    initial = np.zeros(n, dtype=bool)
    initial[m.initial] = True
    labels = [(_label(k), v) for k, v in m.labels.items() if k != "init"]
    targets, prob = m.targets, m.prob
    groups, offsets = m.row_groups, m.row_offsets
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write(
            f"// Exported by distmc\n@type: {'MDP' if m.kind == 'mdp' else 'DTMC'}\n@value_type: double\n"
            f"@parameters\n\n@reward_models\n{' '.join(names)}\n@nr_states\n{n}\n@nr_choices\n{n_rows}\n@model\n"
        )
        for s0 in range(0, n, BLOCK):
            s1 = min(n, s0 + BLOCK)
            r0, r1 = int(groups[s0]), int(groups[s1])
            t0, t1 = int(offsets[r0]), int(offsets[r1])
            states = np.arange(s0, s1)
            row_state = np.repeat(states, np.diff(groups[s0 : s1 + 1]))  # [rows] owner state
            rows = np.arange(r0, r1)
            branch_row = np.repeat(rows, np.diff(offsets[r0 : r1 + 1]))  # [branches] row
            lines = np.empty((s1 - s0) + (r1 - r0) + (t1 - t0), dtype=object)
            # A line's place: the lines of the states, rows and branches of the block before it.
            state_at = (states - s0) + (groups[s0:s1] - r0) + (offsets[groups[s0:s1]] - t0)
            row_at = (row_state - s0) + 1 + (rows - r0) + (offsets[r0:r1] - t0)
            branch_at = (row_state[branch_row - r0] - s0) + 1 + (branch_row - r0) + 1 + np.arange(t1 - t0)
            text = np.array([f"state {s}" for s in states.tolist()], dtype=object)
            text += _brackets([c[s0:s1] for c in state_rew], s1 - s0)
            text += np.where(initial[s0:s1], " init", "")
            for name, mask in labels:
                text += np.where(mask[s0:s1], " " + name, "")
            lines[state_at] = text
            local = (rows - groups[row_state]).tolist()
            lines[row_at] = np.array([f"\taction {a}" for a in local], dtype=object) + _brackets(
                [c[r0:r1] for c in action_rew], r1 - r0
            )
            lines[branch_at] = [
                f"\t\t{t} : {p!r}" for t, p in zip(targets[t0:t1].tolist(), prob[t0:t1].tolist(), strict=True)
            ]
            f.write("\n".join(lines.tolist()))
            f.write("\n")
