"""distmc: verify trained RL policies by model checking the policy-induced DTMC with Storm."""

from __future__ import annotations

from distmc.errors import (
    DistmcError,
    ModelError,
    PolicyError,
    PropertyError,
    ResourceLimitError,
    UnsupportedError,
    WorkerError,
)

__version__ = "0.1.0"

__all__ = [
    "DistmcError",
    "ModelError",
    "PolicyError",
    "PropertyError",
    "ResourceLimitError",
    "UnsupportedError",
    "WorkerError",
    "__version__",
]
