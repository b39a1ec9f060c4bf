"""The risk of each enabled action in each explored state: one step by that action, then the policy.

``risk(s, a) = sum_s' P(s, a, s') V(s')``, where ``V`` is the property's value in every explored state under the
policy being shielded (the values table ``--values`` writes, in-process or one part per Ray worker). Why this and
not the minimal risk still reachable after ``a``: it needs nothing but the values distmc computed and one
expansion of each state by the kernel, it is the risk of what will really happen next (the policy acts again after
the step, not an optimal controller), and it is sound to act on: keeping only the actions whose risk is at most
the state's value never raises the value of an unbounded reachability property (the policy-improvement argument:
the restricted policy's one-step operator maps ``V`` below ``V``, so its least fixed point is below ``V`` too).
The minimal risk would need every successor of every action, states the policy never reaches and distmc never
explored, i.e. the whole MDP the policy-driven exploration exists to avoid. For a step-bounded property ``V(s')``
is the value of the full bound from ``s'``, which is at least the value of the bound less one step: the risk is
over-estimated, never under-estimated. A successor the exploration never reached (an action the policy does not
take, as in deterministic mode) counts as value 1: unknown risk is the highest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distmc.model.kernel import Kernel
from distmc.model.packing import StateCodec
from distmc.model.program import Model
from distmc.policy.shielded import KeyIndex

__all__ = ["ActionRisk", "UNKNOWN_VALUE", "action_risks"]

#: The value given to a successor no exploration reached (the highest a probability can have).
UNKNOWN_VALUE = 1.0

#: States expanded at a time.
BATCH = 1 << 15


@dataclass
class ActionRisk:
    """Per-state, per-model-action risks of ``N`` states.

    Attributes:
        risk: ``[N, A_model]`` float64, NaN where the action is not enabled (or the state is terminal).
        enabled: ``[N, A_model]`` bool (all False in a terminal state: nothing to shield there).
        unknown: number of branches to states no exploration reached (valued :data:`UNKNOWN_VALUE`).
    """

    risk: np.ndarray
    enabled: np.ndarray
    unknown: int


def action_risks(
    model: Model,
    kernel: Kernel,
    codec: StateCodec,
    terminal: object,
    states: np.ndarray,
    known: KeyIndex,
    values: np.ndarray,
) -> ActionRisk:
    """The risk of every enabled action of ``states`` ``[N, V]`` given the values ``[K]`` of ``known`` keys.

    ``terminal``: the property's ``f(states) -> [B] bool`` of states not expanded. Several choices with the same
    action label (same-label nondeterminism) take the highest risk among them.
    """
    n, a = states.shape[0], len(model.actions)
    risk = np.full((n, a), -np.inf)
    enabled = np.zeros((n, a), dtype=bool)
    unknown = 0
    for lo in range(0, n, BATCH):
        block = states[lo : lo + BATCH]
        term = terminal(block) if callable(terminal) else np.zeros(block.shape[0], dtype=bool)
        active = np.flatnonzero(~term)
        if active.size == 0:
            continue
        exp = kernel.expand(block[active], codec.pack(block[active]))
        rows = known.find(exp.succ_keys)  # [T]
        unknown += int((rows < 0).sum())
        v = np.where(rows >= 0, values[np.maximum(rows, 0)], UNKNOWN_VALUE)
        branch_choice = np.repeat(np.arange(exp.n_choices, dtype=np.int64), np.diff(exp.branch_offsets))
        q = np.bincount(branch_choice, weights=exp.prob * v, minlength=exp.n_choices)  # [C]
        s = lo + active[exp.choice_state]
        np.maximum.at(risk, (s, exp.choice_action), q)
        enabled[s, exp.choice_action] = True
    risk[~enabled] = np.nan
    return ActionRisk(risk, enabled, unknown)
