"""distmc: verify trained RL policies by model checking the policy-induced DTMC with Storm."""

from __future__ import annotations

import os as _os

# The compiled kernel (numba, OpenMP threads) and the policy (torch) take turns on the same cores. With OpenMP's
# default active waiting, the threads of one keep spinning while the other runs: measured on 2 cores, torch's
# forward passes took twice as long right after a kernel call. Passive waiting hands the cores over. It must be
# set before an OpenMP runtime starts; a value the user set is kept.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from distmc.errors import (  # noqa: E402
    CheckpointError,
    DistmcError,
    ModelError,
    PolicyError,
    PropertyError,
    ResourceLimitError,
    StorageError,
    UnsupportedError,
    UsageError,
    WorkerError,
)

__version__ = "0.1.0"

#: What a user calls, imported on first use so that ``import distmc`` stays light (no stormpy, torch or Ray).
_API = {
    "verify": "distmc.api",
    "Report": "distmc.api",
    "Session": "distmc.api",
    "sweep": "distmc.api",
    "VerifyOptions": "distmc.options",
    "verify_region": "distmc.region",
}


def __getattr__(name: str) -> object:
    """``distmc.verify``, ``distmc.VerifyOptions``, ...: the entry points of :data:`_API`, loaded when first asked for."""
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'distmc' has no attribute {name!r}")


__all__ = [
    "CheckpointError",
    "DistmcError",
    "ModelError",
    "PolicyError",
    "PropertyError",
    "ResourceLimitError",
    "StorageError",
    "UnsupportedError",
    "UsageError",
    "WorkerError",
    "Report",
    "Session",
    "VerifyOptions",
    "__version__",
    "sweep",
    "verify",
    "verify_region",
]
