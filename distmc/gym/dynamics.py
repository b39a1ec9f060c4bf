"""A model's one-step dynamics as sampling tables, built by the compiled kernel and cached per state.

:class:`Dynamics` turns the kernel's :class:`~distmc.model.kernel.Expansion` of a state into what an
environment needs to take one step from it: for each agent action the choices it stands for (each a list of
successor states with cumulative probabilities and the choice's action reward), the state reward, whether a label
ends the episode, whether the state is a deadlock. States are expanded in batches (:meth:`Dynamics.tables`) and
kept in a bounded cache, so stepping through states already seen costs a dictionary look-up.

Agent actions: for an ``mdp`` they are action labels (the interface's list); every choice of the model carrying
that label belongs to the action, and a step picks one of them uniformly (PRISM's semantics leave same-label
choices nondeterministic; ``distmc run --resolve uniform`` splits them the same way). For a ``dtmc`` there is one
agent action, standing for all the state's choices, each with probability 1/(number of choices), as PRISM and
Storm fuse them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distmc.errors import PolicyError
from distmc.model.kernel import NO_ACTION, Kernel
from distmc.model.packing import StateCodec
from distmc.model.program import Model, RewardStructure

__all__ = ["Choice", "Dynamics", "StateTable"]


@dataclass(frozen=True)
class Choice:
    """One choice of the model in one state.

    Attributes:
        succ: ``[k, V]`` int64 successor states.
        cum: ``[k]`` float64 cumulative probabilities (the last one is the sum, 1 up to rounding).
        reward: the action reward of the choice (0 without a reward structure).
    """

    succ: np.ndarray
    cum: np.ndarray
    reward: float


@dataclass(frozen=True)
class StateTable:
    """What one step from a state needs.

    Attributes:
        choices: per agent action, the model choices it stands for (empty: the action is disabled).
        mask: ``[A]`` bool, the enabled agent actions.
        state_reward: the state reward (0 without a reward structure).
        done: one of the episode-ending labels holds.
        deadlock: no choice is enabled.
    """

    choices: tuple[tuple[Choice, ...], ...]
    mask: np.ndarray
    state_reward: float
    done: bool
    deadlock: bool


class Dynamics:
    """Sampling tables of a model's states under a list of agent actions.

    Args:
        model: the model.
        actions: agent action labels (ignored for a ``dtmc``: one agent action).
        reward: a reward structure, or None for zero rewards.
        done_labels: labels that end an episode.
        cache_size: most states kept; the cache is emptied when it is full.
    """

    def __init__(
        self,
        model: Model,
        actions: list[str],
        reward: RewardStructure | None = None,
        done_labels: tuple[str, ...] = (),
        cache_size: int = 200_000,
    ) -> None:
        self.model = model
        self.codec = StateCodec(model.lo, model.hi)
        self.kernel = Kernel(model, self.codec)
        self.is_dtmc = model.model_type == "dtmc"
        self.actions = ["<step>"] if self.is_dtmc else list(actions)
        index = {a: i for i, a in enumerate(self.actions)}
        # Model action id -> agent action (-1: not an agent action; a dtmc maps every choice to action 0).
        self._agent_of = np.array(
            [0 if self.is_dtmc else index.get(a, -1) for a in model.actions] + [0 if self.is_dtmc else -1],
            dtype=np.int64,
        )
        self.reward = reward
        self.done_labels = done_labels
        self.cache_size = int(cache_size)
        self._cache: dict[bytes, StateTable] = {}
        self.expanded = 0  # states the kernel expanded (cache misses)

    def key(self, state: np.ndarray) -> bytes:
        """The cache key of one state ``[V]`` int64 (its bytes: cheaper than packing it)."""
        return np.ascontiguousarray(state, dtype=np.int64).tobytes()

    def table(self, state: np.ndarray) -> StateTable:
        """The table of one state ``[V]`` int64."""
        hit = self._cache.get(self.key(state))
        return hit if hit is not None else self.tables(state[None, :])[0]

    def tables(self, states: np.ndarray) -> list[StateTable]:
        """Tables of a batch ``[B, V]`` int64; the states not cached yet are expanded in one kernel call."""
        states = np.ascontiguousarray(states, dtype=np.int64)
        kb = [s.tobytes() for s in states]
        miss = [i for i, k in enumerate(kb) if k not in self._cache]
        if miss:
            if len(self._cache) + len(miss) > self.cache_size:
                self._cache.clear()
                miss = list(range(len(kb)))  # the batch's hits went with the rest
            idx = np.array(sorted({kb[i]: i for i in miss}.values()), dtype=np.int64)
            for i, t in zip(idx.tolist(), self._build(states[idx], self.codec.pack(states[idx])), strict=True):
                self._cache[kb[i]] = t
        return [self._cache[k] for k in kb]

    def _build(self, states: np.ndarray, keys: np.ndarray) -> list[StateTable]:
        b = states.shape[0]
        self.expanded += b
        exp = self.kernel.expand(states, keys)
        succ = exp.succ
        agent = self._agent_of[exp.choice_action]
        stray = (agent < 0) & (exp.choice_action != NO_ACTION)
        if stray.any():
            c = int(np.flatnonzero(stray)[0])
            raise PolicyError(
                f"state {self.model.describe_state(states[exp.choice_state[c]])} enables action "
                f"'{self.model.actions[exp.choice_action[c]]}', which the environment's action list {self.actions} "
                "does not contain; list it in the interface"
            )
        c_reward = np.zeros(exp.n_choices)
        s_reward = np.zeros(b)
        if self.reward is not None:
            s_reward = self.reward.state_rewards(states)
            c_reward = self.reward.choice_rewards(states, exp.choice_state, exp.choice_action, self.kernel.action_id)
        done = np.zeros(b, dtype=bool)
        for name in self.done_labels:
            done |= self.model.labels[name](states)
        per_state: list[list[list[Choice]]] = [[[] for _ in self.actions] for _ in range(b)]
        off = exp.branch_offsets
        for c in range(exp.n_choices):  # the kernel groups choices by state, in model action order
            lo, hi = int(off[c]), int(off[c + 1])
            per_state[int(exp.choice_state[c])][int(agent[c])].append(
                Choice(succ[lo:hi], np.cumsum(exp.prob[lo:hi]), float(c_reward[c]))
            )
        out = []
        for i in range(b):
            ch = tuple(tuple(x) for x in per_state[i])
            mask = np.array([len(x) > 0 for x in ch], dtype=bool)
            out.append(StateTable(ch, mask, float(s_reward[i]), bool(done[i]), not mask.any()))
        return out

    def sample(self, table: StateTable, action: int, rng: np.random.Generator) -> tuple[np.ndarray, float]:
        """Successor and step reward of taking enabled agent ``action`` in the state of ``table``.

        The step reward is the state reward of the state being left plus the action reward of the choice taken,
        the way PRISM's cumulative rewards (``R=? [F ...]``, ``R=? [C<=k]``) add them up.
        """
        options = table.choices[action]
        choice = options[int(rng.integers(len(options)))] if len(options) > 1 else options[0]
        j = int(np.searchsorted(choice.cum, rng.random() * choice.cum[-1], side="right"))
        j = min(j, choice.succ.shape[0] - 1)
        return choice.succ[j], table.state_reward + choice.reward
