"""float64 policy arithmetic (``--policy-dtype``): the same induced model and value for any batch shape, thread
count and worker count; float32 still there and reported as such; networks that cannot run in float64 say so."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from distmc.api import verify
from distmc.errors import DistmcError
from distmc.model.kernel import Kernel
from distmc.model.program import load_model
from distmc.options import VerifyOptions
from distmc.policy import batched, load_policy
from distmc.policy.batched import BATCH, TorchPolicy, float32_only

REPO = Path(__file__).resolve().parents[1]
GRID = REPO / "distmc" / "examples" / "gridworld.prism"
EXAMPLE = REPO / "distmc" / "examples" / "gridworld_policy.pt"
PROP = 'P=? [F "crash"]'
CONST = "N=6"
IFACE = {
    "features": ["x", "y", "px", "py"],
    "actions": ["up", "down", "left", "right"],
    "output": "logits",
    "scale": {"x": 0.2, "y": 0.2, "px": 0.2, "py": 0.2},
}


def mlp(hidden: int = 64, seed: int = 5) -> torch.nn.Sequential:
    """A 2x``hidden`` tanh MLP over the gridworld's 4 inputs, with logits sharp enough to matter."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(4, hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, 4),
    )
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(2.0)
    return net.eval()


@pytest.fixture(scope="module")
def nets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str | None]]:
    """name -> (policy file, interface): the bundled example network and a 2x64 network saved as TorchScript."""
    tmp = tmp_path_factory.mktemp("dtype")
    path = tmp / "mlp64.pt"
    torch.jit.script(mlp()).save(str(path))
    (tmp / "mlp64.json").write_text(json.dumps(IFACE))
    return {"example": (str(EXAMPLE), str(EXAMPLE.with_suffix(".json"))), "mlp2x64": (str(path), None)}


def induced(policy: tuple[str, str | None], **kw: object) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, str]:
    """(value, keys, targets, probabilities, policy precision) of the induced DTMC of ``policy``."""
    report, m = verify(
        GRID, PROP, constants=CONST, policy=policy[0], interface=policy[1], keep_model=True, checker="storm", **kw
    )
    return (
        float(report.result),
        m.keys,
        np.concatenate(m.target_chunks),
        np.concatenate(m.prob_chunks),
        str(report.policy_dtype),
    )


def assert_same(a: tuple, b: tuple, what: str) -> None:
    """Same states, transitions and precision; probabilities to 4e-15 absolute and 1e-13 relative, values to 1e-13
    relative.

    Another batch shape sums a layer's products in another order: a logit moves by an ulp or two, and a softmax
    turns that into a relative change of the probability of that size, about 1e-14 where logits are in the tens
    (measured on the example network: 1.8e-14 at p = 0.0028, 1.5e-15 absolute at most; 1e-15 on the 2x64 one).
    """
    assert a[4] == b[4] == "float64", what
    assert np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2]), what
    diff = np.abs(a[3] - b[3])
    assert diff.max() <= 4e-15 and (diff / b[3]).max() <= 1e-13, (what, float(diff.max()), float((diff / b[3]).max()))
    assert abs(a[0] - b[0]) <= 1e-13 * b[0], (what, a[0], b[0])


@pytest.fixture()
def fixed_threads() -> Iterator[None]:
    """Threads set by the test, not by the policy's calibration (which may choose one thread)."""
    saved = torch.get_num_threads()
    choose = TorchPolicy._choose_threads
    TorchPolicy._choose_threads = lambda self, width: None  # type: ignore[method-assign]
    yield
    TorchPolicy._choose_threads = choose  # type: ignore[method-assign]
    torch.set_num_threads(saved)


@pytest.mark.parametrize("name", ["example", "mlp2x64"])
def test_any_batch_and_thread_count_same_model(
    nets: dict[str, tuple[str, str | None]], name: str, monkeypatch: pytest.MonkeyPatch, fixed_threads: None
) -> None:
    base = induced(nets[name])
    for rows in (1, 7, BATCH):
        for threads in (1, 2):
            monkeypatch.setattr(batched, "BATCH", rows)
            torch.set_num_threads(threads)
            assert_same(induced(nets[name]), base, f"{name}: batches of {rows} rows, {threads} threads")


def test_two_ray_workers_same_model(nets: dict[str, tuple[str, str | None]], local_ray: None) -> None:
    for name in ("example", "mlp2x64"):
        base = induced(nets[name])
        assert_same(induced(nets[name], workers=2, driver="ray"), base, f"{name}: 2 Ray workers")


def test_traces_use_the_same_arithmetic(nets: dict[str, tuple[str, str | None]]) -> None:
    """Every step's pi in --traces is the network's probability in float64, evaluated one state at a time."""
    report = verify(GRID, PROP, constants=CONST, policy=nets["mlp2x64"][0], traces=5)
    assert report.traces
    model = load_model(GRID, CONST)
    kernel = Kernel(model)
    net = torch.jit.load(nets["mlp2x64"][0]).double()
    names = [v.name for v in model.variables]
    checked = 0
    for trace in report.traces:
        for step in trace["path"][:-1]:
            state = np.array([[int(step["state"][n]) for n in names]], dtype=np.int64)
            exp = kernel.expand(state)
            enabled = np.zeros(len(model.actions), dtype=bool)
            enabled[exp.choice_action] = True
            x = torch.from_numpy(state[:, [names.index(f) for f in IFACE["features"]]].astype(np.float64) * 0.2)
            with torch.no_grad():
                z = net(x).numpy()[0]
            order = [model.actions.index(a) for a in IFACE["actions"]]
            z = np.where(enabled[order], z, -np.inf)
            pi = np.exp(z - z.max())
            pi /= pi.sum()
            want = pi[IFACE["actions"].index(step["action"])]
            assert abs(step["pi"] - want) <= 1e-14 * want, (step, want)
            checked += 1
    assert checked >= 8


def test_float32_is_an_option_and_is_reported(nets: dict[str, tuple[str, str | None]], tmp_path: Path) -> None:
    r64 = verify(GRID, PROP, constants=CONST, policy=nets["example"][0], interface=nets["example"][1])
    r32 = verify(
        GRID, PROP, constants=CONST, policy=nets["example"][0], interface=nets["example"][1], policy_dtype="float32"
    )
    assert (r64.policy_dtype, r32.policy_dtype) == ("float64", "float32")
    assert "in float64" in r64.summary() and "float32" not in r64.summary()
    assert "policy gridworld_policy.pt in float32" in r32.summary()
    assert "the bounds cover the checker's error only" in r32.summary()
    assert r32.states == r64.states and r32.result != r64.result  # another arithmetic, another (close) value
    assert abs(r32.result - r64.result) <= 1e-6 * r64.result
    assert json.loads(r32.to_json())["policy_dtype"] == "float32"
    assert VerifyOptions.from_dict(json.loads(r32.to_json())["options"]).policy_dtype == "float32"
    uniform = verify(GRID, PROP, constants=CONST)
    assert uniform.policy_dtype == "float64"  # 1/k, computed in float64
    with pytest.raises(DistmcError, match="--policy-dtype must be float64 or float32"):
        VerifyOptions(policy_dtype="float16")


def test_float32_on_ray_workers_is_reported(nets: dict[str, tuple[str, str | None]], local_ray: None) -> None:
    local = verify(GRID, PROP, constants=CONST, policy=nets["mlp2x64"][0], policy_dtype="float32")
    for servers in (0, 1):
        r = verify(
            GRID,
            PROP,
            constants=CONST,
            policy=nets["mlp2x64"][0],
            policy_dtype="float32",
            workers=2,
            policy_servers=servers,
        )
        assert r.policy_dtype == "float32" and r.result == local.result, servers
        assert all(w["policy_dtype"] == "float32" for w in r.worker_stats)


CAST_SRC = '''
import torch
NET = torch.jit.load({path!r})
def policy(obs):
    """A function over a float32 network: it fails on float64 observations."""
    with torch.no_grad():
        return NET(torch.from_numpy(obs))
def rounded(obs):
    """A function that computes in float32 whatever it is given."""
    with torch.no_grad():
        return NET(torch.from_numpy(obs).float())
def rule(obs):
    """A rule: exact probabilities (float32 numbers too, but not computed in float32)."""
    import numpy as np
    return np.tile([0.5, 0.25, 0.125, 0.125], (obs.shape[0], 1))
'''


class _Casting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = mlp(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x.float())  # its own code computes in float32


def test_networks_that_cannot_run_in_float64_say_so(tmp_path: Path) -> None:
    model = load_model(GRID, CONST)
    ts = tmp_path / "net.pt"
    torch.jit.script(mlp(16)).save(str(ts))
    casting = tmp_path / "casting.pt"
    torch.jit.script(_Casting()).save(str(casting))
    (tmp_path / "distmc_test_dtype_callable.py").write_text(CAST_SRC.format(path=str(ts)))
    iface = tmp_path / "iface.json"
    iface.write_text(json.dumps(IFACE))
    sys.path.insert(0, str(tmp_path))
    try:
        for spec, why in [
            ("distmc_test_dtype_callable:policy", "fails on float64 inputs"),
            ("distmc_test_dtype_callable:rounded", "outputs are float32 numbers"),
        ]:
            pol = load_policy(spec, model, iface)
            assert pol.precision == "float32", spec  # type: ignore[attr-defined]
            assert __import__("re").search(why, pol.precision_note), (spec, pol.precision_note)  # type: ignore[attr-defined]
            states = model.initial_states
            assert float32_only(pol.forward(states))
        r = verify(GRID, PROP, constants=CONST, policy="distmc_test_dtype_callable:policy", interface=str(iface))
        assert r.policy_dtype == "float32" and "the policy ran in float32" in r.summary()
        # a TorchScript whose forward casts to float32 (as SB3 actors exported by older distmc versions do, traced or
        # scripted) has its cast retyped: it runs in float64, and computes what the network does in float64
        traced = tmp_path / "traced.pt"
        torch.jit.trace(_Casting(), torch.zeros(2, 4)).save(str(traced))
        states = np.array([[x, y, 5, 0] for x in range(6) for y in range(6)], dtype=np.int64)
        with torch.no_grad():
            want = mlp(16).double()(torch.from_numpy(states.astype(np.float64) * 0.2)).numpy()
        for path in (casting, traced):
            pol = load_policy(str(path), model, iface)
            assert pol.precision == "float64", path  # type: ignore[attr-defined]
            assert np.abs(pol.forward(states) - want).max() <= 1e-14 * np.abs(want).max()
        assert load_policy("distmc_test_dtype_callable:rule", model, iface).precision == "float64"  # type: ignore[attr-defined]
        # the network itself, named as a module attribute, runs in float64
        pol = load_policy("distmc_test_dtype_callable:NET", model, iface)
        assert pol.precision == "float64" and not float32_only(pol.forward(model.initial_states))  # type: ignore[attr-defined]
        user_net = sys.modules["distmc_test_dtype_callable"].NET  # a copy was converted, not the user's module
        assert all(p.dtype == torch.float32 for p in user_net.parameters())
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("distmc_test_dtype_callable", None)


def test_onnx_runs_in_double_or_says_why(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime", reason="ONNX policies need onnxruntime (the onnx extra)")
    onnx = pytest.importorskip("onnx", reason="writing an ONNX model needs onnx (the test extra)")
    from onnx import TensorProto, helper, numpy_helper

    net = mlp(16)
    model = load_model(GRID, CONST)
    iface = tmp_path / "iface.json"
    iface.write_text(json.dumps(IFACE))
    states = np.array([[x, y, 5, 0] for x in range(6) for y in range(6)], dtype=np.int64)
    with torch.no_grad():
        want = net.double()(torch.from_numpy(states.astype(np.float64) * 0.2)).numpy()
    for act, kernel in (("Tanh", True), ("Elu", False)):  # onnxruntime has no double Elu on the CPU
        nodes, weights, x = [], [], "obs"
        for i, layer in enumerate(net):
            y = f"h{i}"
            if isinstance(layer, torch.nn.Linear):
                weights += [
                    numpy_helper.from_array(layer.weight.detach().float().numpy(), f"W{i}"),
                    numpy_helper.from_array(layer.bias.detach().float().numpy(), f"b{i}"),
                ]
                nodes.append(helper.make_node("Gemm", [x, f"W{i}", f"b{i}"], [y], transB=1))
            else:
                nodes.append(helper.make_node(act, [x], [y]))
            x = y
        graph = helper.make_graph(
            nodes,
            "policy",
            [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["b", 4])],
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["b", 4])],
            weights,
        )
        path = tmp_path / f"{act}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        pol = load_policy(str(path), model, iface)
        out = pol.forward(states)
        if kernel:
            assert pol.precision == "float64"  # type: ignore[attr-defined]
            assert np.abs(out - want).max() <= 1e-13 * np.abs(want).max()
        else:
            assert pol.precision == "float32" and "double" in pol.precision_note  # type: ignore[attr-defined]
            assert float32_only(out)
