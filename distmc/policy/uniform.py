"""The built-in ``uniform`` policy: every enabled action equally likely."""

from __future__ import annotations

import numpy as np

__all__ = ["UniformPolicy"]


class UniformPolicy:
    """Uniform over the enabled actions (masking in :func:`~distmc.policy.base.action_distribution` does the rest)."""

    output = "probabilities"
    name = "uniform"

    def __init__(self, actions: list[str]) -> None:
        self.actions = list(actions)
        self.forward_passes = 0
        self.states_evaluated = 0

    def forward(self, states: np.ndarray) -> np.ndarray:
        self.forward_passes += 1
        self.states_evaluated += states.shape[0]
        return np.ones((states.shape[0], len(self.actions)))
