"""The COOL-MC paper's experiment as one command: every environment and property, five ways, side by side.

For each environment of ``benchmarks/envs/envs.toml`` and each of its properties, with the trained policy of
``benchmarks/policies/<env>/`` (``benchmarks/train.py``):

* ``distmc det``: distmc, deterministic mode (the policy's argmax over the enabled actions);
* ``distmc stoch``: distmc, stochastic mode (pi(a|s) renormalised over the enabled actions);
* ``distmc mono``: distmc, monolithic mode (the naive check: the whole reachable MDP, no policy; [min, max]);
* ``storm builder``: Storm's own builder on the full MDP (``stormpy.build_model`` with the property, then Storm's
  check for min and max; :func:`tests.reference.storm_reference`);
* ``callback stoch`` / ``callback det``: the callback approach (:mod:`benchmarks.callback_baseline`: Storm's builder
  asks Python per state and action, the network runs per state) with the same network.

When ``../shared/models/coolmc/`` is present, the same is run on those files (:data:`COOLMC_CASES`) with an
untrained, seeded network of the paper's width (2x64; 2x1024 for Crazy Climber), since no trained policy exists
for them here.

Every run is a fresh child process with a time limit (``--timeout``, "timeout" in the table); its time is measured
inside the child from parsing the model to the value (imports and, for distmc, a warm-up verify of the bundled
example that loads numba's cached routines, are not counted; both sides import torch before the clock starts). The table goes between the ``paper`` markers of
``benchmarks/RESULTS.md`` (re-running replaces it), the plot to ``benchmarks/paper.png``, the raw rows to
``--json``.

Usage (from the repository root)::

    python benchmarks/paper.py                      # project environments, and coolmc's when present
    python benchmarks/paper.py --env crazy_climber --no-coolmc --timeout 300
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

RESULTS = REPO / "benchmarks" / "RESULTS.md"
PLOT = REPO / "benchmarks" / "paper.png"
BEGIN, END = "<!-- paper:begin -->", "<!-- paper:end -->"
COOLMC_DIR = REPO.parent / "shared" / "models" / "coolmc"
METHODS = ("distmc det", "distmc stoch", "distmc mono", "storm builder", "callback stoch", "callback det")


@dataclass(frozen=True)
class Case:
    """One environment: PRISM file, constants, properties, and the network to verify."""

    name: str
    file: Path
    constants: str
    properties: tuple[str, ...]
    policy: Path | None  # TorchScript; None: an untrained network of ``hidden`` width is made
    interface: Path | None
    hidden: int
    origin: str  # "project" or "coolmc"


#: The COOL-MC reference files, their constants and properties (from ``../shared/models/coolmc/README.md``).
COOLMC_CASES: tuple[tuple[str, str, str, tuple[str, ...], int], ...] = (
    ("coolmc freeway", "freeway.prism", "", ('P=? [ F "goal" ]',), 64),
    ("coolmc avoid", "avoid.prism", "xMax=4,yMax=4,slickness=0.1", ("P=? [ F<=100 COLLISION=true ]",), 64),
    ("coolmc crazy_climber", "crazy_climber.prism", "", ("P=? [ F COLLISION=true ]",), 1024),
    ("coolmc transporter", "transporter.prism", "MAX_JOBS=2,MAX_FUEL=10", ("P=? [ F jobs_done=2 ]",), 64),
    ("coolmc frozen_lake", "frozen_lake.prism", "control=0.333,start_position=0", ('P=? [ F "at_frisbee" ]',), 64),
    ("coolmc stock_market", "stock_market.prism", "", ('P=? [ F "success" ]',), 64),
)


# -- children: one measured run each ---------------------------------------------------------------------------


def _value(r: Any) -> Any:
    return r if isinstance(r, dict) else float(r)


def _options(t: dict[str, Any]) -> Any:
    """The :class:`~distmc.options.VerifyOptions` of a task (monolithic mode: no policy)."""
    from distmc.options import VerifyOptions

    policy = t["mode"] != "monolithic"
    return VerifyOptions(
        constants=t["constants"] or None,
        policy=t["policy"] if policy else "uniform",
        interface=t["interface"] if policy else None,
        mode=t["mode"],
    )


def child_distmc(t: dict[str, Any]) -> dict[str, Any]:
    import torch  # noqa: F401  (imported before timing, as on the callback side)

    from distmc.api import verify

    verify(REPO / "distmc" / "examples" / "gridworld.prism", 'P=? [F "crash"]', constants="N=2")  # warm-up
    t0 = time.perf_counter()
    r = verify(t["file"], t["prop"], _options(t))
    seconds = time.perf_counter() - t0
    assert not isinstance(r, tuple)
    return {
        "states": r.states,
        "transitions": r.transitions,
        "result": _value(r.result),
        "seconds": seconds,
        "policy_states": r.policy_states,
        "timings": r.timings,
    }


def child_storm(t: dict[str, Any]) -> dict[str, Any]:
    from tests.reference import storm_reference

    t0 = time.perf_counter()
    r = storm_reference(t["file"], t["constants"] or None, t["prop"])
    return {
        "states": r["states"],
        "transitions": r["transitions"],
        "result": _value(r["result"]),
        "seconds": time.perf_counter() - t0,
    }


def child_callback(t: dict[str, Any]) -> dict[str, Any]:
    import torch
    from torch import nn

    from benchmarks.callback_baseline import run_callback

    spec = json.loads(Path(t["interface"]).read_text())
    net = torch.jit.load(t["policy"])
    if spec.get("output", "probabilities") == "logits":
        # softmax over all actions; the callback renormalises over the kept (enabled) ones, which gives distmc's
        # softmax over the enabled actions
        net = nn.Sequential(net, nn.Softmax(dim=-1))
    net.eval()
    r = run_callback(t["file"], t["constants"], t["prop"], net, t["mode"], spec["features"], spec["actions"])
    return {
        "states": r["states"],
        "transitions": r["transitions"],
        "result": r["result"],
        "seconds": r["seconds"],
        "network_calls": r["network_calls"],
        "timings": r["timings"],
    }


def child_profile(t: dict[str, Any]) -> dict[str, Any]:
    """Where distmc's time goes on one run: :func:`distmc.api.verify`'s own time split, and the CPU thread-count
    calibration inside loading the policy (``TorchScriptPolicy._choose_threads``, timed by wrapping it; it is part
    of ``build_s``).
    """
    import torch  # noqa: F401  (imported before timing, as in child_distmc)

    from distmc.api import Report, verify
    from distmc.policy.torchscript import TorchScriptPolicy

    verify(REPO / "distmc" / "examples" / "gridworld.prism", 'P=? [F "crash"]', constants="N=2")  # warm-up
    spent = {"calibrate_s": 0.0}
    choose = TorchScriptPolicy._choose_threads

    def timed_choose(self: Any, width: int) -> None:
        t0 = time.perf_counter()
        choose(self, width)
        spent["calibrate_s"] += time.perf_counter() - t0

    TorchScriptPolicy._choose_threads = timed_choose  # type: ignore[method-assign]
    r = verify(t["file"], t["prop"], _options(t))
    assert isinstance(r, Report)
    tm = r.timings
    return {
        "seconds": tm["total_s"],
        "result": _value(r.result),
        "states": r.states,
        "build_s": tm["parse_s"],
        "calibrate_s": spent["calibrate_s"],
        "explore_s": tm["explore_s"],
        "forward_s": tm.get("policy_s", 0.0),
        "assemble_s": tm["assemble_s"] + tm.get("handoff_s", 0.0),
        "check_s": tm["check_s"],
        "policy_states": r.policy_states,
        "forward_passes": r.policy_calls,
    }


CHILDREN = {"distmc": child_distmc, "storm": child_storm, "callback": child_callback, "profile": child_profile}


def _spawn(task: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one task in a fresh process; ``{"error": ...}`` or ``{"timeout": True}`` when it does not answer."""
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(task)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        return {"timeout": True}
    if out.returncode != 0:
        lines = [ln for ln in out.stderr.strip().splitlines() if ln.strip()]
        return {"error": lines[-1][:200] if lines else f"exit code {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the experiment ------------------------------------------------------------------------------------------------


def project_cases(names: list[str] | None) -> list[Case]:
    from benchmarks.suite import load_envs

    cases = []
    for name, e in load_envs().items():
        if names and name not in names:
            continue
        if not e.policy.is_file():
            raise SystemExit(f"{e.policy}: no trained policy; run python benchmarks/train.py --env {name} first")
        cases.append(Case(name, e.file, e.constants, e.properties, e.policy, e.interface, e.hidden, "project"))
    return cases


def coolmc_cases(folder: Path, tmp: Path) -> list[Case]:
    """The COOL-MC files present in ``folder``, each with a seeded untrained network saved under ``tmp``."""
    from benchmarks.callback_baseline import network_for, save_network

    cases = []
    for name, file, consts, props, hidden in COOLMC_CASES:
        path = folder / file
        if not path.is_file():
            continue
        net, features, actions = network_for(path, consts, hidden, seed=0)
        policy, interface = save_network(net, features, actions, tmp / name.replace(" ", "_"))
        cases.append(Case(name, path, consts, props, policy, interface, hidden, "coolmc"))
    return cases


def run(cases: list[Case], timeout: float, methods: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = []
    for c in cases:
        for prop in c.properties:
            base = {
                "file": str(c.file),
                "constants": c.constants,
                "prop": prop,
                "policy": str(c.policy),
                "interface": str(c.interface),
            }
            for method in methods:
                kind, mode = method.split()
                task = {
                    **base,
                    "kind": {"distmc": "distmc", "storm": "storm", "callback": "callback"}[kind],
                    "mode": {"det": "deterministic", "stoch": "stochastic", "mono": "monolithic"}.get(mode, ""),
                }
                res = _spawn(task, timeout)
                row = {
                    "env": c.name,
                    "origin": c.origin,
                    "property": prop,
                    "method": method,
                    "hidden": c.hidden,
                    "constants": c.constants,
                    **res,
                }
                rows.append(row)
                print(_line(row), flush=True)
    return rows


# -- output ----------------------------------------------------------------------------------------------------------


def _result(r: Any) -> str:
    if isinstance(r, dict):
        return f"[{r['min']:.6g}, {r['max']:.6g}]"
    return f"{r:.6g}"


def _cells(row: dict[str, Any]) -> tuple[str, str, str, str]:
    if row.get("timeout"):
        return "-", "-", "timeout", "-"
    if "error" in row:
        return "-", "-", f"error: {row['error']}", "-"
    return f"{row['states']:,}", f"{row['transitions']:,}", _result(row["result"]), f"{row['seconds']:.2f}"


def _line(row: dict[str, Any]) -> str:
    s, t, r, sec = _cells(row)
    return f"{row['env']:22} {row['property']:34} {row['method']:15} states {s:>10} trans {t:>12} {r:>28} {sec:>8} s"


def _ratios(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], float]:
    """callback time / distmc time, per (env, property, mode), where both answered."""
    by = {(r["env"], r["property"], r["method"]): r for r in rows}
    out = {}
    for (env, prop, method), r in by.items():
        if not method.startswith("distmc") or "seconds" not in r:
            continue
        mode = method.split()[1]
        cb = by.get((env, prop, f"callback {mode}"))
        if cb and "seconds" in cb:
            out[(env, prop, mode)] = cb["seconds"] / r["seconds"]
    return out


def table(rows: list[dict[str, Any]]) -> str:
    ratios = _ratios(rows)
    lines = [
        "| environment | property | method | states | transitions | result | time s | callback / distmc |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        s, t, r, sec = _cells(row)
        ratio = ""
        if row["method"].startswith("distmc"):
            x = ratios.get((row["env"], row["property"], row["method"].split()[1]))
            ratio = f"{x:.1f}x" if x else ""
        lines.append(f"| {row['env']} | `{row['property']}` | {row['method']} | {s} | {t} | {r} | {sec} | {ratio} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    keys = list(dict.fromkeys((r["env"], r["property"]) for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    by = {(r["env"], r["property"], r["method"]): r for r in rows}
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(keys) * len(methods) / 3 + 2))
    h = 0.8 / len(methods)
    y = np.arange(len(keys))
    for i, m in enumerate(methods):
        vals = [by.get((e, p, m), {}).get("seconds", np.nan) for e, p in keys]
        ax.barh(y + i * h, vals, height=h, label=m)
    ax.set_yticks(y + 0.4 - h / 2)
    ax.set_yticklabels([f"{e}: {p}" for e, p in keys], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("seconds, parse to value (log scale; missing bar: timeout or not applicable)")
    ax.legend(fontsize=8)
    ax.set_title("distmc (det, stoch, monolithic) vs Storm's builder and the callback approach")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_results(rows: list[dict[str, Any]], command: str, timeout: float, path: Path = RESULTS) -> None:
    import torch

    header = (
        "## The paper's experiment (`benchmarks/paper.py`)\n\n"
        f"`{command}`; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine: {platform.machine()}, "
        f"{os.cpu_count()} cores, shared with other jobs (times are noisy; compare within a row group), no GPU; "
        f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads by default. Each cell is one fresh "
        f"process, timed from parsing the model to the value, limit {timeout:.0f} s. Project environments "
        "(`benchmarks/envs/`) use the trained policies of `benchmarks/policies/`; the `coolmc` rows use "
        "`../shared/models/coolmc/` with an untrained seeded network of the paper's width (2x64, 2x1024 for Crazy "
        "Climber). `distmc mono` and `storm builder` check the whole MDP: [min, max] over all policies. The last "
        "column is the callback approach's time over distmc's, same network, same mode.\n\n"
        "![paper](paper.png)\n\n"
    )
    block = f"{BEGIN}\n{header}{table(rows)}\n{END}"
    text = path.read_text() if path.is_file() else "# Benchmark results\n"
    if BEGIN in text and END in text:
        pre, rest = text.split(BEGIN, 1)
        post = rest.split(END, 1)[1]
        text = pre + block + post
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def ratio(env: str, repeat: int, timeout: float) -> int:
    """Print callback / distmc end-to-end ratios (stochastic mode) on one environment, and distmc's profile."""
    (case,) = project_cases([env])
    print(f"{case.name} [{case.constants}], network 2x{case.hidden}; stochastic mode; {repeat} alternating runs")
    print(
        "| property | run | distmc s | callback s | ratio | distmc: build (calibrate) / explore (forward) / "
        "assemble / check s | policy states, forward passes | callback network calls |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for prop in case.properties:
        task = {
            "file": str(case.file),
            "constants": case.constants,
            "prop": prop,
            "policy": str(case.policy),
            "interface": str(case.interface),
            "mode": "stochastic",
        }
        for i in range(repeat):
            d = _spawn({**task, "kind": "distmc"}, timeout)
            c = _spawn({**task, "kind": "callback"}, timeout)
            p = _spawn({**task, "kind": "profile"}, timeout)
            if "seconds" not in d or "seconds" not in c or "seconds" not in p:
                print(f"| `{prop}` | {i + 1} | {d} | {c} | | | | |")
                continue
            prof = (
                f"{p['build_s']:.2f} ({p['calibrate_s']:.2f}) / {p['explore_s']:.2f} ({p['forward_s']:.2f}) / "
                f"{p['assemble_s']:.2f} / {p['check_s']:.2f}"
            )
            print(
                f"| `{prop}` | {i + 1} | {d['seconds']:.2f} | {c['seconds']:.2f} | {c['seconds'] / d['seconds']:.1f}x "
                f"| {prof} | {p['policy_states']:,}, {p['forward_passes']} | {c['network_calls']:,} |",
                flush=True,
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--env", action="append", help="project environment (repeatable; default: all)")
    ap.add_argument("--no-coolmc", action="store_true", help="skip ../shared/models/coolmc/ even when present")
    ap.add_argument("--coolmc-dir", default=str(COOLMC_DIR))
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of %(default)s")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run (default: %(default)s)")
    ap.add_argument("--json", default=None, help="also write the rows as JSON")
    ap.add_argument("--no-write", action="store_true", help="do not touch RESULTS.md and the plot")
    ap.add_argument(
        "--ratio",
        metavar="ENV",
        help="instead: distmc vs callback (stochastic) on one project "
        "environment's properties, alternating, --repeat times, plus a profile of distmc's phases",
    )
    ap.add_argument("--repeat", type=int, default=2, help="runs per side with --ratio (default: %(default)s)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        task = json.loads(args.child)
        print(json.dumps(CHILDREN[task["kind"]](task)))
        return 0
    if args.ratio:
        return ratio(args.ratio, args.repeat, args.timeout)
    methods = tuple(m.strip() for m in args.methods.split(","))
    unknown = set(methods) - set(METHODS)
    if unknown:
        ap.error(f"unknown methods {sorted(unknown)}; choose from {METHODS}")
    with tempfile.TemporaryDirectory() as tmp:
        cases = project_cases(args.env)
        if not args.no_coolmc and Path(args.coolmc_dir).is_dir():
            cases += coolmc_cases(Path(args.coolmc_dir), Path(tmp))
        rows = run(cases, args.timeout, methods)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    if not args.no_write:
        command = "python benchmarks/paper.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
        write_results(rows, command.strip(), args.timeout)
        plot(rows, PLOT)
        print(f"wrote {RESULTS} and {PLOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
