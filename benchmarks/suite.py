"""The project's benchmark environments (``benchmarks/envs/``) and a Monte Carlo simulator over distmc's kernel.

* :func:`load_envs` reads the manifest ``benchmarks/envs/envs.toml`` (one table per environment: PRISM file,
  constants, training reward and done label, network width, properties; the manifest's header says what each key
  means) into :class:`BenchEnv` records.
* :func:`monte_carlo` estimates the manifest's ``P=? [F<=k "label"]`` by rolling a policy out in
  :class:`distmc.gym.PrismEnv` (:func:`distmc.gym.rollout`: the policy's action distribution masked and
  renormalised as distmc verifies with); :func:`wilson_interval` is the confidence interval the Monte Carlo check
  (``tests/test_benchmarks.py``) compares the verified value with.

The trained policies live in ``benchmarks/policies/<env>/`` (``policy.pt`` TorchScript, ``policy.json`` distmc's
interface file, ``meta.json`` the training metadata), written by ``benchmarks/train.py``.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

from distmc.errors import DistmcError
from distmc.model.program import Model, load_model
from distmc.policy import Policy

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
            name,
            file,
            t["constants"],
            t["reward"],
            t["done"],
            int(t["max_steps"]),
            int(t["hidden"]),
            int(t["train_steps"]),
            tuple(t["properties"]),
            t["monte_carlo"],
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


def monte_carlo(env: BenchEnv, policy: Policy | None, mode: str, episodes: int, seed: int) -> tuple[int, int]:
    """Roll ``episodes`` episodes of ``policy`` out and count those that satisfy the manifest's ``monte_carlo``.

    The property ``P=? [F<=k "label"]`` is decided exactly by :func:`distmc.gym.rollout` in a
    :class:`distmc.gym.PrismEnv` that truncates after ``k`` steps and ends an episode at ``label``: the label is
    read in the initial state and after each step, as Storm's bounded reachability counts them.

    Args:
        env: the environment.
        policy: a distmc policy (None: uniform over the enabled actions).
        mode: ``stochastic`` (sample pi(a|s)) or ``deterministic`` (argmax, ties to the policy's first action).
        episodes: number of episodes.
        seed: seed of the rollouts.

    Returns:
        ``(hits, episodes)``.
    """
    from distmc.gym import PrismEnv, rollout

    k, label = bounded_reach(env.monte_carlo)
    gym_env = PrismEnv(env.file, env.constants or None, done_label=label, max_steps=k)
    res = rollout(gym_env, policy, episodes, seed=seed, mode=mode, labels=[label])
    return int(res.reached[label].sum()), episodes


def wilson_interval(hits: int, n: int, alpha: float) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion at confidence ``1 - alpha``."""
    z = NormalDist().inv_cdf(1 - alpha / 2)
    p = hits / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
