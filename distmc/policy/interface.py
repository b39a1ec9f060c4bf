"""The interface file: how a network sees a model (input features, output actions, output kind, scaling).

The interface file (JSON, or TOML with ``.toml``)::

    {
      "features": ["x", "y", "done"],        # PRISM variables, in input order (default: all, in state layout order)
      "actions": ["north", "east", "south", "west"],   # output index -> action label (default: model action order)
      "output": "probabilities",              # or "logits" (softmax over the enabled actions)
      "scale": {"x": 0.25},                   # optional: input = value * scale
      "architecture": {"layers": [64, 64], "activation": "tanh"}   # only for a state_dict (distmc.policy.statedict)
    }

A policy file's interface can sit beside it (:func:`distmc.policy.find_interface`: ``trained.pt`` ->
``trained.interface.json`` or ``trained.json``); :meth:`distmc.gym.PrismEnv.save_interface` writes one.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from distmc.errors import PolicyError
from distmc.model.program import Model

__all__ = ["DTYPES", "Interface", "InputEncoding", "check_interface", "check_dtype", "interface_dict", "load_interface"]

#: The arithmetic a policy can run in (``--policy-dtype``): float64, the default, or float32.
DTYPES = ("float64", "float32")


def check_dtype(dtype: str) -> str:
    """``dtype`` if it is one of :data:`DTYPES`, else a :class:`PolicyError`."""
    if dtype not in DTYPES:
        raise PolicyError(f"--policy-dtype must be float64 or float32, not '{dtype}'")
    return dtype


@dataclass
class Interface:
    """How a network sees a model: input features, output actions, output kind, optional input scaling."""

    features: list[str]
    actions: list[str]
    output: str = "probabilities"
    scale: dict[str, float] = field(default_factory=dict)
    architecture: dict[str, Any] | None = None


class InputEncoding:
    """What a network sees of a state: the interface's features, in order, times their scale, in ``dtype``.

    The one place this is computed: verification (:class:`~distmc.policy.batched.BatchedPolicy`, float64 by
    default: the value times the scale as read from the interface, one rounding) and training
    (:class:`~distmc.gym.PrismEnv`, float32 observations) must feed a network the same numbers. In float32 the
    value and the scale are each rounded to float32 first, as before float64 policies existed.
    """

    def __init__(self, interface: Interface, model: Model, dtype: str = "float64") -> None:
        cols = {v.name: i for i, v in enumerate(model.variables)}
        self.dtype = np.dtype(check_dtype(dtype))
        self.columns = np.array([cols[f] for f in interface.features], dtype=np.int64)
        self.scale = np.array([interface.scale.get(f, 1.0) for f in interface.features], dtype=self.dtype)

    def __call__(self, states: np.ndarray) -> np.ndarray:
        """Inputs ``[B, F]`` (``dtype``) of states ``[B, V]`` int64."""
        return states[:, self.columns].astype(self.dtype) * self.scale


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
    return check_interface(raw, model, str(p))


def interface_dict(interface: Interface) -> dict[str, Any]:
    """The interface as the JSON object of an interface file."""
    out: dict[str, Any] = {
        "features": list(interface.features),
        "actions": list(interface.actions),
        "output": interface.output,
    }
    if interface.scale:
        out["scale"] = dict(interface.scale)
    if interface.architecture is not None:
        out["architecture"] = dict(interface.architecture)
    return out


def check_interface(raw: Any, model: Model, where: str = "interface") -> Interface:
    """Validate an interface object (the parsed file, or :func:`interface_dict` of one) against ``model``."""
    p = where
    names = [v.name for v in model.variables]
    if not isinstance(raw, dict):
        raise PolicyError(f"{p}: the interface must be an object with 'features', 'actions', 'output'")
    unknown_keys = set(raw) - {"features", "actions", "output", "scale", "architecture"}
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
    arch = raw.get("architecture")
    if arch is not None and not isinstance(arch, dict):
        raise PolicyError(
            f'{p}: \'architecture\' must be an object such as {{"layers": [64, 64], "activation": "tanh"}}'
        )
    return Interface(
        features=list(feats),
        actions=list(acts),
        output=output,
        scale={k: float(v) for k, v in scale.items()},
        architecture=arch,
    )
