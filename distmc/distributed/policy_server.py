"""Policy servers: one policy replica serving several Ray workers, instead of a replica in every worker.

The Ray driver has two ways to give its workers a policy (``--policy-servers``):

* ``0`` (the default): every worker loads its own replica (on a GPU share where the cluster has GPUs: fractional
  ``num_gpus``, several replicas per GPU);
* ``S > 0``: ``S`` :class:`PolicyServer` actors each load one replica (one GPU each where the cluster has them) and
  worker ``r`` sends its batches of states to server ``r mod S``; the workers then load no network and ask for
  no GPU. A server answers one request at a time, in the order they come.

Both give the same action distributions: a network policy is always evaluated in fixed-shape batches
(:data:`distmc.policy.batched.BATCH`), so a state's output does not depend on which worker's states share its
batch; the induced model is the same state for state. Which is faster depends on the GPU and the network (a
replica per worker multiplies the GPU memory and the CUDA contexts; a server serialises the workers' calls and
adds a round trip per batch); ``benchmarks/scaling.py --policy-servers`` measures it.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from distmc.errors import DistmcError
from distmc.pipeline import Job

__all__ = ["PolicyServer", "RemotePolicy"]


class PolicyServer:
    """One policy replica, loaded once, answering batches of states (a Ray actor)."""

    def __init__(self, job: Job) -> None:
        from distmc.model.program import load_model
        from distmc.policy import load_policy

        model = load_model(job.model_path, job.constants)
        self.policy = load_policy(job.policy, model, job.interface, trust=job.trust_policy, dtype=job.policy_dtype)

    def describe(self) -> dict[str, Any]:
        """What a :class:`RemotePolicy` needs to stand in for the replica."""
        p = self.policy
        return {
            "actions": list(p.actions),
            "output": p.output,
            "name": p.name,
            "device": str(getattr(p, "device", "cpu")),
            "precision": getattr(p, "precision", "float64"),
        }

    def forward(self, states: np.ndarray) -> tuple[np.ndarray, int]:
        """The raw outputs for ``states`` ``[B, V]``, and the network calls they took."""
        before = int(getattr(self.policy, "forward_passes", 0))
        out = np.asarray(self.policy.forward(states))
        return out, int(getattr(self.policy, "forward_passes", 0)) - before


class RemotePolicy:
    """A worker's stand-in for a policy that a :class:`PolicyServer` evaluates (the policy contract).

    Attributes:
        forward_passes: network calls the server made for this worker.
        seconds: time this worker waited for its answers (transfer and queueing included).
    """

    def __init__(self, server: Any, info: dict[str, Any]) -> None:
        self.server = server
        self.actions: list[str] = info["actions"]
        self.output: str = info["output"]
        self.name: str = f"{info['name']} (served, {info['device']})"
        self.precision: str = info.get("precision", "float64")  # what the server's replica runs in
        self.forward_passes = 0
        self.seconds = 0.0

    def forward(self, states: np.ndarray) -> np.ndarray:
        import ray

        t = time.perf_counter()
        try:
            out, calls = ray.get(self.server.forward.remote(np.ascontiguousarray(states)))
        except ray.exceptions.RayTaskError as exc:  # the policy's own error (PolicyError), as itself
            cause = getattr(exc, "cause", None)
            if isinstance(cause, DistmcError):
                raise cause from None
            raise
        self.forward_passes += calls
        self.seconds += time.perf_counter() - t
        return out
