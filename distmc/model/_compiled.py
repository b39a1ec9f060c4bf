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

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from distmc.model._machine import CHUNK, HAVE_NUMBA, _nb, pack_rows, run_pass
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


#: Largest magnitude of a variable bound for which float64 registers hold every integer exactly.
MAX_EXACT = 2**52

# Opcodes of the register machine: (op, dst, a, b, c) reads registers a, b (and c for ite), writes dst.
OPS = (
    "add",
    "sub",
    "mul",
    "div",
    "min",
    "max",
    "fmod",
    "pow",
    "floor",
    "ceil",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "and",
    "or",
    "not",
    "implies",
    "ite",
)
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
            self.code,
            self.n_regs,
            self.const_reg,
            self.const_val,
            self.guard_end,
            self.cmd_greg,
            self.cmd_ucode,
            self.upd_preg,
            self.upd_asg,
            self.asg_col,
            self.asg_reg,
            codec.lo.astype(i64),
            codec.hi.astype(i64),
            codec.word.astype(i64),
            codec.shift.astype(i64),
            model.model_type in ("dtmc", "mdp"),
            float(PROB_TOLERANCE),
            kmax,
            cmax,
            self.unl,
            self.cmd_first,
            self.cmd_nupd,
            self.cmd_action,
            np.array(grp_action, dtype=i64),
            np.array(grp_mod_start, dtype=i64),
            np.array(mod_cmd_start, dtype=i64),
            np.array(mod_cmds, dtype=i64),
        )
        assert n_cmds == self.cmd_greg.shape[0]

    def _run(self, states: np.ndarray, *args: Any) -> None:
        """The compiled pass over ``states``; a batch of one work item (``CHUNK`` states) runs on this thread alone.

        Why: the pass splits a batch into work items of ``CHUNK`` states over numba's thread pool, and a smaller
        batch has one item, so the pool only adds its wake-up, which dominates single steps (measured on a loaded
        2-core machine: 147 Gymnasium steps/s with the pool, 1890 with one thread, every step a new state).
        """
        if states.shape[0] > CHUNK:
            run_pass(states, *args)
            return
        threads = _nb.get_num_threads()
        _nb.set_num_threads(1)
        try:
            run_pass(states, *args)
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
        c = Counts(
            states,
            words,
            skip,
            np.zeros(b, dtype=np.int64),
            np.zeros(b, dtype=np.int64),
            np.zeros((b, len(self.kernel.model.actions)), dtype=np.int64),
        )
        flags = np.zeros(b, dtype=np.int64)
        z64, zf = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.float64)
        self._run(
            states,
            words,
            3 if light else 0,
            skip,
            c.choices,
            c.branches,
            c.choices,
            c.branches,
            flags,
            z64,
            z64,
            z64,
            words[:1],
            zf,
            c.per_action,
            np.zeros((1, 1)),
            False,
            *self._args,
        )
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
        self._run(
            c.states,
            c.words,
            1,
            c.skip,
            c_off,
            t_off,
            c.choices.copy(),
            c.branches.copy(),
            flags,
            out_cs,
            out_ca,
            out_bo,
            out_keys,
            out_prob,
            c.per_action,
            np.zeros((1, 1)),
            False,
            *self._args,
        )
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
        self._run(
            c.states,
            c.words,
            2,
            c.skip,
            t_off,
            t_off,
            c.choices,
            merged,
            flags,
            z64,
            z64,
            z64,
            out_keys,
            out_prob,
            c.per_action,
            w,
            weights is None,
            *self._args,
        )
        if flags.any():
            return None
        offsets, keys, prob = pack_rows(out_keys, out_prob, t_off, merged)
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
