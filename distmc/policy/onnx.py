"""An ONNX network (``.onnx``), run by onnxruntime (the ``onnx`` extra: ``pip install 'distmc[onnx]'``).

ONNX is what most RL stacks export to. The file is a protobuf graph of standard operators: loading it runs no code
from the file. It is evaluated in the fixed-shape batches of :class:`~distmc.policy.batched.BatchedPolicy`
(in pieces of its own size if its batch dimension is fixed). onnxruntime's kernels are not torch's, so the outputs
agree with the torch network's to about 1e-6, not to the bit. Its CUDA provider is used when onnxruntime has one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from distmc.errors import PolicyError
from distmc.model.program import Model
from distmc.policy.batched import BatchedPolicy, in_fixed_batches, policy_file
from distmc.policy.interface import Interface

__all__ = ["OnnxPolicy", "is_onnx"]

#: Field tags that may follow ``ir_version`` (field 1) at the start of an ONNX ``ModelProto``: producer name and
#: version, domain, model version, doc string, graph, opset imports.
_NEXT_TAGS = {0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42}


def is_onnx(path: str | Path) -> bool:
    """Whether ``path`` starts as an ONNX model does (``ir_version``, a small varint, then a known field)."""
    try:
        with open(path, "rb") as f:
            head = f.read(3)
    except OSError:
        return False
    return len(head) == 3 and head[0] == 0x08 and 1 <= head[1] < 0x80 and head[2] in _NEXT_TAGS


class OnnxPolicy(BatchedPolicy):
    """An ONNX model ``[B, F]`` float32 -> ``[B, A]``, run by onnxruntime."""

    def __init__(self, path: str | Path, interface: Interface, model: Model) -> None:
        from distmc._internal.deps import require

        self.path = policy_file(path)
        require("onnxruntime", f"{self.path}: an ONNX policy")
        import onnxruntime as ort

        super().__init__(str(self.path), self.path.name, interface, model)
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in ort.get_available_providers()]
        try:
            self.session = ort.InferenceSession(str(self.path), providers=providers)
        except Exception as exc:  # noqa: BLE001 - a foreign file: any failure is the file's
            raise PolicyError(f"{self.path}: onnxruntime cannot load it ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
        inputs = self.session.get_inputs()
        if len(inputs) != 1:
            raise PolicyError(f"{self.path}: the model takes {len(inputs)} inputs; a policy takes one, the "
                              "observations [B, features]")
        self.input_name = inputs[0].name
        shape = inputs[0].shape
        self.fixed_batch = shape[0] if shape and isinstance(shape[0], int) else None
        if len(shape) == 2 and isinstance(shape[1], int) and shape[1] != len(self.columns):
            raise PolicyError(f"{self.path}: the model takes {shape[1]} inputs per state; the interface has "
                              f"{len(self.columns)} features")

    def _run(self, x: np.ndarray) -> np.ndarray:
        try:
            out = self.session.run(None, {self.input_name: x})[0]
        except Exception as exc:  # noqa: BLE001 - the model's own failure
            raise PolicyError(f"{self.source}: onnxruntime failed on inputs of width {x.shape[1]}: "
                              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        return np.asarray(out, dtype=np.float64)

    def _call(self, chunk: np.ndarray) -> np.ndarray:
        return in_fixed_batches(self._run, np.ascontiguousarray(chunk, dtype=np.float32), self.fixed_batch)
