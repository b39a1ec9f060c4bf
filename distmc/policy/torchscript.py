"""A TorchScript network (``torch.jit.save``) with an interface file that maps states to inputs and outputs to actions.

The interface file is described in :mod:`distmc.policy.interface`. Arithmetic (the module's parameters and
buffers converted to float64 by ``Module.to``; a script whose own code casts to float32 runs in float32, and the
report says so), batching (fixed-shape batches of :data:`~distmc.policy.batched.BATCH` rows, and why), device and
thread choice are :class:`~distmc.policy.batched.TorchPolicy`'s. Loading a TorchScript file runs no Python code
from it.
"""

from __future__ import annotations

from pathlib import Path

from distmc.errors import PolicyError
from distmc.model.program import Model
from distmc.policy.batched import TorchPolicy, policy_file
from distmc.policy.interface import Interface

__all__ = ["TorchScriptPolicy"]


class TorchScriptPolicy(TorchPolicy):
    """A TorchScript module (``torch.jit.save``) evaluated in batches."""

    def __init__(self, path: str | Path, interface: Interface, model: Model, device: str | None = None,
                 dtype: str = "float64") -> None:
        import torch

        self.path = policy_file(path)
        super().__init__(str(self.path), self.path.name, interface, model, device, dtype)
        try:
            self.net = torch.jit.load(str(self.path), map_location=self.device)
        except Exception as exc:  # corrupt file, or not TorchScript
            raise PolicyError(
                f"{self.path}: not a loadable TorchScript module ({type(exc).__name__}); save it with torch.jit.save"
            ) from None
        self._ready()
