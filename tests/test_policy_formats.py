"""Every policy format: one network saved each way gives the same action distributions (1e-6) and the same
verified value; each distinct state goes through the network once; loading runs no code unless trusted."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from distmc.api import verify
from distmc.errors import PolicyError
from distmc.model.kernel import Kernel
from distmc.model.program import load_model
from distmc.pipeline import Job
from distmc.policy import action_distribution, detect_format, load_policy
from distmc.policy.batched import BATCH

gym_env = pytest.importorskip("distmc.gym")
sb3 = pytest.importorskip("stable_baselines3")
sb3_contrib = pytest.importorskip("sb3_contrib")

REPO = Path(__file__).resolve().parents[1]
GRID = REPO / "distmc" / "examples" / "gridworld.prism"
CONST = "N=4"
IFACE = {
    "features": ["x", "y", "px", "py"],
    "actions": ["up", "down", "left", "right"],
    "output": "logits",
    "scale": {"x": 0.25, "y": 0.25},
}
ARCH = {"layers": [16, 8], "activation": "tanh"}


def make_net() -> torch.nn.Sequential:
    torch.manual_seed(3)
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4)
    )
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(3.0)  # sharper logits: distributions far from uniform
    return net.eval()


def copy_into(dst: list[torch.nn.Linear], net: torch.nn.Sequential) -> None:
    src = [m for m in net if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for d, s in zip(dst, src, strict=True):
            d.weight.copy_(s.weight)
            d.bias.copy_(s.bias)


def save_sb3(algo: str, net: torch.nn.Sequential, path: Path) -> None:
    env = gym_env.PrismEnv(GRID, CONST, interface=_iface_obj())
    kw = {"policy_kwargs": {"net_arch": [16, 8], "activation_fn": torch.nn.Tanh}, "device": "cpu", "seed": 0}
    if algo == "MaskablePPO":
        model = sb3_contrib.MaskablePPO("MlpPolicy", env, n_steps=8, **kw)
        pn = model.policy.mlp_extractor.policy_net
        copy_into([pn[0], pn[2], model.policy.action_net], net)
    elif algo == "DQN":
        model = sb3.DQN("MlpPolicy", env, learning_starts=0, buffer_size=100, **kw)
        q = model.policy.q_net.q_net
        copy_into([q[0], q[2], q[4]], net)
    else:
        model = getattr(sb3, algo)("MlpPolicy", env, n_steps=8, **kw)
        pn = model.policy.mlp_extractor.policy_net
        copy_into([pn[0], pn[2], model.policy.action_net], net)
    model.save(str(path))
    env.save_interface(path.with_suffix(".json"))


def save_onnx(net: torch.nn.Sequential, path: Path) -> None:
    """The network as an ONNX graph of Gemm and Tanh nodes (written with onnx's helpers, not torch's exporter)."""
    onnx = pytest.importorskip("onnx", reason="writing an ONNX model needs onnx (the test extra)")
    from onnx import TensorProto, helper, numpy_helper

    nodes, weights, x = [], [], "obs"
    for i, layer in enumerate(net):
        y = f"h{i}"
        if isinstance(layer, torch.nn.Linear):
            weights += [
                numpy_helper.from_array(layer.weight.detach().numpy(), f"W{i}"),
                numpy_helper.from_array(layer.bias.detach().numpy(), f"b{i}"),
            ]
            nodes.append(helper.make_node("Gemm", [x, f"W{i}", f"b{i}"], [y], transB=1))
        else:
            nodes.append(helper.make_node("Tanh", [x], [y]))
        x = y
    graph = helper.make_graph(
        nodes,
        "policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 4])],
        weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _iface_obj() -> object:
    from distmc.policy import Interface

    return Interface(IFACE["features"], IFACE["actions"], "logits", dict(IFACE["scale"]))


CALLABLE_SRC = """
import torch
NET = torch.jit.load({path!r})
NET64 = torch.jit.load({path!r}).double()
def policy(obs):
    with torch.no_grad():
        return (NET64 if obs.dtype == "float64" else NET)(torch.from_numpy(obs))
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, bool, str | None]]:
    """format -> (policy spec, needs trust, interface); each file with its interface beside it (interface None)."""
    tmp = tmp_path_factory.mktemp("formats")
    net = make_net()
    out: dict[str, tuple[str, bool, str | None]] = {}
    ts = tmp / "net_ts.pt"
    torch.jit.script(net).save(str(ts))
    (tmp / "net_ts.json").write_text(json.dumps(IFACE))
    out["torchscript"] = (str(ts), False, None)
    pt2 = tmp / "net_pt2.pt2"
    torch.export.save(
        torch.export.export(net, (torch.zeros(BATCH, 4),), dynamic_shapes=({0: torch.export.Dim("batch")},)), str(pt2)
    )
    (tmp / "net_pt2.json").write_text(json.dumps(IFACE))
    out["pt2"] = (str(pt2), False, None)
    fixed = tmp / "net_pt2_fixed.pt2"  # exported for a batch of one state: run in pieces of its own size
    torch.export.save(torch.export.export(net, (torch.zeros(1, 4),)), str(fixed))
    (tmp / "net_pt2_fixed.json").write_text(json.dumps(IFACE))
    out["pt2_fixed"] = (str(fixed), False, None)
    if importlib.util.find_spec("onnxruntime") is not None:
        ox = tmp / "net.onnx"
        save_onnx(net, ox)
        (tmp / "net.json").write_text(json.dumps(IFACE))
        out["onnx"] = (str(ox), False, None)
    sd = tmp / "net_sd.pt"
    torch.save(net.state_dict(), sd)
    (tmp / "net_sd.json").write_text(json.dumps({**IFACE, "architecture": ARCH}))
    out["state_dict"] = (str(sd), False, None)
    mod = tmp / "distmc_test_callable_policy.py"
    mod.write_text(CALLABLE_SRC.format(path=str(ts)))
    sys.path.insert(0, str(tmp))
    out["callable"] = ("distmc_test_callable_policy:policy", False, str(tmp / "net_ts.json"))
    out["callable_module"] = ("distmc_test_callable_policy:NET", False, str(tmp / "net_ts.json"))
    for algo in ("PPO", "A2C", "DQN", "MaskablePPO"):
        f = tmp / f"net_{algo.lower()}.zip"
        save_sb3(algo, net, f)
        out[algo] = (str(f), True, None)
    yield out
    sys.path.remove(str(tmp))


def reachable(model_path: Path) -> tuple[object, np.ndarray, np.ndarray]:
    """Every state of the model (monolithic exploration) and its enabled-action mask, by an independent BFS."""
    model = load_model(model_path, CONST)
    kernel = Kernel(model)
    seen = {tuple(s) for s in model.initial_states.tolist()}
    frontier = model.initial_states
    while frontier.shape[0]:
        succ = kernel.expand(frontier).succ
        new = {tuple(s) for s in succ.tolist()} - seen
        seen |= new
        frontier = np.array(sorted(new), dtype=np.int64).reshape(-1, len(model.variables))
    states = np.array(sorted(seen), dtype=np.int64)
    exp = kernel.expand(states)
    enabled = np.zeros((states.shape[0], len(model.actions)), dtype=bool)
    enabled[exp.choice_state, exp.choice_action] = True
    return model, states, enabled


def test_formats_are_detected(saved: dict[str, tuple[str, bool, str | None]]) -> None:
    got = {k: detect_format(v[0]) for k, v in saved.items()}
    want = {
        "torchscript": "torchscript",
        "state_dict": "state_dict",
        "callable": "callable",
        "callable_module": "callable",
        "pt2": "pt2",
        "pt2_fixed": "pt2",
        "onnx": "onnx",
        "PPO": "sb3",
        "A2C": "sb3",
        "DQN": "sb3",
        "MaskablePPO": "sb3",
    }
    if "onnx" not in saved:
        pytest.skip("onnxruntime is not installed (pip install 'distmc[onnx]')")
    assert got == want
    assert detect_format("uniform") == "uniform"


def test_same_network_same_distributions_and_values(saved: dict[str, tuple[str, bool, str | None]]) -> None:
    model, states, enabled = reachable(GRID)
    keep = enabled.any(axis=1)
    states, enabled = states[keep], enabled[keep]
    # Reference: the network itself in float64 on the scaled inputs, softmax over the enabled actions.
    net = make_net().double()
    x = states.astype(np.float64) * np.array([0.25, 0.25, 1, 1])
    with torch.no_grad():
        z = net(torch.from_numpy(x)).numpy()
    z = np.where(enabled, z, -np.inf)
    ref = np.exp(z - z.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    values = {}
    for fmt, (spec, trust, iface) in saved.items():
        pol = load_policy(spec, model, iface, trust=trust)
        pi = action_distribution(pol, states, enabled)
        # every format runs in float64 (float32 weights upcast exactly): the reference's distributions to 1e-14
        assert pol.precision == "float64", fmt  # type: ignore[attr-defined]
        assert np.abs(pi - ref).max() <= 1e-14, (fmt, float(np.abs(pi - ref).max()))
        pol32 = load_policy(spec, model, iface, trust=trust, dtype="float32")
        assert pol32.precision == "float32", fmt  # type: ignore[attr-defined]
        assert np.abs(action_distribution(pol32, states, enabled) - ref).max() <= 1e-6, fmt
        for mode in ("stochastic", "deterministic"):
            r = verify(
                GRID, 'P=? [F "crash"]', constants=CONST, policy=spec, mode=mode, trust_policy=trust, interface=iface
            )
            values[(fmt, mode)] = (r.result, r.states, r.transitions)
    for mode in ("stochastic", "deterministic"):
        base = values[("torchscript", mode)]
        for fmt in saved:
            got = values[(fmt, mode)]
            assert got[1:] == base[1:], (fmt, mode)
            assert abs(got[0] - base[0]) <= 1e-13 * base[0], (fmt, mode, got, base)
        # torch.export runs the TorchScript's kernels on the same batches: the very same value (the program
        # exported for batches of one state runs other kernels: within 1e-9, above)
        assert values[("pt2", mode)] == base


@pytest.mark.parametrize("algo", ["PPO", "A2C", "DQN", "MaskablePPO"])
def test_sb3_outputs_are_sb3s_own(saved: dict[str, tuple[str, bool, str | None]], algo: str) -> None:
    """PPO/A2C: softmax of distmc's output is SB3's action distribution; every algorithm: argmax is predict()."""
    model, states, _ = reachable(GRID)
    pol = load_policy(saved[algo][0], model, trust=True)
    raw = pol.forward(states)
    agent = getattr(sb3_contrib if algo == "MaskablePPO" else sb3, algo).load(saved[algo][0], device="cpu")
    obs = states.astype(np.float32) * np.array([0.25, 0.25, 1, 1], dtype=np.float32)
    action, _ = agent.predict(obs, deterministic=True)
    assert (np.argmax(raw, axis=1) == action).all()
    if algo != "DQN":
        with torch.no_grad():
            probs = agent.policy.get_distribution(torch.from_numpy(obs)).distribution.probs.double().numpy()
        soft = np.exp(raw - raw.max(axis=1, keepdims=True))
        assert np.abs(soft / soft.sum(axis=1, keepdims=True) - probs).max() <= 1e-6


def test_each_distinct_state_evaluated_once(saved: dict[str, tuple[str, bool, str | None]]) -> None:
    from distmc.explore.local import explore_local

    spec = saved["torchscript"][0]
    prop = 'P=? [F<=20 "crash"]'
    parts = Job(str(GRID), prop, CONST, spec).build()
    assert parts.expander is not None and parts.policy is not None
    explored = explore_local(parts.expander, parts.codec.pack(parts.model.initial_states), batch_states=50)
    pol = parts.policy
    # Independently: the explored states that are neither terminal for the property nor deadlocks.
    states = parts.codec.unpack(explored.keys)
    term = parts.spec.terminal_mask(states) if callable(parts.spec.terminal_mask) else np.zeros(len(states), bool)
    exp = Kernel(parts.model).expand(states)
    has_choice = np.bincount(exp.choice_state, minlength=states.shape[0]) > 0
    expected = int((has_choice & ~term).sum())
    assert explored.stats["policy_states"] == expected
    assert pol.states_evaluated == expected  # type: ignore[attr-defined]  # no state twice
    assert pol.forward_passes == explored.stats["policy_calls"] >= -(-expected // BATCH)  # type: ignore[attr-defined]
    r = verify(GRID, prop, constants=CONST, policy=spec)
    assert (r.policy_states, r.states) == (expected, explored.n_states)
    assert 1 <= r.policy_calls <= r.depth + 1


def test_sb3_needs_trust(saved: dict[str, tuple[str, bool, str | None]]) -> None:
    with pytest.raises(PolicyError, match="runs code from the file.*--trust-policy"):
        verify(GRID, 'P=? [F "crash"]', constants=CONST, policy=saved["PPO"][0])


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[Path]]:
        return (Path.touch, (self.marker,))


def test_state_dict_loading_runs_no_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    f = tmp_path / "evil.pt"
    torch.save({"0.weight": _Evil(marker)}, f)
    (tmp_path / "evil.json").write_text(json.dumps({**IFACE, "architecture": ARCH}))
    model = load_model(GRID, CONST)
    with pytest.raises(PolicyError, match="weights_only"):
        load_policy(str(f), model)
    assert not marker.exists()


def test_state_dict_errors(tmp_path: Path) -> None:
    model = load_model(GRID, CONST)
    f = tmp_path / "sd.pt"
    torch.save(make_net().state_dict(), f)
    (tmp_path / "sd.json").write_text(json.dumps(IFACE))
    with pytest.raises(PolicyError, match="needs an architecture"):
        load_policy(str(f), model)
    (tmp_path / "sd.json").write_text(json.dumps({**IFACE, "architecture": {"layers": [16, 9], "activation": "tanh"}}))
    with pytest.raises(PolicyError, match="shapes differ"):
        load_policy(str(f), model)
    (tmp_path / "sd.json").write_text(json.dumps({**IFACE, "architecture": {"layers": [16], "activation": "tanh"}}))
    with pytest.raises(PolicyError, match="does not fit the architecture"):
        load_policy(str(f), model)
    (tmp_path / "sd.json").write_text(json.dumps({**IFACE, "architecture": {"layers": [16, 8], "activation": "swish"}}))
    with pytest.raises(PolicyError, match="activation 'swish'"):
        load_policy(str(f), model)


def test_callable_errors() -> None:
    model = load_model(GRID, CONST)
    with pytest.raises(PolicyError, match="cannot import module 'no_such_module_xyz'"):
        load_policy("no_such_module_xyz:f", model)
    with pytest.raises(PolicyError, match="has no attribute"):
        load_policy("json:no_such_function", model)
    with pytest.raises(PolicyError, match="no such policy file"):
        load_policy("missing/file.pt", model)


def test_cli_trust_policy_and_json(saved: dict[str, tuple[str, bool, str | None]], tmp_path: Path) -> None:
    from distmc.cli import main

    out = tmp_path / "r.json"
    args = ["run", str(GRID), "--const", CONST, "--prop", 'P=? [F "crash"]', "--policy", saved["A2C"][0]]
    assert main(args) == 6
    assert main([*args, "--trust-policy", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["policy_calls"] >= 1 and report["policy_states"] > 0


def test_pt2_with_pickled_parts_needs_trust(saved: dict[str, tuple[str, bool, str | None]], tmp_path: Path) -> None:
    import zipfile

    from distmc.policy.exported import pickled_parts

    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pt2"
    with zipfile.ZipFile(saved["pt2"][0]) as src, zipfile.ZipFile(evil, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if "/data/sample_inputs/" in name:  # torch.export.load would unpickle this without limits
                import io

                buf = io.BytesIO()
                torch.save({"x": _Evil(marker)}, buf)
                data = buf.getvalue()
            dst.writestr(name, data)
    (tmp_path / "evil.json").write_text(json.dumps(IFACE))
    assert detect_format(str(evil)) == "pt2"
    assert pickled_parts(saved["pt2"][0]) == [] and pickled_parts(evil) == ["data/sample_inputs/model.pt"]
    model = load_model(GRID, CONST)
    with pytest.raises(PolicyError, match="would unpickle.*--trust-policy"):
        load_policy(str(evil), model)
    assert not marker.exists()


def test_export_policy_writes_pt2_by_default(tmp_path: Path) -> None:
    from distmc.gym import export_policy

    env = gym_env.PrismEnv(GRID, CONST, interface=_iface_obj())
    net = make_net()
    pt2, iface = export_policy(net, tmp_path / "trained.pt2", env)
    ts, _ = export_policy(net, tmp_path / "old.pt", env, format="torchscript")
    assert (detect_format(str(pt2)), detect_format(str(ts)), iface) == ("pt2", "torchscript", tmp_path / "trained.json")
    prop = 'P=? [F "crash"]'
    a, b = (verify(GRID, prop, constants=CONST, policy=str(p)) for p in (pt2, ts))
    assert (a.result, a.states) == (b.result, b.states)  # type: ignore[union-attr]
    assert a.policy_dtype == b.policy_dtype == "float64"  # type: ignore[union-attr]


def test_export_policy_of_sb3_runs_in_float64(saved: dict[str, tuple[str, bool, str | None]], tmp_path: Path) -> None:
    """An SB3 actor exported, and its rollout, use the float64 arithmetic verification uses."""
    from distmc.gym import export_policy, rollout

    env = gym_env.PrismEnv(GRID, CONST, interface=_iface_obj())
    agent = sb3.PPO.load(saved["PPO"][0], device="cpu")
    pt2, iface = export_policy(agent, tmp_path / "ppo.pt2", env)
    model, states, enabled = reachable(GRID)
    keep = enabled.any(axis=1)
    exported = load_policy(str(pt2), model)
    zipped = load_policy(saved["PPO"][0], model, trust=True)
    assert exported.precision == zipped.precision == "float64"  # type: ignore[attr-defined]
    assert np.array_equal(
        action_distribution(exported, states[keep], enabled[keep]),
        action_distribution(zipped, states[keep], enabled[keep]),
    )
    runs = [rollout(env, p, 50, seed=1) for p in (exported, zipped)]
    assert np.array_equal(runs[0].returns, runs[1].returns) and np.array_equal(runs[0].lengths, runs[1].lengths)


def test_onnx_without_onnxruntime_is_named_before_loading(
    saved: dict[str, tuple[str, bool, str | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from distmc.errors import MissingDependencyError

    if "onnx" not in saved:
        pytest.skip("onnxruntime is not installed (pip install 'distmc[onnx]')")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'distmc\[onnx\]'"):
        verify(GRID, 'P=? [F "crash"]', constants=CONST, policy=saved["onnx"][0])
