"""What every network-backed policy shares: the interface's inputs, fixed-shape batches, and counters.

A state's inputs are the interface's features, in order, times their scale, as ``float32``. Every call of the
network gets exactly :data:`BATCH` rows (the last batch padded with zeros, the padding's outputs dropped): torch's
kernels change with the batch shape (measured: a batch of one state takes another path and differs in the last
bit), and a state's action distribution must not depend on which other states share its batch, or two worker
counts would build different models. The counters give the report its ``policy_calls`` (network calls) and let
tests check that every distinct state is evaluated exactly once.

:class:`TorchPolicy` runs a torch module (TorchScript, a rebuilt ``state_dict`` network, an SB3 actor) under
``torch.inference_mode`` on CUDA when available, else on the CPU with the thread count that measured faster.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from distmc.errors import PolicyError
from distmc.model.program import Model
from distmc.policy.interface import InputEncoding, Interface

__all__ = ["BATCH", "BatchedPolicy", "TorchPolicy", "default_device", "in_fixed_batches", "policy_file"]

#: States per network call.
BATCH = 1024


def policy_file(path: str | Path) -> Path:
    """``path`` as a :class:`Path`, or a :class:`PolicyError` if no such file exists."""
    p = Path(path)
    if not p.is_file():
        raise PolicyError(f"{p}: no such policy file")
    return p


def default_device() -> str:
    """``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def in_fixed_batches(run: Any, chunk: np.ndarray, size: int | None) -> np.ndarray:
    """``run`` over ``chunk`` ``[BATCH, F]`` in pieces of exactly ``size`` rows (the last one padded with zeros).

    For a network exported with a fixed batch size; all at once when ``size`` is None or the chunk's.
    """
    if size is None or size == chunk.shape[0]:
        return np.asarray(run(chunk))
    outs = []
    for start in range(0, chunk.shape[0], size):
        piece = chunk[start : start + size]
        n = piece.shape[0]
        if n < size:
            piece = np.concatenate([piece, np.zeros((size - n, chunk.shape[1]), dtype=chunk.dtype)])
        outs.append(np.asarray(run(piece))[:n])
    return np.concatenate(outs)


#: Thread counts chosen by measurement in this process: (threads available, network shape) -> threads.
_THREAD_CHOICE: dict[tuple[int, object], int] = {}

class BatchedPolicy:
    """A policy evaluated in fixed-shape batches of the interface's inputs (subclasses implement :meth:`_call`).

    Attributes:
        source: what the policy was loaded from, for messages.
        forward_passes: network calls so far.
        states_evaluated: states sent through the network so far (padding not counted).
    """

    def __init__(self, source: str, name: str, interface: Interface, model: Model) -> None:
        self.source = source
        self.name = name
        self.actions = list(interface.actions)
        self.output = interface.output
        self.encode = InputEncoding(interface, model)
        self.columns = self.encode.columns
        self.forward_passes = 0
        self.states_evaluated = 0
        self.seconds = 0.0  # time spent in forward()

    def _call(self, chunk: np.ndarray) -> np.ndarray:
        """Outputs ``[BATCH, A]`` float64 of one padded batch of inputs ``[BATCH, F]`` float32."""
        raise NotImplementedError

    def forward(self, states: np.ndarray) -> np.ndarray:
        t = time.perf_counter()
        x = self.encode(states)
        outs = []
        for start in range(0, x.shape[0], BATCH):
            chunk = x[start : start + BATCH]
            if chunk.shape[0] < BATCH:
                chunk = np.concatenate([chunk, np.zeros((BATCH - chunk.shape[0], x.shape[1]), dtype=np.float32)])
            outs.append(self._call(chunk)[: min(BATCH, x.shape[0] - start)])
            self.forward_passes += 1
        self.states_evaluated += x.shape[0]
        out = np.concatenate(outs) if outs else np.zeros((0, len(self.actions)))
        self.seconds += time.perf_counter() - t
        return out


class TorchPolicy(BatchedPolicy):
    """A torch module ``[B, F] -> [B, A]`` as a policy (``net`` set by the subclass, then :meth:`_ready`)."""

    net: Any

    def __init__(self, source: str, name: str, interface: Interface, model: Model, device: str | None = None) -> None:
        super().__init__(source, name, interface, model)
        self.device = device or default_device()

    def _ready(self) -> None:
        """Put the network in eval mode and, on the CPU, choose the thread count by measurement."""
        self.net.eval()
        if self.device == "cpu":
            self._choose_threads(len(self.columns))

    def _choose_threads(self, width: int) -> None:
        """Keep torch's intra-op thread count only if it beats one thread on a sample batch (measured, per process).

        Why: on small networks and few cores torch's thread pool can cost more than it saves (measured on a 2-core
        machine: a 23-64-64-4 MLP on 10^4 states took 7 ms with one thread and 65 ms with two).
        """
        import torch

        from distmc._internal.jit import thread_cap

        threads = min(torch.get_num_threads(), thread_cap())  # within the run's thread budget
        torch.set_num_threads(threads)
        if threads <= 1:
            return
        try:
            shape = (width, tuple(tuple(p.shape) for p in self.net.parameters()))
        except Exception:  # noqa: BLE001 - a module without parameters(): measure it every time
            shape = None
        if shape is not None and (threads, shape) in _THREAD_CHOICE:
            torch.set_num_threads(_THREAD_CHOICE[threads, shape])
            return
        # One batch of the shape forward() uses: a warm-up run, then the better of two (it costs ~6 batches of
        # network work; it once cost ~24, as much as a whole policy phase of a 2x1024 network on Crazy Climber).
        x = torch.zeros((BATCH, width), dtype=torch.float32)

        def best() -> float:
            times = []
            with torch.inference_mode(), torch.jit.optimized_execution(False):
                self.net(x)
                for _ in range(2):
                    t = time.perf_counter()
                    self.net(x)
                    times.append(time.perf_counter() - t)
            return min(times)

        try:
            many = best()
            torch.set_num_threads(1)
            one = best()
        except Exception:  # noqa: BLE001 - a network that fails here fails again, with a clear error, in forward()
            return
        chosen = threads if many < one else 1
        torch.set_num_threads(chosen)
        if shape is not None:
            _THREAD_CHOICE[threads, shape] = chosen

    def _call(self, chunk: np.ndarray) -> np.ndarray:
        import torch

        # The profiling executor re-specialises on every new batch shape, which costs more than it gains for the
        # small networks policies are; plain execution is used.
        with torch.inference_mode(), torch.jit.optimized_execution(False):
            xb = torch.from_numpy(chunk).to(self.device)
            try:
                y = self.net(xb)
            except RuntimeError as exc:
                raise PolicyError(
                    f"{self.source}: the network failed on inputs of width {chunk.shape[1]} "
                    f"(features {len(self.columns)}): {str(exc).splitlines()[0]}"
                ) from exc
            if not isinstance(y, torch.Tensor):
                raise PolicyError(f"{self.source}: the network returned {type(y).__name__}, not a tensor")
            return y.detach().to("cpu", torch.float64).numpy()
