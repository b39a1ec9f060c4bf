"""The compiled successor kernel: a register machine compiled once (numba), fed a per-model program.

Why: the vectorised numpy kernel (:mod:`distmc.model.kernel`) makes one numpy call per command, update and
operator over a batch; on the paper's models (avoid.prism: 88 commands, each with a dozen operators) that is
thousands of passes over memory per batch, measured at about 1 M MDP transitions/s, below Storm's own builder.
Generating per-model numba code was tried first: it ran fast but took 15-40 s to compile per model (numba's type
inference is the cost), so instead every guard, probability and assignment of the model is translated once into a
short program for a small register machine (float64 registers, booleans as 0/1, common subexpressions shared), and
one interpreter, compiled by numba once per installation and cached on disk, runs that program state by state in
parallel chunks. A generic compiled routine then enumerates the synchronised products.

Contract: the same :class:`~distmc.model.kernel.Expansion` as the numpy kernel, choice for choice and branch for
branch in the same order (unlabelled commands first, in program order, then each synchronising action in
``Model.sync`` order, products enumerated with the last module's command varying fastest). It handles the common
case: no possible synchronising write conflict, and integer ranges within 2^52 (so
float64 registers are exact). When a state breaks a model check (a probability that is negative, not finite or
that does not sum to one with its siblings; a successor outside a variable's bounds) the batch is handed back to
the numpy kernel, whose error message names the state and the command; the compiled kernel never reports a result
for such a batch.

Successor keys are computed as ``key + sum of the participants' key deltas``: an update that sets variable ``i``
from ``x`` to ``x'`` adds ``(x' - x) << shift_i`` to the word of the packed key that holds ``i`` (modular 64-bit arithmetic, exact because
synchronising modules write disjoint variables and every successor is checked to lie within its bounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from distmc.model.expansion import PROB_TOLERANCE, Expansion
from distmc.model.expr import Tree

__all__ = ["CompiledKernel", "compiled_kernel_available"]


class Kernel(Protocol):
    """What this module reads of :class:`distmc.model.kernel.Kernel` (which imports this module, not the reverse)."""

    model: Any
    codec: Any
    commands: Any
    action_id: Any
    unlabelled: Any
    sync_groups: Any
    lo: Any
    hi: Any
    _conflicts: Any

#: States per parallel work item.
CHUNK = 1024

#: Largest magnitude of a variable bound for which float64 registers hold every integer exactly.
MAX_EXACT = 2**52

try:  # numba is a dependency, but the numpy kernel still works where it cannot be imported
    import numba as _nb

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only without numba
    _nb = None  # type: ignore[assignment]
    HAVE_NUMBA = False

# Opcodes of the register machine: (op, dst, a, b, c) reads registers a, b (and c for ite), writes dst.
OPS = ("add", "sub", "mul", "div", "min", "max", "fmod", "pow", "floor", "ceil", "eq", "ne", "lt", "le", "gt",
       "ge", "and", "or", "not", "implies", "ite")
OPCODE = {name: i for i, name in enumerate(OPS)}


def compiled_kernel_available(kernel: Kernel) -> bool:
    """Whether :class:`CompiledKernel` can serve this kernel's model."""
    bounds_ok = bool((np.abs(kernel.lo) < MAX_EXACT).all() and (np.abs(kernel.hi) < MAX_EXACT).all())
    return HAVE_NUMBA and not kernel._conflicts and bounds_ok


class _Program:
    """Register-machine code for a model: registers ``[0, V)`` hold the state, then constants, then temporaries."""

    def __init__(self, n_vars: int) -> None:
        self.n_vars = n_vars
        self.code: list[tuple[int, int, int, int, int]] = []
        self.consts: dict[float, int] = {}
        self.n_regs = n_vars
        self.zero = self.const(0.0)

    def const(self, value: float) -> int:
        if value not in self.consts:
            self.consts[value] = self.n_regs
            self.n_regs += 1
        return self.consts[value]

    def emit(self, t: Tree, memo: dict[Tree, int]) -> int:
        """Register holding ``t``, emitting code for it unless ``memo`` already has it (common subexpressions)."""
        if t[0] == "var":
            return int(t[1])
        if t[0] == "const":
            return self.const(float(t[1]))
        if t in memo:
            return memo[t]
        args = [self.emit(c, memo) for c in t[1:]]
        args += [self.zero] * (3 - len(args))
        dst = self.n_regs
        self.n_regs += 1
        self.code.append((OPCODE[t[0]], dst, args[0], args[1], args[2]))
        memo[t] = dst
        return dst



# The interpreter, the enumerator and the batch driver: compiled on first use, cached on disk by numba.
if HAVE_NUMBA:
    _jit = _nb.njit(cache=True, error_model="numpy", nogil=True)


    @_jit
    def _exec(code, start, end, r):
        for i in range(start, end):
            op = code[i, 0]
            a = r[code[i, 2]]
            b = r[code[i, 3]]
            if op == 10:
                x = 1.0 if a == b else 0.0
            elif op == 16:
                x = 1.0 if (a != 0.0 and b != 0.0) else 0.0
            elif op == 18:
                x = 0.0 if a != 0.0 else 1.0
            elif op == 17:
                x = 1.0 if (a != 0.0 or b != 0.0) else 0.0
            elif op == 11:
                x = 1.0 if a != b else 0.0
            elif op == 12:
                x = 1.0 if a < b else 0.0
            elif op == 13:
                x = 1.0 if a <= b else 0.0
            elif op == 14:
                x = 1.0 if a > b else 0.0
            elif op == 15:
                x = 1.0 if a >= b else 0.0
            elif op == 0:
                x = a + b
            elif op == 1:
                x = a - b
            elif op == 2:
                x = a * b
            elif op == 3:
                x = a / b
            elif op == 4:
                x = min(a, b)
            elif op == 5:
                x = max(a, b)
            elif op == 6:
                x = np.fmod(a, b)
            elif op == 7:
                x = a**b
            elif op == 8:
                x = math.floor(a)
            elif op == 9:
                x = math.ceil(a)
            elif op == 19:
                x = 1.0 if (a == 0.0 or b != 0.0) else 0.0
            else:  # ite
                x = b if a != 0.0 else r[code[i, 4]]
            r[code[i, 1]] = x

    @_jit
    def _enumerate(
        b, key, mode, c_at, t_at, g, p, kd, dsum,  # state b, key [W], mode, cursors, guards [K], probs [U], deltas [U, W]
        unl, cmd_first, cmd_nupd, cmd_action, grp_action, grp_mod_start, mod_cmd_start, mod_cmds,
        en, nen, idx, ui,  # scratch
        out_cs, out_ca, out_bo, out_keys, out_prob,
        act_count, wts, n_choices, uniform,
    ):
        # mode 0: count choices and branches (and choices per action into act_count[b]); mode 3: the same from the
        # guards alone (every branch counts, an upper bound); mode 1: write the choices and branches; mode 2 (fused):
        # write each branch with its probability times the weight of its choice (wts[b, action], or 1/n_choices
        # when uniform), skipping choices of weight zero.
        nc = 0
        nt = 0
        wc = 1.0
        for i in range(unl.shape[0]):
            c = unl[i]
            if g[c]:
                a = cmd_action[c]
                if mode == 3:
                    act_count[b, a] += 1
                    nc += 1
                    nt += cmd_nupd[c]
                    continue
                if mode == 0:
                    act_count[b, a] += 1
                elif mode == 1:
                    out_cs[c_at + nc] = b
                    out_ca[c_at + nc] = a
                    out_bo[c_at + nc] = t_at + nt
                else:
                    wc = 1.0 / n_choices if uniform else wts[b, a]
                nc += 1
                if mode == 2 and not wc > 0.0:
                    continue
                for u in range(cmd_first[c], cmd_first[c] + cmd_nupd[c]):
                    if p[u] > 0:
                        if mode != 0:
                            for w in range(key.shape[0]):
                                out_keys[t_at + nt, w] = key[w] + kd[u, w]
                            out_prob[t_at + nt] = p[u] if mode == 1 else p[u] * wc
                        nt += 1
        for gi in range(grp_action.shape[0]):
            m0 = grp_mod_start[gi]
            k = grp_mod_start[gi + 1] - m0
            ok = True
            for j in range(k):
                cnt = 0
                for t in range(mod_cmd_start[m0 + j], mod_cmd_start[m0 + j + 1]):
                    c = mod_cmds[t]
                    if g[c]:
                        en[j, cnt] = c
                        cnt += 1
                nen[j] = cnt
                if cnt == 0:
                    ok = False
                    break
            if not ok:
                continue
            a = grp_action[gi]
            if mode == 2:
                wc = 1.0 / n_choices if uniform else wts[b, a]
            for j in range(k):
                idx[j] = 0
            while True:
                if mode == 3:  # light count: every branch counts, so the number is the product of update counts
                    act_count[b, a] += 1
                    prod = 1
                    for j in range(k):
                        prod *= cmd_nupd[en[j, idx[j]]]
                    nt += prod
                elif mode == 0:
                    act_count[b, a] += 1
                elif mode == 1:
                    out_cs[c_at + nc] = b
                    out_ca[c_at + nc] = a
                    out_bo[c_at + nc] = t_at + nt
                nc += 1
                for j in range(k):
                    ui[j] = 0
                while mode != 3 and (mode != 2 or wc > 0.0):
                    pr = 1.0
                    dsum[:] = 0
                    for j in range(k):
                        u = cmd_first[en[j, idx[j]]] + ui[j]
                        pr *= p[u]
                        for w in range(key.shape[0]):
                            dsum[w] += kd[u, w]
                    if pr > 0:
                        if mode != 0:
                            for w in range(key.shape[0]):
                                out_keys[t_at + nt, w] = key[w] + dsum[w]
                            out_prob[t_at + nt] = pr if mode == 1 else pr * wc
                        nt += 1
                    j = k - 1
                    while j >= 0:
                        ui[j] += 1
                        if ui[j] < cmd_nupd[en[j, idx[j]]]:
                            break
                        ui[j] = 0
                        j -= 1
                    if j < 0:
                        break
                j = k - 1
                while j >= 0:
                    idx[j] += 1
                    if idx[j] < nen[j]:
                        break
                    idx[j] = 0
                    j -= 1
                if j < 0:
                    break
        return nc, nt

    @_jit
    def _merge_segment(keys, prob, start, n, tk, tpos, used):
        """Add up duplicate keys among one state's branches ``start:start+n`` (one-word keys), in place.

        Distinct keys keep the order of their first occurrence and duplicates are added in arrival order, so the
        visited set numbers new states exactly as it would from the unmerged branches. ``tk``/``tpos`` is an empty
        open-addressing table of at least ``2n`` slots (``tpos`` -1), left empty again; ``used`` has ``n`` slots.
        """
        if n <= 1:
            return n
        mask = np.uint64(tk.shape[0] - 1)
        m = 0
        for i in range(n):
            k = keys[start + i, 0]
            pr = prob[start + i]
            h = (np.uint64(k) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32) & mask
            while True:
                pos = tpos[h]
                if pos == -1:
                    tpos[h] = m
                    tk[h] = k
                    used[m] = h
                    keys[start + m, 0] = k
                    prob[start + m] = pr
                    m += 1
                    break
                if tk[h] == k:
                    prob[start + pos] += pr
                    break
                h = (h + np.uint64(1)) & mask
        for i in range(m):
            tpos[used[i]] = -1
        return m

    @_jit
    def _merge_table(t_off, lo, hi, needed):
        """An empty table for :func:`_merge_segment`, large enough for the longest row among states ``lo:hi``."""
        longest = 1
        if needed:
            for b in range(lo, hi):
                longest = max(longest, t_off[b + 1] - t_off[b])
        slots = 1
        while slots < 2 * longest:
            slots *= 2
        return np.zeros(slots, np.int64), np.full(slots, -1, np.int64), np.zeros(longest, np.uint64)

    @_nb.njit(cache=True, error_model="numpy", nogil=True, parallel=True)
    def _run(S, K, mode, skip, c_off, t_off, counts_c, counts_t, flags, out_cs, out_ca, out_bo, out_keys, out_prob,
             act_count, wts, uniform,
             code, n_regs, const_reg, const_val, guard_end, cmd_greg, cmd_ucode, upd_preg, upd_asg, asg_col, asg_reg,
             lo, hi, word, shift, check_sum, tol, kmax, cmax,
             unl, cmd_first, cmd_nupd, cmd_action, grp_action, grp_mod_start, mod_cmd_start, mod_cmds):
        B = S.shape[0]
        V = S.shape[1]
        NK = cmd_greg.shape[0]
        NU = upd_preg.shape[0]
        nchunks = (B + CHUNK - 1) // CHUNK
        for ch in _nb.prange(nchunks):
            r = np.zeros(n_regs, np.float64)
            for i in range(const_reg.shape[0]):
                r[const_reg[i]] = const_val[i]
            g = np.zeros(max(NK, 1), np.bool_)
            p = np.zeros(max(NU, 1), np.float64)
            kd = np.zeros((max(NU, 1), K.shape[1]), np.int64)
            dsum = np.zeros(K.shape[1], np.int64)
            en = np.zeros((kmax, cmax), np.int64)
            nen = np.zeros(kmax, np.int64)
            idx = np.zeros(kmax, np.int64)
            ui = np.zeros(kmax, np.int64)
            tk, tpos, used = _merge_table(t_off, ch * CHUNK, min(B, (ch + 1) * CHUNK), mode == 2)
            for b in range(ch * CHUNK, min(B, (ch + 1) * CHUNK)):
                if mode == 2 and (skip[b] or counts_c[b] == 0):  # terminal or deadlock: a self-loop
                    for w in range(K.shape[1]):
                        out_keys[t_off[b], w] = K[b, w]
                    out_prob[t_off[b]] = 1.0
                    counts_t[b] = 1
                    continue
                if skip[b]:
                    continue
                for v in range(V):
                    r[v] = S[b, v]
                _exec(code, 0, guard_end, r)
                flag = 0
                for k in range(NK):
                    on = r[cmd_greg[k]] != 0.0
                    g[k] = on
                    if not on:
                        continue
                    if mode == 3:  # light count: no update is evaluated
                        continue
                    _exec(code, cmd_ucode[k, 0], cmd_ucode[k, 1], r)
                    tot = 0.0
                    for u in range(cmd_first[k], cmd_first[k] + cmd_nupd[k]):
                        pu = r[upd_preg[u]]
                        if not (pu >= 0.0 and pu < np.inf):
                            flag = 1
                        p[u] = pu
                        kd[u, :] = 0
                        tot += pu
                        for a in range(upd_asg[u], upd_asg[u + 1]):
                            col = asg_col[a]
                            nv = np.int64(r[asg_reg[a]])
                            if nv < lo[col] or nv > hi[col]:
                                flag = 2
                            kd[u, word[col]] += (nv - S[b, col]) << shift[col]
                    if check_sum and abs(tot - 1.0) > tol:
                        flag = 3
                flags[b] = flag
                if flag != 0:
                    continue
                nc, nt = _enumerate(b, K[b], mode, c_off[b], t_off[b], g, p, kd, dsum, unl, cmd_first, cmd_nupd,
                                    cmd_action, grp_action, grp_mod_start, mod_cmd_start, mod_cmds, en, nen, idx, ui,
                                    out_cs, out_ca, out_bo, out_keys, out_prob, act_count, wts, counts_c[b], uniform)
                if mode == 2:
                    counts_t[b] = _merge_segment(out_keys, out_prob, t_off[b], nt, tk, tpos, used)
                else:  # modes 0 and 3
                    counts_c[b] = nc
                    counts_t[b] = nt

    @_jit
    def _compact(keys, prob, t_off, counts):
        """Pack the rows ``t_off[b] : t_off[b] + counts[b]`` of ``keys``/``prob`` together."""
        n = counts.shape[0]
        off = np.zeros(n + 1, np.int64)
        for b in range(n):
            off[b + 1] = off[b] + counts[b]
        ok = np.empty(off[n], keys.dtype)
        op = np.empty(off[n], np.float64)
        for b in range(n):
            ok[off[b] : off[b + 1]] = keys[t_off[b] : t_off[b] + counts[b], 0]
            op[off[b] : off[b + 1]] = prob[t_off[b] : t_off[b] + counts[b]]
        return off, ok, op


class CompiledKernel:
    """Compiled :meth:`Kernel.expand` for one model (see the module docstring for when it applies)."""

    def __init__(self, kernel: Kernel) -> None:
        assert compiled_kernel_available(kernel)

        self.kernel = kernel
        model = kernel.model
        codec = kernel.codec
        cmds = kernel.commands
        n_cmds = len(cmds)
        prog = _Program(len(model.variables))
        # Guards first, all of them, sharing subexpressions; then each command's updates, which may reuse guard
        # registers but not another command's (those are evaluated only when that command is enabled).
        guard_memo: dict[Tree, int] = {}
        greg = [prog.emit(c.guard.tree, guard_memo) for c in cmds]
        guard_end = len(prog.code)
        ucode: list[tuple[int, int]] = []
        preg: list[int] = []
        asg_start, asg_col, asg_reg, first, nupd = [0], [], [], [], []
        for c in cmds:
            memo = dict(guard_memo)
            start = len(prog.code)
            first.append(len(preg))
            nupd.append(len(c.updates))
            for upd in c.updates:
                preg.append(prog.emit(upd.prob.tree, memo))
                for col, e in upd.assigns:
                    asg_col.append(col)
                    asg_reg.append(prog.emit(e.tree, memo))
                asg_start.append(len(asg_col))
            ucode.append((start, len(prog.code)))
        i64 = np.int64
        self.code = np.array(prog.code, dtype=i64).reshape(-1, 5)
        self.n_regs = prog.n_regs
        self.const_reg = np.array(list(prog.consts.values()), dtype=i64)
        self.const_val = np.array(list(prog.consts.keys()), dtype=np.float64)
        self.guard_end = guard_end
        self.cmd_greg = np.array(greg, dtype=i64)
        self.cmd_ucode = np.array(ucode, dtype=i64).reshape(-1, 2)
        self.upd_preg = np.array(preg, dtype=i64)
        self.upd_asg = np.array(asg_start, dtype=i64)
        self.asg_col = np.array(asg_col, dtype=i64)
        self.asg_reg = np.array(asg_reg, dtype=i64)
        self.cmd_first = np.array(first, dtype=i64)
        self.cmd_nupd = np.array(nupd, dtype=i64)
        self.cmd_action = np.array([kernel.action_id[c.action] for c in cmds], dtype=i64)
        self.unl = np.array(kernel.unlabelled, dtype=i64)
        grp_action, grp_mod_start, mod_cmd_start, mod_cmds = [], [0], [0], []
        kmax, cmax = 1, 1
        for aid, groups in kernel.sync_groups:
            grp_action.append(aid)
            for g in groups:
                mod_cmds.extend(g)
                mod_cmd_start.append(len(mod_cmds))
                cmax = max(cmax, len(g))
            grp_mod_start.append(len(mod_cmd_start) - 1)
            kmax = max(kmax, len(groups))
        self._args = (
            self.code, self.n_regs, self.const_reg, self.const_val, self.guard_end, self.cmd_greg, self.cmd_ucode,
            self.upd_preg, self.upd_asg, self.asg_col, self.asg_reg,
            codec.lo.astype(i64), codec.hi.astype(i64), codec.word.astype(i64), codec.shift.astype(i64),
            model.model_type in ("dtmc", "mdp"), float(PROB_TOLERANCE), kmax, cmax,
            self.unl, self.cmd_first, self.cmd_nupd, self.cmd_action, np.array(grp_action, dtype=i64),
            np.array(grp_mod_start, dtype=i64), np.array(mod_cmd_start, dtype=i64), np.array(mod_cmds, dtype=i64),
        )
        assert n_cmds == self.cmd_greg.shape[0]

    def _run(self, states: np.ndarray, *args: Any) -> None:
        """The compiled pass over ``states``; a batch of one work item (``CHUNK`` states) runs on this thread alone.

        Why: the pass splits a batch into work items of ``CHUNK`` states over numba's thread pool, and a smaller
        batch has one item, so the pool only adds its wake-up, which dominates single steps (measured on a loaded
        2-core machine: 147 Gymnasium steps/s with the pool, 1890 with one thread, every step a new state).
        """
        if states.shape[0] > CHUNK:
            _run(states, *args)
            return
        threads = _nb.get_num_threads()
        _nb.set_num_threads(1)
        try:
            _run(states, *args)
        finally:
            _nb.set_num_threads(threads)

    @property
    def program_size(self) -> int:
        """Instructions of the model's register-machine program."""
        return int(self.code.shape[0])

    def count(
        self, states: np.ndarray, keys: np.ndarray, skip: np.ndarray | None = None, *, light: bool = False
    ) -> Counts | None:
        """First pass over ``states`` ``[B, V]`` (packed ``keys`` ``[B]``): what each state enables.

        Counts choices and branches per state, and choices per model action ``[B, A]``; states in ``skip`` ``[B]``
        bool are left out. None if a model check failed.

        ``light``: evaluate guards only; ``branches`` is then an upper bound (branches of probability zero count),
        and the model checks are left to the pass that evaluates the updates (:meth:`fused_rows`).
        """
        b = states.shape[0]
        states = np.ascontiguousarray(states, dtype=np.int64)
        words = self.kernel.codec.to_words(keys).view(np.int64)  # [B, W]
        skip = np.zeros(b, dtype=np.bool_) if skip is None else np.ascontiguousarray(skip, dtype=np.bool_)
        c = Counts(states, words, skip, np.zeros(b, dtype=np.int64), np.zeros(b, dtype=np.int64),
                   np.zeros((b, len(self.kernel.model.actions)), dtype=np.int64))
        flags = np.zeros(b, dtype=np.int64)
        z64, zf = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.float64)
        self._run(states, words, 3 if light else 0, skip, c.choices, c.branches, c.choices, c.branches, flags, z64, z64, z64,
                  words[:1], zf, c.per_action, np.zeros((1, 1)), False, *self._args)
        return None if flags.any() else c

    def expand(self, states: np.ndarray, keys: np.ndarray) -> Expansion | None:
        """Expansion of ``states`` ``[B, V]`` int64 with packed ``keys`` ``[B]``; None if a check failed."""
        c = self.count(states, keys)
        if c is None:
            return None
        codec = self.kernel.codec
        c_off, t_off = _offsets(c.choices), _offsets(c.branches)
        n_c, n_t = int(c_off[-1]), int(t_off[-1])
        out_cs = np.empty(n_c, dtype=np.int64)
        out_ca = np.empty(n_c, dtype=np.int64)
        out_bo = np.empty(n_c + 1, dtype=np.int64)
        out_keys = np.empty((n_t, codec.words), dtype=np.int64)
        out_prob = np.empty(n_t, dtype=np.float64)
        flags = np.zeros(states.shape[0], dtype=np.int64)
        self._run(c.states, c.words, 1, c.skip, c_off, t_off, c.choices.copy(), c.branches.copy(), flags, out_cs,
                  out_ca, out_bo, out_keys, out_prob, c.per_action, np.zeros((1, 1)), False, *self._args)
        out_bo[n_c] = n_t
        return Expansion(out_cs, out_ca, out_bo, codec.from_words(out_keys.view(np.uint64)), out_prob, codec=codec)

    def fused_rows(self, c: Counts, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """One merged row per state of a counted batch: ``sum_c w(c) P(s, c, .)``.

        Args:
            c: the batch's :meth:`count` (one-word keys only).
            weights: ``[B, A]`` weight of each model action (a state's choices must have distinct actions), or
                None for ``1 / (number of choices)`` per choice (a dtmc's uniform fusion).

        Returns:
            ``offsets [B + 1]``, ``keys [T]`` uint64 without duplicates within a row (distinct keys in order of first
            occurrence, duplicates added in arrival order), ``prob [T]``. Skipped (terminal) states and deadlocks get a self-loop. None if a model
            check failed.
        """
        assert self.kernel.codec.words == 1
        b = c.states.shape[0]
        cap = np.where(c.skip | (c.choices == 0), 1, c.branches)
        t_off = _offsets(cap)
        out_keys = np.empty((int(t_off[-1]), 1), dtype=np.int64)
        out_prob = np.empty(int(t_off[-1]), dtype=np.float64)
        merged = np.zeros(b, dtype=np.int64)
        flags = np.zeros(b, dtype=np.int64)
        z64 = np.zeros(1, dtype=np.int64)
        w = np.zeros((1, 1)) if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
        self._run(c.states, c.words, 2, c.skip, t_off, t_off, c.choices, merged, flags, z64, z64, z64, out_keys,
                  out_prob, c.per_action, w, weights is None, *self._args)
        if flags.any():
            return None
        offsets, keys, prob = _compact(out_keys, out_prob, t_off, merged)
        return offsets, keys.view(np.uint64), prob


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


@dataclass
class Counts:
    """The first pass over a batch of ``B`` states (:meth:`CompiledKernel.count`).

    Attributes:
        states: ``[B, V]`` int64.
        words: ``[B, W]`` int64, the packed keys as words.
        skip: ``[B]`` bool, states left out (terminal).
        choices: ``[B]`` int64 enabled choices per state (0 for a deadlock or a skipped state).
        branches: ``[B]`` int64 branches of positive probability per state.
        per_action: ``[B, A]`` int64 choices per model action.
    """

    states: np.ndarray
    words: np.ndarray
    skip: np.ndarray
    choices: np.ndarray
    branches: np.ndarray
    per_action: np.ndarray
