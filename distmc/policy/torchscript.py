"""A TorchScript network with an interface file that maps states to inputs and outputs to action labels.

The interface file (JSON, or TOML with ``.toml``)::

    {
      "features": ["x", "y", "done"],        # PRISM variables, in input order (default: all, in state layout order)
      "actions": ["north", "east", "south", "west"],   # output index -> action label (default: model action order)
      "output": "probabilities",              # or "logits" (softmax over the enabled actions)
      "scale": {"x": 0.25}                    # optional: input = value * scale
    }

Inference is batched under ``torch.inference_mode``, every forward pass with the same shape (:data:`BATCH` rows,
the last one padded): torch's kernels change with the batch shape (measured: a batch of one state takes another
path and differs in the last bit), and a state's action distribution must not depend on which other states share
its batch, or two worker counts would build different models. The network runs on CUDA when available.
"""

from __future__ import annotations

import json
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from distmc.errors import PolicyError
from distmc.model.program import Model

__all__ = ["Interface", "TorchScriptPolicy", "load_interface"]

#: States per forward pass.
BATCH = 1024


@dataclass
class Interface:
    """How a network sees a model: input features, output actions, output kind, optional input scaling."""

    features: list[str]
    actions: list[str]
    output: str = "probabilities"
    scale: dict[str, float] = field(default_factory=dict)


def load_interface(path: str | Path | None, model: Model) -> Interface:
    """Read and validate an interface file against ``model`` (None: the documented defaults)."""
    names = [v.name for v in model.variables]
    if path is None:
        return Interface(features=names, actions=list(model.actions))
    p = Path(path)
    if not p.is_file():
        raise PolicyError(f"{p}: no such interface file")
    try:
        raw: dict[str, Any] = tomllib.loads(p.read_text()) if p.suffix == ".toml" else json.loads(p.read_text())
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise PolicyError(f"{p}: cannot read interface file: {exc}") from None
    if not isinstance(raw, dict):
        raise PolicyError(f"{p}: the interface must be an object with 'features', 'actions', 'output'")
    unknown_keys = set(raw) - {"features", "actions", "output", "scale"}
    if unknown_keys:
        raise PolicyError(f"{p}: unknown interface key(s) {sorted(unknown_keys)}")
    feats = raw.get("features", names)
    acts = raw.get("actions", list(model.actions))
    bad = [f for f in feats if f not in names]
    if bad:
        raise PolicyError(f"{p}: features {bad} are not variables of {model.path} (variables: {names})")
    bad = [a for a in acts if a not in model.actions]
    if bad:
        raise PolicyError(f"{p}: actions {bad} are not action labels of {model.path} (actions: {model.actions})")
    if len(set(acts)) != len(acts):
        raise PolicyError(f"{p}: an action is listed twice in {acts}")
    output = raw.get("output", "probabilities")
    if output not in ("probabilities", "logits"):
        raise PolicyError(f"{p}: output must be 'probabilities' or 'logits', not '{output}'")
    scale = raw.get("scale", {})
    bad = [f for f in scale if f not in feats]
    if bad:
        raise PolicyError(f"{p}: scale names {bad}, which are not features")
    return Interface(features=list(feats), actions=list(acts), output=output, scale={k: float(v) for k, v in scale.items()})


class TorchScriptPolicy:
    """A TorchScript module (``torch.jit.save``) evaluated in batches."""

    def __init__(self, path: str | Path, interface: Interface, model: Model, device: str | None = None) -> None:
        import torch

        self.path = Path(path)
        self.name = self.path.name
        self.actions = interface.actions
        self.output = interface.output
        if not self.path.is_file():
            raise PolicyError(f"{self.path}: no such policy file")
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            self.net = torch.jit.load(str(self.path), map_location=self.device)
        except Exception as exc:  # corrupt file, or not TorchScript
            raise PolicyError(
                f"{self.path}: not a loadable TorchScript module ({type(exc).__name__}); save it with torch.jit.save"
            ) from None
        self.net.eval()
        cols = {v.name: i for i, v in enumerate(model.variables)}
        self.columns = np.array([cols[f] for f in interface.features], dtype=np.int64)
        self.scale = np.array([interface.scale.get(f, 1.0) for f in interface.features], dtype=np.float32)
        self.forward_passes = 0
        self.states_evaluated = 0
        if self.device == "cpu":
            self._choose_threads(len(self.columns))

    def _choose_threads(self, width: int) -> None:
        """Keep torch's intra-op thread count only if it beats one thread on a sample batch (measured, per process).

        Why: on small networks and few cores torch's thread pool can cost more than it saves (measured on a 2-core
        machine: a 23-64-64-4 MLP on 10^4 states took 7 ms with one thread and 65 ms with two).
        """
        import torch

        if torch.get_num_threads() <= 1:
            return
        x = torch.zeros((4096, width), dtype=torch.float32)

        def best() -> float:
            times = []
            with torch.inference_mode(), torch.jit.optimized_execution(False):
                for _ in range(3):
                    t = time.perf_counter()
                    self.net(x)
                    times.append(time.perf_counter() - t)
            return min(times)

        try:
            many = best()
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            one = best()
        except Exception:  # noqa: BLE001 - a network that fails here fails again, with a clear error, in forward()
            return
        if many < one:
            torch.set_num_threads(threads)

    def forward(self, states: np.ndarray) -> np.ndarray:
        import torch

        x = states[:, self.columns].astype(np.float32) * self.scale
        outs = []
        # The profiling executor re-specialises on every new batch shape, which costs more than it gains for the
        # small networks policies are; plain execution is used.
        with torch.inference_mode(), torch.jit.optimized_execution(False):
            for start in range(0, x.shape[0], BATCH):
                chunk = x[start : start + BATCH]
                if chunk.shape[0] < BATCH:
                    chunk = np.concatenate([chunk, np.zeros((BATCH - chunk.shape[0], x.shape[1]), dtype=np.float32)])
                xb = torch.from_numpy(chunk).to(self.device)
                try:
                    y = self.net(xb)
                except RuntimeError as exc:
                    raise PolicyError(
                        f"{self.path}: the network failed on inputs of width {x.shape[1]} "
                        f"(features {len(self.columns)}): {str(exc).splitlines()[0]}"
                    ) from exc
                if not isinstance(y, torch.Tensor):
                    raise PolicyError(f"{self.path}: the network returned {type(y).__name__}, not a tensor")
                outs.append(y.detach().to("cpu", torch.float64).numpy()[: min(BATCH, x.shape[0] - start)])
                self.forward_passes += 1
        self.states_evaluated += x.shape[0]
        return np.concatenate(outs) if outs else np.zeros((0, len(self.actions)))
