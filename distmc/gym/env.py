"""A Gymnasium environment over any PRISM model, stepped by distmc's compiled successor kernel.

Observation: the state vector as the environment's :class:`~distmc.policy.Interface` defines it (its features,
in order, times their scale), a ``float32`` :class:`gymnasium.spaces.Box` bounded by the variables' ranges.
Actions: ``Discrete(len(interface.actions))``, one per action label (a ``dtmc`` has a single action that lets the
chain move). The enabled actions of the current state are ``env.action_masks()`` (the convention of
sb3-contrib's ``MaskablePPO``) and ``info["action_mask"]``.

Step semantics (see :mod:`distmc.gym.dynamics`): choosing an action label takes one of the state's choices with
that label (uniformly, if the model has several) and samples its successor with the model's probabilities. The
reward is the named PRISM reward structure's state reward of the state being left plus the action reward of the
choice taken (so an episode's return is what ``R=? [F label]`` / ``R=? [C<=k]`` accumulate), times
``reward_scale``. An episode is *terminated* when a ``done_label`` holds in the reached state or the reached state
is a deadlock, and *truncated* after ``max_steps`` steps. A disabled action, with ``invalid_action="noop"``
(default), leaves the state unchanged, gives ``invalid_penalty`` and sets ``info["invalid_action"]``; with
``"raise"`` it raises :class:`~distmc.errors.PolicyError`.

The environment's interface (``env.interface``) is what a policy trained on it sees; :meth:`PrismEnv.save_interface`
writes it as the interface file that ``distmc run`` finds beside the policy (``trained.zip`` -> ``trained.json``),
so the trained policy verifies without a hand-written interface.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

try:
    import gymnasium as gym
    from gymnasium import spaces
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("distmc.gym needs gymnasium: pip install 'distmc[rl]'") from exc

from distmc._internal.atomic import write_text
from distmc.errors import ModelError, PolicyError, UsageError
from distmc.gym.dynamics import Dynamics, StateTable
from distmc.model.program import Model, load_model
from distmc.policy.interface import InputEncoding, Interface, check_interface, interface_dict, load_interface

__all__ = ["PrismEnv", "interface_dict"]


class PrismEnv(gym.Env[np.ndarray, np.int64]):
    """A PRISM model (dtmc or mdp) as a Gymnasium environment.

    Args:
        model_path: the PRISM file (or an already loaded :class:`~distmc.model.program.Model`).
        constants: undefined constants, ``"N=3,p=0.1"`` or a dict.
        reward: name of the PRISM reward structure giving the reward (None: zero reward; ``""``: the first one).
        done_label: a label, or several, whose truth ends an episode (terminated).
        max_steps: steps after which an episode is truncated.
        interface: an interface file (features, actions, output, scale) or an :class:`Interface`; default: every
            variable in state layout order, every action label in model order, output ``"logits"``.
        normalize: with no scale in the interface, scale each feature by ``1 / max(|lo|, |hi|, 1)`` of its range.
        reward_scale: factor on every reward (``-1`` turns a cost structure into a reward).
        invalid_action: ``"noop"`` or ``"raise"`` (see the module docstring).
        invalid_penalty: reward of a disabled action under ``"noop"``.
        cache_size: states whose sampling tables are kept.
        render_mode: ``None`` or ``"ansi"`` (the state as ``(x=1, ...)``).

    Example:
        >>> env = PrismEnv("gridworld.prism", "N=4", reward="steps", done_label=["crash", "goal"],
        ...                reward_scale=-1)  # doctest: +SKIP
        >>> obs, info = env.reset(seed=0)
        >>> obs, r, terminated, truncated, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
    """

    metadata = {"render_modes": ["ansi"]}
    action_space: spaces.Discrete
    observation_space: spaces.Box

    def __init__(
        self,
        model_path: str | Path | Model,
        constants: str | dict[str, str] | None = None,
        *,
        reward: str | None = None,
        done_label: str | list[str] | tuple[str, ...] | None = None,
        max_steps: int = 1000,
        interface: str | Path | Interface | None = None,
        normalize: bool = False,
        reward_scale: float = 1.0,
        invalid_action: str = "noop",
        invalid_penalty: float = 0.0,
        cache_size: int = 200_000,
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        model = model_path if isinstance(model_path, Model) else load_model(model_path, constants)
        self.model = model
        if max_steps < 1:
            raise UsageError(f"max_steps must be at least 1, not {max_steps}")
        if invalid_action not in ("noop", "raise"):
            raise UsageError(f"invalid_action must be 'noop' or 'raise', not '{invalid_action}'")
        if render_mode not in (None, "ansi"):
            raise UsageError(f"render_mode must be None or 'ansi', not '{render_mode}'")
        labels = (done_label,) if isinstance(done_label, str) else tuple(done_label or ())
        bad = [lab for lab in labels if lab not in model.labels]
        if bad:
            raise ModelError(f"{model.path}: no label(s) {bad} (labels: {sorted(model.labels)})")
        if isinstance(interface, Interface):
            iface = check_interface(interface_dict(interface), model, "interface")
        else:
            iface = load_interface(interface, model)
            if interface is None:
                iface.output = "logits"
        if normalize and not iface.scale:
            bound = {v.name: max(abs(v.lo), abs(v.hi), 1) for v in model.variables}
            iface.scale = {f: 1.0 / bound[f] for f in iface.features}
        self.interface = iface
        structure = None if reward is None else model.reward(reward or None)
        self.dynamics = Dynamics(model, iface.actions, structure, labels, cache_size)
        self.max_steps = int(max_steps)
        self.reward_scale = float(reward_scale)
        self.invalid_action = invalid_action
        self.invalid_penalty = float(invalid_penalty)
        self.render_mode = render_mode
        self.encode = InputEncoding(iface, model, "float32")  # training observations: float32, as SB3 keeps them
        lo, hi = self.encode(model.lo[None, :])[0], self.encode(model.hi[None, :])[0]
        self.observation_space = spaces.Box(np.minimum(lo, hi), np.maximum(lo, hi), dtype=np.float32)
        self.action_space = spaces.Discrete(len(self.dynamics.actions))
        self.state = model.initial_states[0].copy()
        self._table: StateTable | None = None
        self.steps = 0

    # -- what a policy sees --------------------------------------------------------------------------------

    @property
    def actions(self) -> list[str]:
        """Action labels, one per discrete action (a dtmc: one placeholder)."""
        return list(self.dynamics.actions)

    def observe(self, states: np.ndarray) -> np.ndarray:
        """Observations ``[B, F]`` float32 of states ``[B, V]`` int64 (what the interface feeds a network)."""
        return self.encode(states)

    def save_interface(self, path: str | Path, *, output: str | None = None) -> Path:
        """Write the interface file a policy trained on this environment verifies with.

        Args:
            path: the file; name it after the policy (``trained.zip`` -> ``trained.json``) for ``distmc run`` to
                find it without ``--interface``.
            output: ``"logits"`` or ``"probabilities"``: what the saved network returns (default: the interface's).
        """
        if self.dynamics.is_dtmc:
            raise PolicyError(f"{self.model.path} is a dtmc: its choices are not a policy's, so it has no interface")
        iface = interface_dict(self.interface)
        if output is not None:
            if output not in ("logits", "probabilities"):
                raise PolicyError(f"output must be 'logits' or 'probabilities', not '{output}'")
            iface["output"] = output
        return write_text(path, json.dumps(iface, indent=2) + "\n")

    # -- gymnasium API ---------------------------------------------------------------------------------------

    def action_masks(self) -> np.ndarray:
        """``[A]`` bool: the actions enabled in the current state."""
        return self._current().mask.copy()

    def _current(self) -> StateTable:
        if self._table is None:
            self._table = self.dynamics.table(self.state)
        return self._table

    def _info(self, **extra: Any) -> dict[str, Any]:
        return {"action_mask": self._current().mask.copy(), "state": self.state.copy(), **extra}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start in an initial state of the model (uniformly among several), or in ``options["state"]``.

        ``options["state"]``: a state vector ``[V]`` in layout order or a dict variable -> value (the other
        variables take their initial values), for tests and curricula.
        """
        super().reset(seed=seed)
        init = self.model.initial_states
        self.state = init[int(self.np_random.integers(init.shape[0]))].copy() if init.shape[0] > 1 else init[0].copy()
        if options and "state" in options:
            self.state = self._state_of(options["state"])
        self._table = None
        self.steps = 0
        return self.observe(self.state[None, :])[0], self._info()

    def _state_of(self, given: Any) -> np.ndarray:
        names = [v.name for v in self.model.variables]
        if isinstance(given, dict):
            bad = [k for k in given if k not in names]
            if bad:
                raise ModelError(f"{self.model.path}: no variable(s) {bad} (variables: {names})")
            state = self.model.initial_states[0].copy()
            for k, v in given.items():
                state[names.index(k)] = int(v)
        else:
            state = np.asarray(given, dtype=np.int64).reshape(-1).copy()
            if state.shape[0] != len(names):
                raise ModelError(f"{self.model.path}: a state has {len(names)} values ({names}), not {state.shape[0]}")
        if ((state < self.model.lo) | (state > self.model.hi)).any():
            raise ModelError(
                f"{self.model.path}: state {self.model.describe_state(state)} is outside the variables' ranges"
            )
        return state

    def outcomes(self, action: Any) -> tuple[np.ndarray, np.ndarray]:
        """Successors ``[k, V]`` int64 of taking ``action`` in the current state and their probabilities ``[k]``.

        Duplicate successors are added up; several choices with the action's label count each with probability
        1/(their number), as :meth:`step` picks them. Empty for a disabled action.
        """
        a = int(action)
        options = self._current().choices[a] if 0 <= a < self.action_space.n else ()
        if not options:
            return np.zeros((0, len(self.model.variables)), dtype=np.int64), np.zeros(0)
        succ = np.concatenate([c.succ for c in options])
        prob = np.concatenate([np.diff(c.cum, prepend=0.0) / len(options) for c in options])
        uniq, inv = np.unique(succ, axis=0, return_inverse=True)
        return uniq, np.bincount(inv.reshape(-1), weights=prob, minlength=uniq.shape[0])

    def step_to(self, action: Any, state: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """:meth:`step` with its outcome given: take ``action`` and move to ``state`` (a vector or a dict).

        For replaying a path, e.g. a trace of ``distmc run --traces``. ``info["probability"]`` is the probability
        of that outcome under the action (:meth:`outcomes`); the reward is :meth:`step`'s (the mean of the
        label's choices' action rewards when it has several). Raises :class:`~distmc.errors.PolicyError` when the
        action is disabled or cannot lead to ``state``.
        """
        a = int(action)
        target = self._state_of(state)
        succ, prob = self.outcomes(a)
        hit = np.flatnonzero((succ == target).all(axis=1)) if succ.shape[0] else np.zeros(0, dtype=np.int64)
        if hit.size == 0:
            raise PolicyError(
                f"action {self.actions[a] if 0 <= a < len(self.actions) else a!r} in state "
                f"{self.model.describe_state(self.state)} cannot lead to {self.model.describe_state(target)}"
            )
        p = float(prob[hit[0]])
        table = self._current()
        choices = table.choices[a]
        reward = table.state_reward + sum(c.reward for c in choices) / len(choices)
        self.steps += 1
        self.state = target
        self._table = None
        nxt = self._current()
        terminated = nxt.done or nxt.deadlock
        truncated = not terminated and self.steps >= self.max_steps
        return (
            self.observe(self.state[None, :])[0],
            float(reward * self.reward_scale),
            bool(terminated),
            bool(truncated),
            self._info(invalid_action=False, probability=p),
        )

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = int(action)
        if not 0 <= a < self.action_space.n:
            raise PolicyError(f"action {a} is outside the action space 0..{self.action_space.n - 1}")
        table = self._current()
        self.steps += 1
        invalid = not table.mask[a]
        if table.deadlock:
            reward, terminated = 0.0, True
        elif invalid:
            if self.invalid_action == "raise":
                raise PolicyError(
                    f"action '{self.dynamics.actions[a]}' is not enabled in state {self.model.describe_state(self.state)} "
                    f"(enabled: {[x for x, m in zip(self.dynamics.actions, table.mask, strict=True) if m]})"
                )
            reward, terminated = self.invalid_penalty, table.done
        else:
            succ, r = self.dynamics.sample(table, a, self.np_random)
            self.state = succ.copy()
            self._table = None
            nxt = self._current()
            reward, terminated = r * self.reward_scale, nxt.done or nxt.deadlock
        truncated = not terminated and self.steps >= self.max_steps
        return (
            self.observe(self.state[None, :])[0],
            float(reward),
            bool(terminated),
            bool(truncated),
            self._info(invalid_action=invalid),
        )

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self.model.describe_state(self.state)
        return None
