"""Policies: the contract, the built-in uniform policy, and the formats :func:`load_policy` reads.

Formats (detected from the spec and the file's content, never from running it):

* ``uniform`` (or None): every enabled action equally likely.
* ``package.module:function`` (when no such file exists): a Python function over batches of observations
  (:mod:`distmc.policy.callable`).
* a Stable-Baselines3 PPO/A2C/DQN ``.zip`` (:mod:`distmc.policy.sb3`): loading it executes code stored in the
  file, so it needs ``trust=True`` (``--trust-policy``).
* a ``torch.export`` program (``.pt2``, ``torch.export.save``; :mod:`distmc.policy.exported`): loading runs no
  code unless the archive holds pickled parts, which need ``trust=True``.
* a shielded policy: the JSON manifest ``distmc shield`` writes (:mod:`distmc.policy.shielded`), a base policy
  restricted by a shield table.
* an ONNX model (``.onnx``; :mod:`distmc.policy.onnx`, run by onnxruntime, the ``onnx`` extra).
* a TorchScript file (``torch.jit.save``; :mod:`distmc.policy.torchscript`).
* any other torch file: a ``state_dict`` read with ``torch.load(weights_only=True)`` and rebuilt from the
  interface's ``architecture`` (:mod:`distmc.policy.statedict`).

The interface (features, actions, output, scale, architecture) comes from ``interface``, else from the file saved
beside the policy (:func:`find_interface`), else the defaults (every variable, every action label).

Every network runs in float64 unless ``dtype="float32"`` (``--policy-dtype``), whatever its format; a policy's
``precision`` says what it ran in (:mod:`distmc.policy.batched`).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from distmc.errors import PolicyError
from distmc.model.program import Model
from distmc.policy.base import Policy, action_distribution
from distmc.policy.interface import DTYPES, Interface, check_dtype, load_interface
from distmc.policy.torchscript import TorchScriptPolicy
from distmc.policy.uniform import UniformPolicy

__all__ = [
    "DTYPES",
    "Interface",
    "Policy",
    "TorchScriptPolicy",
    "UniformPolicy",
    "action_distribution",
    "detect_format",
    "find_interface",
    "load_interface",
    "load_policy",
    "require_packages",
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


def detect_format(spec: str | None) -> str:
    """The format of ``spec``: ``uniform``, ``callable``, ``shielded``, ``sb3``, ``pt2``, ``onnx``, ``torchscript``...

    (or ``state_dict``). Read from the spec and the file's content; nothing is loaded.
    """
    from distmc.policy.callable import CALLABLE_SPEC
    from distmc.policy.exported import is_pt2
    from distmc.policy.onnx import is_onnx
    from distmc.policy.shielded import is_shielded

    if spec is None or spec == "uniform":
        return "uniform"
    p = Path(spec)
    if not p.is_file():
        if CALLABLE_SPEC.match(spec):
            return "callable"
        raise PolicyError(f"{spec}: no such policy file (nor 'uniform', nor a 'package.module:function')")
    if is_shielded(p):
        return "shielded"
    if is_onnx(p):
        return "onnx"
    if zipfile.is_zipfile(p):
        if is_pt2(p):
            return "pt2"
        with zipfile.ZipFile(p) as z:
            names = z.namelist()
        if "data" in names and "policy.pth" in names:
            return "sb3"
        if any("/code/" in n or n.endswith("constants.pkl") for n in names):
            return "torchscript"
    return "state_dict"


def require_packages(spec: str | None) -> None:
    """Stop with a :class:`~distmc.errors.MissingDependencyError` if loading ``spec`` needs a missing package.

    Nothing is loaded; a run calls this before its work starts, so the error comes first, in one line.
    """
    from distmc._internal.deps import require

    fmt = detect_format(spec)
    if fmt == "shielded":
        from distmc.policy.shielded import read_manifest

        require_packages(read_manifest(str(spec))["policy"])
    elif fmt == "sb3":
        from distmc.policy.sb3 import ALGORITHMS, detect_algorithm

        algo = detect_algorithm(str(spec))
        require(ALGORITHMS[algo], f"{spec}: a Stable-Baselines3 {algo} policy")
    elif fmt == "onnx":
        require("onnxruntime", f"{spec}: an ONNX policy")


def load_policy(
    spec: str | None, model: Model, interface: str | Path | None = None, *, trust: bool = False, dtype: str = "float64"
) -> Policy:
    """Load the policy ``spec`` names (see the module docstring for the formats).

    Args:
        spec: ``"uniform"``, ``module:function`` or a policy file.
        model: the model the policy acts in.
        interface: the interface file (default: the one beside the policy file, else the defaults).
        trust: allow formats whose loading executes code stored in the file (SB3 ``.zip``; a ``.pt2`` archive
            with pickled parts).
        dtype: the network's arithmetic, ``"float64"`` (default) or ``"float32"``
            (:mod:`distmc.policy.batched`); the policy's ``precision`` says what it runs in.
    """
    check_dtype(dtype)
    fmt = detect_format(spec)
    if fmt == "shielded":  # the manifest names the base policy and its interface
        from distmc.policy.shielded import ShieldedPolicy, read_manifest

        m = read_manifest(str(spec))
        base = load_policy(m["policy"], model, m.get("interface"), trust=trust)
        return ShieldedPolicy.of_manifest(str(spec), m, base, model)
    if interface is None and fmt not in ("uniform", "callable"):
        interface = find_interface(str(spec))
    iface = load_interface(interface, model)
    if fmt == "uniform":
        return UniformPolicy(iface.actions)
    assert spec is not None
    if fmt == "callable":
        from distmc.policy.callable import callable_policy

        return callable_policy(spec, iface, model, dtype)
    if fmt == "sb3":
        from distmc.policy.sb3 import SB3Policy

        return SB3Policy(spec, iface, model, trust=trust, dtype=dtype)
    if fmt == "pt2":
        from distmc.policy.exported import ExportedPolicy

        return ExportedPolicy(spec, iface, model, trust=trust, dtype=dtype)
    if fmt == "onnx":
        from distmc.policy.onnx import OnnxPolicy

        return OnnxPolicy(spec, iface, model, dtype)
    if fmt == "torchscript":
        return TorchScriptPolicy(spec, iface, model, dtype=dtype)
    from distmc.policy.statedict import StateDictPolicy

    return StateDictPolicy(spec, iface, model, dtype=dtype)
