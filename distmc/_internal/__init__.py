"""Compiled helpers shared by the explorer and the reducer (numba; each has a numpy fallback where it is used)."""
