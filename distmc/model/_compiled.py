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
from typing import TYPE_CHECKING

import numpy as np

from distmc.model.expr import Tree

if TYPE_CHECKING:
    from distmc.model.kernel import Expansion, Kernel

__all__ = ["CompiledKernel", "compiled_kernel_available"]

#: States per parallel work item.
CHUNK = 1024

#: Largest magnitude of a variable bound for which float64 registers hold every integer exactly.
MAX_EXACT = 2**52

try:  # numba is a dependency, but the numpy kernel still works where it cannot be imported
    import numba as _nb

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only without numba
    _nb = None
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
    def _exec(code, start, end, r):  # type: ignore[no-untyped-def]
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
        b, key, fill, c_at, t_at, g, p, kd, dsum,  # state b, key [W], fill?, cursors, guards [K], probs [U], deltas [U, W]
        unl, cmd_first, cmd_nupd, cmd_action, grp_action, grp_mod_start, mod_cmd_start, mod_cmds,
        en, nen, idx, ui,  # scratch
        out_cs, out_ca, out_bo, out_keys, out_prob,
    ):  # type: ignore[no-untyped-def]
        nc = 0
        nt = 0
        for i in range(unl.shape[0]):
            c = unl[i]
            if g[c]:
                if fill:
                    out_cs[c_at + nc] = b
                    out_ca[c_at + nc] = cmd_action[c]
                    out_bo[c_at + nc] = t_at + nt
                nc += 1
                for u in range(cmd_first[c], cmd_first[c] + cmd_nupd[c]):
                    if p[u] > 0:
                        if fill:
                            for w in range(key.shape[0]):
                                out_keys[t_at + nt, w] = key[w] + kd[u, w]
                            out_prob[t_at + nt] = p[u]
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
            for j in range(k):
                idx[j] = 0
            while True:
                if fill:
                    out_cs[c_at + nc] = b
                    out_ca[c_at + nc] = grp_action[gi]
                    out_bo[c_at + nc] = t_at + nt
                nc += 1
                for j in range(k):
                    ui[j] = 0
                while True:
                    pr = 1.0
                    dsum[:] = 0
                    for j in range(k):
                        u = cmd_first[en[j, idx[j]]] + ui[j]
                        pr *= p[u]
                        for w in range(key.shape[0]):
                            dsum[w] += kd[u, w]
                    if pr > 0:
                        if fill:
                            for w in range(key.shape[0]):
                                out_keys[t_at + nt, w] = key[w] + dsum[w]
                            out_prob[t_at + nt] = pr
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


    @_nb.njit(cache=True, error_model="numpy", nogil=True, parallel=True)
    def _run(S, K, fill, c_off, t_off, counts_c, counts_t, flags, out_cs, out_ca, out_bo, out_keys, out_prob,
             code, n_regs, const_reg, const_val, guard_end, cmd_greg, cmd_ucode, upd_preg, upd_asg, asg_col, asg_reg,
             lo, hi, word, shift, check_sum, tol, kmax, cmax,
             unl, cmd_first, cmd_nupd, cmd_action, grp_action, grp_mod_start, mod_cmd_start, mod_cmds):  # type: ignore[no-untyped-def]
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
            for b in range(ch * CHUNK, min(B, (ch + 1) * CHUNK)):
                for v in range(V):
                    r[v] = S[b, v]
                _exec(code, 0, guard_end, r)
                flag = 0
                for k in range(NK):
                    on = r[cmd_greg[k]] != 0.0
                    g[k] = on
                    if not on:
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
                nc, nt = _enumerate(b, K[b], fill, c_off[b], t_off[b], g, p, kd, dsum, unl, cmd_first, cmd_nupd,
                                    cmd_action, grp_action, grp_mod_start, mod_cmd_start, mod_cmds, en, nen, idx, ui,
                                    out_cs, out_ca, out_bo, out_keys, out_prob)
                counts_c[b] = nc
                counts_t[b] = nt





class CompiledKernel:
    """Compiled :meth:`Kernel.expand` for one model (see the module docstring for when it applies)."""

    def __init__(self, kernel: Kernel) -> None:
        assert compiled_kernel_available(kernel)
        from distmc.model.kernel import PROB_TOLERANCE

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
        ucode, preg, asg_start, asg_col, asg_reg, first, nupd = [], [], [0], [], [], [], []
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
        self._run = _run
        assert n_cmds == self.cmd_greg.shape[0]

    @property
    def program_size(self) -> int:
        """Instructions of the model's register-machine program."""
        return int(self.code.shape[0])

    def expand(self, states: np.ndarray, keys: np.ndarray) -> Expansion | None:
        """Expansion of ``states`` ``[B, V]`` int64 with packed ``keys`` ``[B]`` uint64; None if a check failed."""
        from distmc.model.kernel import Expansion

        b = states.shape[0]
        states = np.ascontiguousarray(states, dtype=np.int64)
        codec = self.kernel.codec
        k64 = codec.to_words(keys).view(np.int64)  # [B, W]
        counts_c = np.zeros(b, dtype=np.int64)
        counts_t = np.zeros(b, dtype=np.int64)
        flags = np.zeros(b, dtype=np.int64)
        z64 = np.zeros(1, dtype=np.int64)
        zk = np.zeros((1, codec.words), dtype=np.int64)
        zf = np.zeros(1, dtype=np.float64)
        self._run(states, k64, False, counts_c, counts_t, counts_c, counts_t, flags, z64, z64, z64, zk, zf,
                  *self._args)
        if flags.any():
            return None
        c_off = np.zeros(b + 1, dtype=np.int64)
        np.cumsum(counts_c, out=c_off[1:])
        t_off = np.zeros(b + 1, dtype=np.int64)
        np.cumsum(counts_t, out=t_off[1:])
        n_c, n_t = int(c_off[-1]), int(t_off[-1])
        out_cs = np.empty(n_c, dtype=np.int64)
        out_ca = np.empty(n_c, dtype=np.int64)
        out_bo = np.empty(n_c + 1, dtype=np.int64)
        out_keys = np.empty((n_t, codec.words), dtype=np.int64)
        out_prob = np.empty(n_t, dtype=np.float64)
        self._run(states, k64, True, c_off, t_off, counts_c, counts_t, flags, out_cs, out_ca, out_bo, out_keys,
                  out_prob, *self._args)
        out_bo[n_c] = n_t
        return Expansion(out_cs, out_ca, out_bo, codec.from_words(out_keys.view(np.uint64)), out_prob, codec=codec)
