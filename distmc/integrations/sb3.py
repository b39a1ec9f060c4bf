"""Verify a policy while Stable-Baselines3 trains it: :class:`VerifyCallback`.

Every ``every`` environment steps the callback exports the current policy (:func:`distmc.gym.export_policy`: a
``torch.export`` program and its interface, ``DIR/step-<N>.pt2``, which ``distmc run --policy`` and ``distmc curve``
read as they are), verifies it on the exploration it shares with every other checkpoint
(:class:`distmc.curve.SharedModel`: the model is explored once, on the first check), and logs to SB3's logger
(TensorBoard, CSV, stdout, whatever the run configured): ``distmc/value`` (the property's value),
``distmc/verify_seconds`` and, for a threshold property (``P<=0.1 [F "crash"]``), ``distmc/holds`` (1 or 0). With
``stop_on_fail`` training stops (``_on_step`` returns False) at the first check where a threshold property fails.
``callback.curve`` is the :class:`~distmc.curve.CurveReport` of the checks so far (``plot_curve`` draws it).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from distmc.curve.curve import CurveReport
from distmc.curve.engine import SharedModel
from distmc.errors import UsageError
from distmc.options import VerifyOptions

__all__ = ["VerifyCallback"]


class VerifyCallback(BaseCallback):
    """Verify the policy being trained every ``every`` steps; log the value; optionally stop when it fails.

    Args:
        model_path: the PRISM mdp the environment steps.
        prop: one property; a threshold one (``P<=0.1 [...]``) also decides ``distmc/holds`` and stopping.
        env: the :class:`~distmc.gym.PrismEnv` the policy trains on (its interface is saved with each export);
            default: the training environment's first one.
        every: environment steps between checks (also checked once when training ends, if steps were taken since).
        directory: where the exported checkpoints go (default ``distmc-checkpoints``).
        stop_on_fail: stop training when a threshold property fails.
        options: :class:`~distmc.options.VerifyOptions` of the checks (constants, mode, checker...); ``kw`` by
            name.

    Example:
        >>> cb = VerifyCallback("avoid.prism", 'P<=0.2 [F<=30 "crash"]', every=2048,
        ...                     constants="N=5,slickness=0.1")  # doctest: +SKIP
        >>> PPO("MlpPolicy", env).learn(20_000, callback=cb)  # doctest: +SKIP
    """

    def __init__(
        self,
        model_path: str | Path,
        prop: str,
        *,
        env: Any = None,
        every: int = 10_000,
        directory: str | Path = "distmc-checkpoints",
        stop_on_fail: bool = False,
        options: VerifyOptions | None = None,
        verbose: int = 0,
        **kw: Any,
    ) -> None:
        super().__init__(verbose)
        if every < 1:
            raise UsageError(f"VerifyCallback: every must be at least 1, not {every}")
        self.model_path, self.prop, self.env, self.every = str(model_path), prop, env, int(every)
        self.directory = Path(directory)
        self.stop_on_fail = stop_on_fail
        self.opts = VerifyOptions.build(options, **kw)
        self.shared: SharedModel | None = None
        self.curve = CurveReport(self.model_path, prop, "shared")
        self.failed = False
        self._last = 0

    def _prism_env(self) -> Any:
        if self.env is not None:
            return self.env
        envs = getattr(self.training_env, "envs", None)
        if not envs:
            raise UsageError(
                "VerifyCallback: give env= (the PrismEnv): the training environment is not a "
                "DummyVecEnv whose environments this process holds"
            )
        return envs[0].unwrapped

    def verify_now(self) -> bool:
        """Export and verify the current policy, log it; False when training should stop."""
        from distmc.gym import export_policy

        t0 = time.perf_counter()
        self.directory.mkdir(parents=True, exist_ok=True)
        step = int(self.num_timesteps)
        path, _ = export_policy(self.model, self.directory / f"step-{step}.pt2", self._prism_env())
        if self.shared is None:
            self.shared = SharedModel(self.model_path, self.prop, self.opts)
            if self.shared.same_label:
                raise UsageError(
                    f"{self.model_path}: a state enables several choices of one action label; verify "
                    "the exported checkpoints with distmc curve --separate"
                )
            self.curve.explore_s = self.shared.explore_s
            self.curve.mdp_states, self.curve.mdp_transitions = self.shared.n_states, self.shared.mdp.n_transitions
        point = self.shared.check(str(path), step)
        self.curve.points.append(point)
        self.curve.total_s += time.perf_counter() - t0
        self.logger.record("distmc/value", point.value)
        self.logger.record("distmc/verify_seconds", point.seconds)
        if point.truth is not None:
            self.logger.record("distmc/holds", int(point.truth))
        if self.verbose:
            print(f"distmc: step {step}: {self.prop} = {point.value:.10g} ({point.seconds:.2f} s)")
        self._last = step
        self.failed = point.truth is False
        return not (self.failed and self.stop_on_fail)

    def _on_step(self) -> bool:
        if self.num_timesteps - self._last >= self.every:
            return self.verify_now()
        return True

    def _on_training_end(self) -> None:
        if self.num_timesteps > self._last and not self.failed:
            self.verify_now()
            self.logger.dump(self.num_timesteps)
