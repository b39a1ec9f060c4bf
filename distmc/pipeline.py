"""What a run explores, as a small picklable description (:class:`Job`), and the parts built from it.

The in-process driver builds the parts once; each Ray actor builds its own from the same job (a model, a kernel
and a policy replica per worker), so only the job's few strings cross the wire.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from distmc.check.properties import PropertySet, PropertySpec, parse_properties, property_constants
from distmc.explore.expander import Expander
from distmc.model.kernel import Kernel
from distmc.model.packing import StateCodec
from distmc.model.program import Model, load_model, parse_constants
from distmc.options import VerifyOptions
from distmc.policy import Policy, load_policy, require_packages

__all__ = ["Job", "Parts"]


@dataclass(frozen=True)
class Job:
    """The inputs of a run (see :func:`distmc.api.verify` for their meaning)."""

    model_path: str
    prop: str  # one property, or several as one properties text (``A; B``, :func:`parse_properties`)
    constants: str | None = None
    policy: str | None = "uniform"
    interface: str | None = None
    mode: str = "stochastic"
    threshold: float = 0.0
    resolve: str = "none"
    trust_policy: bool = False
    policy_dtype: str = "float64"  # the network's arithmetic (distmc.policy.batched)

    @classmethod
    def of(cls, model_path: str, prop: str, options: VerifyOptions) -> Job:
        """The job of a run of ``prop`` on ``model_path`` with ``options`` (validated already: they are made so)."""
        o = options
        return cls(
            model_path,
            prop,
            o.constants,
            o.policy,
            o.interface,
            o.mode,
            o.threshold,
            o.resolve,
            o.trust_policy,
            o.policy_dtype,
        )

    def build(self, *, explorer: bool = True, policy: Policy | None = None) -> Parts:
        """Parse the model and property; with ``explorer``, also load the policy and compile the kernel.

        The Ray driver's own process only routes and assembles (``explorer=False``); its actors explore.
        ``policy``: use this policy instead of loading the job's (a Ray worker's stand-in for a policy server).
        """
        constants = parse_constants(self.constants)
        declared = property_constants(self.prop)  # the properties' own constants (const int B;) take their --const
        model = load_model(Path(self.model_path), {k: v for k, v in constants.items() if k not in declared})
        props = parse_properties(self.prop, model, {k: v for k, v in constants.items() if k in declared})
        needs_policy = self.mode != "monolithic" and model.model_type == "mdp"
        reward_names = props.reward_names(model)
        codec = StateCodec(model.lo, model.hi)
        if needs_policy and policy is None:
            require_packages(self.policy)  # here, not in a Ray actor after the start-up
        if not explorer:
            return Parts(model, props, codec, None, needs_policy, reward_names)
        pol = None
        if needs_policy:
            pol = policy or load_policy(
                self.policy, model, self.interface, trust=self.trust_policy, dtype=self.policy_dtype
            )
        expander = Expander(
            model,
            Kernel(model, codec),
            codec,
            pol,
            self.mode,
            terminal=props.terminal_mask,
            threshold=self.threshold,
            resolve=self.resolve,
            reward_names=reward_names,
        )
        return Parts(model, props, codec, expander, pol is not None, reward_names)


@dataclass
class Parts:
    """What a :class:`Job` builds."""

    model: Model
    props: PropertySet  # the run's properties, explored for once
    codec: StateCodec
    expander: Expander | None  # None when built with explorer=False
    uses_policy: bool  # an mdp outside monolithic mode: a policy resolves its choices
    reward_names: list[str]

    @property
    def spec(self) -> PropertySpec:
        """The first (or only) property."""
        return self.props.specs[0]

    @property
    def force_mdp(self) -> bool:
        """Monolithic mode: the induced model is the MDP itself."""
        return self.model.model_type == "mdp" and not self.uses_policy

    @property
    def policy(self) -> Policy | None:
        return self.expander.policy if self.expander is not None else None
