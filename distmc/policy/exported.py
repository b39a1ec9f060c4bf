"""A ``torch.export`` program (``.pt2``, ``torch.export.save``): the format that follows TorchScript in torch 2.x.

What a ``.pt2`` archive holds: the program's graph as JSON, its weights as raw tensor bytes, and sample inputs.
``torch.export.load`` unpickles some parts when they are not plain tensors (weights or constants marked
``use_pickle``, custom objects, sample inputs that the safe ``weights_only`` unpickler refuses), and a pickle can
run code. :func:`pickled_parts` finds those parts from the archive's JSON configs without unpickling anything; an
archive with any is loaded only with ``trust=True`` (``--trust-policy``), like an SB3 ``.zip``. What
``torch.export.save`` writes for a network of plain layers (and :func:`distmc.gym.export_policy`) has none.

The program is run as its ``module()`` in the fixed-shape batches of :class:`~distmc.policy.batched.TorchPolicy`:
the same kernels as the TorchScript of the same network, so the same outputs, bit for bit. A program exported
with a fixed batch size other than :data:`~distmc.policy.batched.BATCH` is run in pieces of its own size.

float64 (the default, ``--policy-dtype``): the module's parameters and buffers are converted, and so is every
float32 that its graph names as a constant argument (the input's recorded dtype that the program asserts, a cast
``x.float()`` became), so that the whole graph computes in float64 (:func:`retype_graph`).
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from distmc.errors import PolicyError
from distmc.model.program import Model
from distmc.policy.batched import TorchPolicy, in_fixed_batches, policy_file, torch_dtype
from distmc.policy.interface import Interface

__all__ = ["ExportedPolicy", "is_pt2", "pickled_parts", "retype_graph"]


def _prefix(names: list[str]) -> str | None:
    """The archive's folder (``name/``) if it is a ``.pt2`` archive: its ``archive_format`` entry reads ``pt2``."""
    for n in names:
        if n.endswith("archive_format") and n.count("/") <= 1:
            return n[: -len("archive_format")]
    return None


def is_pt2(path: str | Path) -> bool:
    """Whether ``path`` is a ``torch.export.save`` archive (read from its content, nothing loaded)."""
    try:
        with zipfile.ZipFile(path) as z:
            pre = _prefix(z.namelist())
            return pre is not None and z.read(pre + "archive_format").strip() == b"pt2"
    except (OSError, zipfile.BadZipFile, KeyError):
        return False


def pickled_parts(path: str | Path) -> list[str]:
    """The parts of a ``.pt2`` archive that ``torch.export.load`` would unpickle (empty: loading runs no code)."""
    import torch

    out = []
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        pre = _prefix(names) or ""
        for n in names:
            rel = n[len(pre) :]
            if rel.startswith(("data/weights/", "data/constants/")) and rel.endswith(".pt"):
                out.append(rel)  # legacy weights or constants: one pickle
            elif rel.startswith(("data/weights/", "data/constants/")) and rel.endswith("_config.json"):
                for fqn, meta in json.loads(z.read(n)).get("config", {}).items():
                    kind = str(meta.get("path_name", ""))
                    if meta.get("use_pickle") or kind.startswith(("custom_obj", "opaque_obj")):
                        out.append(f"{rel}: {fqn}")
            elif rel.startswith("data/sample_inputs/"):
                data = z.read(n)
                if data:
                    try:  # what torch.export.load tries first; on failure it would unpickle without limits
                        torch.load(io.BytesIO(data), weights_only=True)
                    except Exception:  # noqa: BLE001 - any refusal means a full unpickling later
                        out.append(rel)
    return out


def retype_graph(module: Any, dtype: Any) -> Any:
    """``module`` (a ``torch.fx.GraphModule``) computing in ``dtype``, converted in place.

    Its floating parameters and buffers, and every floating dtype its graph names as an argument (``torch.float32``,
    ``torch.float64``, half types), become ``dtype``.
    """
    import torch

    floating = {torch.float16, torch.bfloat16, torch.float32, torch.float64}

    def swap(v: Any) -> Any:
        if isinstance(v, torch.dtype) and v in floating:
            return dtype
        if isinstance(v, (list, tuple)):
            return type(v)(swap(a) for a in v)
        if isinstance(v, dict):
            return {k: swap(a) for k, a in v.items()}
        return v

    module = module.to(dtype)
    for node in module.graph.nodes:
        node.args, node.kwargs = swap(node.args), swap(node.kwargs)
    module.recompile()
    return module


class ExportedPolicy(TorchPolicy):
    """A ``torch.export`` program (``.pt2``) evaluated in batches."""

    def __init__(
        self,
        path: str | Path,
        interface: Interface,
        model: Model,
        device: str | None = None,
        *,
        trust: bool = False,
        dtype: str = "float64",
    ) -> None:
        import torch

        self.path = policy_file(path)
        super().__init__(str(self.path), self.path.name, interface, model, device, dtype)
        risky = pickled_parts(self.path)
        if risky and not trust:
            raise PolicyError(
                f"{self.path}: this torch.export archive has parts that loading would unpickle ({', '.join(risky[:3])}"
                f"{', ...' if len(risky) > 3 else ''}), which runs code from the file; pass --trust-policy "
                "(verify(..., trust_policy=True)) if you trust it"
            )
        try:
            program = torch.export.load(str(self.path))
        except Exception as exc:  # noqa: BLE001 - a foreign file: any failure is the file's
            raise PolicyError(
                f"{self.path}: not a loadable torch.export program ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}); save it with torch.export.save"
            ) from None
        inputs = [
            n for n in program.graph.nodes if n.op == "placeholder" and n.name in program.graph_signature.user_inputs
        ]
        if len(inputs) != 1:
            raise PolicyError(
                f"{self.path}: the program takes {len(inputs)} inputs; a policy takes one, the "
                "observations [B, features]"
            )
        shape = getattr(inputs[0].meta.get("val"), "shape", None)
        self.fixed_batch = int(shape[0]) if shape is not None and isinstance(shape[0], int) else None
        self.net = program.module().to(self.device)
        self._ready()

    def _ready(self) -> None:
        # An exported module is already in the mode it was exported in (eval() is not allowed on it).
        self._convert(torch_dtype(self.dtype))
        self._settle()
        if self.device == "cpu":
            self._choose_threads(len(self.columns))

    def _convert(self, dtype: Any) -> None:
        self.net = retype_graph(self.net, dtype)

    def _call(self, chunk: np.ndarray) -> np.ndarray:
        run: Any = super()._call
        return in_fixed_batches(run, chunk, self.fixed_batch)
