"""A ``state_dict`` (``torch.save(net.state_dict())``) plus a small architecture spec in the interface file.

The weights are read with ``torch.load(weights_only=True)``, which unpickles tensors and plain containers only,
never code. The network is rebuilt from the interface's ``architecture`` object::

    "architecture": {
      "layers": [64, 64],             # hidden widths; input = len(features), output = len(actions)
      "activation": "tanh",           # relu, tanh, sigmoid, elu, leaky_relu, gelu, silu or identity
      "output_activation": "none",    # or "softmax" (then set "output": "probabilities")
      "prefix": ""                    # where the layers sit in the state_dict, e.g. "body." (other keys ignored)
    }

The rebuilt network is ``torch.nn.Sequential(Linear, act, Linear, act, ..., Linear[, Softmax])`` (its weights
upcast to float64 unless ``--policy-dtype float32``), so the
``state_dict`` keys it loads are ``{prefix}0.weight``, ``{prefix}0.bias``, ``{prefix}2.weight``, ...: what
``torch.nn.Sequential`` of the same layers saves. Every expected key must be present with its shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from distmc.errors import PolicyError
from distmc.model.program import Model
from distmc.policy.batched import TorchPolicy, policy_file
from distmc.policy.interface import Interface

__all__ = ["ACTIVATIONS", "StateDictPolicy", "build_network"]

#: Activation name -> torch.nn class name.
ACTIVATIONS = {
    "relu": "ReLU",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
    "elu": "ELU",
    "leaky_relu": "LeakyReLU",
    "gelu": "GELU",
    "silu": "SiLU",
    "identity": "Identity",
}


def build_network(arch: dict[str, Any], n_in: int, n_out: int, where: str = "architecture") -> Any:
    """The ``torch.nn.Sequential`` an architecture spec describes (fresh weights)."""
    import torch

    unknown = set(arch) - {"layers", "activation", "output_activation", "prefix"}
    if unknown:
        raise PolicyError(f"{where}: unknown architecture key(s) {sorted(unknown)}")
    layers = arch.get("layers", [])
    if not isinstance(layers, list) or not all(isinstance(w, int) and w > 0 for w in layers):
        raise PolicyError(f"{where}: 'layers' must be a list of positive widths, not {layers!r}")
    act = arch.get("activation", "relu")
    if act not in ACTIVATIONS:
        raise PolicyError(f"{where}: activation '{act}' is not one of {sorted(ACTIVATIONS)}")
    out_act = arch.get("output_activation", "none")
    if out_act not in ("none", "softmax"):
        raise PolicyError(f"{where}: output_activation must be 'none' or 'softmax', not '{out_act}'")
    mods: list[Any] = []
    widths = [n_in, *layers, n_out]
    for i in range(len(widths) - 1):
        mods.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            mods.append(getattr(torch.nn, ACTIVATIONS[act])())
    if out_act == "softmax":
        mods.append(torch.nn.Softmax(dim=-1))
    return torch.nn.Sequential(*mods)


class StateDictPolicy(TorchPolicy):
    """A network rebuilt from the interface's ``architecture`` with weights from a ``state_dict`` file."""

    def __init__(
        self, path: str | Path, interface: Interface, model: Model, device: str | None = None, dtype: str = "float64"
    ) -> None:
        import torch

        self.path = policy_file(path)
        super().__init__(str(self.path), self.path.name, interface, model, device, dtype)
        try:
            state = torch.load(str(self.path), map_location=self.device, weights_only=True)
        except Exception as exc:  # noqa: BLE001 - corrupt, or pickled code that weights_only refuses
            raise PolicyError(
                f"{self.path}: not a TorchScript module, a Stable-Baselines3 .zip, nor a state_dict that "
                f"torch.load(weights_only=True) reads "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            ) from None
        if interface.architecture is None:
            raise PolicyError(
                f'{self.path}: a state_dict needs an architecture: add "architecture": {{"layers": [...], '
                '"activation": ...}} to its interface file (see distmc.policy.statedict)'
            )
        net = build_network(
            interface.architecture, len(interface.features), len(interface.actions), f"{self.path} architecture"
        )
        if isinstance(state, dict) and set(state) == {"state_dict"}:
            state = state["state_dict"]
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise PolicyError(f"{self.path}: expected a mapping of parameter names to tensors (a state_dict)")
        prefix = str(interface.architecture.get("prefix", ""))
        own = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        expected = net.state_dict()
        missing = sorted(set(expected) - set(own))
        extra = sorted(set(own) - set(expected))
        if missing or extra:
            raise PolicyError(
                f"{self.path}: the state_dict does not fit the architecture: missing {[prefix + k for k in missing]}, "
                f"unexpected {[prefix + k for k in extra]} (keys present: {sorted(state)[:8]}...)"
            )
        bad = [
            f"{prefix}{k}: {tuple(own[k].shape)} vs {tuple(v.shape)}"
            for k, v in expected.items()
            if tuple(own[k].shape) != tuple(v.shape)
        ]
        if bad:
            raise PolicyError(f"{self.path}: parameter shapes differ from the architecture's: {bad}")
        net.load_state_dict({k: own[k] for k in expected})
        self.net = net.to(self.device)
        self._ready()
