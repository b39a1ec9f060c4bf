"""Shields for a trained policy: risk per action, refinement until the shielded policy verifies within a budget.

* :func:`shield` (:mod:`distmc.shield.build`): the loop, the report, the shield table and the shielded policy.
* :mod:`distmc.shield.risk`: each enabled action's risk, one step by it and then the policy.
* :class:`ShieldedEnv` (:mod:`distmc.shield.gym`): the Gymnasium wrapper that masks the removed actions.
* the shielded policy itself is a policy format: :mod:`distmc.policy.shielded`.
"""

from distmc.shield.build import ShieldReport, shield

__all__ = ["ShieldReport", "ShieldedEnv", "shield"]


def __getattr__(name: str) -> object:
    if name == "ShieldedEnv":  # gymnasium is imported only when the wrapper is asked for
        from distmc.shield.gym import ShieldedEnv

        return ShieldedEnv
    raise AttributeError(name)
