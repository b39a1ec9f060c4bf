"""Continuous-state controllers (MOSAIC): box abstraction, splitting by the network's action, bounds, refinement.

See :mod:`distmc.abstract.mdp` for the abstraction and why its bounds are sound.
"""
