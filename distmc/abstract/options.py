"""What one analysis of a continuous-state controller does (``distmc abstract``), as one frozen, validated object.

:func:`distmc.abstract.refine.analyse` takes an :class:`AbstractOptions`, keywords over one, or keywords alone
(``analyse(env, net, faults, horizon=3, refine=5)``); ``distmc abstract`` builds one from its command line.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distmc.errors import UsageError

__all__ = ["ABSTRACTIONS", "MAX_SPLITS", "AbstractOptions", "default_workers"]

ABSTRACTIONS = ("tree", "lattice")
#: Bisections per box when splitting by action, per abstraction (measured in benchmarks/RESULTS.md: in the tree the
#: pieces of one action are hulled again, so splitting them buys little there and costs most of the time).
MAX_SPLITS = {"tree": 0, "lattice": 4}


def default_workers(abstraction: str, driver: str) -> int:
    """Workers when none are asked for.

    The tree splits on every core (measured faster here, benchmarks/RESULTS.md); the lattice in-process uses one
    process (its batches are too small to pay for starting the split processes).
    """
    return max(1, min(os.cpu_count() or 1, 8)) if abstraction == "tree" or driver == "ray" else 1


@dataclass(frozen=True)
class AbstractOptions:
    """The options of one analysis (:func:`~distmc.abstract.refine.analyse`), validated when made.

    Attributes:
        horizon: decisions within which failure is bounded.
        refine: refinement steps (each bisects the undecided boxes).
        threshold: the failure probability a box is decided against.
        min_size: the smallest box refined, as a fraction of the initial region's width.
        max_splits: bisections per box when splitting by action (None: :data:`MAX_SPLITS` of the abstraction).
        workers: processes that split boxes, or Ray actors (None: :func:`default_workers`).
        method: how the network is bounded over a box (``crown``, ...; :mod:`distmc.abstract.split`).
        driver: ``local`` or ``ray``.
        address: the Ray cluster to join (``driver="ray"``).
        abstraction: ``tree`` (:mod:`distmc.abstract.tree`) or ``lattice`` (:mod:`distmc.abstract.mdp`).
        validate: exact failure probabilities of this many uniform points of every new box, after each step.
        seed: the points' random seed.
        time_limit: seconds; refinement stops before a step that would end past it.
        progress: called with each step's record (not compared).
    """

    horizon: int
    refine: int
    threshold: float = 0.05
    min_size: float = 1 / 64
    max_splits: int | None = None
    workers: int | None = None
    method: str = "crown"
    driver: str = "local"
    address: str | None = None
    abstraction: str = "tree"
    validate: int = 0
    seed: int = 0
    time_limit: float | None = None
    progress: Callable[[dict[str, Any]], None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.driver not in ("local", "ray"):
            raise UsageError(f"driver must be 'local' or 'ray', not '{self.driver}'")
        if self.abstraction not in ABSTRACTIONS:
            raise UsageError(f"abstraction must be one of {', '.join(ABSTRACTIONS)}, not '{self.abstraction}'")
        if (
            self.refine < 0
            or not 0.0 <= self.threshold <= 1.0
            or not 0.0 < self.min_size <= 1.0
            or self.splits < 0
            or self.validate < 0
        ):
            raise UsageError(
                "need --refine >= 0, 0 <= --threshold <= 1, 0 < --min-size <= 1, --max-splits >= 0 and --validate >= 0"
            )

    @property
    def splits(self) -> int:
        """``max_splits``, or the abstraction's default."""
        return MAX_SPLITS[self.abstraction] if self.max_splits is None else self.max_splits

    @property
    def n_workers(self) -> int:
        """``workers``, or the default for the abstraction and the driver."""
        return default_workers(self.abstraction, self.driver) if self.workers is None else self.workers

    @classmethod
    def build(cls, options: AbstractOptions | None = None, /, **changes: Any) -> AbstractOptions:
        """``options`` with ``changes`` to its fields; an unknown name is a TypeError.

        Without ``options`` the changes alone, which then name ``horizon`` and ``refine``.
        """
        if options is None:
            return cls(**changes)
        return dataclasses.replace(options, **changes) if changes else options
