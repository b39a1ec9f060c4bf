"""Controllers of continuous systems: a feed-forward network stored as plain torch weights plus a JSON spec.

The spec (``NAME.json``) lists the layers (``{"type": "linear", "in": I, "out": O}``, ``{"type": "relu"}``,
``{"type": "tanh"}``, ``{"type": "softmax"}``), the environment, and the file of weights (a ``torch.save`` of
the ``state_dict`` of the equivalent ``torch.nn.Sequential``, loaded with ``weights_only=True``). The action is
the argmax of the output; a final softmax does not change the argmax and is dropped for the bounds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from distmc.errors import PolicyError

__all__ = ["Network", "load_network"]

ACTIVATIONS = ("relu", "tanh")


@dataclass
class Network:
    """A feed-forward network in float64: ``layers`` is a list of ``("linear", W, b)`` or ``(act, None, None)``.

    Attributes:
        layers: the layers in order (a trailing softmax already removed).
        env: name of the environment it controls.
        meta: the spec's other fields (training metadata).
    """

    layers: list[tuple[str, torch.Tensor | None, torch.Tensor | None]]
    env: str = ""
    meta: dict[str, Any] | None = None

    @property
    def n_inputs(self) -> int:
        w = next(w for k, w, _ in self.layers if k == "linear")
        assert w is not None
        return int(w.shape[1])

    @property
    def n_outputs(self) -> int:
        w = [w for k, w, _ in self.layers if k == "linear"][-1]
        assert w is not None
        return int(w.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs ``[N, A]`` for inputs ``[N, d]`` (float64)."""
        for kind, w, b in self.layers:
            if kind == "linear":
                assert w is not None and b is not None
                x = x @ w.T + b
            elif kind == "relu":
                x = torch.relu(x)
            else:
                x = torch.tanh(x)
        return x

    def act(self, x: np.ndarray) -> np.ndarray:
        """Chosen action index ``[N]`` (argmax, first on ties) of states ``x`` ``[N, d]``."""
        with torch.no_grad():
            return self.forward(torch.as_tensor(x, dtype=torch.float64)).argmax(dim=1).numpy()

    def to_arrays(self) -> list[tuple[str, np.ndarray | None, np.ndarray | None]]:
        """The layers as numpy arrays (to send to worker processes)."""
        return [(k, None if w is None else w.numpy(), None if b is None else b.numpy()) for k, w, b in self.layers]

    @classmethod
    def from_arrays(cls, layers: list[tuple[str, np.ndarray | None, np.ndarray | None]]) -> Network:
        return cls(
            [
                (k, None if w is None else torch.as_tensor(w), None if b is None else torch.as_tensor(b))
                for k, w, b in layers
            ]
        )

    @classmethod
    def random(cls, sizes: list[int], activation: str = "relu", seed: int = 0) -> Network:
        """A random network with layer widths ``sizes`` (for tests)."""
        g = torch.Generator().manual_seed(seed)
        layers: list[tuple[str, torch.Tensor | None, torch.Tensor | None]] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            layers.append(
                (
                    "linear",
                    torch.randn(b, a, generator=g, dtype=torch.float64) / a**0.5,
                    torch.randn(b, generator=g, dtype=torch.float64) * 0.1,
                )
            )
            if i < len(sizes) - 2:
                layers.append((activation, None, None))
        return cls(layers)


def load_network(path: str | Path) -> Network:
    """Load a controller from its JSON spec (or from the weights file next to a spec of the same stem)."""
    p = Path(path)
    spec_path = p if p.suffix == ".json" else p.with_suffix(".json")
    if not spec_path.is_file():
        raise PolicyError(f"policy '{path}': no spec file {spec_path} (a JSON file listing the layers and weights)")
    try:
        spec = json.loads(spec_path.read_text())
        weights_path = spec_path.parent / spec["weights"]
        state = torch.load(weights_path, map_location="cpu", weights_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise PolicyError(f"policy '{spec_path}': cannot read the spec or its weights ({exc})") from exc
    layers: list[tuple[str, torch.Tensor | None, torch.Tensor | None]] = []
    specs = spec.get("layers", [])
    for i, layer in enumerate(specs):
        kind = layer.get("type")
        if kind == "linear":
            try:
                w = state[f"{i}.weight"].to(torch.float64)
                b = state[f"{i}.bias"].to(torch.float64)
            except KeyError as exc:
                raise PolicyError(f"policy '{spec_path}': weights file lacks {exc} for layer {i}") from None
            if tuple(w.shape) != (layer["out"], layer["in"]):
                raise PolicyError(
                    f"policy '{spec_path}': layer {i} has shape {tuple(w.shape)}, the spec says "
                    f"({layer['out']}, {layer['in']})"
                )
            layers.append(("linear", w, b))
        elif kind in ACTIVATIONS:
            layers.append((kind, None, None))
        elif kind == "softmax" and i == len(specs) - 1:
            continue  # argmax of softmax = argmax of its input
        else:
            raise PolicyError(
                f"policy '{spec_path}': layer {i} of type {kind!r} is not supported "
                f"(linear, {', '.join(ACTIVATIONS)}, and a final softmax are)"
            )
    if not layers or layers[0][0] != "linear" or layers[-1][0] != "linear":
        raise PolicyError(f"policy '{spec_path}': the network must start and end with a linear layer")
    meta = {k: v for k, v in spec.items() if k not in ("layers", "weights")}
    return Network(layers, env=str(spec.get("env", "")), meta=meta)
