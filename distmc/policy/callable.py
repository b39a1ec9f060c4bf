"""A Python function as a policy: ``--policy package.module:function``.

The named function takes a batch of observations, ``float32`` ``[B, F]`` (the interface's features, in order,
times their scale) and returns ``[B, A]`` outputs (a numpy array or a torch tensor) over the interface's actions,
as ``"probabilities"`` or ``"logits"`` per the interface. distmc calls it with fixed-shape batches of
:data:`~distmc.policy.batched.BATCH` rows (padded with zeros), like every network, so the function need not be
batch-size independent. The module is imported by name, so it must be importable (on ``PYTHONPATH``, or installed);
importing it runs its code, as any ``import`` does.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from distmc.errors import PolicyError
from distmc.model.program import Model
from distmc.policy.batched import BatchedPolicy
from distmc.policy.interface import Interface

__all__ = ["CALLABLE_SPEC", "CallablePolicy", "resolve_callable"]

#: ``module.path:function`` (a dotted attribute path after the colon is allowed).
CALLABLE_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def resolve_callable(spec: str) -> Callable[[np.ndarray], Any]:
    """Import ``module:function`` and return the function."""
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise PolicyError(f"policy '{spec}': cannot import module '{module_name}' ({exc}); put it on PYTHONPATH") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PolicyError(f"policy '{spec}': module '{module_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise PolicyError(f"policy '{spec}': '{attr}' is not callable")
    fn: Callable[[np.ndarray], Any] = obj
    return fn


class CallablePolicy(BatchedPolicy):
    """A function ``observations [B, F] -> outputs [B, A]`` named ``module:function``."""

    def __init__(self, spec: str, interface: Interface, model: Model) -> None:
        super().__init__(spec, spec, interface, model)
        self.fn = resolve_callable(spec)

    def _call(self, chunk: np.ndarray) -> np.ndarray:
        y = self.fn(chunk)
        if hasattr(y, "detach"):  # a torch tensor
            y = y.detach().to("cpu").double().numpy()
        out = np.asarray(y, dtype=np.float64)
        if out.ndim != 2 or out.shape[0] != chunk.shape[0]:
            raise PolicyError(
                f"policy '{self.source}' returned shape {out.shape} for {chunk.shape[0]} observations; expected "
                f"({chunk.shape[0]}, {len(self.actions)})"
            )
        return out
