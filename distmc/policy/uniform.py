"""The built-in ``uniform`` policy: every enabled action equally likely."""

from __future__ import annotations

import numpy as np

__all__ = ["UniformPolicy"]


class UniformPolicy:
    """Uniform over the enabled actions (masking in :func:`~distmc.policy.base.action_distribution` does the rest)."""

    output = "logits"  # equal scores: softmax over the enabled actions gives exactly 1/k each
    name = "uniform"
    precision = "float64"  # 1/k, computed by action_distribution in float64 whatever --policy-dtype says
    precision_note = ""

    def __init__(self, actions: list[str]) -> None:
        self.actions = list(actions)
        self.forward_passes = 0
        self.states_evaluated = 0

    def forward(self, states: np.ndarray) -> np.ndarray:
        self.forward_passes += 1
        self.states_evaluated += states.shape[0]
        return np.zeros((states.shape[0], len(self.actions)))
