"""Exploration a budget at a time, the frontier in priority order: mass first, or breadth first (``--order``).

A partial model's bounds (:mod:`distmc.check.partial`) are as wide as the probability of reaching the states it
did not expand. Breadth-first search expands every state of a level before the next one, however unlikely; the
mass-first order expands first the frontier states that carry the most probability, so that a trained policy's
few likely states are expanded before the tail, and the width shrinks faster per state. A state's ``mass`` is
(``rank``):

* ``reach`` (the default): the probability mass pushed to it so far. The initial states hold 1; a state, when
  expanded, hands its mass on once, times each branch's probability (the policy's included; an MDP's rows share
  it equally). A frontier state's mass is then the probability of the paths that reach it through states expanded
  before it: what it adds to the width, since the width is the probability of reaching the frontier (before the
  property is decided). Mass that reaches a state after it was expanded is not passed on (an under-estimate).
* ``path``: the probability of the most likely path to it (the maximum over its predecessors). It under-rates a
  state that many paths reach: where the model moves as a wave (delivery: the fuel counts the steps, so every
  state is reached at one depth), the middle of the wave has a small most-likely-path probability but most of the
  mass, and ``path`` expands the wave's edges first (``benchmarks/RESULTS.md``, issue 22: delivery N=48, width
  5.1e-4 against 5.9e-8 for ``reach`` at 10% of the states, both with the spread below).

Each batch takes the frontier states of highest mass (ties by the smaller id; breadth first: the least depth,
ties by id), at most ``batch_states``, at most an eighth of the states expanded so far (``GROWTH``: small batches
while the rank changes fast), and, mass first, at most the states whose mass is within a factor ``spread`` of the
frontier's highest (but at least 64): a wave of a few likely states per level is followed one level at a time
instead of level by level in ever wider batches. The explored set depends only on the model, the policy, the
order, ``rank``, ``spread`` and the budget, not on how the budget was split into rounds.

:class:`PriorityExplorer` keeps what it explored between rounds: :meth:`PriorityExplorer.grow` expands further
until a number of states have been found, :meth:`PriorityExplorer.snapshot` copies out the explored part with
its frontier closed (one self-loop row each; :func:`distmc.check.partial.close_frontier`) for the check, and the
next round goes on from where the last stopped; :meth:`PriorityExplorer.save` writes it to a checkpoint
(``--checkpoint-dir``), which ``--resume`` continues to a smaller ``--width`` without exploring again.

Depth is the least number of steps to a state found so far. Under the mass-first order a state can be expanded
before a shorter path to it is found, so the horizon cut (:func:`distmc.check.partial.horizon_of`) runs with the
breadth-first order only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from distmc._internal.atomic import atomic_path, checkpoint_note
from distmc.explore.expander import Expander, policy_counters
from distmc.explore.limits import LimitCheck
from distmc.explore.partition import Explored
from distmc.explore.visited import VisitedSet

__all__ = [
    "MASS_RANK",
    "MASS_RANKS",
    "ORDERS",
    "PRIORITY_CHECKPOINT",
    "PriorityExplorer",
    "load_arrays",
    "save_arrays",
    "saved_settings",
]

ORDERS = ("mass", "bfs")

#: What the mass-first order ranks the frontier by (module docstring): ``reach`` (the default) or ``path``.
MASS_RANKS = ("reach", "path")
MASS_RANK = "reach"
#: Mass first, a batch holds no state whose mass is below SPREAD times the frontier's highest (but 64 states).
SPREAD = 1e-3
#: A batch holds at most 1/GROWTH of the states expanded so far (but 64).
GROWTH = 8

#: The file of a checkpointed ``--width`` run in its ``--checkpoint-dir`` (:meth:`PriorityExplorer.save`).
PRIORITY_CHECKPOINT = "priority.npz"

_UNSEEN_DEPTH = np.iinfo(np.int64).max


def save_arrays(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """A priority run's checkpoint (``.npz``), replaced atomically and fsynced (:meth:`PriorityExplorer.save`).

    Raises:
        StorageError: the file cannot be written; the last round's file is kept.
    """
    p = Path(path)
    note = checkpoint_note(p.parent, "the last round's" if p.is_file() else None)
    with atomic_path(p, sync=True, note=note) as tmp:
        # numpy's stub types savez's **kwds as if a name could be its allow_pickle (a bool): every name here is an array's
        np.savez(tmp, **arrays)  # type: ignore[arg-type]


def load_arrays(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays :func:`save_arrays` wrote."""
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def saved_settings(d: dict[str, np.ndarray]) -> tuple[str, str, float]:
    """The order, rank and spread of a saved run.

    One written before the rank and spread were chosen: the most likely path, batches not limited.
    """
    return str(d["order"]), str(d.get("rank", "path")), float(d.get("spread", 0.0))


class PriorityExplorer:
    """The explored part of one run, grown a budget at a time in ``order`` (``mass`` or ``bfs``)."""

    def __init__(
        self,
        expander: Expander,
        initial_keys: np.ndarray,
        order: str = "mass",
        batch_states: int = 20_000,
        rank: str | None = None,
        spread: float | None = None,
    ) -> None:
        if order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
        rank = MASS_RANK if rank is None else rank
        if rank not in MASS_RANKS:
            raise ValueError(f"rank must be one of {MASS_RANKS}, not {rank!r}")
        self.spread = SPREAD if spread is None else float(spread)
        if not 0.0 <= self.spread <= 1.0:
            raise ValueError(f"spread must be in [0, 1], not {self.spread}")
        self.expander, self.order, self.batch_states, self.rank = expander, order, batch_states, rank
        self.visited = VisitedSet(expander.codec.dtype)
        cap = 1024
        self.keys = np.zeros(cap, dtype=expander.codec.dtype)  # [cap] packed keys by id
        self.mass = np.zeros(cap)  # [cap] the rank's mass: reach mass pushed so far, or most likely path's
        self.depth = np.full(cap, _UNSEEN_DEPTH, dtype=np.int64)  # [cap] least depth found so far
        self.expanded = np.zeros(cap, dtype=bool)  # [cap]
        self.loop = np.zeros(cap, dtype=bool)  # [cap] terminal or deadlock (of expanded states)
        self.deadlock = np.zeros(cap, dtype=bool)  # [cap]
        # per batch: (source ids [R], actions [R], branches per row [R], target ids [T], prob [T], rewards {[R]})
        self.rows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]] = []
        self.n_expanded = self.transitions = self.policy_states = 0
        self.budget = 0  # the last round's budget of states (a resumed run starts from it)
        ids = self._insert(initial_keys)
        self.initial = np.unique(ids)
        self.mass[self.initial] = 1.0
        self.depth[self.initial] = 0

    @property
    def n_states(self) -> int:
        return int(self.visited.size)

    @property
    def frontier_size(self) -> int:
        return self.n_states - self.n_expanded

    def _insert(self, keys: np.ndarray) -> np.ndarray:
        ids, new = self.visited.insert(keys)
        n = self.visited.size
        if n > self.keys.shape[0]:
            cap = max(n, 2 * self.keys.shape[0])
            for name, fill in (
                ("keys", 0),
                ("mass", 0.0),
                ("depth", _UNSEEN_DEPTH),
                ("expanded", False),
                ("loop", False),
                ("deadlock", False),
            ):
                old = getattr(self, name)
                grown = np.full(cap, fill, dtype=old.dtype)
                grown[: old.shape[0]] = old
                setattr(self, name, grown)
        if new.shape[0]:
            self.keys[n - new.shape[0] : n] = new
        return ids

    def _pick(self, k: int) -> np.ndarray:
        """The ``k`` frontier states of highest rank ``[k]`` (ids); mass first, no more than are within ``spread``."""
        f = np.flatnonzero(~self.expanded[: self.n_states])
        if self.order == "mass" and f.shape[0] > 64:  # no more than the states within spread of the top (at least 64)
            m = self.mass[f]
            k = min(k, max(64, int(np.count_nonzero(m >= m.max() * self.spread))))
        if f.shape[0] > k:  # the top k by rank, then in rank order (a stable tie-break: the smaller id)
            score = -self.mass[f] if self.order == "mass" else self.depth[f].astype(np.float64)
            cut = np.partition(score, k - 1)[k - 1]
            f = f[score <= cut]
            score = score[score <= cut]
            f = f[np.lexsort((f, score))][:k]
        return np.sort(f)

    def grow(
        self,
        budget: int,
        check: LimitCheck | None = None,
        interrupted: Callable[[], str | None] | None = None,
        horizon: int | None = None,
    ) -> str | None:
        """Expand until more than ``budget`` states are found (or none is left to expand); why it stopped early.

        Returns the limit passed (or Ctrl-C), else None. ``horizon``: states at that depth are not expanded
        (breadth-first order only).
        """
        while self.n_states <= budget:
            # small batches first (the rank is fresher), up to batch_states as the explored part grows
            f_ids = self._pick(min(self.batch_states, max(64, self.n_expanded // GROWTH)))
            if horizon is not None:
                f_ids = f_ids[self.depth[f_ids] < horizon]
            if f_ids.shape[0] == 0:
                return None
            self._expand(f_ids)
            why = None if check is None else check.exceeded(states=0, memory=None)
            why = why or (interrupted() if interrupted is not None else None)
            if why is not None:
                return why
        return None

    def _expand(self, ids: np.ndarray) -> None:
        rows = self.expander.expand(self.keys[ids])
        targets = self._insert(rows.target_keys)
        counts = np.diff(rows.branch_offsets)  # [R]
        src = ids[rows.row_state]  # [R]
        branch_src = np.repeat(src, counts)  # [T]
        if self.rank == "path":
            np.maximum.at(self.mass, targets, self.mass[branch_src] * rows.prob)
        else:  # "reach": each state hands its mass on once, split over its rows (MDP rows: uniformly) and branches
            per_row = 1.0 / np.bincount(rows.row_state)[rows.row_state]  # [R]
            np.add.at(self.mass, targets, np.repeat(self.mass[src] * per_row, counts) * rows.prob)
        np.minimum.at(self.depth, targets, self.depth[branch_src] + 1)
        self.expanded[ids] = True
        self.loop[ids] = rows.terminal | rows.deadlock
        self.deadlock[ids] = rows.deadlock
        self.rows.append((src, rows.row_action, counts, targets, rows.prob, dict(rows.rewards)))
        self.n_expanded += int(ids.shape[0])
        self.transitions += int(targets.shape[0])
        self.policy_states += rows.policy_states

    def snapshot(self) -> Explored:
        """The explored part as the reducer takes it (a copy): rows by source id, each frontier state one self-loop.

        ``Explored.frontier`` holds the ids not expanded (their rows are there already).
        """
        n = self.n_states
        frontier = np.flatnonzero(~self.expanded[:n])  # [F]
        f = frontier.shape[0]
        names = list(self.rows[0][5]) if self.rows else []
        src = np.concatenate([r[0] for r in self.rows] + [frontier])
        action = np.concatenate([r[1] for r in self.rows] + [np.full(f, -1, dtype=np.int64)])
        counts = np.concatenate([r[2] for r in self.rows] + [np.ones(f, dtype=np.int64)])
        targets = np.concatenate([r[3] for r in self.rows] + [frontier])
        prob = np.concatenate([r[4] for r in self.rows] + [np.ones(f)])
        rewards = {k: np.concatenate([r[5][k] for r in self.rows] + [np.zeros(f)]) for k in names}
        order = np.argsort(src, kind="stable")  # rows grouped by source, as the reducer wants them
        starts = np.zeros(counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts[order], out=offsets[1:])
        take = np.repeat(starts[:-1][order] - offsets[:-1], counts[order]) + np.arange(offsets[-1], dtype=np.int64)
        calls, seconds = policy_counters(self.expander)
        out = Explored(
            keys=self.keys[:n].copy(),
            loop=self.loop[:n].copy(),
            deadlock=self.deadlock[:n].copy(),
            row_state=src[order],
            row_action=action[order],
            branch_offsets=offsets,
            target_chunks=[targets[take]],
            prob_chunks=[prob[take]],
            chunk_rows=np.array([order.shape[0]], dtype=np.int64),
            rewards={k: v[order] for k, v in rewards.items()},
            initial=self.initial.copy(),
        )
        out.frontier = frontier
        reached = self.depth[:n][self.depth[:n] != _UNSEEN_DEPTH]
        out.stats.update(
            {
                "depth": int(reached.max(initial=0)),
                "policy_states": self.policy_states,
                "policy_calls": calls,
                "policy_s": seconds,
                "expanded": self.n_expanded,
            }
        )
        return out

    # -- checkpoint -------------------------------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write what was explored to ``path`` (``.npz``, replaced atomically): a resumed run goes on from it."""
        n = self.n_states
        names = list(self.rows[0][5]) if self.rows else []
        cat = [np.concatenate([r[i] for r in self.rows]) if self.rows else np.zeros(0) for i in range(5)]
        arrays = {
            "keys": self.keys[:n],
            "mass": self.mass[:n],
            "depth": self.depth[:n],
            "expanded": self.expanded[:n],
            "loop": self.loop[:n],
            "deadlock": self.deadlock[:n],
            "initial": self.initial,
            "src": cat[0],
            "action": cat[1],
            "counts": cat[2],
            "targets": cat[3],
            "prob": cat[4],
            **{f"reward:{k}": np.concatenate([r[5][k] for r in self.rows]) for k in names},
            "counters": np.array([self.n_expanded, self.transitions, self.policy_states, self.budget], dtype=np.int64),
            "order": np.array(self.order),
            "rank": np.array(self.rank),
            "spread": np.array(self.spread),
        }
        save_arrays(path, arrays)

    def close(self, ok: bool) -> None:
        """Nothing to end: the in-process explorer holds no workers (the Ray one's ends them)."""

    @classmethod
    def load(cls, path: str | Path, expander: Expander, batch_states: int = 20_000) -> PriorityExplorer:
        """The explorer :meth:`save` wrote, ready to grow further."""
        d = load_arrays(path)
        order, rank, spread = saved_settings(d)
        out = cls(expander, d["keys"][:0], order, batch_states, rank, spread)
        out._insert(d["keys"])  # every key is new: ids 0 .. n-1 in the saved order
        n = d["keys"].shape[0]
        for name in ("mass", "depth", "expanded", "loop", "deadlock"):
            getattr(out, name)[:n] = d[name]
        out.initial = d["initial"]
        names = [k.split(":", 1)[1] for k in d if k.startswith("reward:")]
        if d["src"].shape[0]:
            out.rows = [
                (
                    d["src"].astype(np.int64),
                    d["action"].astype(np.int64),
                    d["counts"].astype(np.int64),
                    d["targets"].astype(np.int64),
                    d["prob"],
                    {k: d[f"reward:{k}"] for k in names},
                )
            ]
        out.n_expanded, out.transitions, out.policy_states, out.budget = (int(x) for x in d["counters"])
        return out
