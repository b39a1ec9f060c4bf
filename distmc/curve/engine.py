"""Verify many policies of one model and property (a training run's checkpoints) on one exploration.

Every policy's induced DTMC is a reweighting of one MDP: the states reachable under *some* policy, with one row per
enabled action. :class:`SharedModel` builds that MDP once (the states by the explorer's fast fused path under the
uniform policy, which keeps every action; then one compiled kernel pass over them for the rows of each action, the
successors numbered by a sorted-key look-up) and keeps, per transition, where it lands in the fused row of its
state; a policy then costs its forward pass over the states,
one ``bincount`` that adds ``pi(a|s) P(s,a,s')`` into the fused rows, and the check. When a policy keeps every
action with probability > 0 (a softmax: every checkpoint of a PPO run), its reachable set is the MDP's, and its
DTMC is the reweighted one as it is. When it drops actions (deterministic mode, a threshold, exact zeros), its
reachable set is smaller: the states its kept rows reach from the initial states are found by a breadth-first
search over the reweighted rows and the DTMC is restricted to them, which is exactly what exploring it would find
(the MDP holds every state any policy reaches), so nothing is explored again. The price is the MDP's size: it
holds every action's row, so it is worth it when the policies reach most of what the MDP reaches, as softmax
policies do; :func:`verify_each` (separate runs, ``--separate``) is the comparison.

Each policy's value is checked like a separate ``distmc run`` of it (the same checker and precision); its rows
differ from that run's only in the order the fused probabilities are added up (last bits), so values agree to
about 1e-15 (the tests hold them to 1e-12).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numba as nb
import numpy as np

from distmc.assemble.reducer import InducedModel, assemble
from distmc.assemble.storm import to_storm
from distmc.check.dispatch import check_properties, vector_result
from distmc.check.forms import Recurrence, step_recurrence, unsupported
from distmc.check.result import CheckResult, Precision
from distmc.curve.batched import steps_many
from distmc.errors import ResourceLimitError, UsageError
from distmc.explore.expander import Expander
from distmc.explore.limits import Limits, parse_duration, parse_memory
from distmc.explore.local import explore_local
from distmc.options import VerifyOptions
from distmc.pipeline import Job, Parts
from distmc.policy import load_policy

__all__ = ["BATCH", "BATCH_BYTES", "CurvePoint", "SharedModel", "checkpoint_step"]

#: Checkpoints checked together in one batched pass (step-bounded properties), at most.
BATCH = 16
#: Bytes the batched pass's ``[T, K]`` probabilities may take: ``K`` is chosen to fit (at least 1).
BATCH_BYTES = 2 << 30


def checkpoint_step(path: str | Path, default: int) -> int:
    """The training step a checkpoint's file name gives (its last number: ``ppo_20000_steps.pt2`` -> 20000)."""
    numbers = re.findall(r"\d+", Path(str(path)).stem)
    return int(numbers[-1]) if numbers else default


@dataclass
class CurvePoint:
    """One policy's verification on a curve."""

    policy: str
    step: int
    value: float
    seconds: float  # wall-clock of this policy's verification (forward pass, rows, check; or a whole run)
    states: int  # the policy's reachable states
    transitions: int
    shared: bool  # on the shared exploration (False: a separate run)
    bounds: list[float] | None = None
    truth: bool | None = None  # a threshold property's truth value


class SharedModel:
    """The MDP of every action (explored once), on which every policy's DTMC is a reweighting.

    Attributes:
        parts: the parsed model, property and kernel (monolithic mode: no policy).
        mdp: the assembled MDP (``row_action`` per row; self-loop rows of terminal and deadlock states: -1).
        states: ``[N, V]`` int64 decoded states.
        enabled: ``[N, A_model]`` bool, the actions each state enables.
        row_state: ``[R]`` int64.
        targets, prob: ``[T]`` the MDP's transitions (int32 targets where they fit), shared with ``mdp``.
        fused: the fused rows (a policy's DTMC), made when a policy is first checked alone.
        explore_s: seconds of the exploration and assembly.
    """

    def __init__(self, model_path: str | Path, prop: str, opts: VerifyOptions) -> None:
        t0 = time.perf_counter()
        self.opts = opts
        self.prop = prop
        # the MDP reachable under some policy, a row per enabled choice: one exploration in monolithic mode (the
        # explorer numbers the successors as it finds them, so no second kernel pass and no key look-up)
        job = Job(str(model_path), prop, opts.constants, None, None, "monolithic", 0.0, opts.resolve)
        self.parts: Parts = job.build()
        parts = self.parts
        if parts.model.model_type != "mdp":
            raise UsageError(f"{model_path} is a dtmc: no policy acts in it")
        assert parts.expander is not None
        limits = Limits(opts.max_states, parse_memory(opts.max_memory), parse_duration(opts.timeout))
        initial = parts.codec.pack(parts.model.initial_states)
        reached: list[int] = []  # the states within d steps of the initial ones, d = 1, 2, ... (ids are breadth first)
        explored = explore_local(
            parts.expander, initial, limits=limits, progress=lambda i: reached.append(int(i["states"]))
        )
        if "expanded" in explored.stats:
            raise ResourceLimitError(
                f"the shared exploration stopped before its end ({explored.stats.get('stopped', 'a limit')}): "
                "a curve needs every state; raise the limit or run the checkpoints separately (--separate)"
            )
        #: ``[D + 1]``: the number of states within ``d`` steps of the initial states, for ``d = 0 .. depth``
        self.levels = np.array([int(np.unique(explored.initial).shape[0]), *reached], dtype=np.int64)
        mdp = assemble(explored, parts.model, parts.codec, parts.props.atoms, parts.reward_names, force_mdp=True)
        del explored
        self.mdp = mdp
        n = mdp.n_states
        self.row_state = np.repeat(np.arange(n, dtype=np.int64), np.diff(mdp.row_groups))
        acted = mdp.row_action >= 0
        self.states = parts.codec.unpack(mdp.keys)
        self.enabled = np.zeros((n, len(parts.model.actions)), dtype=bool)
        self.enabled[self.row_state[acted], mdp.row_action[acted]] = True
        # several rows of one action in a state: same-label choices, which a policy does not resolve
        self.same_label = bool((np.bincount(self.row_state[acted], minlength=n) > self.enabled.sum(axis=1)).any())
        # the MDP's transitions in one array each (int32 targets where they fit: less to read per sweep)
        self.targets = np.empty(mdp.n_transitions, dtype=np.int32 if n < 2**31 else np.int64)
        at = 0
        for c in mdp.target_chunks:  # chunk by chunk: no int64 copy of all of them
            self.targets[at : at + c.shape[0]] = c
            at += c.shape[0]
        self.prob = mdp.prob
        mdp.target_chunks, mdp.prob_chunks = [self.targets], [self.prob]
        self._fused: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._fused_count: int | None = None
        self.explore_s = time.perf_counter() - t0

    @property
    def fused_transitions(self) -> int:
        """The transitions of a policy's DTMC that keeps every row (the fused rows' distinct targets)."""
        if self._fused is not None:
            return int(self._fused[0][-1])
        if self._fused_count is None:
            self._fused_count = int(_fused_count(self.mdp.row_groups, self.mdp.row_offsets, self.targets))
        return self._fused_count

    @property
    def fused(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The fused rows (one per state, a policy's DTMC), made when first asked (a policy checked alone).

        ``(d_offsets [N + 1], d_targets [T_d] int64 sorted within a row, dest [T]: each MDP transition's position
        in them, branch_row [T]: each MDP transition's row)``.
        """
        if self._fused is None:
            m = self.mdp
            d_offsets, d_targets, dest = _fuse(m.row_groups, m.row_offsets, self.targets)
            branch_row = np.repeat(np.arange(m.n_rows, dtype=np.int64), np.diff(m.row_offsets))
            self._fused = (d_offsets, d_targets, dest, branch_row)
        return self._fused

    @property
    def n_states(self) -> int:
        return self.mdp.n_states

    def weights(self, policy: Any) -> np.ndarray:
        """``[R]`` float64: each MDP row's weight under ``policy`` and the run's mode (self-loops 1)."""
        p = self.parts
        assert p.expander is not None
        ex = Expander(
            p.model,
            p.expander.kernel,
            p.codec,
            policy,
            self.opts.mode,
            terminal=p.props.terminal_mask,
            threshold=self.opts.threshold,
            resolve=self.opts.resolve,
        )
        has = self.enabled.any(axis=1)
        w = np.zeros(self.enabled.shape)
        w[has] = ex.action_weights(self.states[has], self.enabled[has])
        act = self.mdp.row_action
        return np.where(act >= 0, w[self.row_state, np.maximum(act, 0)], 1.0)

    def fused_prob(self, w_row: np.ndarray) -> np.ndarray:
        """``[T_d]`` the fused rows' probabilities under row weights ``w_row`` ``[R]``."""
        _, d_targets, dest, branch_row = self.fused
        return np.bincount(dest, weights=self.prob * w_row[branch_row], minlength=d_targets.shape[0])

    def row_rewards(self, w_row: np.ndarray) -> dict[str, tuple[np.ndarray | None, np.ndarray | None]]:
        """Each reward structure's (state rewards, policy-weighted action rewards per state) under ``w_row``."""
        n = self.mdp.n_states
        return {
            name: (
                state_r,
                None if action_r is None else np.bincount(self.row_state, weights=action_r * w_row, minlength=n),
            )
            for name, (state_r, action_r) in self.mdp.rewards.items()
        }

    def induced(self, w_row: np.ndarray) -> InducedModel:
        """The DTMC of row weights ``w_row`` ``[R]``, restricted to the states it reaches."""
        m = self.mdp
        n = m.n_states
        prob = self.fused_prob(w_row)
        offsets, targets = self.fused[:2]
        keep_t = prob > 0
        if not keep_t.all():
            counts = np.add.reduceat(keep_t.astype(np.int64), offsets[:-1]) if n else np.zeros(0, np.int64)
            counts[np.diff(offsets) == 0] = 0
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            targets, prob = targets[keep_t], prob[keep_t]
        # every row kept (a softmax policy): the MDP's states, all reachable; else search from the initial states
        reach = np.ones(n, dtype=bool) if (w_row > 0).all() else _reachable(offsets, targets, m.initial, n)
        row_rew = self.row_rewards(w_row)
        if reach.all():
            ids = None
            labels = m.labels
            keys, initial = m.keys, m.initial
        else:
            ids = np.flatnonzero(reach)
            new_id = np.full(n, -1, dtype=np.int64)
            new_id[ids] = np.arange(ids.shape[0])
            sel = np.repeat(reach, np.diff(offsets))
            counts = np.diff(offsets)[ids]
            offsets = np.zeros(ids.shape[0] + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            targets, prob = new_id[targets[sel]], prob[sel]
            labels = {k: v[ids] for k, v in m.labels.items()}
            row_rew = {
                k: (None if s is None else s[ids], None if a is None else a[ids]) for k, (s, a) in row_rew.items()
            }
            keys, initial = m.keys[ids], new_id[m.initial]
        k = offsets.shape[0] - 1
        return InducedModel(
            "dtmc",
            np.arange(k + 1, dtype=np.int64),
            offsets,
            [targets],
            [prob],
            np.full(k, -1, dtype=np.int64),
            initial,
            labels,
            row_rew,
            keys,
        )

    def check(self, spec_policy: str, step: int) -> CurvePoint:
        """Load the policy ``spec_policy``, build its DTMC and check the property like ``distmc run`` would."""
        t0 = time.perf_counter()
        induced = self.induced(self.weights(self._load(spec_policy)))
        return self._point(spec_policy, step, induced, _check(self.parts, induced, self.opts), time.perf_counter() - t0)

    def check_many(self, policies: Sequence[tuple[str, int]]) -> list[CurvePoint]:
        """:meth:`check` of each ``(policy, step)``, the step-bounded ones :data:`BATCH` at a time in one pass.

        A policy that keeps every row (a softmax) of a step-bounded property (``F<=k``, ``U<=k``, ``C<=k``,
        ``I=k``) checked by distmc's own kernels (``--checker native`` or ``auto``) joins a batch, whose steps run
        together on the MDP's rows (:func:`distmc.curve.batched.steps_many`); any other is checked alone, in its
        place. A batched point's ``seconds`` is its own forward pass and weights plus an equal share of its batch's
        check.
        """
        o, spec, m = self.opts, self.parts.spec, self.mdp
        init = m.initial
        batchable = (
            o.checker in ("auto", "native")
            and not o.exact
            and unsupported(spec, "dtmc") is None
            and not (init.shape[0] > 1 and spec.filter in ("avg", "sum", "first", "count"))
        )
        # a weight column [R] and three value columns [N] (and their copies) per checkpoint of a batch
        width = max(1, min(BATCH, BATCH_BYTES // max(1, 8 * (m.n_rows + 6 * m.n_states))))
        p_min = float(self.prob.min(initial=1.0))
        out: list[CurvePoint] = []
        pending: list[tuple[str, int, float, Recurrence]] = []
        weights = np.empty((0, 0))

        def flush() -> None:
            if not pending:
                return
            t0 = time.perf_counter()
            cols = weights if len(pending) == weights.shape[1] else np.ascontiguousarray(weights[:, : len(pending)])
            values = steps_many(
                m.row_groups, m.row_offsets, self.targets, self.prob, cols, [p[3] for p in pending], levels=self.levels
            )
            share = (time.perf_counter() - t0) / len(pending)
            for j, (policy, step, own_s, _) in enumerate(pending):
                v = values[init, j]
                point = self._point(policy, step, None, vector_result(spec, v, v, v, "native"), own_s + share)
                out.append(point)
            pending.clear()

        for i, (policy, step) in enumerate(policies):
            t0 = time.perf_counter()
            w_row = self.weights(self._load(policy))
            # every row kept, and no weight so small that weight x probability rounds to 0 (the policy's own run
            # would then lose that transition): the policy's DTMC is the MDP's every row, weighted
            if batchable and float(w_row.min(initial=1.0)) * p_min > 0:
                rec = step_recurrence(spec, replace(m, rewards=self.row_rewards(w_row)))
                if rec is not None:
                    if not pending:
                        weights = np.empty((m.n_rows, min(width, len(policies) - i)))
                    weights[:, len(pending)] = w_row
                    pending.append((policy, step, time.perf_counter() - t0, rec))
                    if len(pending) == weights.shape[1]:
                        flush()
                    continue
            flush()
            induced = self.induced(w_row)
            res = _check(self.parts, induced, o)
            out.append(self._point(policy, step, induced, res, time.perf_counter() - t0))
        flush()
        return out

    def _load(self, spec_policy: str) -> Any:
        o = self.opts
        return load_policy(spec_policy, self.parts.model, o.interface, trust=o.trust_policy, dtype=o.policy_dtype)

    def _point(
        self, policy: str, step: int, induced: InducedModel | None, res: CheckResult, seconds: float
    ) -> CurvePoint:
        """The curve's point of a check (``induced`` None: the DTMC of every MDP row, as a softmax policy keeps)."""
        bounds = [float(x) for x in res.bounds] if isinstance(res.bounds, tuple) else None
        if isinstance(res.value, dict):
            raise UsageError(f"{self.prop}: a policy's DTMC has one value, not min and max")
        states = induced.n_states if induced is not None else self.n_states
        transitions = induced.n_transitions if induced is not None else self.fused_transitions
        return CurvePoint(str(policy), step, float(res.value), seconds, states, transitions, True, bounds, res.truth)


@nb.njit(cache=True, nogil=True)
def _fuse(row_groups, row_offsets, targets):  # pragma: no cover - compiled
    """The fused rows' CSR (``[N + 1]``, ``[T_d]``, targets sorted within a row) and each branch's position ``[T]``.

    A state's branches (its rows' targets, each row sorted and unique) are sorted by target in a small buffer
    (insertion sort: a state has a few dozen at most), equal targets share one position.
    """
    n = row_groups.shape[0] - 1
    d_offsets = np.zeros(n + 1, np.int64)
    d_targets = np.empty(targets.shape[0], np.int64)
    dest = np.empty(targets.shape[0], np.int64)
    buf_t = np.empty(64, np.int64)
    buf_i = np.empty(64, np.int64)
    out = 0
    for s in range(n):
        lo, hi = row_offsets[row_groups[s]], row_offsets[row_groups[s + 1]]
        k = hi - lo
        if k > buf_t.shape[0]:
            buf_t = np.empty(2 * k, np.int64)
            buf_i = np.empty(2 * k, np.int64)
        for j in range(k):
            t, i = targets[lo + j], lo + j
            m = j
            while m > 0 and buf_t[m - 1] > t:
                buf_t[m] = buf_t[m - 1]
                buf_i[m] = buf_i[m - 1]
                m -= 1
            buf_t[m] = t
            buf_i[m] = i
        for j in range(k):
            if j == 0 or buf_t[j] != buf_t[j - 1]:
                d_targets[out] = buf_t[j]
                out += 1
            dest[buf_i[j]] = out - 1
        d_offsets[s + 1] = out
    return d_offsets, d_targets[:out].copy(), dest


@nb.njit(cache=True, nogil=True)
def _fused_count(row_groups, row_offsets, targets):  # pragma: no cover - compiled
    """The number of distinct targets over each state's rows, summed (the fused rows' transitions)."""
    n = row_groups.shape[0] - 1
    total = 0
    for s in range(n):
        lo, hi = row_offsets[row_groups[s]], row_offsets[row_groups[s + 1]]
        buf = np.sort(targets[lo:hi])
        for j in range(buf.shape[0]):
            if j == 0 or buf[j] != buf[j - 1]:
                total += 1
    return total


def _reachable(offsets: np.ndarray, targets: np.ndarray, initial: np.ndarray, n: int) -> np.ndarray:
    """``[N]`` bool: the states the CSR graph reaches from ``initial`` (level by level, numpy over each level)."""
    seen = np.zeros(n, dtype=bool)
    seen[initial] = True
    frontier = np.unique(initial)
    while frontier.size:
        counts = np.diff(offsets)[frontier]
        starts = np.repeat(offsets[frontier] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        nxt = targets[starts + np.arange(int(counts.sum()))]
        nxt = np.unique(nxt[~seen[nxt]])
        seen[nxt] = True
        frontier = nxt
    return seen


def _check(parts: Parts, induced: InducedModel, o: VerifyOptions) -> CheckResult:
    """The property's value on ``induced`` with the checker ``distmc run`` would use here (Storm unless native)."""
    prec = Precision.from_options(o.precision, o.precision_abs, o.exact, o.sound_mdp)
    checker = "native" if o.checker == "native" else "storm"
    storm: list[Any] = []

    def storm_model() -> Any:
        if not storm:
            storm.append(to_storm(induced, release=True, exact=o.exact))
        return storm[0]

    return check_properties(parts.props, induced, [checker] * len(parts.props.specs), prec, storm_model)[0]
