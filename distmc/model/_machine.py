"""The register machine of :mod:`distmc.model._compiled`: its interpreter, the product enumerator and the batch pass.

Compiled by numba on first use and cached on disk (once per installation); a model only feeds them its program and
tables. Kept apart from the compiler (``_compiled.py``) so that the compiled code is one unit that changes rarely.
"""

from __future__ import annotations

import math

import numpy as np

try:  # numba is a dependency, but the numpy kernel still works where it cannot be imported
    import numba as _nb

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only without numba
    HAVE_NUMBA = False

__all__ = ["CHUNK", "HAVE_NUMBA", "pack_rows", "run_pass"]

#: States per parallel work item.
CHUNK = 1024


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
        b,
        key,
        mode,
        c_at,
        t_at,
        g,
        p,
        kd,
        dsum,  # state b, key [W], mode, cursors, guards [K], probs [U], deltas [U, W]
        unl,
        cmd_first,
        cmd_nupd,
        cmd_action,
        grp_action,
        grp_mod_start,
        mod_cmd_start,
        mod_cmds,
        en,
        nen,
        idx,
        ui,  # scratch
        out_cs,
        out_ca,
        out_bo,
        out_keys,
        out_prob,
        act_count,
        wts,
        n_choices,
        uniform,
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
    def run_pass(
        S,
        K,
        mode,
        skip,
        c_off,
        t_off,
        counts_c,
        counts_t,
        flags,
        out_cs,
        out_ca,
        out_bo,
        out_keys,
        out_prob,
        act_count,
        wts,
        uniform,
        code,
        n_regs,
        const_reg,
        const_val,
        guard_end,
        cmd_greg,
        cmd_ucode,
        upd_preg,
        upd_asg,
        asg_col,
        asg_reg,
        lo,
        hi,
        word,
        shift,
        check_sum,
        tol,
        kmax,
        cmax,
        unl,
        cmd_first,
        cmd_nupd,
        cmd_action,
        grp_action,
        grp_mod_start,
        mod_cmd_start,
        mod_cmds,
    ):
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
                nc, nt = _enumerate(
                    b,
                    K[b],
                    mode,
                    c_off[b],
                    t_off[b],
                    g,
                    p,
                    kd,
                    dsum,
                    unl,
                    cmd_first,
                    cmd_nupd,
                    cmd_action,
                    grp_action,
                    grp_mod_start,
                    mod_cmd_start,
                    mod_cmds,
                    en,
                    nen,
                    idx,
                    ui,
                    out_cs,
                    out_ca,
                    out_bo,
                    out_keys,
                    out_prob,
                    act_count,
                    wts,
                    counts_c[b],
                    uniform,
                )
                if mode == 2:
                    counts_t[b] = _merge_segment(out_keys, out_prob, t_off[b], nt, tk, tpos, used)
                else:  # modes 0 and 3
                    counts_c[b] = nc
                    counts_t[b] = nt

    @_jit
    def pack_rows(keys, prob, t_off, counts):
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
