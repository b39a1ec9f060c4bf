"""Policies: the contract, the built-in uniform policy, TorchScript networks with an interface file."""

from __future__ import annotations

from pathlib import Path

from distmc.model.program import Model
from distmc.policy.base import Policy, action_distribution
from distmc.policy.torchscript import Interface, TorchScriptPolicy, load_interface
from distmc.policy.uniform import UniformPolicy

__all__ = ["Interface", "Policy", "TorchScriptPolicy", "UniformPolicy", "action_distribution", "load_interface", "load_policy"]


def load_policy(spec: str | None, model: Model, interface: str | Path | None = None) -> Policy:
    """``"uniform"`` (or None) -> :class:`UniformPolicy`; a file path -> :class:`TorchScriptPolicy`."""
    iface = load_interface(interface, model)
    if spec is None or spec == "uniform":
        return UniformPolicy(iface.actions)
    return TorchScriptPolicy(spec, iface, model)
