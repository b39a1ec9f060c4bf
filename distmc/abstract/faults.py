"""Fault models: what the plant does with the action the controller chose.

* ``fail:p``: with probability ``p`` the action fails to execute; the plant applies its no-op control instead
  (``ContinuousEnv.noop``: zero torque or force).
* ``sticky:p``: with probability ``p`` the action sticks and executes twice (two physical steps in one decision
  step).
* combinations (``fail:0.1,sticky:0.2``) are independent: the executed control (the action or the no-op) is
  applied once or twice.

Each outcome is a probability and a tuple saying, per physical step, whether the chosen action (True) or the
no-op (False) is applied. Failure is checked after every physical step (a sticky step that passes through the
failure region has failed even if it ends outside it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distmc.errors import UsageError

__all__ = ["FaultModel", "parse_fault"]


@dataclass(frozen=True)
class FaultModel:
    """Independent action failure (probability ``p_fail``) and sticky action (probability ``p_sticky``)."""

    p_fail: float = 0.0
    p_sticky: float = 0.0

    def outcomes(self) -> list[tuple[float, tuple[bool, ...]]]:
        """``(probability, executed per physical step)`` of every outcome with positive probability."""
        out = []
        for executed, pe in ((True, 1 - self.p_fail), (False, self.p_fail)):
            for steps, ps in ((1, 1 - self.p_sticky), (2, self.p_sticky)):
                if pe * ps > 0:
                    out.append((pe * ps, (executed,) * steps))
        return out

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Outcome index ``[n]`` (into :meth:`outcomes`) of ``n`` independent steps."""
        probs = np.array([p for p, _ in self.outcomes()])
        return rng.choice(probs.shape[0], size=n, p=probs / probs.sum())

    def describe(self) -> str:
        parts = [f"fail:{self.p_fail:g}"] if self.p_fail else []
        parts += [f"sticky:{self.p_sticky:g}"] if self.p_sticky else []
        return ",".join(parts) or "none"


def parse_fault(text: str | None) -> FaultModel:
    """``"sticky:0.2"``, ``"fail:0.1"``, ``"fail:0.1,sticky:0.2"`` or ``None``/``"none"``."""
    if text is None or text.strip() in ("", "none"):
        return FaultModel()
    probs = {"fail": 0.0, "sticky": 0.0}
    for part in text.split(","):
        name, _, value = part.strip().partition(":")
        try:
            p = float(value)
        except ValueError:
            p = -1.0
        if name not in probs or not 0.0 <= p <= 1.0:
            raise UsageError(
                f"--fault '{text}': expected KIND:P with KIND fail or sticky and 0 <= P <= 1, "
                f"e.g. sticky:0.2 or fail:0.1,sticky:0.2"
            )
        probs[name] = p
    return FaultModel(probs["fail"], probs["sticky"])
