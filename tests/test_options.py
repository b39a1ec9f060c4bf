"""Issue 14, item 6: one frozen options object behind ``verify``, the CLI and ``distmc scale``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import distmc.api
import distmc.scale
from distmc.api import Report, Session, sweep, verify
from distmc.cli import _parser, main, options_from_args
from distmc.errors import DistmcError, UsageError
from distmc.options import VerifyOptions

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "distmc" / "examples"
EXAMPLE = EXAMPLES / "gridworld.prism"
NET = str(EXAMPLES / "gridworld_policy.pt")
IFACE = str(EXAMPLES / "gridworld_policy.json")
PROP = 'P=? [F "crash"]'


def test_round_trip_through_json() -> None:
    o = VerifyOptions(
        constants={"N": 6, "p": "0.1"},
        policy=NET,
        interface=Path(IFACE),
        props=['P=? [F "goal"]'],
        workers=3,
        max_memory="8G",
        timeout=90,
        checker="native",
        checkpoint_dir=Path("/tmp/ck"),
    )
    assert (o.constants, o.interface, o.props, o.checkpoint_dir) == ("N=6,p=0.1", IFACE, ('P=? [F "goal"]',), "/tmp/ck")
    back = VerifyOptions.from_dict(json.loads(json.dumps(o.to_dict())))
    assert back == o and hash(back) == hash(o)
    assert VerifyOptions.from_dict({}) == VerifyOptions()
    assert "progress" not in o.to_dict()  # callbacks are neither saved nor compared
    assert VerifyOptions(progress=print) == VerifyOptions()
    with pytest.raises(TypeError, match="'wokers'"):
        VerifyOptions.from_dict({"wokers": 2})


def test_frozen_and_replace_validates_again() -> None:
    o = VerifyOptions(constants="N=6")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.workers = 2  # type: ignore[misc]
    two = dataclasses.replace(o, workers=2, driver="ray")
    assert (two.workers, two.run_driver, two.constants, o.workers) == (2, "ray", "N=6", 1)
    assert VerifyOptions().run_driver == "local" and VerifyOptions(workers=2).run_driver == "ray"
    assert VerifyOptions(checkpoint_dir="ck").run_driver == "ray"
    with pytest.raises(DistmcError, match="local driver runs one partition"):
        dataclasses.replace(o, workers=2, driver="local")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"workers": 0}, "--workers must be at least 1, not 0"),
        ({"policy_servers": -1}, "--policy-servers must be 0 or more"),
        ({"threads_per_worker": 0}, "--threads-per-worker must be at least 1"),
        ({"gpus_per_worker": 1.5}, "--gpus-per-worker must be 0, a fraction up to 1"),
        ({"checker": "prism"}, "--checker must be auto, storm, native or distributed, not 'prism'"),
        ({"mode": "greedy"}, "mode must be one of stochastic, deterministic, monolithic"),
        ({"resolve": "max"}, "--resolve must be 'none' or 'uniform'"),
        ({"threshold": 1.0}, r"--threshold must be in \[0, 1\)"),
        ({"precision": 1e-6, "precision_abs": 1e-9}, "not both"),
        ({"exact": True, "checker": "native"}, "--exact checks with Storm's exact engine"),
        ({"max_memory": "lots"}, "--max-memory 'lots'"),
        ({"timeout": "soon"}, "--timeout 'soon'"),
        ({"traces": -1}, "--traces must be 0 or more"),
        ({"plot_vars": "x,y"}, "give --plot too"),
        ({"export_path": "m.txt"}, "must end in .drn or .umb"),
        ({"driver": "slurm"}, "--driver must be 'local' or 'ray'"),
        ({"driver": "local", "policy_servers": 1}, "policy servers serve Ray workers"),
        ({"driver": "local", "checkpoint_dir": "ck"}, "checkpoints are written by the Ray driver"),
        ({"driver": "local", "checker": "distributed"}, "checks on the Ray workers"),
        ({"checker": "distributed", "keep_model": True}, "leaves the model on the workers"),
        ({"resume": "a", "checkpoint_dir": "b"}, "do not give another --checkpoint-dir"),
    ],
)
def test_validation_errors(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        VerifyOptions(**kw)
    with pytest.raises(UsageError, match=message):  # the same from verify's keywords, before any parsing
        verify("no-such-model.prism", PROP, **kw)


def test_cli_exit_codes_of_invalid_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "example", "--prop", PROP, "--workers", "0", "--quiet"]) == 1
    assert "distmc: error: --workers must be at least 1, not 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # a command-line error: argparse's exit code 2
        main(["run", "example", "--prop", PROP, "--export", "m.txt"])
    assert exc.value.code == 2


def test_keywords_override_options_and_unknown_ones_fail() -> None:
    base = VerifyOptions(constants="N=3", mode="deterministic", policy=NET, interface=IFACE)
    r = verify(EXAMPLE, PROP, base, mode="stochastic", constants="N=4")
    alone = verify(EXAMPLE, PROP, constants="N=4", policy=NET, interface=IFACE)
    assert isinstance(r, Report) and isinstance(alone, Report)
    assert (r.result, r.states, r.mode) == (alone.result, alone.states, "stochastic")
    assert r.options == dataclasses.replace(base, mode="stochastic", constants="N=4").to_dict()
    with pytest.raises(TypeError, match="unexpected keyword argument 'constnts'"):
        verify(EXAMPLE, PROP, constnts="N=3")
    with pytest.raises(TypeError, match="'wrkers'"):
        verify(EXAMPLE, PROP, base, wrkers=2)


def test_report_saves_its_options(tmp_path: Path) -> None:
    o = VerifyOptions(constants="N=3", props=['P=? [F "goal"]'], checker="native", max_states=10_000)
    r = verify(EXAMPLE, PROP, o)
    assert isinstance(r, Report)
    saved = json.loads(r.to_json())["options"]
    assert VerifyOptions.from_dict(saved) == o
    again = verify(r.model, PROP, VerifyOptions.from_dict(saved))  # the saved run, run again
    assert isinstance(again, Report) and again.results == [
        {**e, "check_s": a["check_s"]} for e, a in zip(r.results, again.results, strict=True)
    ]
    out = tmp_path / "r.json"
    assert main(["run", "example", "--const", "N=3", "--prop", PROP, "--json", str(out), "--quiet"]) == 0
    assert VerifyOptions.from_dict(json.loads(out.read_text())["options"]) == VerifyOptions(constants="N=3")


def _captured(monkeypatch: pytest.MonkeyPatch, target: Any, name: str) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []

    def fake(*args: Any, **kw: Any) -> Any:
        calls.append((*args, kw))
        raise DistmcError("stop here")

    monkeypatch.setattr(target, name, fake)
    return calls


def test_cli_builds_the_options_of_the_python_call(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _captured(monkeypatch, distmc.api, "verify")
    argv = [
        "run",
        "example",
        "--const",
        "N=6",
        "--policy",
        "example",
        "--prop",
        PROP,
        "--prop",
        'P=? [F "goal"]',
        "--mode",
        "deterministic",
        "--workers",
        "2",
        "--checker",
        "native",
        "--precision-abs",
        "1e-9",
        "--max-memory",
        "8G",
        "--timeout",
        "15m",
        "--threads-per-worker",
        "1",
        "--traces",
        "2",
        "--quiet",
    ]
    assert main(argv) == 1
    model, prop, options, kw = calls[0]
    assert (model, prop) == (str(EXAMPLE), f'{PROP}; P=? [F "goal"]')
    assert options == VerifyOptions(
        constants="N=6",
        policy=NET,
        interface=IFACE,
        mode="deterministic",
        workers=2,
        checker="native",
        precision_abs=1e-9,
        max_memory="8G",
        timeout="15m",
        threads_per_worker=1,
        traces=2,
    )
    assert set(kw) == {"progress", "phases"}


def test_every_option_has_a_run_flag() -> None:
    """``distmc run`` reaches every saved field of VerifyOptions (but ``props``: --prop/--props are verify's)."""
    argv = [
        "run",
        "m.prism",
        "--prop",
        PROP,
        "--const",
        "N=2",
        "--policy",
        "p.pt",
        "--interface",
        "i.json",
        "--trust-policy",
        "--mode",
        "monolithic",
        "--threshold",
        "0.1",
        "--resolve",
        "uniform",
        "--workers",
        "2",
        "--driver",
        "ray",
        "--address",
        "auto",
        "--gpus-per-worker",
        "0",
        "--threads-per-worker",
        "2",
        "--policy-servers",
        "1",
        "--max-states",
        "9",
        "--max-memory",
        "1G",
        "--timeout",
        "9",
        "--checkpoint-dir",
        "ck",
        "--resume",
        "ck",
        "--export",
        "m.drn",
        "--traces",
        "1",
        "--values",
        "v.parquet",
        "--plot",
        "p.png",
        "--plot-vars",
        "x,y",
        "--checker",
        "storm",
        "--precision",
        "1e-3",
        "--sound-mdp",
        "--exact",
        "--policy-dtype",
        "float32",
        "--horizon-cut",
        "--width",
        "1e-3",
        "--order",
        "bfs",
    ]
    o = options_from_args(_parser().parse_args(argv))
    unset = {k for k, v in o.to_dict().items() if v == VerifyOptions().to_dict()[k]}
    assert unset == {"props", "keep_model", "precision_abs"}  # keep_model is the Python API's; precision: one of two


def test_scale_builds_its_options_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _captured(monkeypatch, distmc.scale, "scale")
    argv = [
        "scale",
        "example",
        "--const",
        "N=6",
        "--policy",
        "example",
        "--prop",
        PROP,
        "--workers",
        "1,2",
        "--threads-per-worker",
        "1",
        "--checker",
        "native",
        "--plot",
        "s.png",
        "--quiet",
    ]
    assert main(argv) == 1
    model, prop, counts, kw = calls[0]
    assert (model, prop, counts) == (str(EXAMPLE), PROP, [1, 2])
    assert kw["options"] == VerifyOptions(
        constants="N=6", policy=NET, interface=IFACE, threads_per_worker=1, checker="native"
    )  # --plot is the scaling picture, not verify's


def test_session_and_sweep_in_process() -> None:
    variants = [
        {"constants": "N=3"},
        {"constants": "N=4", "mode": "deterministic"},
        VerifyOptions(constants="N=4", policy="uniform"),
    ]
    base = VerifyOptions(policy=NET, interface=IFACE, checker="native")
    reports = sweep(EXAMPLE, PROP, variants, base)
    separate = [
        verify(EXAMPLE, PROP, base, constants="N=3"),
        verify(EXAMPLE, PROP, base, constants="N=4", mode="deterministic"),
        verify(EXAMPLE, PROP, constants="N=4"),
    ]
    got = [(r.result, r.states, r.policy) for r in reports]  # type: ignore[union-attr]
    assert got == [(r.result, r.states, r.policy) for r in separate]  # type: ignore[union-attr]
    with Session(base, constants="N=3") as s:
        r = s.verify(EXAMPLE, PROP, mode="deterministic")
        assert r.options["mode"] == "deterministic" and r.options["constants"] == "N=3"  # type: ignore[union-attr]


def test_typed_parts_are_made_once_with_the_options() -> None:
    """The Ray driver's settings, the limits and the checkers' precision are made (and validated) with the options,
    and travel as they are; a copy with changes has its own."""
    from distmc.check.result import Precision
    from distmc.options import RaySettings

    o = VerifyOptions(workers=3, threads_per_worker=2, max_states=10, timeout="1m", precision=1e-8)
    assert o.ray == RaySettings(workers=3, threads_per_worker=2) and o.ray is o.ray
    assert (o.limits.max_states, o.limits.timeout, o.limits.max_memory) == (10, 60.0, None)
    assert o.check_precision == Precision.from_options(1e-8, None, False, False)
    two = dataclasses.replace(o, workers=2, max_states=None)
    assert two.ray.workers == 2 and two.limits.max_states is None and o.ray.workers == 3
    with pytest.raises(UsageError, match="--workers must be at least 1"):
        RaySettings(workers=0)
    with pytest.raises(UsageError, match="--policy-servers must be 0 or more"):
        RaySettings(policy_servers=-1)
