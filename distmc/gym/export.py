"""Save a policy trained on a :class:`~distmc.gym.PrismEnv` so that ``distmc run`` verifies it as it is.

:func:`export_policy` writes the network as a ``torch.export`` program (``trained.pt2``; or TorchScript, which
torch 2.x deprecates) and the environment's interface beside it (``trained.json``), which
:func:`distmc.policy.load_policy` finds on its own: no hand-written interface file, and no unpickling when the
policy is verified.

It then loads the file as ``distmc run`` will, in float64 (:mod:`distmc.policy.batched`), and checks that it
computes what the network computes in float64 on states of the model (to 1e-12 relative): the verified numbers
are the trained network's, with no float32 rounding that depends on the machine. A network whose own code
computes in float32 (a cast in ``forward``) is written all the same, with a warning: distmc verifies it in float32
and its report says so.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import numpy as np

from distmc._internal.atomic import atomic_path
from distmc.errors import PolicyError
from distmc.gym.env import PrismEnv

__all__ = ["export_policy"]

log = logging.getLogger(__name__)


#: What :func:`export_policy` writes: a ``torch.export`` program (``.pt2``) or TorchScript.
FORMATS = ("pt2", "torchscript")


def export_policy(
    policy: Any, path: str | Path, env: PrismEnv, *, output: str | None = None, format: str = "pt2"
) -> tuple[Path, Path]:
    """Write ``policy``'s network at ``path`` and ``env``'s interface as ``path`` with suffix ``.json``.

    Args:
        policy: a Stable-Baselines3 PPO/A2C/DQN model trained on ``env`` (its actor network is saved: logits, or
            Q-values for DQN) or a ``torch.nn.Module`` mapping observations ``[B, F]`` to ``[B, A]``.
        path: the file to write (``trained.pt2``; the format is read back from the content, not the name).
        env: the environment the policy was trained on.
        output: ``"logits"`` or ``"probabilities"``, what the network returns (default ``"logits"``).
        format: ``"pt2"`` (default: ``torch.export.save``, with a free batch dimension where the network allows
            it, else exported for distmc's batch of 1024) or ``"torchscript"`` (``torch.jit.trace``).

    Returns:
        The network file and the interface file.
    """
    import torch

    from distmc.policy.sb3 import actor_module

    if format not in FORMATS:
        raise PolicyError(f"export_policy: format must be one of {', '.join(FORMATS)}, not '{format}'")
    if hasattr(policy, "policy") and hasattr(policy, "predict"):
        net = actor_module(policy)
        output = output or "logits"
    elif isinstance(policy, torch.nn.Module):
        net = policy.eval()
    else:
        raise PolicyError(f"export_policy: expected an SB3 model or a torch.nn.Module, not {type(policy).__name__}")
    p = Path(path)
    rng = np.random.default_rng(0)
    low, high = env.observation_space.low, env.observation_space.high
    sample = torch.from_numpy((low + (high - low) * rng.random((64, low.shape[0]))).astype(np.float32))
    with torch.inference_mode():
        want = net(sample)
    if format == "pt2":
        program, got = _export(net, sample)
    else:
        with torch.inference_mode():
            try:
                program = torch.jit.trace(net, sample[:2], check_trace=False)
            except Exception as exc:  # noqa: BLE001 - user network
                raise PolicyError(f"export_policy: cannot trace the network: {type(exc).__name__}: {exc}") from exc
            got = program(sample)
    if tuple(got.shape) != (64, env.action_space.n) or not torch.allclose(want, got, rtol=0, atol=1e-6):
        raise PolicyError(
            f"export_policy: the exported network does not reproduce the original (shape {tuple(got.shape)}, "
            f"expected (64, {env.action_space.n})); networks with data-dependent control flow cannot be exported"
        )
    # the archive is named after its file (same_name); torch's writers fail with a RuntimeError
    with atomic_path(p, same_name=True, errors=(OSError, RuntimeError)) as tmp:
        if format == "pt2":
            torch.export.save(program, str(tmp))
        else:
            program.save(str(tmp))
    iface = env.save_interface(p.with_suffix(".json"), output=output)
    _check_float64(net, p, iface, env)
    return p, iface


def _check_float64(net: Any, path: Path, iface: Path, env: PrismEnv) -> None:
    """The saved policy, loaded as distmc loads it, computes what ``net`` computes in float64 (module docstring)."""
    import torch

    from distmc.policy import load_policy
    from distmc.policy.interface import InputEncoding

    model = env.model
    policy: Any = load_policy(str(path), model, iface)
    if policy.precision != "float64":
        log.warning("export_policy: %s; its bounds will cover the checker's error only", policy.precision_note)
        return
    states = np.random.default_rng(0).integers(model.lo, model.hi + 1, size=(64, len(model.variables)))
    try:
        with torch.inference_mode():
            want = copy.deepcopy(net).double()(torch.from_numpy(InputEncoding(policy.interface, model)(states)))
    except Exception:  # noqa: BLE001 - the network's own code does not run in float64: nothing to compare with
        return
    got = policy.forward(states)
    scale = float(np.abs(want.numpy()).max()) or 1.0
    if want.dtype != torch.float64 or not np.allclose(got, want.numpy(), rtol=0, atol=1e-12 * scale):
        raise PolicyError(
            f"export_policy: {path}, run in float64 as distmc runs it, does not reproduce the network "
            f"in float64 (largest difference {float(np.abs(got - want.numpy()).max()):.3g})"
        )


def _export(net: Any, sample: Any) -> tuple[Any, Any]:
    """``torch.export`` of ``net`` (batch dimension free, else fixed at distmc's batch) and its output on ``sample``."""
    import torch

    from distmc.policy.batched import BATCH, in_fixed_batches

    try:
        program = torch.export.export(net, (sample,), dynamic_shapes=({0: torch.export.Dim("batch")},))
        fixed = None
    except Exception:  # noqa: BLE001 - the network fixes its batch size somewhere: export it for distmc's
        try:
            program = torch.export.export(net, (torch.zeros((BATCH, sample.shape[1])),))
        except Exception as exc:  # noqa: BLE001 - user network
            raise PolicyError(
                f"export_policy: torch.export cannot export the network: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}"
            ) from exc
        fixed = BATCH
    module = program.module()
    with torch.inference_mode():
        got = in_fixed_batches(lambda x: module(torch.from_numpy(x)).numpy(), sample.numpy(), fixed)
    return program, torch.from_numpy(got)
