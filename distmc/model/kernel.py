"""The successor kernel: a batch of states in, every enabled choice and its successors out.

Compiled once per model (:class:`Kernel`). Guards are decided per module, before the product: for each module
and command the guard is one vectorised evaluation over the batch, the enabled (state, command) pairs are
gathered, and synchronisation on an action label is a vectorised join of the modules' enabled pairs by state
(mixed-radix enumeration of the product), so the cost follows the enabled combinations, not the size of the
flattened program. Each update is stored as a delta on the state vector; the successor of a synchronised
choice is the source state plus the sum of its participants' deltas (modules write disjoint variables; a
synchronising write of one variable by two modules is an error, as in Storm).

Every probability is checked (finite, non-negative, the updates of each command summing to one) and every
successor is checked against its variables' bounds; the first violation raises :class:`~distmc.errors.ModelError`
naming the state and the command. Branches of probability zero are dropped, as Storm does.

For a ``dtmc`` model the explorer fuses the choices of a state into one with weight 1/(number of choices), as
PRISM and Storm do; the kernel itself always returns the separate choices.
"""

from __future__ import annotations

import os

import numpy as np

from distmc.errors import ModelError
from distmc.model.expansion import NO_ACTION, PROB_TOLERANCE, Expansion
from distmc.model.packing import StateCodec
from distmc.model.program import Command, Model

__all__ = ["Expansion", "Kernel", "NO_ACTION"]


def _mixed_radix(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Enumerate the product of ``counts`` ``[N, k]``: for each item ``n`` every tuple ``0 <= i_j < counts[n, j]``.

    Returns ``owner [M]`` (the item of each tuple) and ``digits [M, k]``.
    """
    total = np.prod(counts, axis=1)
    owner = np.repeat(np.arange(counts.shape[0], dtype=np.int64), total)
    starts = np.cumsum(total) - total
    local = np.arange(owner.shape[0], dtype=np.int64) - starts[owner]
    k = counts.shape[1]
    digits = np.empty((owner.shape[0], k), dtype=np.int64)
    for j in range(k - 1, -1, -1):  # loop over the k participants, not over states
        c = counts[owner, j]
        digits[:, j] = local % c
        local //= c
    return owner, digits


class Kernel:
    """Successor generator compiled from a :class:`~distmc.model.program.Model`.

    Example:
        >>> kernel = Kernel(model)  # doctest: +SKIP
        >>> exp = kernel.expand(model.initial_states)
        >>> exp.succ.shape, exp.prob.sum()
    """

    def __init__(self, model: Model, codec: StateCodec | None = None, *, compiled: bool | None = None) -> None:
        """Compile the kernel of ``model``.

        Args:
            model: the model.
            codec: how states are packed (default: ``StateCodec(model.lo, model.hi)``).
            compiled: use the numba kernel (:mod:`distmc.model._compiled`) where it applies; default on, unless the
                environment sets ``DISTMC_KERNEL=numpy``.
        """
        self.model = model
        self.codec = codec if codec is not None else StateCodec(model.lo, model.hi)
        self.lo = model.lo
        self.hi = model.hi
        self.n_vars = len(model.variables)
        self.action_id = {a: i for i, a in enumerate(model.actions)}
        self.commands: list[Command] = [c for m in model.modules for c in m.commands]
        # Writes of every command (union over its updates), for the synchronising-write check.
        self._writes = [frozenset(col for u in c.updates for col, _ in u.assigns) for c in self.commands]
        # Per action label: for each participating module, the global indices of its commands with that label.
        gid = 0
        per_module: list[list[int]] = []
        for m in model.modules:
            per_module.append(list(range(gid, gid + len(m.commands))))
            gid += len(m.commands)
        self.unlabelled = [g for g, c in enumerate(self.commands) if c.action == ""]
        self.sync_groups: list[tuple[int, list[list[int]]]] = []
        for action, mods in model.sync.items():
            groups = [[g for g in per_module[mi] if self.commands[g].action == action] for mi in mods]
            self.sync_groups.append((self.action_id[action], groups))
        self._conflicts: dict[int, list[tuple[int, int]]] = {}
        for aid, groups in self.sync_groups:
            pairs = []
            for i in range(len(groups)):
                for j in range(i + 1, len(groups)):
                    for a in groups[i]:
                        for b in groups[j]:
                            if self._writes[a] & self._writes[b]:
                                pairs.append((a, b))
            if pairs:
                self._conflicts[aid] = pairs
        if compiled is None:
            compiled = os.environ.get("DISTMC_KERNEL", "compiled") != "numpy"
        self._compiled = None
        if compiled:
            from distmc.model._compiled import CompiledKernel, compiled_kernel_available

            if compiled_kernel_available(self):
                self._compiled = CompiledKernel(self)

    @property
    def is_compiled(self) -> bool:
        """Whether batches go through the numba kernel."""
        return self._compiled is not None

    # -- per-command update tables ----------------------------------------------------------------------------

    def _command_tables(
        self, states: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Evaluate every guard, and every update of every enabled (state, command) pair.

        Returns:
            pair_state [P], pair_cmd [P], pair_row [P] (first update row), pair_nupd [P],
            row_prob [R], row_delta [R, V].
        """
        ps, pc, pr, pn, probs, deltas = [], [], [], [], [], []
        row = 0
        for g, cmd in enumerate(self.commands):
            enabled = cmd.guard(states)
            idx = np.flatnonzero(enabled)
            if idx.size == 0:
                continue
            sub = states[idx]
            nu = len(cmd.updates)
            p = np.empty((idx.size, nu), dtype=np.float64)
            d = np.zeros((idx.size, nu, self.n_vars), dtype=np.int64)
            for u, upd in enumerate(cmd.updates):
                p[:, u] = upd.prob(sub)
                for col, e in upd.assigns:
                    d[:, u, col] = e(sub).astype(np.int64) - sub[:, col]
            self._check_probabilities(cmd, sub, p)
            ps.append(idx)
            pc.append(np.full(idx.size, g, dtype=np.int64))
            pr.append(row + np.arange(idx.size, dtype=np.int64) * nu)
            pn.append(np.full(idx.size, nu, dtype=np.int64))
            probs.append(p.reshape(-1))
            deltas.append(d.reshape(idx.size * nu, self.n_vars))
            row += idx.size * nu
        if not ps:
            z = np.zeros(0, dtype=np.int64)
            return z, z, z, z, np.zeros(0), np.zeros((0, self.n_vars), dtype=np.int64)
        return (
            np.concatenate(ps),
            np.concatenate(pc),
            np.concatenate(pr),
            np.concatenate(pn),
            np.concatenate(probs),
            np.concatenate(deltas),
        )

    def _check_probabilities(self, cmd: Command, sub: np.ndarray, p: np.ndarray) -> None:
        bad = ~np.isfinite(p).all(axis=1) | (p < 0).any(axis=1)
        total = p.sum(axis=1)
        if self.model.model_type in ("dtmc", "mdp"):
            bad |= np.abs(total - 1.0) > PROB_TOLERANCE
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ModelError(
                f"{self.model.path}: in state {self.model.describe_state(sub[i])}, {cmd.where(self.model.modules)}: "
                f"update probabilities {p[i].tolist()} do not form a distribution (sum {total[i]:.12g})"
            )

    # -- expansion --------------------------------------------------------------------------------------------

    def expand(self, states: np.ndarray, keys: np.ndarray | None = None) -> Expansion:
        """All enabled choices of ``states`` ``[B, V]`` int64 (deadlocks have none; the caller adds self-loops).

        ``keys`` ``[B]``, the packed ``states``, saves packing them again when the caller has them.
        """
        states = np.ascontiguousarray(states, dtype=np.int64)
        if self._compiled is not None:
            exp = self._compiled.expand(states, self.codec.pack(states) if keys is None else keys)
            if exp is not None:
                return exp
            # A model check failed in this batch: the numpy path below finds it and names the state.
        return self._expand_numpy(states)

    def _expand_numpy(self, states: np.ndarray) -> Expansion:
        pair_state, pair_cmd, pair_row, pair_nupd, row_prob, row_delta = self._command_tables(states)
        # Each choice source: (state [C], action [C], participants [C, k] pair ids).
        sources: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        cmd_action = np.array([self.action_id[c.action] for c in self.commands], dtype=np.int64)
        if self.unlabelled:
            is_unl = np.isin(pair_cmd, np.array(self.unlabelled, dtype=np.int64))
            pid = np.flatnonzero(is_unl)
            sources.append((pair_state[pid], cmd_action[pair_cmd[pid]], pid[:, None]))
        n = states.shape[0]
        for aid, groups in self.sync_groups:
            per_mod = []
            counts = np.empty((n, len(groups)), dtype=np.int64)
            for j, cmds in enumerate(groups):
                pid = np.flatnonzero(np.isin(pair_cmd, np.array(cmds, dtype=np.int64)))
                pid = pid[np.argsort(pair_state[pid], kind="stable")]
                counts[:, j] = np.bincount(pair_state[pid], minlength=n)
                per_mod.append(pid)
            ok = np.flatnonzero((counts > 0).all(axis=1))
            if ok.size == 0:
                continue
            owner, digits = _mixed_radix(counts[ok])
            parts = np.empty_like(digits)
            for j, pid in enumerate(per_mod):
                start = np.cumsum(counts[:, j]) - counts[:, j]
                parts[:, j] = pid[start[ok[owner]] + digits[:, j]]
            if aid in self._conflicts:
                self._check_sync_writes(aid, states, pair_state, pair_cmd, parts)
            sources.append((ok[owner], np.full(owner.shape[0], aid, dtype=np.int64), parts))
        if not sources:
            z = np.zeros(0, dtype=np.int64)
            return Expansion(
                z,
                z,
                np.zeros(1, dtype=np.int64),
                self.codec.pack(np.zeros((0, self.n_vars), dtype=np.int64)),
                np.zeros(0),
                self.codec,
            )
        cs, ca, offs, succs, probs = [], [], [], [], []
        for c_state, c_action, parts in sources:
            nupd = pair_nupd[parts]  # [C, k]
            owner, digits = _mixed_radix(nupd)
            rows = pair_row[parts[owner]] + digits  # [T, k]
            prob = row_prob[rows].prod(axis=1)
            succ = states[c_state[owner]] + row_delta[rows].sum(axis=1)
            # Branches of probability zero are dropped (Storm drops them too).
            keep = prob > 0
            per_choice = np.bincount(owner[keep], minlength=c_state.shape[0])
            cs.append(c_state)
            ca.append(c_action)
            offs.append(per_choice)
            succs.append(succ[keep])
            probs.append(prob[keep])
        choice_state = np.concatenate(cs)
        choice_action = np.concatenate(ca)
        per_choice = np.concatenate(offs)
        succ = np.concatenate(succs)
        prob = np.concatenate(probs)
        # Group choices by state (stable: unlabelled commands first, then actions in model order).
        order = np.argsort(choice_state, kind="stable")
        branch_start = np.cumsum(per_choice) - per_choice
        per_choice = per_choice[order]
        choice_state, choice_action = choice_state[order], choice_action[order]
        gather = np.repeat(branch_start[order], per_choice) + (
            np.arange(int(per_choice.sum()), dtype=np.int64) - np.repeat(np.cumsum(per_choice) - per_choice, per_choice)
        )
        succ, prob = succ[gather], prob[gather]
        offsets = np.zeros(choice_state.shape[0] + 1, dtype=np.int64)
        np.cumsum(per_choice, out=offsets[1:])
        self._check_bounds(states, choice_state, choice_action, offsets, succ)
        return Expansion(choice_state, choice_action, offsets, self.codec.pack(succ), prob, self.codec)

    def _check_sync_writes(
        self, aid: int, states: np.ndarray, pair_state: np.ndarray, pair_cmd: np.ndarray, parts: np.ndarray
    ) -> None:
        cmds = pair_cmd[parts]
        for a, b in self._conflicts[aid]:
            hit = (cmds == a).any(axis=1) & (cmds == b).any(axis=1)
            if hit.any():
                s = states[pair_state[parts[int(np.flatnonzero(hit)[0]), 0]]]
                ca, cb = self.commands[a], self.commands[b]
                raise ModelError(
                    f"{self.model.path}: in state {self.model.describe_state(s)}, action '{ca.action}' synchronises "
                    f"{ca.where(self.model.modules)} and {cb.where(self.model.modules)}, which both write "
                    f"{sorted(self.model.variables[c].name for c in self._writes[a] & self._writes[b])} "
                    "(illegal synchronising write)"
                )

    def _check_bounds(
        self,
        states: np.ndarray,
        choice_state: np.ndarray,
        choice_action: np.ndarray,
        offsets: np.ndarray,
        succ: np.ndarray,
    ) -> None:
        bad = ((succ < self.lo) | (succ > self.hi)).any(axis=1)
        if not bad.any():
            return
        t = int(np.flatnonzero(bad)[0])
        c = int(np.searchsorted(offsets, t, side="right") - 1)
        src = states[choice_state[c]]
        col = int(np.flatnonzero((succ[t] < self.lo) | (succ[t] > self.hi))[0])
        v = self.model.variables[col]
        act = self.model.actions[choice_action[c]] if choice_action[c] >= 0 else ""
        raise ModelError(
            f"{self.model.path}: in state {self.model.describe_state(src)}, a command"
            f"{' of action [' + act + ']' if act else ''} sets '{v.name}' to {int(succ[t, col])}, "
            f"outside its range [{v.lo}..{v.hi}]"
        )
