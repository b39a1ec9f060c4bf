"""One expansion step: packed states in, rows of the induced model (with successor keys) out.

This is where the kernel, the policy and the mode meet:

* ``monolithic``: every enabled choice is a row of an MDP (no policy);
* ``stochastic``: every action with pi(a|s) > threshold is kept (pi renormalised over the kept actions; if no
  action exceeds the threshold the most probable one is kept), and the kept choices are fused into one row
  ``sum_a pi(a|s) P(s,a,.)``;
* ``deterministic``: only argmax_a pi(a|s) is kept (ties go to the first action in the policy's order).

A ``dtmc`` model has no policy choice: its choices are fused with weight 1/(number of choices) as in Storm.
If a state enables several choices with the same action label, the policy does not resolve them: with
``resolve="none"`` the state keeps one row per combination of those choices (an MDP; the check reports min and
max), with ``resolve="uniform"`` the label's probability is split evenly among them.

Terminal states (see :mod:`distmc.check.properties`) and deadlocks get a self-loop, as in Storm.
"""

from __future__ import annotations

import itertools

import numpy as np

from distmc._internal.jit import gather_index
from distmc.errors import PolicyError, ResourceLimitError
from distmc.explore.contracts import Rows, SuccessorGenerator
from distmc.model.kernel import NO_ACTION, Kernel
from distmc.model.packing import StateCodec
from distmc.model.program import Model
from distmc.policy.base import Policy, action_distribution

__all__ = ["Expander", "Rows", "gather_rows", "policy_counters"]


#: Most rows one state may get from unresolved same-label nondeterminism.
MAX_PRODUCT_ROWS = 4096


def policy_counters(expander: SuccessorGenerator) -> tuple[int, float]:
    """Forward passes and seconds the expander's policy has spent so far (0, 0.0 without a counting policy).

    Any successor generator behind the explorer's contract may be given (the box abstraction has no policy).
    """
    return expander.policy_counters()


def gather_rows(order: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Branch gather index and new offsets for taking rows ``order`` out of CSR ``offsets``."""
    counts = np.diff(offsets)[order]
    new_off = np.zeros(order.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=new_off[1:])
    return gather_index(offsets[:-1][order], new_off), new_off


class Expander:
    """Turns packed states into rows of the induced model (stateless between batches).

    ``mode`` and ``resolve`` are taken as given: :class:`~distmc.options.VerifyOptions` validates them, once.
    """

    def __init__(
        self,
        model: Model,
        kernel: Kernel,
        codec: StateCodec,
        policy: Policy | None,
        mode: str = "stochastic",
        *,
        terminal: object = None,
        threshold: float = 0.0,
        resolve: str = "none",
        reward_names: list[str] | None = None,
    ) -> None:
        self.model, self.kernel, self.codec, self.mode = model, kernel, codec, mode
        self.policy = policy if (mode != "monolithic" and model.model_type == "mdp") else None
        self.terminal = terminal
        self.threshold = float(threshold)
        self.resolve = resolve
        self.rewards = [model.reward(n) for n in (reward_names or [])]
        if self.policy is not None:
            index = {a: i for i, a in enumerate(self.policy.actions)}
            self.model_to_policy = np.array([index.get(a, -1) for a in model.actions], dtype=np.int64)

    # -- weights ---------------------------------------------------------------------------------------------

    def _weights_matrix(self, states: np.ndarray, enabled_model: np.ndarray) -> np.ndarray:
        """Weight ``[B, A_model]`` of each model action under the policy and mode (0 = dropped or disabled)."""
        assert self.policy is not None
        missing = enabled_model[:, self.model_to_policy < 0]
        if missing.any():
            i, j = (int(x[0]) for x in np.nonzero(missing))
            action = self.model.actions[int(np.flatnonzero(self.model_to_policy < 0)[j])]
            raise PolicyError(
                f"state {self.model.describe_state(states[i])} enables action '{action}', which the policy's action "
                f"list {self.policy.actions} does not contain; list it in the interface file"
            )
        b, a = states.shape[0], len(self.policy.actions)
        if a == 0:  # a model without actions: every state is a deadlock, nothing to weigh
            return np.zeros(enabled_model.shape)
        cols = np.flatnonzero(self.model_to_policy >= 0)
        enabled = np.zeros((b, a), dtype=bool)
        enabled[:, self.model_to_policy[cols]] = enabled_model[:, cols]
        has = enabled.any(axis=1)
        rows = np.flatnonzero(has)
        pi = np.zeros((b, a))
        pi[rows] = action_distribution(self.policy, states[rows], enabled[rows], self.model.describe_state)
        if self.mode == "deterministic":
            best = np.argmax(np.where(enabled, pi, -1.0), axis=1)
            keep = np.zeros_like(enabled)
            keep[rows, best[rows]] = True
            pi = keep.astype(np.float64)
        elif self.threshold > 0:
            keep = enabled & (pi > self.threshold)
            none = has & ~keep.any(axis=1)
            if none.any():
                best = np.argmax(np.where(enabled, pi, -1.0), axis=1)
                keep[np.flatnonzero(none), best[none]] = True
            pi = np.where(keep, pi, 0.0)
            pi[rows] /= pi[rows].sum(axis=1, keepdims=True)
        out = np.zeros(enabled_model.shape)
        out[:, cols] = pi[:, self.model_to_policy[cols]]
        return out

    def action_weights(self, states: np.ndarray, enabled_model: np.ndarray) -> np.ndarray:
        """Weight ``[B, A_model]`` the induced rows give each model action of ``states`` ``[B, V]``.

        ``enabled_model`` ``[B, A_model]`` bool: the enabled actions. The policy's distribution under the mode
        and threshold (0: dropped or disabled); used to name the actions of a trace's steps
        (:mod:`distmc.explain.traces`). Needs a policy (an mdp outside monolithic mode).
        """
        return self._weights_matrix(states, enabled_model)

    def _policy_weights(self, states: np.ndarray, c_state: np.ndarray, c_action: np.ndarray) -> np.ndarray:
        """Weight of each choice ``[C]`` under the policy and mode (0 = dropped)."""
        enabled_model = np.zeros((states.shape[0], len(self.model.actions)), dtype=bool)
        enabled_model[c_state, c_action] = True
        return self._weights_matrix(states, enabled_model)[c_state, c_action]

    def _expand_fused(self, keys: np.ndarray, states: np.ndarray, term: np.ndarray) -> Rows | None:
        """The compiled path: one merged row per state straight from the kernel (None: use the general path).

        It applies when the kernel is compiled, keys are one word, no rewards are needed and the induced model is
        a DTMC whose rows fuse distinct actions (a state whose choices repeat an action label goes the general
        way, which keeps or splits that nondeterminism). The rows are those of the general path with duplicate
        targets already added up, in the same order, so the assembled model is identical.
        """
        compiled = self.kernel._compiled
        if compiled is None or self.codec.words != 1 or self.rewards:
            return None
        if self.policy is None and self.model.model_type != "dtmc":
            return None  # monolithic: one row per choice
        c = compiled.count(states, keys, term, light=True)
        assert c is not None  # a light count checks nothing
        weights = None
        policy_states = 0
        if self.policy is not None:
            if (c.per_action > 1).any():
                return None
            enabled = c.per_action > 0
            weights = self._weights_matrix(states, enabled)
            policy_states = int(enabled.any(axis=1).sum())
        fused = compiled.fused_rows(c, weights)
        if fused is None:
            return None  # a model check failed: the general path names the state
        offsets, target_keys, prob = fused
        b = states.shape[0]
        return Rows(
            np.arange(b, dtype=np.int64),
            np.full(b, NO_ACTION, dtype=np.int64),
            offsets,
            target_keys,
            prob,
            {},
            term,
            ~term & (c.choices == 0),
            policy_states,
        )

    # -- expansion ---------------------------------------------------------------------------------------------

    def policy_counters(self) -> tuple[int, float]:
        """Forward passes and seconds of the policy so far (the formats that count them; else 0, 0.0)."""
        policy = self.policy
        return int(getattr(policy, "forward_passes", 0)), float(getattr(policy, "seconds", 0.0))

    def expand(self, keys: np.ndarray) -> Rows:
        """Rows for the states with packed ``keys`` ``[B]``."""
        states = self.codec.unpack(keys)
        b = states.shape[0]
        term = self.terminal(states) if callable(self.terminal) else np.zeros(b, dtype=bool)
        fused = self._expand_fused(keys, states, term)
        if fused is not None:
            return fused
        active = np.flatnonzero(~term)
        exp = self.kernel.expand(states[active], keys[active])
        c_state = active[exp.choice_state]
        c_action = exp.choice_action
        has_choice = np.bincount(c_state, minlength=b) > 0
        deadlock = ~term & ~has_choice
        c_rew = {r.name: r.choice_rewards(states, c_state, c_action, self.kernel.action_id) for r in self.rewards}
        branch_choice = np.repeat(np.arange(exp.n_choices, dtype=np.int64), np.diff(exp.branch_offsets))
        policy_states = 0

        if self.model.model_type == "mdp" and self.policy is None:
            # Monolithic: one row per choice.
            row_state, row_action, offsets = c_state, c_action, exp.branch_offsets
            succ, prob = exp.succ_keys, exp.prob
            row_rew = c_rew
        else:
            if self.policy is None:  # dtmc: uniform fusion
                n = np.bincount(c_state, minlength=b)
                w = 1.0 / n[c_state]
                nondet = np.zeros(b, dtype=bool)
            else:
                w = self._policy_weights(states, c_state, c_action)
                policy_states = int(np.unique(c_state).shape[0])
                kept = w > 0
                # Same-label duplicates among kept choices.
                pair = c_state[kept] * (len(self.model.actions) + 1) + c_action[kept]
                uniq, cnt = np.unique(pair, return_counts=True)
                dup = np.zeros(b, dtype=bool)
                dup[(uniq[cnt > 1] // (len(self.model.actions) + 1)).astype(np.int64)] = True
                if dup.any() and self.resolve == "uniform":
                    per_choice = np.zeros(exp.n_choices, dtype=np.int64)
                    lookup = dict(zip(uniq.tolist(), cnt.tolist(), strict=True)) if cnt.max() > 1 else {}
                    per_choice[kept] = [lookup.get(p, 1) for p in pair.tolist()] if lookup else 1
                    w = np.where(kept, w / np.maximum(per_choice, 1), 0.0)
                    nondet = np.zeros(b, dtype=bool)
                else:
                    nondet = dup
            fuse = (w > 0) & ~nondet[c_state]
            fb = fuse[branch_choice]
            row_state = np.unique(c_state[fuse])
            per_row = np.bincount(c_state[branch_choice[fb]], minlength=b)[row_state]
            offsets = np.zeros(row_state.shape[0] + 1, dtype=np.int64)
            np.cumsum(per_row, out=offsets[1:])
            succ = exp.succ_keys[fb]
            prob = exp.prob[fb] * w[branch_choice[fb]]
            row_action = np.full(row_state.shape[0], NO_ACTION, dtype=np.int64)
            row_index = np.searchsorted(row_state, c_state[fuse])
            row_rew = {
                k: np.bincount(row_index, weights=v[fuse] * w[fuse], minlength=row_state.shape[0])
                for k, v in c_rew.items()
            }
            if nondet.any():
                row_state, row_action, offsets, succ, prob, row_rew = self._append_products(
                    states,
                    np.flatnonzero(nondet),
                    c_state,
                    c_action,
                    w,
                    exp,
                    c_rew,
                    (row_state, row_action, offsets, succ, prob, row_rew),
                )
        target_keys = succ
        # Self-loops for terminal and deadlock states.
        loops = np.flatnonzero(term | deadlock)
        if loops.size:
            row_state = np.concatenate([row_state, loops])
            row_action = np.concatenate([row_action, np.full(loops.size, NO_ACTION, dtype=np.int64)])
            offsets = np.concatenate([offsets, offsets[-1] + 1 + np.arange(loops.size, dtype=np.int64)])
            target_keys = np.concatenate([target_keys, keys[loops]])
            prob = np.concatenate([prob, np.ones(loops.size)])
            row_rew = {k: np.concatenate([v, np.zeros(loops.size)]) for k, v in row_rew.items()}
            order = np.argsort(row_state, kind="stable")
            gather, offsets = gather_rows(order, offsets)
            row_state, row_action = row_state[order], row_action[order]
            target_keys, prob = target_keys[gather], prob[gather]
            row_rew = {k: v[order] for k, v in row_rew.items()}
        return Rows(row_state, row_action, offsets, target_keys, prob, row_rew, term, deadlock, policy_states)

    def _append_products(self, states, nd_states, c_state, c_action, w, exp, c_rew, base):
        """Rows for states whose same-label choices stay nondeterministic (rare: a Python loop over them only)."""
        row_state, row_action, offsets, succ, prob, row_rew = base
        add_state, add_off, add_succ, add_prob = [], [], [], []
        add_rew: dict[str, list[float]] = {k: [] for k in row_rew}
        first = np.searchsorted(c_state, nd_states, side="left")
        last = np.searchsorted(c_state, nd_states, side="right")
        for s, lo, hi in zip(nd_states.tolist(), first.tolist(), last.tolist(), strict=True):
            groups: dict[int, list[int]] = {}
            for c in range(lo, hi):
                if w[c] > 0:
                    groups.setdefault(int(c_action[c]), []).append(c)
            combos = 1
            for g in groups.values():
                combos *= len(g)
            if combos > MAX_PRODUCT_ROWS:
                raise ResourceLimitError(
                    f"state {self.model.describe_state(states[s])} has {combos} combinations of same-label choices; "
                    "use --resolve uniform"
                )
            for combo in itertools.product(*groups.values()):
                parts = [np.arange(exp.branch_offsets[c], exp.branch_offsets[c + 1]) for c in combo]
                idx = np.concatenate(parts)
                add_state.append(s)
                add_off.append(idx.size)
                add_succ.append(exp.succ_keys[idx])
                add_prob.append(np.concatenate([exp.prob[p] * w[c] for p, c in zip(parts, combo, strict=True)]))
                for k in add_rew:
                    add_rew[k].append(float(sum(c_rew[k][c] * w[c] for c in combo)))
        row_state = np.concatenate([row_state, np.array(add_state, dtype=np.int64)])
        row_action = np.concatenate([row_action, np.full(len(add_state), NO_ACTION, dtype=np.int64)])
        offsets = np.concatenate([offsets, offsets[-1] + np.cumsum(add_off)])
        succ = np.concatenate([succ, *add_succ])
        prob = np.concatenate([prob, *add_prob])
        row_rew = {k: np.concatenate([v, np.array(add_rew[k])]) for k, v in row_rew.items()}
        order = np.argsort(row_state, kind="stable")
        gather, offsets = gather_rows(order, offsets)
        return (
            row_state[order],
            row_action[order],
            offsets,
            succ[gather],
            prob[gather],
            {k: v[order] for k, v in row_rew.items()},
        )
