"""Save a policy trained on a :class:`~distmc.gym.PrismEnv` so that ``distmc run`` verifies it as it is.

:func:`export_policy` writes the network as TorchScript (``trained.pt``) and the environment's interface beside it
(``trained.json``), which :func:`distmc.policy.load_policy` finds on its own: no hand-written interface file, and
no unpickling when the policy is verified.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from distmc.errors import PolicyError
from distmc.gym.env import PrismEnv

__all__ = ["export_policy"]


def export_policy(policy: Any, path: str | Path, env: PrismEnv, *, output: str | None = None) -> tuple[Path, Path]:
    """Write ``policy`` as TorchScript at ``path`` and ``env``'s interface as ``path`` with suffix ``.json``.

    Args:
        policy: a Stable-Baselines3 PPO/A2C/DQN model trained on ``env`` (its actor network is saved: logits, or
            Q-values for DQN) or a ``torch.nn.Module`` mapping observations ``[B, F]`` to ``[B, A]``.
        path: the ``.pt`` file to write.
        env: the environment the policy was trained on.
        output: ``"logits"`` or ``"probabilities"``, what the network returns (default ``"logits"``).

    Returns:
        The network file and the interface file.
    """
    import torch

    from distmc.policy.sb3 import actor_module

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
        try:
            traced = torch.jit.trace(net, sample[:2], check_trace=False)
        except Exception as exc:  # noqa: BLE001 - user network
            raise PolicyError(f"export_policy: cannot trace the network: {type(exc).__name__}: {exc}") from exc
        want, got = net(sample), traced(sample)
    if tuple(got.shape) != (64, env.action_space.n) or not torch.allclose(want, got, rtol=0, atol=1e-6):
        raise PolicyError(
            f"export_policy: the traced network does not reproduce the original (shape {tuple(got.shape)}, expected "
            f"(64, {env.action_space.n})); networks with data-dependent control flow need torch.jit.script"
        )
    traced.save(str(p))
    iface = env.save_interface(p.with_suffix(".json"), output=output)
    return p, iface
