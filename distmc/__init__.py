"""distmc: verify trained RL policies by model checking the policy-induced DTMC with Storm."""

from __future__ import annotations

import os as _os

# The compiled kernel (numba, OpenMP threads) and the policy (torch) take turns on the same cores. With OpenMP's
# default active waiting, the threads of one keep spinning while the other runs: measured on 2 cores, torch's
# forward passes took twice as long right after a kernel call. Passive waiting hands the cores over. It must be
# set before an OpenMP runtime starts; a value the user set is kept.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from distmc.errors import (  # noqa: E402
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
