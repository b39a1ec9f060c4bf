"""A TorchScript network (``torch.jit.save``) with an interface file that maps states to inputs and outputs to actions.

The interface file is described in :mod:`distmc.policy.interface`. Arithmetic: the module's parameters and
buffers are converted by ``Module.to``, and every floating dtype its code names as a constant ``dtype`` argument
(``x.float()`` in a traced or scripted ``forward`` is ``aten::to(x, 6)``, which SB3 actors exported by older
distmc versions have) is made the policy's (:func:`retype_script`); what still computes in float32 runs in
float32, and the report says so. Batching (fixed-shape batches of :data:`~distmc.policy.batched.BATCH` rows, and
why), device and thread choice are :class:`~distmc.policy.batched.TorchPolicy`'s. Loading a TorchScript file runs
no Python code from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from distmc.errors import PolicyError
from distmc.model.program import Model
from distmc.policy.batched import TorchPolicy, policy_file
from distmc.policy.interface import Interface

__all__ = ["TorchScriptPolicy", "retype_script"]

#: torch's ScalarType codes of the floating dtypes a TorchScript graph may name: Half, Float, Double, BFloat16.
_FLOATING = {5: "float16", 6: "float32", 7: "float64", 15: "bfloat16"}


def retype_script(module: Any, dtype: Any) -> Any:
    """``module`` (a TorchScript module, before its first call) computing in ``dtype``, converted in place.

    Its floating parameters and buffers, and every floating constant passed as the ``dtype`` argument of an
    ``aten`` operator in any method of it or its submodules, become ``dtype``. (A method's graph is compiled on its
    first call: a module already called keeps the plan it compiled.)
    """
    import torch

    code = 7 if dtype is torch.float64 else 6
    module = module.to(dtype)

    def retype(graph: Any, block: Any) -> None:
        for node in block.nodes():
            for sub in node.blocks():
                retype(graph, sub)
            if not node.kind().startswith("aten::"):
                continue
            try:
                args = torch._C.parse_schema(node.schema()).arguments
            except RuntimeError:  # no schema
                continue
            for i, (arg, value) in enumerate(zip(args, node.inputs(), strict=False)):
                const = value.node()
                if (
                    arg.name == "dtype"
                    and const.kind() == "prim::Constant"
                    and const.hasAttribute("value")
                    and const.kindOf("value") == "i"
                    and const.i("value") in _FLOATING
                    and const.i("value") != code
                ):
                    with graph.insert_point_guard(node):
                        node.replaceInput(i, graph.insertConstant(code))

    for sub in module.modules():
        for name in sub._c._method_names():
            graph = sub._c._get_method(name).graph
            retype(graph, graph)
    return module


class TorchScriptPolicy(TorchPolicy):
    """A TorchScript module (``torch.jit.save``) evaluated in batches."""

    def __init__(
        self, path: str | Path, interface: Interface, model: Model, device: str | None = None, dtype: str = "float64"
    ) -> None:

        self.path = policy_file(path)
        super().__init__(str(self.path), self.path.name, interface, model, device, dtype)
        self.net = self._load()
        self._ready()

    def _load(self) -> Any:
        import torch

        try:
            return torch.jit.load(str(self.path), map_location=self.device)
        except Exception as exc:  # corrupt file, or not TorchScript
            raise PolicyError(
                f"{self.path}: not a loadable TorchScript module ({type(exc).__name__}); save it with torch.jit.save"
            ) from None

    def _convert(self, dtype: Any) -> None:
        # from the file each time: a module that has run keeps the plan it compiled for its old types
        self.net = retype_script(self._load().eval(), dtype)
