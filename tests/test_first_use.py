"""What a new user meets first: dependencies named before the work, the rough edges of issue 14."""

from __future__ import annotations

import json
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from distmc.cli import main
from distmc.errors import MissingDependencyError

REPO = Path(__file__).resolve().parents[1]
CRASH = ["--prop", 'P=? [F "crash"]']


def _one_error_line(err: str) -> str:
    err = err.strip()
    assert err.startswith("distmc: error: ") and len(err.splitlines()) == 1, err
    return err


# -- optional dependencies -------------------------------------------------------------------------------------


def test_matplotlib_is_a_core_dependency() -> None:
    # The README's plain install (`pip install -e .`) must give --plot what it needs.
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert any(dep.split(">")[0].split("=")[0].strip() == "matplotlib" for dep in project["dependencies"])


def _fake_ppo_zip(path: Path) -> Path:
    # What detect_format/detect_algorithm read of an SB3 file: a zip with 'data' (JSON) and 'policy.pth'.
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("data", json.dumps({"clip_range": {}, "policy_class": {"__module__": "stable_baselines3.common"}}))
        z.writestr("policy.pth", b"")
    return path


def test_missing_sb3_named_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)  # as if not installed
    import distmc.run

    def explored(*a: object, **k: object) -> None:
        raise AssertionError("the exploration started before the missing package was found")

    monkeypatch.setattr(distmc.run, "explore_local", explored)
    zpath = _fake_ppo_zip(tmp_path / "trained.zip")
    assert main(["run", "example", "--const", "N=3", *CRASH, "--policy", str(zpath), "--trust-policy", "--quiet"]) == 1
    err = _one_error_line(capfd.readouterr().err)
    assert "stable-baselines3" in err and "pip install 'distmc[rl]'" in err


def test_missing_package_found_by_the_ray_drivers_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The Ray driver's own process builds the job without a policy (the actors load it): the check is there too.
    from distmc._internal.subcommand import example_path
    from distmc.pipeline import Job

    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    job = Job(example_path("example"), 'P=? [F "crash"]', "N=3", str(_fake_ppo_zip(tmp_path / "t.zip")))
    with pytest.raises(MissingDependencyError, match=r"pip install 'distmc\[rl\]'"):
        job.build(explorer=False)


def test_missing_matplotlib_named_before_the_analysis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    import distmc.abstract.refine

    def analysed(*a: object, **k: object) -> None:
        raise AssertionError("the analysis started before the missing package was found")

    monkeypatch.setattr(distmc.abstract.refine, "analyse", analysed)
    code = main(
        [
            "abstract",
            "pendulum",
            "--policy",
            str(REPO / "benchmarks/policies/pendulum.json"),
            "--plot",
            str(tmp_path / "h.png"),
        ]
    )
    assert code == 1
    err = _one_error_line(capfd.readouterr().err)
    assert "matplotlib" in err and "pip install matplotlib" in err


# -- rough edges: models, constants, export ---------------------------------------------------------------------


def test_interval_probabilities_are_unsupported(storm_files: Path, capfd: pytest.CaptureFixture[str]) -> None:
    model = storm_files / "idtmc" / "die-intervals.pm"
    assert main(["run", str(model), "--prop", "P=? [F s=7]", "--quiet"]) == 4
    err = _one_error_line(capfd.readouterr().err)
    assert "interval probabilities" in err and "not supported" in err and "sum" not in err


@pytest.mark.parametrize(
    ("const", "needle"), [("N=3,M=3", "its undefined constants are N"), ("M=3", "its undefined constants are N")]
)
def test_unknown_constant_names_the_ones_to_give(const: str, needle: str, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "example", "--const", const, *CRASH, "--quiet"]) == 3
    err = _one_error_line(capfd.readouterr().err)
    assert "'M'" in err and needle in err
    assert "slip" not in err and "[" not in err.split("'M'")[1]  # not the defined one, not a Python list


@pytest.mark.parametrize(
    ("mode", "prop"), [("stochastic", 'R{"steps"}=? [F "goal"]'), ("monolithic", 'Pmax=? [F "crash"]')]
)
def test_drn_export_reads_back_exactly(tmp_path: Path, mode: str, prop: str) -> None:
    import stormpy

    from distmc._internal.subcommand import example_path
    from distmc.api import verify
    from distmc.check.checker import check
    from distmc.pipeline import Job

    drn = tmp_path / "m.drn"
    got = verify(example_path("example"), prop, constants="N=4", mode=mode, export_path=drn, keep_model=True)
    assert isinstance(got, tuple)
    report, m = got
    back = stormpy.build_model_from_drn(str(drn))
    assert (back.nr_states, back.nr_transitions, back.nr_choices) == (m.n_states, m.n_transitions, m.n_rows)
    entries = [(e.column, e.value) for e in back.transition_matrix]
    assert [t for t, _ in entries] == m.targets.tolist()
    assert [p for _, p in entries] == m.prob.tolist()  # every probability the very same double
    for name, mask in m.labels.items():
        if name != "init":
            assert sorted(back.labeling.get_states(name)) == np.flatnonzero(mask).tolist(), name
    assert sorted(back.initial_states) == m.initial.tolist()
    spec = Job(example_path("example"), prop, "N=4", mode=mode).build(explorer=False).spec
    assert check(back, spec, m.kind, m.initial).value == report.result  # bit for bit, not to 1e-10


# -- rough edges: the command line -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [["run", "example", "--porp", "x"], ["run", "example"], ["run", "example", *CRASH, "--export", "m.txt"]]
)
def test_run_usage_errors_print_runs_usage(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: distmc run ") and "distmc run: error: " in err


def test_abstract_unknown_env_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["abstract", "pendulm", "--policy", "p.json"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: distmc abstract" in err and "invalid choice: 'pendulm'" in err and "pendulum" in err


def test_refinement_that_stops_early_says_why() -> None:
    from distmc.abstract.envs import get_env
    from distmc.abstract.faults import parse_fault
    from distmc.abstract.network import load_network
    from distmc.abstract.refine import analyse
    from distmc.abstract.report import summary

    env = get_env("pendulum")
    net = load_network(str(REPO / "benchmarks/policies/pendulum.json"))
    a = analyse(env, net, parse_fault(None), horizon=3, refine=50, min_size=0.25)
    steps = len(a.history) - 1
    assert steps < 50
    assert a.stats["stopped"].startswith(f"refinement stopped after step {steps} of 50: ")
    assert "--min-size 0.25" in a.stats["stopped"]  # measured: the boxes left above the threshold are all at it
    assert a.stats["stopped"] in summary(a, env)


def test_run_help_and_options_page_agree() -> None:
    from distmc.cli import DRIVER_DEFAULT, NATIVE_CHECKS, _parser, _subparser

    run = _subparser(_parser(), "run")
    helps = {a.option_strings[0]: a.help or "" for a in run._actions if a.option_strings}
    rows = {}
    for line in (REPO / "docs" / "options.md").read_text().splitlines():
        if line.startswith("| `--"):
            name = line.split("`")[1].split()[0]
            rows[name] = line.replace("`", "")
    assert NATIVE_CHECKS in helps["--checker"] and NATIVE_CHECKS in rows["--checker"]
    assert DRIVER_DEFAULT in helps["--driver"] and DRIVER_DEFAULT in rows["--driver"]
    assert set(helps) - {"-h"} <= set(rows), sorted(set(helps) - set(rows) - {"-h"})  # every option is documented


def test_make_policy_rebuilds_the_shipped_bytes(tmp_path: Path) -> None:
    import subprocess

    import torch

    script = REPO / "distmc" / "examples" / "make_policy.py"
    outs = []
    for k in range(2):  # two folders, two processes (each with its own string hashing)
        out = tmp_path / f"o{k}"
        subprocess.run([sys.executable, str(script), "--out", str(out)], check=True, capture_output=True)
        outs.append((out / "gridworld_policy.pt").read_bytes())
    assert outs[0] == outs[1]
    shipped = REPO / "distmc" / "examples" / "gridworld_policy.pt"
    new = torch.jit.load(str(tmp_path / "o0" / "gridworld_policy.pt")).state_dict()
    old = torch.jit.load(str(shipped)).state_dict()
    if not all(torch.equal(new[k], old[k]) for k in old):
        pytest.skip("this machine's torch trains other weights (last bits) than the one the shipped file was made on")
    assert outs[0] == shipped.read_bytes()


def test_ray_notices_only_at_debug() -> None:
    import logging

    from distmc.progress import setup_logging

    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    try:
        setup_logging("warning")
        assert not notice.isEnabledFor(logging.WARNING)
        setup_logging("debug")
        assert notice.isEnabledFor(logging.WARNING)
    finally:
        setup_logging("warning")


# -- live phases ---------------------------------------------------------------------------------------------------


def test_phases_are_named_logged_and_add_up(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from distmc._internal.subcommand import example_path
    from distmc.api import verify

    seen: list[tuple[str, str]] = []
    with caplog.at_level(logging.INFO, logger="distmc.phase"):
        r = verify(
            example_path("example"),
            'P=? [F "crash"]',
            constants="N=4",
            phases=lambda n, d: seen.append((n, d)),
            export_path=tmp_path / "m.umb",
        )
    assert [n for n, _ in seen] == ["parsing", "exploring", "assembling", "exporting", "handing to Storm", "checking"]
    assert seen[-1] == ("checking", "Storm")
    events = [(rec.getMessage().split()[0], rec.getMessage().split()[1]) for rec in caplog.records]
    assert events == [(f"phase={n.replace(' ', '_')}", f"event={e}") for n, _ in seen for e in ("start", "end")]
    t = r.timings  # type: ignore[union-attr]
    parts = ("parse_s", "explore_s", "assemble_s", "export_s", "handoff_s", "check_s")
    assert all(t[k] > 0 for k in parts)
    assert abs(sum(t[k] for k in parts) - t["total_s"]) < 1e-9  # nothing left out of the total
    line = r.summary().splitlines()[2]  # type: ignore[union-attr]
    assert line.startswith("  time: parse ") and "hand-off" in line and "export" in line
    # the figures shown add up to the total shown (each rounded to the millisecond)
    shown = [float(w) for w in line.replace(",", "").split() if w.replace(".", "").isdigit()]
    assert abs(sum(shown[:-1]) - shown[-1]) <= 0.0005 * len(shown)


def test_native_check_has_no_handoff() -> None:
    from distmc._internal.subcommand import example_path
    from distmc.api import verify

    seen: list[tuple[str, str]] = []
    r = verify(
        example_path("example"),
        'P=? [F "crash"]',
        constants="N=3",
        checker="native",
        phases=lambda n, d: seen.append((n, d)),
    )
    assert ("checking", "distmc's native value iteration") in seen and "handing to Storm" not in dict(seen)
    assert r.timings["handoff_s"] == 0.0 and "hand-off" not in r.summary()  # type: ignore[union-attr]
    # the checker's own steps reach the listener as details of the checking phase
    # (the graph analysis always; the iteration's gap only when it takes more than a pass or two)
    assert any(n == "checking" and d.startswith("checking: graph analysis") for n, d in seen), seen
    seen.clear()
    verify(
        example_path("example"),
        'P=? [F<=5 "crash"]',
        constants="N=3",
        checker="native",
        phases=lambda n, d: seen.append((n, d)),
    )
    steps = [d for n, d in seen if n == "checking" and d.startswith("checking: step")]
    assert steps and set(steps) <= {f"checking: step {i}/5" for i in range(1, 6)} and steps == sorted(steps)


def test_live_line_names_the_phase() -> None:
    import io

    from rich.console import Console

    from distmc.progress import LiveProgress

    buf = io.StringIO()
    with LiveProgress(console=Console(file=buf, force_terminal=True, width=200)) as live:
        live({"depth": 3, "states": 1500, "frontier": 0, "transitions": 9000, "elapsed_s": 1.0})
        live.phase("handing to Storm")
        assert live.live is not None
        live.live.refresh()
        assert "handing to Storm | 1.50k states, 9.00k transitions | 0." in buf.getvalue()
        live.phase("checking", "Storm")
        live.live.refresh()
        assert "checking (Storm) | 1.50k states" in buf.getvalue()
        line = live.line
        live.phase("checking", "sound value iteration: gap 3.0e-07")  # the same phase: a new detail, same clock
        assert live.line is line
        live.live.refresh()
        assert "checking (sound value iteration: gap 3.0e-07) | 1.50k states" in buf.getvalue()
        live.phase("checking", "checking: step 41/100")
        live.live.refresh()
        assert "checking: step 41/100 | 1.50k states" in buf.getvalue()


def _ci_script(name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"ci_{name}", REPO / ".ci" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_readme_script_finds_every_command_and_checks_values() -> None:
    readme = _ci_script("readme")
    found = readme.commands((REPO / "README.md").read_text())
    cmds = [c.cmd for c in found]
    assert cmds[0].startswith("pip install torch==2.13.0 -e . && distmc run example")  # the plain install first
    assert any("--workers 2" in c for c in cmds)  # the front page's scaling-out command
    assert not any("MODEL" in c for c in cmds)  # usage synopses are not commands
    shown = {c.cmd: c.cell for c in found if c.cell}
    assert shown["distmc run example --const N=6 --policy uniform --prop 'P=? [F \"crash\"]'"] == "0.685 (1,296 states)"
    out = 'P=? [F "crash"]  =  0.685352451959\n  model ...; induced dtmc: 1296 states, 13094 transitions'
    assert readme.agrees(out, "0.685 (1,296 states)")
    assert not readme.agrees(out.replace("0.685", "0.695"), "0.685 (1,296 states)")
    assert not readme.agrees(out.replace("1296 states", "1297 states"), "0.685 (1,296 states)")
    # every value shown is compared: the set-up command's output block, and every Python example's print comments
    assert found[0].lines and found[0].lines[0].startswith('P=? [F "crash"]  =  ')
    python = [c for c in found if "\n" in c.cmd and "verify(" in c.cmd]
    assert python and all(c.lines for c in python)
    line = "  model .../gridworld.prism (stochastic, policy p.pt in float64); induced dtmc: 1296 states, depth 12"
    printed = (
        "x\n  model /a/b/gridworld.prism (stochastic, policy p.pt in float64); induced dtmc: 1296 states, depth 12"
    )
    assert readme.missing_line(printed, [line]) is None
    assert readme.missing_line(printed.replace("1296", "1297"), [line]) == line
    assert readme.missing_line(printed.replace("float64", "float32"), [line]) == line
    cut = "0.010194819812... [0.010194819811..., 0.010194819813...] 1296"  # shown truncated: within 1e-12
    assert readme.missing_line("0.01019481981200985 [0.01019481981100985, 0.010194819813009851] 1296", [cut]) is None
    assert readme.missing_line("0.0101948211722 [0.01019481981100985, 0.010194819813009851] 1296", [cut]) == cut


def test_docs_script_finds_every_page_command_and_skips_only_marked_blocks() -> None:
    docs = _ci_script("docs")
    checks = {p.name: docs.page_checks(p.read_text()) for p in sorted((REPO / "docs").glob("*.md"))}
    cmds = [c.cmd for page in checks.values() for c in page if not c.skip]
    assert any(c.startswith("distmc scale ") for c in cmds) and any(c.startswith("distmc abstract ") for c in cmds)
    assert any(c.startswith("distmc shield ") for c in cmds) and any(c.startswith("distmc curve ") for c in cmds)
    assert not any("MODEL" in c for c in cmds)  # usage synopses are not commands
    python = [c for c in checks["python-api.md"] if c.python and "report.bounds" in c.cmd]
    assert python and python[0].lines is not None and len(python[0].lines) == 4  # a print's comment, a loop's three
    tutorial = checks["tutorial.md"]
    assert all(c.lines for c in tutorial if c.cmd.startswith("distmc ") and not c.skip)  # each shows its output
    assert any(c.python and "VerifyCallback" in c.cmd and not c.skip for c in tutorial)
    skipped = [c for page in checks.values() for c in page if c.skip]
    assert skipped and all(c.lines is None for c in skipped)  # a block not run takes no output block
    page = "<!-- not run: needs a cluster -->\n```\ndistmc run m.prism --prop p\n```\n\n```\nP=? 1\n```\n"
    (check,) = docs.page_checks(page)
    assert check.skip == "needs a cluster" and check.lines is None
    (check,) = docs.page_checks(page.replace("<!-- not run: needs a cluster -->\n", ""))
    assert check.skip is None and check.lines == ["P=? 1"]


def test_cli_reference_page_is_the_parsers_help() -> None:
    import importlib.util

    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = hooks.cli_reference()
    for name in ("run", "abstract", "scale", "shield", "curve"):
        assert f"## distmc {name}\n" in page
    assert "--horizon-cut" in page and "--delta DELTA" in page  # options of run and of shield, from the parser
