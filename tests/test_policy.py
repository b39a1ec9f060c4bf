"""Policy-induced models against an independent reference (Storm's MDP weighted in Python)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from distmc.api import verify
from distmc.errors import PolicyError
from tests.reference import storm_policy_reference

EXAMPLE = Path(__file__).resolve().parents[1] / "distmc" / "examples" / "gridworld.prism"
ACTIONS = ["up", "down", "left", "right"]
FEATURES = ["x", "y", "px", "py"]


class Net(torch.nn.Module):
    def __init__(self, out: str = "softmax") -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
        self.out = out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.body(x)
        return torch.softmax(z, dim=-1) if self.out == "softmax" else z


def save(tmp: Path, net: torch.nn.Module, output: str) -> tuple[Path, Path]:
    f = tmp / "net.pt"
    torch.jit.script(net).save(str(f))
    i = tmp / "iface.json"
    i.write_text(json.dumps({"features": FEATURES, "actions": ACTIONS, "output": output}))
    return f, i


def pi_of(net: torch.nn.Module, logits: bool) -> object:
    def fn(val: dict[str, int]) -> np.ndarray:
        x = torch.tensor([[float(val[f]) for f in FEATURES]])
        with torch.no_grad():
            y = net(x)[0].double().numpy()
        return np.exp(y - y.max()) if logits else y

    return fn


@pytest.mark.parametrize("mode", ["stochastic", "deterministic"])
@pytest.mark.parametrize("output", ["probabilities", "logits"])
def test_network_policy_matches_reference(tmp_path: Path, mode: str, output: str) -> None:
    net = Net("softmax" if output == "probabilities" else "logits")
    f, i = save(tmp_path, net, output)
    prop = 'P=? [F "crash"]'
    got = verify(EXAMPLE, prop, constants="N=4", policy=str(f), interface=i, mode=mode)
    ref = storm_policy_reference(
        EXAMPLE, "N=4", prop, pi_of(net, output == "logits"), ACTIONS, deterministic=mode == "deterministic"
    )
    assert (got.states, got.transitions) == (ref["states"], ref["transitions"])
    # The network computes in float32 and batched matmuls round differently from one-state calls (~1e-7 per
    # probability), so the values agree to that precision, not to 1e-9; the structure agrees exactly.
    assert abs(got.result - ref["result"]) <= 1e-6


def test_uniform_matches_reference() -> None:
    prop = 'P=? [F<=12 "crash"]'
    got = verify(EXAMPLE, prop, constants="N=4")
    ref = storm_policy_reference(EXAMPLE, "N=4", prop, lambda v: np.ones(4), ACTIONS)
    assert (got.states, got.transitions) == (ref["states"], ref["transitions"])
    assert abs(got.result - ref["result"]) <= 1e-9


def test_deterministic_is_between_monolithic_bounds() -> None:
    mono = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", mode="monolithic")
    det = verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", mode="deterministic")
    assert mono.result["min"] - 1e-9 <= det.result <= mono.result["max"] + 1e-9


class Bad(torch.nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "nan":
            return torch.full((x.shape[0], 4), float("nan"))
        if self.kind == "negative":
            return torch.full((x.shape[0], 4), -0.25)
        if self.kind == "shape":
            return torch.ones((x.shape[0], 3))
        if self.kind == "unnormalised":
            return torch.full((x.shape[0], 4), 0.2)
        # all mass on "down", which the initial state (y = 0) does not enable
        return torch.tensor([0.0, 1.0, 0.0, 0.0]).repeat(x.shape[0], 1)


@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("nan", "not finite"),
        ("negative", "negative"),
        ("shape", "shape"),
        ("zero", "zero probability"),
        ("unnormalised", "summing to 0.8, not 1"),
    ],
)
def test_bad_network_output_names_state(tmp_path: Path, kind: str, needle: str) -> None:
    f, i = save(tmp_path, Bad(kind), "probabilities")
    with pytest.raises(PolicyError, match=needle) as err:
        verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", policy=str(f), interface=i)
    if kind != "shape":
        assert "x=0" in str(err.value)


def test_interface_rejects_unknown_names(tmp_path: Path) -> None:
    i = tmp_path / "iface.json"
    i.write_text(json.dumps({"features": ["x", "speed"], "actions": ACTIONS}))
    with pytest.raises(PolicyError, match="speed"):
        verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", policy="uniform", interface=i)
    i.write_text(json.dumps({"features": FEATURES, "actions": ["up", "jump"]}))
    with pytest.raises(PolicyError, match="jump"):
        verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", policy="uniform", interface=i)


def test_corrupt_policy_file(tmp_path: Path) -> None:
    f = tmp_path / "net.pt"
    f.write_bytes(b"not a network")
    with pytest.raises(PolicyError, match="TorchScript"):
        verify(EXAMPLE, 'P=? [F "crash"]', constants="N=4", policy=str(f))
