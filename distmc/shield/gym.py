"""A Gymnasium wrapper that masks the actions a shield removes, for training under it (sb3-contrib's MaskablePPO).

:class:`ShieldedEnv` wraps a :class:`~distmc.gym.PrismEnv`: ``action_masks()`` (and ``info["action_mask"]``) is the
environment's mask of enabled actions, and in a state of the shield table, the shield's allowed set too. A state
the table does not hold keeps every enabled action, as :class:`~distmc.policy.shielded.ShieldedPolicy` does.
Stepping with a removed action is stepping with a disabled one: the environment's ``invalid_action`` rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from distmc.errors import PolicyError
from distmc.gym.env import PrismEnv
from distmc.model.packing import StateCodec
from distmc.policy.shielded import SHIELD_FORMAT, KeyIndex, ShieldTable, read_manifest

__all__ = ["ShieldedEnv"]


class ShieldedEnv(gym.Wrapper):
    """``env`` with its action mask narrowed to a shield's allowed actions.

    Args:
        env: the environment (a :class:`PrismEnv`, possibly wrapped).
        shield: the shield table (``shield.parquet``) or the shielded policy's manifest (``shielded.json``).

    Example:
        >>> env = ShieldedEnv(PrismEnv("avoid.prism", "N=5,slickness=0.1"), "shield/shielded.json")  # doctest: +SKIP
        >>> from sb3_contrib import MaskablePPO
        >>> MaskablePPO("MlpPolicy", env).learn(10_000)  # doctest: +SKIP
    """

    def __init__(self, env: gym.Env, shield: str | Path) -> None:
        super().__init__(env)
        base = env.unwrapped
        if not isinstance(base, PrismEnv):
            raise PolicyError(f"ShieldedEnv wraps a distmc PrismEnv, not {type(base).__name__}")
        self.prism: PrismEnv = base
        path = Path(shield)
        if path.suffix.lower() == ".json":
            manifest = read_manifest(path)
            assert manifest["format"] == SHIELD_FORMAT
            path = Path(manifest["shield"])
        self.table = ShieldTable.read(path, base.model, base.actions)
        self.codec = StateCodec(base.model.lo, base.model.hi)
        self.index = KeyIndex(self.codec.pack(self.table.states))

    def allowed(self, state: np.ndarray) -> np.ndarray:
        """``[A]`` bool: the actions the shield allows in ``state`` ``[V]`` (all of them outside the table)."""
        row = int(self.index.find(self.codec.pack(np.asarray(state, dtype=np.int64)[None, :]))[0])
        return self.table.allowed[row].copy() if row >= 0 else np.ones(len(self.table.actions), dtype=bool)

    def action_masks(self) -> np.ndarray:
        """``[A]`` bool: enabled and allowed by the shield in the current state."""
        return self.prism.action_masks() & self.allowed(self.prism.state)

    def _masked(self, info: dict[str, Any]) -> dict[str, Any]:
        if "action_mask" in info:
            info = {**info, "action_mask": self.action_masks()}
        return info

    def reset(self, **kw: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kw)
        return obs, self._masked(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float(reward), terminated, truncated, self._masked(info)
