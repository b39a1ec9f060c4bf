"""Policies: the contract, the built-in uniform policy, TorchScript networks with an interface file."""

from __future__ import annotations

from pathlib import Path

from distmc.model.program import Model
from distmc.policy.base import Policy, action_distribution
from distmc.policy.torchscript import Interface, TorchScriptPolicy, load_interface
from distmc.policy.uniform import UniformPolicy

__all__ = [
    "Interface",
    "Policy",
    "TorchScriptPolicy",
    "UniformPolicy",
    "action_distribution",
    "find_interface",
    "load_interface",
    "load_policy",
]

#: Interface files looked for beside a policy file ``trained.zip``/``trained.pt``, in this order.
SIDECARS = (".interface.json", ".interface.toml", ".json", ".toml")


def find_interface(policy_path: str | Path) -> Path | None:
    """The interface file saved beside a policy (``trained.pt`` -> ``trained.interface.json``, ``trained.json``, ...)."""
    p = Path(policy_path)
    for suffix in SIDECARS:
        candidate = p.with_name(p.stem + suffix)
        if candidate.is_file() and candidate != p:
            return candidate
    return None


def load_policy(spec: str | None, model: Model, interface: str | Path | None = None) -> Policy:
    """``"uniform"`` (or None) -> :class:`UniformPolicy`; a file path -> :class:`TorchScriptPolicy`.

    Without ``interface``, a policy file's interface is the one saved beside it (:func:`find_interface`), else the
    documented defaults.
    """
    if interface is None and spec not in (None, "uniform") and Path(str(spec)).is_file():
        interface = find_interface(str(spec))
    iface = load_interface(interface, model)
    if spec is None or spec == "uniform":
        return UniformPolicy(iface.actions)
    return TorchScriptPolicy(spec, iface, model)
