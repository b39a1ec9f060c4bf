"""The explorer's written contracts: what a model must provide to be explored, in process or on Ray workers.

Two models stand behind them: the PRISM kernel (:class:`~distmc.model.packing.StateCodec`,
:class:`~distmc.explore.expander.Expander`, :class:`~distmc.pipeline.Job`) and the box abstraction of
:mod:`distmc.abstract` (:class:`~distmc.abstract.mdp.KeyCodec`, :class:`~distmc.abstract.mdp.BoxExpander`,
:class:`~distmc.abstract.distributed.BoxJob`). The drivers (:func:`~distmc.explore.local.explore_local`,
:func:`~distmc.distributed.explore_ray`) see only these protocols and :class:`Rows`.

* :class:`KeyCodec`: a state is one fixed-width key ``[K]`` (a numpy dtype); the Ray exchange routes and ships
  keys as ``[K, words]`` uint64 words.
* :class:`SuccessorGenerator`: ``expand(keys [B]) -> Rows``, the rows of the induced model with the successors
  still keys; resolving them to ids is the driver's job.
* :class:`WorkerJob`: a few picklable fields that every worker turns into its own parts (:class:`WorkerParts`:
  the generator, the codec, the reward structures its rows carry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

__all__ = ["KeyCodec", "Rows", "SuccessorGenerator", "WorkerJob", "WorkerParts"]


@dataclass
class Rows:
    """Rows of the induced model for a batch of ``B`` source states, grouped by source in batch order.

    Attributes:
        row_state: ``[R]`` int64, index of the source state in the batch (non-decreasing).
        row_action: ``[R]`` int64, model action id of a row that is one choice, else ``NO_ACTION``.
        branch_offsets: ``[R + 1]`` int64.
        target_keys: ``[T]`` packed successor keys.
        prob: ``[T]`` float64 (duplicates within a row are merged later, by the reducer).
        rewards: reward structure name -> ``[R]`` float64 action reward of each row (policy-weighted).
        terminal: ``[B]`` bool, not expanded because of the property.
        deadlock: ``[B]`` bool, no enabled choice.
        policy_states: number of states whose distribution was asked of the policy.
    """

    row_state: np.ndarray
    row_action: np.ndarray
    branch_offsets: np.ndarray
    target_keys: np.ndarray
    prob: np.ndarray
    rewards: dict[str, np.ndarray] = field(default_factory=dict)
    terminal: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    deadlock: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    policy_states: int = 0

    @property
    def n_rows(self) -> int:
        return int(self.row_state.shape[0])


class KeyCodec(Protocol):
    """The keys of a model's states: one numpy value each, and its ``words`` uint64 words for the exchange."""

    @property
    def dtype(self) -> np.dtype:
        """The keys' dtype (``uint64`` for one word, else a fixed-size ``void``)."""
        ...

    @property
    def words(self) -> int:
        """uint64 words per key."""
        ...

    def to_words(self, keys: np.ndarray) -> np.ndarray:
        """Keys ``[K]`` -> their words ``[K, words]`` uint64."""
        ...

    def from_words(self, words: np.ndarray) -> np.ndarray:
        """Words ``[K, words]`` uint64 -> keys ``[K]``."""
        ...


class SuccessorGenerator(Protocol):
    """One expansion step: keys of states in, the rows of the induced model out (stateless between batches)."""

    @property
    def codec(self) -> KeyCodec:
        """The keys this generator takes and gives."""
        ...

    def expand(self, keys: np.ndarray) -> Rows:
        """The rows of the states ``keys`` ``[B]``, their successors as keys."""
        ...

    def policy_counters(self) -> tuple[int, float]:
        """Forward passes and seconds its policy has spent so far ((0, 0.0) without a counting policy)."""
        ...


class WorkerParts(Protocol):
    """What a worker builds from a :class:`WorkerJob`."""

    @property
    def expander(self) -> SuccessorGenerator | None:
        """The successor generator (None when built without the explorer: the Ray driver's own process)."""
        ...

    @property
    def codec(self) -> KeyCodec:
        """The keys of the model's states."""
        ...

    @property
    def reward_names(self) -> list[str]:
        """The reward structures the rows carry (checkpoint files and frontier rows have a column each)."""
        ...


class WorkerJob(Protocol):
    """What travels to every worker (picklable, small): it builds the worker's parts."""

    def build(self, *, explorer: bool = True) -> WorkerParts:
        """The parts; with ``explorer`` False, without the successor generator (cheaper)."""
        ...
