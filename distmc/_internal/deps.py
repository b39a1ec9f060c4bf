"""Optional dependencies: found missing before a run's work starts, and named with the ``pip install`` that brings them.

A run that needs a package distmc does not install by default (Stable-Baselines3 for an SB3 ``.zip``,
onnxruntime for an ``.onnx`` policy) or that a user may have removed (matplotlib for ``--plot``) is checked here
first, so that it stops in one line instead of with a traceback after the exploration. Nothing is imported by the
check (:func:`importlib.util.find_spec`), so it costs no start-up time.
"""

from __future__ import annotations

import importlib.util
import sys

from distmc.errors import MissingDependencyError

__all__ = ["PACKAGES", "available", "install_hint", "require"]

#: Importable module -> (the distribution to install, the distmc extra that has it, or None for a core dependency).
PACKAGES: dict[str, tuple[str, str | None]] = {
    "stable_baselines3": ("stable-baselines3", "rl"),
    "sb3_contrib": ("sb3-contrib", "rl"),
    "gymnasium": ("gymnasium", "rl"),
    "onnxruntime": ("onnxruntime", "onnx"),
    "onnx": ("onnx", "onnx"),
    "matplotlib": ("matplotlib", None),
}


def available(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    if module in sys.modules:
        return sys.modules[module] is not None  # None: import blocked (how tests remove a package)
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def install_hint(module: str) -> str:
    """The ``pip install`` command that brings ``module``."""
    dist, extra = PACKAGES.get(module, (module, None))
    return f"pip install 'distmc[{extra}]'" if extra else f"pip install {dist}"


def require(module: str, purpose: str) -> None:
    """Raise :class:`~distmc.errors.MissingDependencyError` unless ``module`` can be imported.

    Args:
        module: the importable name, e.g. ``"onnxruntime"``.
        purpose: what needs it, for the message, e.g. ``"policy.onnx: an ONNX policy"``.
    """
    if not available(module):
        dist = PACKAGES.get(module, (module, None))[0]
        raise MissingDependencyError(f"{purpose} needs {dist}, which is not installed: {install_hint(module)}")
