"""A Python function, or a torch module, as a policy: ``--policy package.module:function``.

The named function takes a batch of observations ``[B, F]`` (numpy; the interface's features, in order, times
their scale), float64 unless ``--policy-dtype float32``, and returns ``[B, A]`` outputs (a numpy array or a torch
tensor) over the interface's actions, as ``"probabilities"`` or ``"logits"`` per the interface. A function that
fails on float64 observations (its network is float32) is given float32 ones, and one whose outputs are float32
numbers computes in float32: the report then says the policy ran in float32
(:meth:`~distmc.policy.batched.BatchedPolicy._settle`). To run a network in float64, compute in float64 in the
function, or name the network itself: when the name is a ``torch.nn.Module`` (or TorchScript module), distmc
runs a copy of it as it runs any network file (:class:`~distmc.policy.batched.TorchPolicy`: converted to the
policy's dtype, on CUDA when available).

distmc calls it with fixed-shape batches of :data:`~distmc.policy.batched.BATCH` rows (padded with zeros), like
every network, so the function need not be batch-size independent. The module is imported by name, so it must be
importable (on ``PYTHONPATH``, or installed); importing it runs its code, as any ``import`` does.
"""

from __future__ import annotations

import copy
import importlib
import re
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from distmc.errors import PolicyError
from distmc.model.program import Model
from distmc.policy.batched import BatchedPolicy, TorchPolicy
from distmc.policy.interface import Interface

__all__ = ["CALLABLE_SPEC", "CallablePolicy", "ModulePolicy", "callable_policy", "resolve_callable"]

#: ``module.path:function`` (a dotted attribute path after the colon is allowed).
CALLABLE_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def resolve_callable(spec: str) -> Callable[[np.ndarray], Any]:
    """Import ``module:function`` and return the function."""
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise PolicyError(
            f"policy '{spec}': cannot import module '{module_name}' ({exc}); put it on PYTHONPATH"
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PolicyError(f"policy '{spec}': module '{module_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise PolicyError(f"policy '{spec}': '{attr}' is not callable")
    fn: Callable[[np.ndarray], Any] = obj
    return fn


def _is_torch_module(obj: object) -> bool:
    torch = sys.modules.get("torch")  # a module object exists only where torch was imported
    return torch is not None and isinstance(obj, torch.nn.Module)


def callable_policy(spec: str, interface: Interface, model: Model, dtype: str = "float64") -> BatchedPolicy:
    """The policy ``module:name`` names: a :class:`ModulePolicy` for a torch module, else a :class:`CallablePolicy`."""
    fn = resolve_callable(spec)
    if _is_torch_module(fn):
        return ModulePolicy(spec, fn, interface, model, dtype=dtype)
    return CallablePolicy(spec, interface, model, dtype=dtype, fn=fn)


class ModulePolicy(TorchPolicy):
    """A torch module named ``module:attribute``, run like a network file (a copy of it: the caller's is untouched)."""

    def __init__(
        self, spec: str, net: Any, interface: Interface, model: Model, device: str | None = None, dtype: str = "float64"
    ) -> None:
        super().__init__(spec, spec, interface, model, device, dtype)
        try:
            self.net = copy.deepcopy(net).to(self.device)
        except Exception as exc:  # noqa: BLE001 - user object
            raise PolicyError(f"policy '{spec}': cannot copy the torch module ({type(exc).__name__}: {exc})") from None
        self._ready()


class CallablePolicy(BatchedPolicy):
    """A function ``observations [B, F] -> outputs [B, A]`` named ``module:function``."""

    def __init__(
        self,
        spec: str,
        interface: Interface,
        model: Model,
        dtype: str = "float64",
        fn: Callable[[np.ndarray], Any] | None = None,
    ) -> None:
        super().__init__(spec, spec, interface, model, dtype)
        self.fn = fn if fn is not None else resolve_callable(spec)
        self._settle()

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
