"""Gymnasium environments over PRISM models (:class:`PrismEnv`), Monte Carlo rollouts of distmc policies.

Needs the ``rl`` extra (``pip install 'distmc[rl]'``: gymnasium, stable-baselines3, sb3-contrib). Importing this
package registers :class:`PrismEnv` as ``"distmc/Prism-v0"``, so
``gymnasium.make("distmc/Prism-v0", model_path=..., constants=..., ...)`` works too.
"""

from __future__ import annotations

from distmc.gym.dynamics import Dynamics
from distmc.gym.env import PrismEnv, gym, interface_dict
from distmc.gym.export import export_policy
from distmc.gym.rollout import RolloutResult, rollout

if "distmc/Prism-v0" not in gym.registry:
    gym.register(id="distmc/Prism-v0", entry_point="distmc.gym.env:PrismEnv")

__all__ = ["Dynamics", "PrismEnv", "export_policy", "RolloutResult", "interface_dict", "rollout"]
