"""Gymnasium environments over PRISM models (:class:`PrismEnv`), Monte Carlo rollouts of distmc policies.

Needs the ``rl`` extra (``pip install 'distmc[rl]'``: gymnasium, stable-baselines3).
"""

from __future__ import annotations

from distmc.gym.dynamics import Dynamics
from distmc.gym.env import PrismEnv, interface_dict
from distmc.gym.export import export_policy
from distmc.gym.rollout import RolloutResult, rollout

__all__ = ["Dynamics", "PrismEnv", "export_policy", "RolloutResult", "interface_dict", "rollout"]
