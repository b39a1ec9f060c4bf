"""Every bad input a user can give ends in one line on standard error, a documented exit code, and no traceback.

The table is the project's list of bad inputs tried (benchmarks/RESULTS.md counts it). Standard output is
captured at the file-descriptor level, so Storm's own C++ log lines would show here too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from distmc.cli import main

BAD = Path(__file__).resolve().parent / "data" / "bad"
RUN = ["run", "example", "--const", "N=4", "--quiet"]
CRASH = ["--prop", 'P=? [F "crash"]']


class Width3(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.lin(x), dim=-1)


class Constant(torch.nn.Module):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.full((x.shape[0], 4), self.value)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    out = {}
    for name, net in [
        ("width3", Width3()),
        ("nan", Constant(float("nan"))),
        ("negative", Constant(-0.25)),
        ("unnormalised", Constant(0.2)),
    ]:
        torch.jit.script(net).save(str(d / f"{name}.pt"))
        out[name] = str(d / f"{name}.pt")
    (d / "corrupt.pt").write_bytes(b"this is not a network")
    out["corrupt"] = str(d / "corrupt.pt")
    for name, body in [
        ("unknown_var", {"features": ["x", "speed"]}),
        ("unknown_action", {"actions": ["up", "jump"]}),
        ("bad_output", {"output": "scores"}),
    ]:
        (d / f"{name}.json").write_text(json.dumps(body))
        out[name] = str(d / f"{name}.json")
    (d / "broken_iface.json").write_text("{ features: [x")
    out["corrupt_json"] = str(d / "broken_iface.json")
    (d / "ckpt").mkdir()
    (d / "ckpt" / "meta.json").write_text("{}")
    out["taken_dir"] = str(d / "ckpt")
    out["empty_dir"] = str(d)
    return out


# (id, arguments (with {name} standing for a file of the fixture), exit code, words the message must contain)
CASES = [
    ("syntax error", ["run", str(BAD / "syntax.prism"), "--prop", "P=? [F x=1]"], 3, "syntax.prism:6:1: syntax error"),
    ("missing model", ["run", "missing.prism", "--prop", "P=? [F true]"], 3, "no such model file"),
    ("unsupported type", ["run", str(BAD / "ctmc.prism"), "--prop", "P=? [F x=1]"], 4, "model type ctmc"),
    ("undefined constant", ["run", "example", "--prop", 'P=? [F "crash"]'], 3, "undefined constant"),
    ("unknown constant", [*RUN[:3], "N=4,Q=2", *CRASH], 3, "'Q'"),
    ("constant not a number", ["run", "example", "--const", "N=abc", *CRASH], 3, "value 'abc' of constant 'N'"),
    ("constant of wrong type", ["run", "example", "--const", "N=2.5", *CRASH], 3, "is an int"),
    ("unknown label", [*RUN, "--prop", 'P=? [F "nope"]'], 5, "nope"),
    ("unknown variable", [*RUN, "--prop", "P=? [F z=1]"], 5, "names z"),
    ("unknown reward", [*RUN, "--prop", 'R{"nope"}=? [F "crash"]'], 5, "reward structure 'nope'"),
    ("malformed property", [*RUN, "--prop", "P=? [F"], 5, "cannot parse"),
    ("not an operator", [*RUN, "--prop", '"crash"'], 5, "must be a P, R, S (LRA) or T operator"),
    ("Storm cannot check it", [*RUN, "--prop", "R=? [I=3]"], 5, "Storm cannot check 'R=? [I=3]'"),
    ("native: long-run average", [*RUN, "--checker", "native", "--prop", 'S=? ["crash"]'], 5, "by Storm only"),
    ("property constant without a value", [*RUN, "--prop", 'const double q; P>=q [F "crash"]'], 5, "without a value"),
    ("missing properties file", [*RUN, "--props", "missing.props"], 5, "cannot read it"),
    ("two precisions", [*RUN, *CRASH, "--precision", "1e-6", "--precision-abs", "1e-9"], 1, "not both"),
    ("precision out of range", [*RUN, *CRASH, "--precision-abs", "2"], 1, "--precision-abs must be in (0, 1)"),
    ("missing policy", [*RUN, *CRASH, "--policy", "nope.pt"], 6, "no such policy"),
    (
        "corrupt policy",
        [*RUN, *CRASH, "--policy", "{corrupt}"],
        6,
        "not a TorchScript module, a Stable-Baselines3 .zip, nor a state_dict",
    ),
    ("wrong input width", [*RUN, *CRASH, "--policy", "{width3}"], 6, "width 4"),
    ("NaN output", [*RUN, *CRASH, "--policy", "{nan}"], 6, "not finite"),
    ("negative output", [*RUN, *CRASH, "--policy", "{negative}"], 6, "negative probability"),
    ("unnormalised output", [*RUN, *CRASH, "--policy", "{unnormalised}"], 6, "summing to 0.8, not 1"),
    ("interface: unknown variable", [*RUN, *CRASH, "--interface", "{unknown_var}"], 6, "speed"),
    ("interface: unknown action", [*RUN, *CRASH, "--interface", "{unknown_action}"], 6, "jump"),
    ("interface: bad output kind", [*RUN, *CRASH, "--interface", "{bad_output}"], 6, "scores"),
    ("interface: not JSON", [*RUN, *CRASH, "--interface", "{corrupt_json}"], 6, "cannot read interface"),
    (
        "probabilities not summing to 1",
        ["run", str(BAD / "sum.prism"), "--prop", 'P=? [F "done"]'],
        3,
        "do not form a distribution (sum 0.9)",
    ),
    (
        "variable out of range",
        ["run", str(BAD / "bounds.prism"), "--prop", "Pmax=? [F x=7]"],
        3,
        "outside its range [0..2]",
    ),
    ("threshold out of range", [*RUN, *CRASH, "--threshold", "1.5"], 1, "--threshold"),
    ("no workers", [*RUN, *CRASH, "--workers", "0"], 1, "--workers"),
    ("local driver with workers", [*RUN, *CRASH, "--workers", "2", "--driver", "local"], 1, "local driver"),
    ("bad memory size", [*RUN, *CRASH, "--max-memory", "lots"], 1, "--max-memory"),
    ("bad timeout", [*RUN, *CRASH, "--timeout", "soon"], 1, "--timeout"),
    ("resume: no checkpoint", ["run", "--resume", "{empty_dir}", "--quiet"], 1, "no checkpoint there"),
    ("checkpoint dir taken", [*RUN, *CRASH, "--checkpoint-dir", "{taken_dir}"], 1, "already holds a checkpoint"),
    (
        "shield: delta out of range",
        ["shield", "example", "--const", "N=4", "--policy", "example", *CRASH, "--delta", "2"],
        1,
        "--delta must be a probability",
    ),
    (
        "shield: not a probability",
        [
            "shield",
            "example",
            "--const",
            "N=4",
            "--policy",
            "example",
            "--prop",
            'R{"steps"}=? [F "goal"]',
            "--delta",
            "0.1",
        ],
        5,
        "lowers one probability",
    ),
    (
        "curve: steps do not match",
        ["curve", "example", "--const", "N=4", *CRASH, "--policies", "uniform", "--steps", "1,2"],
        1,
        "--steps gives 2 steps for 1 policies",
    ),
]


@pytest.mark.parametrize(("args", "code", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_one_line(
    files: dict[str, str], args: list[str], code: int, needle: str, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main([files[a[1:-1]] if a[:1] + a[-1:] == "{}" and a[1:-1] in files else a for a in args]) == code
    out, err = capfd.readouterr()
    err = err.strip()
    assert needle in err, err
    assert err.startswith("distmc: error: ") and len(err.splitlines()) == 1, err
    assert "Traceback" not in err and out == ""


def test_debug_shows_the_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    assert main([*RUN, "--prop", 'P=? [F "nope"]', "--debug"]) == 5
    assert "Traceback" in capfd.readouterr().err


def test_missing_model_and_property_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--prop", "P=? [F true]"])
    assert exit_info.value.code == 2


def test_error_kinds_of_a_run_set_up() -> None:
    """A bad option is a UsageError, a checkpoint problem a CheckpointError, both exit code 1 (as documented);
    a variable no 64-bit key can hold is an UnsupportedError, exit code 4 (not a raw ValueError)."""
    import numpy as np

    from distmc.api import verify
    from distmc.assemble.reducer import InducedModel
    from distmc.assemble.storm import export
    from distmc.errors import CheckpointError, DistmcError, UnsupportedError, UsageError
    from distmc.model.packing import StateCodec
    from distmc.options import VerifyOptions

    assert UsageError.exit_code == CheckpointError.exit_code == DistmcError.exit_code == 1
    assert UnsupportedError.exit_code == 4
    with pytest.raises(UsageError, match="--workers must be at least 1"):
        VerifyOptions(workers=0)
    with pytest.raises(CheckpointError, match="no checkpoint there"):
        verify(None, None, resume=str(Path(__file__).parent))
    with pytest.raises(UnsupportedError, match="more than 2"):
        StateCodec(np.array([-(2**62) - 1]), np.array([2**62]))
    with pytest.raises(UsageError, match="use .umb or .drn"):
        export(InducedModel.__new__(InducedModel), "m.txt")
