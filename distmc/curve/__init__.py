"""Safety over training: verify a run's checkpoints on one shared exploration (:func:`curve`)."""

from distmc.curve.curve import CurveReport, curve, plot_curve
from distmc.curve.engine import CurvePoint, SharedModel

__all__ = ["CurvePoint", "CurveReport", "SharedModel", "curve", "plot_curve"]
