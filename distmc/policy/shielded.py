"""A policy restricted by a shield: ``--policy shielded.json`` (written by ``distmc shield``).

A shielded policy is two files beside each other and a manifest that names them:

* the shield table (Parquet, :class:`ShieldTable`): one row per state the shield restricts, one column per model
  variable (named as in the model) and ``allowed`` (``list<string>``: the action labels the shield keeps there);
  any other columns (``distmc shield`` adds each action's risk) are for people and ignored here;
* the manifest (JSON, :func:`write_manifest`): ``{"format": "distmc-shielded-policy", "version": 1, "policy":
  ..., "interface": ..., "shield": ...}``, paths relative to the manifest's folder; ``policy`` is any spec
  :func:`distmc.policy.load_policy` reads (a network file, ``module:function``, ``uniform``).

The shielded distribution in a state of the table is the base policy's, restricted to the allowed actions and
renormalised over them: ``pi'(a|s) = pi(a|s) [a allowed] / sum_b pi(b|s) [b allowed]``; elsewhere it is the base
policy's own. :meth:`ShieldedPolicy.forward` returns outputs of the base's kind, so that
:func:`~distmc.policy.base.action_distribution` (masking, renormalising, validating) does the rest exactly as for
the base policy: logits with a removed action's set to :data:`REMOVED_LOGIT` (its softmax weight is exactly 0),
or probabilities restricted and renormalised (uniform over the allowed actions when the base gives all of them
zero mass). Outside the table the output is the base's row itself, so an empty shield verifies to the base
policy's value bit for bit. Reading the manifest runs no code unless the base policy's format does (an SB3
``.zip`` still needs ``trust``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from distmc._internal.atomic import atomic_path, write_text
from distmc.errors import PolicyError
from distmc.model.packing import StateCodec
from distmc.model.program import Model
from distmc.policy.base import Policy

__all__ = [
    "SHIELD_FORMAT",
    "KeyIndex",
    "ShieldTable",
    "ShieldedPolicy",
    "is_shielded",
    "read_manifest",
    "write_manifest",
]

#: The manifest's ``format`` field.
SHIELD_FORMAT = "distmc-shielded-policy"

#: The logit a removed action gets (finite, so the output passes validation; its softmax weight is exactly 0).
REMOVED_LOGIT = -1e300


def is_shielded(path: Path) -> bool:
    """Whether ``path`` is a shielded-policy manifest (a small JSON file whose ``format`` says so)."""
    if path.suffix.lower() != ".json" or path.stat().st_size > 1 << 20:
        return False
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and data.get("format") == SHIELD_FORMAT


def write_manifest(
    path: str | Path, policy: str, shield: str | Path, interface: str | Path | None = None, **about: Any
) -> Path:
    """Write a shielded-policy manifest at ``path`` (paths inside it relative to its folder where they can be).

    Args:
        path: the manifest (``.json``).
        policy: the base policy's spec (a file, ``module:function`` or ``uniform``).
        shield: the shield table (Parquet).
        interface: the base policy's interface file (None: the one beside the policy file).
        about: more fields kept for people (model, property, delta, ...).
    """
    p = Path(path)
    base = p.parent.resolve()

    def rel(x: str | Path | None) -> str | None:
        if x is None:
            return None
        q = Path(x)
        if not q.exists():
            return str(x)  # module:function, uniform
        try:
            return str(q.resolve().relative_to(base))
        except ValueError:
            return str(q.resolve())

    data = {
        "format": SHIELD_FORMAT,
        "version": 1,
        "policy": rel(policy),
        "interface": rel(interface),
        "shield": rel(shield),
        **about,
    }
    return write_text(p, json.dumps(data, indent=2) + "\n")


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest with its paths resolved against its folder."""
    p = Path(path)
    data = json.loads(p.read_text())
    if data.get("format") != SHIELD_FORMAT or data.get("version") != 1:
        raise PolicyError(f"{p}: not a version-1 shielded-policy manifest (format {data.get('format')!r})")
    for name in ("policy", "interface", "shield"):
        value = data.get(name)
        if value is not None and not Path(value).is_absolute() and (p.parent / value).exists():
            data[name] = str(p.parent / value)
    if data.get("policy") is None or data.get("shield") is None:
        raise PolicyError(f"{p}: the manifest needs 'policy' and 'shield'")
    return data


class KeyIndex:
    """Sorted packed keys ``[S]`` and their rows: :meth:`find` maps keys to row numbers (-1: absent)."""

    def __init__(self, keys: np.ndarray) -> None:
        self.order = np.argsort(keys, kind="stable")
        self.sorted = keys[self.order]

    def find(self, keys: np.ndarray) -> np.ndarray:
        """``[B]`` int64 row of each key in the table, or -1."""
        if self.sorted.shape[0] == 0:
            return np.full(keys.shape[0], -1, dtype=np.int64)
        pos = np.searchsorted(self.sorted, keys)
        pos_c = np.minimum(pos, self.sorted.shape[0] - 1)
        hit = self.sorted[pos_c] == keys
        return np.where(hit, self.order[pos_c], -1).astype(np.int64)


@dataclass
class ShieldTable:
    """The states a shield restricts and what it allows there.

    Attributes:
        actions: the action labels of ``allowed``'s columns.
        states: ``[S, V]`` int64 states in the model's layout.
        allowed: ``[S, A]`` bool.
    """

    actions: list[str]
    states: np.ndarray
    allowed: np.ndarray

    @classmethod
    def read(cls, path: str | Path, model: Model, actions: list[str]) -> ShieldTable:
        """Read a shield table for ``model``, with ``allowed`` over ``actions`` (an unknown label is an error)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(str(path))
        except (OSError, pa.ArrowInvalid) as exc:
            raise PolicyError(f"{path}: cannot read the shield table ({exc})") from None
        missing = [v.name for v in model.variables if v.name not in table.column_names]
        if missing or "allowed" not in table.column_names:
            raise PolicyError(
                f"{path}: the shield table lacks column(s) {missing + (['allowed'] if 'allowed' not in table.column_names else [])}"
                f" of model {model.path}"
            )
        states = (
            np.stack(
                [
                    np.asarray(table.column(v.name).to_numpy(zero_copy_only=False), dtype=np.int64)
                    for v in model.variables
                ],
                axis=1,
            )
            if table.num_rows
            else np.zeros((0, len(model.variables)), dtype=np.int64)
        )
        col = table.column("allowed").combine_chunks()
        flat = pc.list_flatten(col).to_numpy(zero_copy_only=False)
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False).astype(np.int64)
        index = {a: i for i, a in enumerate(actions)}
        unknown = sorted(set(flat.tolist()) - set(index))
        if unknown:
            raise PolicyError(
                f"{path}: the shield allows action(s) {unknown}, which the policy's actions {actions} do not contain"
            )
        allowed = np.zeros((table.num_rows, len(actions)), dtype=bool)
        allowed[np.repeat(np.arange(table.num_rows), lengths), [index[a] for a in flat.tolist()]] = True
        return cls(list(actions), states, allowed)

    def write(self, path: str | Path, model: Model, extra: dict[str, np.ndarray] | None = None) -> Path:
        """Write the table as Parquet (model variables, ``allowed``, then ``extra`` columns ``[S]``)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        cols: dict[str, Any] = {}
        for i, v in enumerate(model.variables):
            cols[v.name] = pa.array(self.states[:, i].astype(bool) if v.is_bool else self.states[:, i])
        names = np.array(self.actions, dtype=object)
        offsets = np.zeros(self.allowed.shape[0] + 1, dtype=np.int32)
        np.cumsum(self.allowed.sum(axis=1), out=offsets[1:])
        flat = names[np.nonzero(self.allowed)[1]]
        cols["allowed"] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat.tolist(), type=pa.string()))
        for k, column in (extra or {}).items():
            cols[k] = pa.array(column)
        p = Path(path)
        with atomic_path(p) as tmp:
            pq.write_table(pa.table(cols), tmp)
        return p


class ShieldedPolicy:
    """A base :class:`~distmc.policy.base.Policy` restricted by a :class:`ShieldTable` (see the module docstring).

    Attributes:
        base: the policy the shield restricts.
        table: the shield.
    """

    def __init__(self, base: Policy, table: ShieldTable, model: Model, name: str | None = None) -> None:
        self.base = base
        self.output = base.output
        self.table = table
        self.actions = list(base.actions)
        self.name = name or f"shielded {base.name}"
        self.codec = StateCodec(model.lo, model.hi)
        self.index = KeyIndex(self.codec.pack(table.states))

    @classmethod
    def of_manifest(cls, spec: str | Path, manifest: dict[str, Any], base: Policy, model: Model) -> ShieldedPolicy:
        """The policy of the manifest ``spec`` (read by :func:`read_manifest`) over its base policy.

        ``base`` is the manifest's ``policy`` with its ``interface``, which the caller loads
        (:func:`~distmc.policy.load_policy`: this module stays below the loader that dispatches to it).
        """
        table = ShieldTable.read(manifest["shield"], model, list(base.actions))
        return cls(base, table, model, f"{Path(spec).name} (shielded {base.name})")

    # the base policy's counters are the report's policy_calls/policy_states
    @property
    def forward_passes(self) -> int:
        return int(getattr(self.base, "forward_passes", 0))

    @property
    def states_evaluated(self) -> int:
        return int(getattr(self.base, "states_evaluated", 0))

    @property
    def seconds(self) -> float:
        return float(getattr(self.base, "seconds", 0.0))

    def allowed_of(self, states: np.ndarray) -> np.ndarray:
        """``[B, A]`` bool: the actions the shield allows in ``states`` ``[B, V]`` (all outside the table)."""
        rows = self.index.find(self.codec.pack(states))
        out = np.ones((states.shape[0], len(self.actions)), dtype=bool)
        hit = rows >= 0
        out[hit] = self.table.allowed[rows[hit]]
        return out

    def forward(self, states: np.ndarray) -> np.ndarray:
        """``states`` ``[B, V]`` int64 -> the shielded outputs ``[B, A]`` float64 (of the base's kind)."""
        raw = np.asarray(self.base.forward(states), dtype=np.float64)
        allowed = self.allowed_of(states)
        if self.output == "logits":  # a removed action's logit: exp() of it, after any shift, is exactly 0
            return np.where(allowed, raw, REMOVED_LOGIT)
        q = np.where(allowed, raw, 0.0)
        mass = q.sum(axis=1, keepdims=True)
        uniform = allowed / np.maximum(allowed.sum(axis=1, keepdims=True), 1)
        out = np.where(mass > 0, q / np.where(mass > 0, mass, 1.0), uniform)
        return np.where(allowed.all(axis=1, keepdims=True), raw, out)  # outside the table: the base's own row
