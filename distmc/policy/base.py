"""The policy contract and the one place where a policy's output becomes a distribution over enabled actions.

A policy sees a batch of states and returns one row per state over *its* action list (the interface's, or the
model's action order by default). :func:`action_distribution` then masks the actions that are not enabled in
each state and renormalises over the rest; that masking is documented behaviour, not an error. What is an error,
and stops the run naming the state: a row with NaN/inf, a negative probability, probabilities that do not sum to
1 (within :data:`NORMALISED_TOL`, over all of the policy's actions, before masking), a wrong shape, or zero mass on
every enabled action.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from distmc.errors import PolicyError

__all__ = ["NORMALISED_TOL", "Policy", "action_distribution", "policy_precision"]

#: How far a row of probabilities may sum from 1 (float32 softmax rounding stays far below this).
NORMALISED_TOL = 1e-4


@runtime_checkable
class Policy(Protocol):
    """A memoryless policy over a model's states.

    Attributes:
        actions: action labels, one per output column, in the policy's order (ties of argmax go to the first).
        output: ``"probabilities"`` or ``"logits"``.
        name: a short description for reports.

    A policy may also say which arithmetic it runs in, ``precision`` (``"float64"`` or ``"float32"``,
    :func:`policy_precision`); the report names it.
    """

    actions: list[str]
    output: str
    name: str

    def forward(self, states: np.ndarray) -> np.ndarray:
        """``states`` ``[B, V]`` int64 -> raw outputs ``[B, len(actions)]`` (one batched call, never per state)."""
        ...


def policy_precision(policy: object) -> str | None:
    """The arithmetic ``policy`` runs in (its ``precision``: ``"float64"`` or ``"float32"``); None for no policy."""
    return None if policy is None else str(getattr(policy, "precision", "float64"))


def action_distribution(policy: Policy, states: np.ndarray, enabled: np.ndarray, describe: object = None) -> np.ndarray:
    """pi(a|s) over the policy's actions, masked to ``enabled`` ``[B, A]`` and renormalised: ``[B, A]`` float64.

    Args:
        policy: the policy.
        states: ``[B, V]`` int64.
        enabled: ``[B, A]`` bool, which of the policy's actions each state enables.
        describe: optional ``f(state) -> str`` used in error messages.
    """
    b, a = enabled.shape
    if b == 0:
        return np.zeros((0, a))
    try:
        raw = policy.forward(states)
    except PolicyError:
        raise
    except Exception as exc:  # user code: wrap, never swallow
        raise PolicyError(f"policy {policy.name} failed on a batch of {b} states: {type(exc).__name__}: {exc}") from exc
    raw = np.asarray(raw, dtype=np.float64)
    if raw.shape != (b, a):
        raise PolicyError(
            f"policy {policy.name} returned shape {tuple(raw.shape)} for {b} states; expected ({b}, {a}) "
            f"(one column per action: {policy.actions})"
        )

    def name(i: int) -> str:
        return describe(states[i]) if callable(describe) else str(states[i].tolist())

    finite = np.isfinite(raw).all(axis=1)
    if not finite.all():
        i = int(np.flatnonzero(~finite)[0])
        raise PolicyError(f"policy {policy.name} returned {raw[i].tolist()} (not finite) in state {name(i)}")
    if policy.output == "logits":
        z = np.where(enabled, raw, -np.inf)
        z = z - np.max(np.where(enabled, raw, -np.inf), axis=1, keepdims=True)
        p = np.where(enabled, np.exp(z), 0.0)
    else:
        neg = (raw < 0).any(axis=1)
        if neg.any():
            i = int(np.flatnonzero(neg)[0])
            raise PolicyError(
                f"policy {policy.name} returned a negative probability {raw[i].tolist()} in state {name(i)}"
            )
        total = raw.sum(axis=1)
        off = np.abs(total - 1.0) > NORMALISED_TOL
        if off.any():
            i = int(np.flatnonzero(off)[0])
            raise PolicyError(
                f"policy {policy.name} returned probabilities {raw[i].tolist()} summing to {total[i]:.6g}, not 1, in "
                f'state {name(i)}; if the network\'s outputs are scores, declare "output": "logits" in its '
                f"interface"
            )
        p = np.where(enabled, raw, 0.0)
    mass = p.sum(axis=1)
    dead = (mass <= 0) & enabled.any(axis=1)
    if dead.any():
        i = int(np.flatnonzero(dead)[0])
        en = [policy.actions[j] for j in np.flatnonzero(enabled[i])]
        raise PolicyError(
            f"policy {policy.name} gives zero probability to every enabled action {en} in state {name(i)} "
            f"(output {raw[i].tolist()})"
        )
    return p / np.where(mass > 0, mass, 1.0)[:, None]
