"""What every network-backed policy shares: the interface's inputs, its arithmetic, fixed-shape batches, counters.

**Arithmetic.** A network runs in float64 by default (``--policy-dtype float64``): its weights (float32 as trained,
upcast exactly) and its inputs (the interface's features, in order, times their scale) are float64, and so is every
operation. float32 results depend on the batch's shape, the BLAS kernel and the CPU's vector width (measured: a
2x64 network's probabilities move by 3e-7 relative between one state at a time and distmc's batches, and the
README's example value moved by 3e-9 between two x86-64 CPUs, 3000 times the bound its report stated); in float64
the same differences are a few units of 1e-16, so the induced model, the value and the traces agree to about
1e-13 on any machine, within the checker's stated error. ``float32`` stays an option (2-4x faster on large
networks, ``benchmarks/RESULTS.md``); then the report says that its bounds cover the checker's error only.

Each format converts its network (:meth:`TorchPolicy._ready`, :mod:`distmc.policy.onnx`, ...). Whether the
conversion took is measured, not assumed (:meth:`BatchedPolicy._settle`): a probe batch of states in the model's
ranges goes through the network, and a network whose outputs are all float32 numbers computes in float32 somewhere
(a cast in its code); one that fails on float64 inputs runs in float32. Either way :attr:`BatchedPolicy.precision`
says ``float32``, the report names it, and :attr:`BatchedPolicy.precision_note` says why.

**Batches.** Every call of the network gets exactly :attr:`BatchedPolicy.batch` (:data:`BATCH`) rows (the last
batch padded with zeros, the padding's outputs dropped). float64 makes a state's output independent of its batch
to about 1e-16, not to the bit: torch's kernels still change with the batch's shape (a batch of one state takes
another path), and a state's action distribution must not depend on which other states share its batch, or two
worker counts would build models that differ in the last bit and values that differ at 1e-16. With fixed-shape
batches they are identical on one machine, bit for bit, and float64 keeps them within 1e-13 across machines. The
counters give the report its ``policy_calls`` (network calls) and let tests check that every distinct state is
evaluated exactly once.

:class:`TorchPolicy` runs a torch module (TorchScript, a rebuilt ``state_dict`` network, an SB3 actor, a
``torch.export`` program, a module named by ``module:attribute``) under ``torch.inference_mode`` on CUDA when
available, else on the CPU with the thread count that measured faster.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from distmc.errors import PolicyError
from distmc.model.program import Model
from distmc.policy.interface import InputEncoding, Interface, check_dtype

__all__ = [
    "BATCH",
    "BatchedPolicy",
    "TorchPolicy",
    "default_device",
    "float32_only",
    "in_fixed_batches",
    "policy_file",
    "torch_dtype",
]

log = logging.getLogger(__name__)

#: States per network call.
BATCH = 1024

#: States in the probe batch that settles a policy's precision (:meth:`BatchedPolicy._settle`).
PROBE_STATES = 64


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


def torch_dtype(dtype: str) -> Any:
    """The torch dtype of ``"float64"`` or ``"float32"``."""
    import torch

    return torch.float64 if check_dtype(dtype) == "float64" else torch.float32


def float32_only(y: np.ndarray) -> bool:
    """Whether ``y`` looks computed in float32.

    Every number is a float32 number, and some use more than 16 bits of a float32's 24: outputs computed in float32,
    then widened, are so; exact values such as 0, 0.25 or 1 that a rule-based policy returns in float64 are float32
    numbers too, but short ones.
    """
    y = np.asarray(y, dtype=np.float64)
    finite = y[np.isfinite(y)]
    if not np.array_equal(finite.astype(np.float32).astype(np.float64), finite):
        return False
    mantissa = np.ldexp(np.frexp(finite)[0], 16)
    return bool((mantissa != np.round(mantissa)).any())


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
        dtype: the arithmetic asked for, ``"float64"`` (default) or ``"float32"``.
        precision: the arithmetic it runs in (:meth:`_settle`): ``dtype``, or ``"float32"`` where the network
            cannot run in float64; :attr:`precision_note` then says why.
        batch: rows per network call (:data:`BATCH`).
        forward_passes: network calls so far.
        states_evaluated: states sent through the network so far (padding not counted).
    """

    def __init__(self, source: str, name: str, interface: Interface, model: Model, dtype: str = "float64") -> None:
        self.source = source
        self.name = name
        self.actions = list(interface.actions)
        self.output = interface.output
        self.dtype = check_dtype(dtype)
        self.precision = self.dtype
        self.precision_note = ""
        self.batch = BATCH
        self.interface = interface
        self.encode = InputEncoding(interface, model, self.dtype)
        self.columns = self.encode.columns
        rng = np.random.default_rng(0)  # states in the model's ranges, for _settle
        self._probe = rng.integers(model.lo, model.hi + 1, size=(PROBE_STATES, len(model.variables)))
        self.model = model
        self.forward_passes = 0
        self.states_evaluated = 0
        self.seconds = 0.0  # time spent in forward()

    def _call(self, chunk: np.ndarray) -> np.ndarray:
        """Outputs ``[batch, A]`` float64 of one padded batch of inputs ``[batch, F]`` (the encoding's dtype)."""
        raise NotImplementedError

    def _to_float32(self) -> None:
        """Run in float32 from now on (the network could not run in float64): subclasses convert their network."""
        self.encode = InputEncoding(self.interface, self.model, "float32")

    def _padded(self, x: np.ndarray) -> np.ndarray:
        if x.shape[0] == self.batch:
            return x
        return np.concatenate([x, np.zeros((self.batch - x.shape[0], x.shape[1]), dtype=x.dtype)])

    def _settle(self) -> None:
        """Measure the arithmetic the network runs in (after loading; module docstring), and fall back to float32.

        Not counted as a forward pass.
        """
        if self.dtype == "float32":
            return
        x = self._padded(self.encode(self._probe)[: self.batch])
        try:
            y = self._call(x)
        except Exception as exc:  # noqa: BLE001 - tried again in float32 below; a real failure fails there too
            why = f"it fails on float64 inputs ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            self._to_float32()
            try:
                self._call(self._padded(self.encode(self._probe)[: self.batch]))
            except PolicyError:
                raise
            except Exception as again:  # noqa: BLE001 - user code: wrapped, never swallowed
                raise PolicyError(
                    f"policy {self.name} failed on a batch of {self.batch} states: {type(again).__name__}: {again}"
                ) from again
            self._fall_back(why)
            return
        if float32_only(y[: min(PROBE_STATES, self.batch)]):
            self._fall_back("its outputs are float32 numbers, so it computes in float32")

    def _fall_back(self, why: str) -> None:
        self.precision = "float32"
        self.precision_note = f"{self.source} runs in float32: {why}"
        log.warning(
            "%s; the report's bounds cover the checker's error only, not the policy's rounding", self.precision_note
        )

    def forward(self, states: np.ndarray) -> np.ndarray:
        t = time.perf_counter()
        x = self.encode(states)
        outs = []
        for start in range(0, x.shape[0], self.batch):
            chunk = x[start : start + self.batch]
            outs.append(self._call(self._padded(chunk))[: chunk.shape[0]])
            self.forward_passes += 1
        self.states_evaluated += x.shape[0]
        out = np.concatenate(outs) if outs else np.zeros((0, len(self.actions)))
        self.seconds += time.perf_counter() - t
        return out


class TorchPolicy(BatchedPolicy):
    """A torch module ``[B, F] -> [B, A]`` as a policy (``net`` set by the subclass, then :meth:`_ready`)."""

    net: Any

    def __init__(
        self,
        source: str,
        name: str,
        interface: Interface,
        model: Model,
        device: str | None = None,
        dtype: str = "float64",
    ) -> None:
        super().__init__(source, name, interface, model, dtype)
        self.device = device or default_device()

    def _ready(self) -> None:
        """Eval mode, the policy's dtype, its precision measured; then, on the CPU, the thread count chosen by measurement.

        float32 weights are upcast to float64 exactly.
        """
        self.net.eval()
        self._convert(torch_dtype(self.dtype))
        self._settle()
        if self.device == "cpu":
            self._choose_threads(len(self.columns))

    def _convert(self, dtype: Any) -> None:
        """The network's floating-point parameters and buffers in ``dtype`` (subclasses: also its graph's types)."""
        self.net = self.net.to(dtype)

    def _to_float32(self) -> None:
        import torch

        super()._to_float32()
        self._convert(torch.float32)

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
        dtype = torch_dtype(self.precision)
        try:
            shape = (width, dtype, tuple(tuple(p.shape) for p in self.net.parameters()))
        except Exception:  # noqa: BLE001 - a module without parameters(): measure it every time
            shape = None
        if shape is not None and (threads, shape) in _THREAD_CHOICE:
            torch.set_num_threads(_THREAD_CHOICE[threads, shape])
            return
        # One batch of the shape forward() uses: a warm-up run, then the better of two (it costs ~6 batches of
        # network work; it once cost ~24, as much as a whole policy phase of a 2x1024 network on Crazy Climber).
        x = torch.zeros((self.batch, width), dtype=dtype, device=self.device)

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
            torch.set_num_threads(threads)
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
