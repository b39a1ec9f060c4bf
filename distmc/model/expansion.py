"""What a kernel answers for a batch of states: its :class:`Expansion`, and the constants both kernels share.

The numpy kernel (:mod:`distmc.model.kernel`) and the compiled one (:mod:`distmc.model._compiled`) both produce it;
it lives apart from both so that neither imports the other's module for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from distmc.model.packing import StateCodec

__all__ = ["NO_ACTION", "PROB_TOLERANCE", "Expansion"]

#: Action id of a fused (dtmc) choice and of the self-loop of a deadlock or terminal state.
NO_ACTION = -1

#: Tolerance of the sum-to-one check of a command's update probabilities (Storm's default precision).
PROB_TOLERANCE = 1e-6


@dataclass
class Expansion:
    """The enabled choices of a batch of ``B`` states, grouped by state in increasing order.

    Attributes:
        choice_state: ``[C]`` int64, index of the source state within the batch.
        choice_action: ``[C]`` int64, index into ``Model.actions`` (``NO_ACTION`` for a fused dtmc choice).
        branch_offsets: ``[C + 1]`` int64, the branches of choice ``c`` are ``branch_offsets[c]:branch_offsets[c+1]``.
        succ_keys: ``[T]`` packed successor states (the kernel's codec).
        prob: ``[T]`` float64, branch probabilities.
    """

    choice_state: np.ndarray
    choice_action: np.ndarray
    branch_offsets: np.ndarray
    succ_keys: np.ndarray
    prob: np.ndarray
    codec: StateCodec = field(repr=False)

    @property
    def n_choices(self) -> int:
        return int(self.choice_state.shape[0])

    @property
    def succ(self) -> np.ndarray:
        """``[T, V]`` int64 successor states (decoded from the keys)."""
        return self.codec.unpack(self.succ_keys)
