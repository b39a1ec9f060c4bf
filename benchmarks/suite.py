"""The project's benchmark environments (``benchmarks/envs/``) and a Monte Carlo simulator over distmc's kernel.

* :func:`load_envs` reads the manifest ``benchmarks/envs/envs.toml`` (one table per environment: PRISM file,
  constants, training reward and done label, network width, properties; the manifest's header says what each key
  means) into :class:`BenchEnv` records.
* :class:`Simulator` rolls a policy out in a PRISM MDP, many episodes at once: distmc's :class:`~distmc.model.kernel.Kernel`
  gives every state's enabled choices and their branches, the policy's action distribution comes from
  :func:`distmc.policy.base.action_distribution` (the same masking and renormalisation distmc verifies with; argmax
  over the enabled actions in deterministic mode), and numpy samples an action and a branch per episode. The network
  sees each distinct state of a step once.
* :func:`monte_carlo` estimates ``P=? [F<=k "label"]`` from such rollouts; :func:`wilson_interval` is the confidence
  interval the Monte Carlo check (``tests/test_benchmarks.py``) compares the verified value with.

The trained policies live in ``benchmarks/policies/<env>/`` (``policy.pt`` TorchScript, ``policy.json`` distmc's
interface file, ``meta.json`` the training metadata), written by ``benchmarks/train.py``.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

import numpy as np

from distmc.errors import DistmcError
from distmc.model.kernel import Expansion, Kernel
from distmc.model.program import Model, load_model
from distmc.policy import Policy, load_policy
from distmc.policy.base import action_distribution

BENCH = Path(__file__).resolve().parent
ENV_DIR = BENCH / "envs"
MANIFEST = ENV_DIR / "envs.toml"
POLICY_DIR = BENCH / "policies"

_BOUNDED = re.compile(r'^\s*P\s*=\s*\?\s*\[\s*F\s*<=\s*(\d+)\s*"([A-Za-z_][A-Za-z0-9_]*)"\s*\]\s*$')


@dataclass(frozen=True)
class BenchEnv:
    """One benchmark environment of the manifest (see its header for the keys)."""

    name: str
    file: Path
    constants: str
    reward: str
    done: str
    max_steps: int
    hidden: int
    train_steps: int
    properties: tuple[str, ...]
    monte_carlo: str
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def policy_dir(self) -> Path:
        """Folder of the environment's trained policy."""
        return POLICY_DIR / self.name

    @property
    def policy(self) -> Path:
        """The trained policy (TorchScript)."""
        return self.policy_dir / "policy.pt"

    @property
    def interface(self) -> Path:
        """The trained policy's interface file."""
        return self.policy_dir / "policy.json"

    @property
    def meta(self) -> Path:
        """The trained policy's metadata (steps, seed, mean reward, ...)."""
        return self.policy_dir / "meta.json"

    def load_model(self) -> Model:
        """The instantiated PRISM model."""
        return load_model(self.file, self.constants or None)


_KEYS = {"file", "constants", "reward", "done", "max_steps", "hidden", "train_steps", "properties", "monte_carlo"}


def load_envs(manifest: str | Path = MANIFEST) -> dict[str, BenchEnv]:
    """The environments of a manifest, by name, in the manifest's order.

    Raises:
        DistmcError: a missing key, an unknown key or a missing PRISM file (the message names the table).
    """
    path = Path(manifest)
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    envs: dict[str, BenchEnv] = {}
    for name, t in data.items():
        missing = _KEYS - set(t)
        unknown = set(t) - _KEYS
        if missing or unknown:
            raise DistmcError(f"{path}: table [{name}]: missing keys {sorted(missing)}, unknown keys {sorted(unknown)}")
        file = path.parent / t["file"]
        if not file.is_file():
            raise DistmcError(f"{path}: table [{name}]: no PRISM file {file}")
        envs[name] = BenchEnv(
            name, file, t["constants"], t["reward"], t["done"], int(t["max_steps"]), int(t["hidden"]),
            int(t["train_steps"]), tuple(t["properties"]), t["monte_carlo"],
        )
    return envs


def bounded_reach(prop: str) -> tuple[int, str]:
    """``(k, label)`` of a property ``P=? [F<=k "label"]``.

    Raises:
        DistmcError: another shape of property.
    """
    m = _BOUNDED.match(prop)
    if m is None:
        raise DistmcError(f"'{prop}' is not of the form P=? [F<=k \"label\"] (the Monte Carlo check needs one)")
    return int(m.group(1)), m.group(2)


class Simulator:
    """Batched rollouts of a policy in a PRISM MDP, on distmc's kernel (see the module docstring).

    Args:
        model: the model.
        policy: a distmc policy (its ``actions`` name the model's action labels), or None for the uniform policy
            over the model's labels.
        mode: ``stochastic`` (sample pi(a|s)) or ``deterministic`` (argmax over the enabled actions, ties to the
            first in the policy's action order, as distmc's deterministic mode).
        compiled: use distmc's compiled kernel (default, as distmc does); ``False`` selects the numpy kernel, which
            is faster for one state at a time beside torch's threads (training).
    """

    def __init__(
        self, model: Model, policy: Policy | None = None, mode: str = "stochastic", compiled: bool | None = None
    ) -> None:
        if mode not in ("stochastic", "deterministic"):
            raise DistmcError(f"mode must be stochastic or deterministic, not '{mode}'")
        self.model = model
        self.kernel = Kernel(model, compiled=compiled)
        self.codec = self.kernel.codec
        self.policy = policy if policy is not None else load_policy("uniform", model)
        self.mode = mode
        col = {a: i for i, a in enumerate(self.policy.actions)}
        self.column = np.array([col.get(a, -1) for a in model.actions], dtype=np.int64)
        self.n_actions = len(self.policy.actions)

    def choices(self, states: np.ndarray) -> tuple[np.ndarray, Expansion]:
        """``[B, A]`` index of the kernel's choice for each (state, policy action), -1 where not enabled."""
        exp = self.kernel.expand(states)
        cols = self.column[exp.choice_action]
        if (cols < 0).any():
            c = int(np.flatnonzero(cols < 0)[0])
            raise DistmcError(
                f"{self.model.path}: state {self.model.describe_state(states[exp.choice_state[c]])} enables action "
                f"'{self.model.actions[exp.choice_action[c]]}', which the policy does not list"
            )
        table = np.full((states.shape[0], self.n_actions), -1, dtype=np.int64)
        flat = exp.choice_state * self.n_actions + cols
        if np.unique(flat).shape[0] != flat.shape[0]:
            raise DistmcError(f"{self.model.path}: a state enables several choices with one action label")
        table.reshape(-1)[flat] = np.arange(exp.n_choices)
        dead = (table < 0).all(axis=1)
        if dead.any():
            raise DistmcError(f"{self.model.path}: deadlock in state {self.model.describe_state(states[dead][0])}")
        return table, exp

    def distribution(self, states: np.ndarray, enabled: np.ndarray) -> np.ndarray:
        """``[B, A]`` action probabilities (each distinct state through the policy once)."""
        uniq, inverse = np.unique(states, axis=0, return_inverse=True)
        first = np.zeros(uniq.shape[0], dtype=np.int64)
        first[inverse[::-1]] = np.arange(states.shape[0])[::-1]
        pi = action_distribution(self.policy, uniq, enabled[first], self.model.describe_state)
        if self.mode == "deterministic":
            best = np.argmax(np.where(enabled[first], pi, -1.0), axis=1)
            pi = np.zeros_like(pi)
            pi[np.arange(pi.shape[0]), best] = 1.0
        return pi[inverse.reshape(-1)]

    def step(self, states: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One step of every episode: ``(next states [B, V], chosen policy action [B])``."""
        b = states.shape[0]
        table, exp = self.choices(states)
        pi = self.distribution(states, table >= 0)
        cum = np.cumsum(pi, axis=1)
        u = rng.random(b) * cum[:, -1]
        action = np.minimum((cum <= u[:, None]).sum(axis=1), self.n_actions - 1)
        choice = table[np.arange(b), action]
        if (choice < 0).any():  # only by rounding at the edge of a zero-probability column
            raise DistmcError("sampled a disabled action (rounding); report this")
        lo = exp.branch_offsets[choice]
        hi = exp.branch_offsets[choice + 1]
        cp = np.concatenate([[0.0], np.cumsum(exp.prob)])
        x = cp[lo] + rng.random(b) * (cp[hi] - cp[lo])
        branch = np.clip(np.searchsorted(cp, x, side="right") - 1, lo, hi - 1)
        return self.codec.unpack(exp.succ_keys[branch]), action


def monte_carlo(
    model: Model, prop: str, policy: Policy | None, mode: str, episodes: int, seed: int
) -> tuple[int, int]:
    """Roll ``episodes`` episodes out and count those that satisfy ``P=? [F<=k "label"]``.

    The label is read in the initial state and after each of the ``k`` steps, as Storm's bounded reachability
    counts them; an episode that has satisfied it stops being simulated.

    Returns:
        ``(hits, episodes)``.
    """
    k, label = bounded_reach(prop)
    if label not in model.labels:
        raise DistmcError(f"{model.path}: no label '{label}' (have {sorted(model.labels)})")
    if model.initial_states.shape[0] != 1:
        raise DistmcError(f"{model.path}: the Monte Carlo check needs one initial state")
    sim = Simulator(model, policy, mode)
    rng = np.random.default_rng(seed)
    states = np.repeat(model.initial_states, episodes, axis=0)
    hit = model.labels[label](states).astype(bool)
    for _ in range(k):
        live = np.flatnonzero(~hit)
        if live.shape[0] == 0:
            break
        nxt, _ = sim.step(states[live], rng)
        states[live] = nxt
        hit[live] = model.labels[label](nxt).astype(bool)
    return int(hit.sum()), episodes


def wilson_interval(hits: int, n: int, alpha: float) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion at confidence ``1 - alpha``."""
    z = NormalDist().inv_cdf(1 - alpha / 2)
    p = hits / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
