"""Stable-Baselines3 PPO, A2C and DQN policies, and sb3-contrib's MaskablePPO (``.zip`` files, the ``rl`` extra).

What a network gives distmc, per algorithm (a ``Discrete`` action space over the interface's actions):

* PPO, A2C and MaskablePPO: the logits of the categorical action distribution (the policy's ``action_net`` on the actor's
  latent features), so stochastic mode uses the trained distribution pi(a|s) = softmax(logits) exactly, and
  deterministic mode its argmax, which is what ``model.predict(obs, deterministic=True)`` returns. MaskablePPO
  masks disabled actions the way distmc does (softmax over the enabled actions' logits), so a policy trained
  with :meth:`distmc.gym.PrismEnv.action_masks` is verified with exactly the distribution it was trained with.
* DQN: the Q-values, given as ``"logits"``. A DQN policy is greedy: verify it with ``--mode deterministic``
  (argmax Q, what ``predict`` returns). Stochastic mode would treat softmax(Q) as the policy, which is a Boltzmann
  policy, not the trained one.

Security: an SB3 ``.zip`` stores Python objects with cloudpickle (the policy class, spaces, schedules), and
loading it executes code from the file. distmc therefore loads one only with an explicit opt-in
(``verify(..., trust_policy=True)``, ``distmc run --trust-policy``) and otherwise stops with a
:class:`~distmc.errors.PolicyError`. Which algorithm wrote the file is read from its JSON ``data`` entry, which
involves no unpickling. To verify without trusting the file, export the actor once, where the file is trusted, with
:func:`distmc.gym.export_policy` (a ``torch.export`` ``.pt2`` plus its interface file) and verify that.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import zipfile
from pathlib import Path
from typing import Any

from distmc.errors import PolicyError
from distmc.model.program import Model
from distmc.policy.batched import TorchPolicy, policy_file
from distmc.policy.interface import Interface

__all__ = ["ALGORITHMS", "SB3Policy", "actor_module", "detect_algorithm", "load_sb3"]

#: The algorithms distmc reads, and the package that has each.
ALGORITHMS = {
    "PPO": "stable_baselines3",
    "A2C": "stable_baselines3",
    "DQN": "stable_baselines3",
    "MaskablePPO": "sb3_contrib",
}


def detect_algorithm(path: str | Path) -> str:
    """``"PPO"``, ``"A2C"``, ``"DQN"`` or ``"MaskablePPO"``, from the JSON ``data`` entry of an SB3 ``.zip``.

    Nothing is unpickled: the keys of the algorithm's saved hyperparameters and the policy class's module name
    (stored as plain text beside its pickle) tell the algorithms apart.
    """
    p = Path(path)
    try:
        with zipfile.ZipFile(p) as z:
            data: dict[str, Any] = json.loads(z.read("data"))
    except (OSError, KeyError, zipfile.BadZipFile, ValueError):
        raise PolicyError(f"{p}: not a Stable-Baselines3 model file (a .zip with a 'data' entry)") from None
    module = str(data.get("policy_class", {}).get("__module__", ""))
    if module.startswith("sb3_contrib"):
        if "maskable" in module:
            return "MaskablePPO"
        raise PolicyError(f"{p}: an sb3-contrib model of an algorithm distmc does not read (it reads MaskablePPO)")
    if "exploration_initial_eps" in data or module.startswith("stable_baselines3.dqn"):
        return "DQN"
    if "clip_range" in data:
        return "PPO"
    if "ent_coef" in data and "n_steps" in data:
        return "A2C"
    raise PolicyError(
        f"{p}: a Stable-Baselines3 model of an algorithm distmc does not read (it reads PPO, A2C, DQN, MaskablePPO)"
    )


def load_sb3(path: str | Path, *, trust: bool, device: str = "cpu") -> Any:
    """Load an SB3 model (its code runs: only with ``trust``)."""
    p = policy_file(path)
    algo = detect_algorithm(p)
    if not trust:
        raise PolicyError(
            f"{p}: loading a Stable-Baselines3 .zip unpickles objects stored in it and so runs code from the file; "
            "pass --trust-policy (verify(..., trust_policy=True)) if you trust it, or export the actor to "
            "a torch.export .pt2 with distmc.gym.export_policy"
        )
    from distmc._internal.deps import require

    require(ALGORITHMS[algo], f"{p}: a Stable-Baselines3 {algo} policy")
    package = importlib.import_module(ALGORITHMS[algo])
    try:
        return getattr(package, algo).load(str(p), device=device)
    except Exception as exc:  # noqa: BLE001 - a foreign file: any failure is the file's
        raise PolicyError(
            f"{p}: Stable-Baselines3 could not load this {algo} model: {type(exc).__name__}: {exc}"
        ) from None


def actor_module(algo_model: Any) -> Any:
    """The network of an SB3 PPO/A2C/DQN/MaskablePPO model as a plain torch module: observations ``[B, F]`` -> ``[B, A]``.

    PPO/A2C/MaskablePPO give the action logits, DQN the Q-values (see the module docstring). The observations are
    used in the dtype they come in (SB3 casts them to float32; distmc feeds the actor's own dtype, float64 unless
    ``--policy-dtype float32``), so the module converts with ``.to(dtype)`` and exports without a cast.
    """
    import torch
    from gymnasium import spaces

    policy = algo_model.policy
    if not isinstance(policy.action_space, spaces.Discrete):
        raise PolicyError(
            f"{type(algo_model).__name__} model: distmc needs a Discrete action space, not {policy.action_space}"
        )
    if not isinstance(policy.observation_space, spaces.Box) or len(policy.observation_space.shape) != 1:
        raise PolicyError(f"{type(algo_model).__name__} model: distmc needs a flat Box observation space")

    class _Actor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            if hasattr(policy, "q_net"):
                self.extractor = policy.q_net.features_extractor
                self.head = policy.q_net.q_net
                self.latent: torch.nn.Module | None = None
            else:
                self.extractor = policy.pi_features_extractor
                self.latent = policy.mlp_extractor.policy_net
                self.head = policy.action_net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = self.extractor(x)
            if self.latent is not None:
                z = self.latent(z)
            return self.head(z)

    return _Actor().eval()


class SB3Policy(TorchPolicy):
    """The actor of an SB3 PPO/A2C/DQN/MaskablePPO ``.zip`` (loaded only with ``trust``), evaluated in batches.

    Its output is always ``"logits"`` (PPO/A2C action logits, DQN Q-values), whatever the interface says; the
    interface gives the features (and scale) the model was trained on and the label of each action index.
    """

    def __init__(
        self,
        path: str | Path,
        interface: Interface,
        model: Model,
        *,
        trust: bool = False,
        device: str | None = None,
        dtype: str = "float64",
    ) -> None:
        self.path = Path(path)
        iface = dataclasses.replace(interface, output="logits")
        super().__init__(str(self.path), self.path.name, iface, model, device, dtype)
        algo_model = load_sb3(self.path, trust=trust, device=self.device)
        self.algorithm = type(algo_model).__name__
        self.name = f"{self.path.name} ({self.algorithm})"
        obs_space, act_space = algo_model.policy.observation_space, algo_model.policy.action_space
        self.net = actor_module(algo_model).to(self.device)
        width = int(obs_space.shape[0]) if getattr(obs_space, "shape", None) else -1
        if width != len(self.columns):
            raise PolicyError(
                f"{self.path}: the model observes {width} values but the interface has {len(self.columns)} features "
                f"{interface.features}; save the training environment's interface beside it "
                f"(env.save_interface('{self.path.with_suffix('.json')}'))"
            )
        n = int(getattr(act_space, "n", -1))
        if n != len(self.actions):
            raise PolicyError(
                f"{self.path}: the model has {n} actions but the interface lists {len(self.actions)} {self.actions}"
            )
        self._ready()
