"""Integrations with training libraries (:mod:`distmc.integrations.sb3`: Stable-Baselines3)."""
