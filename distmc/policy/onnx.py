"""An ONNX network (``.onnx``), run by onnxruntime (the ``onnx`` extra: ``pip install 'distmc[onnx]'``).

ONNX is what most RL stacks export to. The file is a protobuf graph of standard operators: loading it runs no code
from the file. It is evaluated in the fixed-shape batches of :class:`~distmc.policy.batched.BatchedPolicy`
(in pieces of its own size if its batch dimension is fixed). Its CUDA provider is used when onnxruntime has one.

float64 (the default, ``--policy-dtype``): the graph is converted with the ``onnx`` package
(:func:`double_graph`: its float initializers, constants, casts and declared types become double) and run by
onnxruntime in double, which then agrees with the torch network of the same weights to about 1e-15. Where that
cannot be done (the ``onnx`` package missing, or an operator onnxruntime has no double kernel for on this device,
such as ``Elu``, ``LeakyRelu`` or ``Erf`` on the CPU) the file runs as it is, in float32, and the report says so;
onnxruntime's float32 kernels are not torch's, so its outputs then agree with the torch network's to about 1e-6.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from distmc.errors import PolicyError
from distmc.model.program import Model
from distmc.policy.batched import BatchedPolicy, in_fixed_batches, policy_file
from distmc.policy.interface import Interface

__all__ = ["OnnxPolicy", "double_graph", "is_onnx"]

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


def double_graph(model: Any) -> Any:
    """A copy of the ``onnx.ModelProto`` ``model`` that computes in double.

    Every float, float16 and bfloat16 initializer, ``Constant``, ``ConstantOfShape`` value, ``Cast`` target and
    declared tensor type is made double (float32 weights upcast exactly), subgraphs included.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16}
    out = onnx.ModelProto()
    out.CopyFrom(model)

    def tensor(t: Any) -> None:
        if t.data_type in floats:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))

    def types(values: Any) -> None:
        for v in values:
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type in floats:
                v.type.tensor_type.elem_type = TensorProto.DOUBLE

    def graph(g: Any) -> None:
        for t in g.initializer:
            tensor(t)
        types(g.input)
        types(g.output)
        types(g.value_info)
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    tensor(a.t)
                elif a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        graph(sub)
                elif node.op_type == "Cast" and a.name == "to" and a.i in floats:
                    a.i = TensorProto.DOUBLE
                elif node.op_type == "Constant" and a.name in ("value_float", "value_floats"):
                    value = np.asarray(a.f if a.name == "value_float" else list(a.floats), dtype=np.float64)
                    node.attribute.remove(a)
                    node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(value)))
                    break  # a Constant has one value attribute

    graph(out.graph)
    return out


class OnnxPolicy(BatchedPolicy):
    """An ONNX model ``[B, F] -> [B, A]``, run by onnxruntime in double (see the module docstring)."""

    def __init__(self, path: str | Path, interface: Interface, model: Model, dtype: str = "float64") -> None:
        from distmc._internal.deps import require

        self.path = policy_file(path)
        require("onnxruntime", f"{self.path}: an ONNX policy")
        import onnxruntime as ort

        super().__init__(str(self.path), self.path.name, interface, model, dtype)
        self.providers = [
            p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in ort.get_available_providers()
        ]
        self.session = self._session(str(self.path))
        inputs = self.session.get_inputs()
        if len(inputs) != 1:
            raise PolicyError(
                f"{self.path}: the model takes {len(inputs)} inputs; a policy takes one, the observations [B, features]"
            )
        self.input_name = inputs[0].name
        shape = inputs[0].shape
        self.fixed_batch = shape[0] if shape and isinstance(shape[0], int) else None
        if len(shape) == 2 and isinstance(shape[1], int) and shape[1] != len(self.columns):
            raise PolicyError(
                f"{self.path}: the model takes {shape[1]} inputs per state; the interface has "
                f"{len(self.columns)} features"
            )
        self.as_saved = self.session  # the file's own graph, what runs in float32
        self.saved_input = np.float64 if inputs[0].type == "tensor(double)" else np.float32
        self.input_dtype = self.saved_input
        if self.dtype == "float64":
            self._to_double()

    def _session(self, source: str | bytes) -> Any:
        import onnxruntime as ort

        try:
            return ort.InferenceSession(source, providers=self.providers)
        except Exception as exc:  # noqa: BLE001 - a foreign file: any failure is the file's
            raise PolicyError(
                f"{self.path}: onnxruntime cannot load it ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''})"
            ) from None

    def _to_double(self) -> None:
        """Run the graph converted to double (:func:`double_graph`), or say why it runs as it is, in float32."""
        import importlib.util

        if importlib.util.find_spec("onnx") is None:
            self._to_float32()
            self._fall_back("converting an ONNX graph to double needs the onnx package (pip install onnx)")
            return
        import onnx

        try:
            double = double_graph(onnx.load(str(self.path)))
            session = self._session(double.SerializeToString())
        except Exception as exc:  # noqa: BLE001 - whatever the conversion or onnxruntime refuses: run as saved
            self._to_float32()
            self._fall_back(f"onnxruntime cannot run it in double ({str(exc).splitlines()[0]})")
            return
        self.session, self.input_dtype = session, np.float64
        self._settle()

    def _to_float32(self) -> None:
        super()._to_float32()
        self.session, self.input_dtype = self.as_saved, self.saved_input

    def _run(self, x: np.ndarray) -> np.ndarray:
        try:
            out = self.session.run(None, {self.input_name: x})[0]
        except Exception as exc:  # noqa: BLE001 - the model's own failure
            raise PolicyError(
                f"{self.source}: onnxruntime failed on inputs of width {x.shape[1]}: "
                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            ) from None
        return np.asarray(out, dtype=np.float64)

    def _call(self, chunk: np.ndarray) -> np.ndarray:
        return in_fixed_batches(self._run, np.ascontiguousarray(chunk, dtype=self.input_dtype), self.fixed_batch)
