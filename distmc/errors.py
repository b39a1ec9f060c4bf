"""The error hierarchy of distmc: one root, one subclass per kind of failure.

Every error a user can cause ends in one of these, with a message that names the file, the line or the state,
and says what to do. Errors raised by user code (a policy network) are wrapped in :class:`PolicyError` with the
original exception chained, never swallowed.
"""

from __future__ import annotations

__all__ = [
    "CheckerProcessError",
    "CheckpointError",
    "DistmcError",
    "Interrupted",
    "MissingDependencyError",
    "ModelError",
    "PolicyError",
    "PropertyError",
    "ResourceLimitError",
    "SlowConvergenceError",
    "StorageError",
    "UnsupportedError",
    "UsageError",
    "WorkerError",
]


class DistmcError(Exception):
    """Root of every error distmc raises on purpose."""

    #: Process exit code the CLI uses for this kind of error.
    exit_code: int = 1


class UsageError(DistmcError):
    """An option's value, or a combination of options, is invalid (the message names the option and what to give).

    Raised before any work starts where it can be (:class:`~distmc.options.VerifyOptions` checks a run's options
    when it is made); exit code 1, as for the other errors of a run's set-up.
    """


class CheckpointError(DistmcError):
    """A checkpoint cannot be written, read or resumed (taken, damaged, of another run, of an older format)."""


class StorageError(DistmcError):
    """A file cannot be written: the disk is full, or the directory is read-only or not writable.

    The message names the path, the reason, and what was kept: the previous file, or the last good checkpoint.

    Every file distmc writes is written atomically (:mod:`distmc._internal.atomic`), so a failed write changes
    nothing on disk.
    """


class MissingDependencyError(DistmcError):
    """A package the run needs is not installed (the message names the ``pip install`` that brings it)."""


class Interrupted(DistmcError):
    """The run was stopped by the user (Ctrl-C, SIGINT); the message says what was saved and how to resume."""

    exit_code = 130  # 128 + SIGINT, what a shell reports for a process ended by Ctrl-C


class ModelError(DistmcError):
    """The PRISM model is malformed, incomplete or violates its own declarations."""

    exit_code = 3


class UnsupportedError(ModelError):
    """The model uses a feature distmc does not handle (a model type, clocks, ...)."""

    exit_code = 4


class PropertyError(DistmcError):
    """The PCTL property is malformed or refers to something the model does not have."""

    exit_code = 5


class SlowConvergenceError(PropertyError):
    """Value iteration converges too slowly on the model to reach the precision asked; the message names what to use."""


class PolicyError(DistmcError):
    """The policy cannot be loaded, does not fit the model, or returned an invalid distribution."""

    exit_code = 6


class ResourceLimitError(DistmcError):
    """A user-set limit (states, memory, time) was reached before the run finished.

    Attributes:
        partial: what the run had explored when it stopped (``states``, ``transitions``, ``frontier``, ``depth``,
            ``elapsed_s``, ``limit``), for the partial report; empty when the limit is not about exploration.
    """

    exit_code = 7

    def __init__(self, message: str, partial: dict[str, float] | None = None) -> None:
        super().__init__(message)
        self.partial: dict[str, float] = dict(partial or {})

    def __reduce__(self) -> tuple[object, ...]:  # keeps ``partial`` when it crosses a process (Ray)
        return (type(self), (str(self), self.partial))


class CheckerProcessError(DistmcError):
    """A checker's child process (the ``--exact`` check) ended without an answer: it was killed or crashed."""


class WorkerError(DistmcError):
    """A worker of a distributed run failed."""

    exit_code = 8
