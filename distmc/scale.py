r"""``distmc scale``: the scaling experiment on a user's own model and cluster.

One run of :func:`distmc.api.verify` per worker count, with the Ray driver (the fastest of ``repeat`` runs is
kept), the same model and property in all. Every worker count must give the same value (the drivers are built to;
a difference is reported, not hidden). What is compared is the exploration without the actors' start-up
(``levels_s + gather_s``: the first run of a worker count starts Ray and its actors, later ones reuse them), so a
short model on a cold cluster still shows how its levels scale; start-up (the rest of ``explore_s``), assembly,
hand-off and check are reported beside it.

Per run: ``workers``, ``result``, ``timings`` (the report's), ``speedup`` (the first worker count's exploration
time over this run's: 1.0 for the first), ``efficiency`` (speed-up over the ratio of the worker counts),
``bytes_per_state`` (what the workers sent each other, per state: the key batches and the owners' answers),
``keys_per_state`` (keys sent to other owners per state: how often a state crosses), ``driver_bytes_per_state``
(the new states' first occurrences to the driver and their global ids back, per state), ``worker_cpu`` (each
worker's CPU and wall seconds, exploring and checking), ``balance`` (the largest partition over the mean),
``worker_stats``, and ``first_timings`` (the first run's, which started the actors). :func:`table` prints them, :func:`plot` draws time per phase (stacked) and speed-up
against the ideal.

Example::

    distmc scale benchmarks/envs/avoid.prism --const N=6,slickness=0.1 --prop 'P=? [F<=10 "crash"]' \\
        --workers 1,2,4 --json scaling.json --plot scaling.png
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from distmc._internal.atomic import save_figure, write_text
from distmc.errors import UsageError
from distmc.options import VerifyOptions

__all__ = ["Scaling", "add_parser", "main", "plot", "scale", "table"]

log = logging.getLogger("distmc.scale")

#: The phases a run's time is split into for the plot (timings keys, bottom to top; ``start-up`` is the rest of
#: ``explore_s``: starting or joining Ray, and the actors).
PLOT_PHASES = (
    ("parse_s", "parse"),
    ("start-up", "start-up (Ray, actors)"),
    ("levels_s", "levels"),
    ("gather_s", "gather"),
    ("assemble_s", "assemble"),
    ("export_s", "export"),
    ("handoff_s", "hand-off"),
    ("check_s", "check"),
)


@dataclass
class Scaling:
    """What :func:`scale` measured (``to_json`` is the ``--json`` report)."""

    model: str
    property: str
    constants: str | None
    policy: str
    states: int
    transitions: int
    runs: list[dict[str, Any]]
    same_value: bool
    machine: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # the runs' VerifyOptions but workers and driver

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)


def explore_time(timings: dict[str, float]) -> float:
    """The exploration without starting the actors: the levels and the gather (see the module docstring)."""
    if "levels_s" in timings:
        return float(timings["levels_s"] + timings.get("gather_s", 0.0))
    return float(timings["explore_s"])


def startup_time(timings: dict[str, float]) -> float:
    """The exploration's time before its levels: starting (or joining) Ray and starting (or reusing) the actors."""
    return max(0.0, float(timings["explore_s"]) - explore_time(timings))


def _parse_counts(text: str) -> list[int]:
    try:
        counts = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise UsageError(f"--workers {text}: expected worker counts such as 1,2,4") from None
    if not counts or min(counts) < 1:
        raise UsageError(f"--workers {text}: expected worker counts of at least 1, such as 1,2,4")
    return counts


def scale(
    model: str | Path,
    prop: str,
    workers: list[int],
    *,
    repeat: int = 1,
    log_run: Callable[[str], None] | None = None,
    before_run: Callable[[], None] | None = None,
    options: VerifyOptions | None = None,
    **verify_kw: Any,
) -> Scaling:
    """Run ``verify(model, prop, replace(options, workers=w, driver="ray"))`` for each ``w`` in ``workers``.

    Args:
        model: PRISM file.
        prop: PCTL property.
        workers: the worker counts, in the order to run them (the first is the base of the speed-up).
        repeat: runs per worker count; the one with the shortest exploration is kept.
        log_run: called with one line per run (the CLI prints it to standard error).
        before_run: called before every run (``benchmarks/scaling.py`` runs its in-process reference there, so
            that both drivers are measured under the same load).
        options: what every run verifies and how (:class:`~distmc.options.VerifyOptions`: ``constants``,
            ``policy``, ``address``, ``threads_per_worker``, ...), but the worker count and the driver.
        verify_kw: changes to ``options``, by name.
    """
    from distmc.api import Report, verify

    base = VerifyOptions.build(options, **verify_kw)
    if repeat < 1:
        raise UsageError(f"--repeat must be at least 1, not {repeat}")
    if not workers or min(workers) < 1:
        raise UsageError(f"worker counts must be at least 1, not {workers}")
    kept: list[tuple[int, Report, Report]] = []  # workers, the fastest run, the first (which started the actors)
    for w in workers:
        best: Report | None = None
        first: Report | None = None
        for k in range(repeat):
            if before_run is not None:
                before_run()
            r = verify(model, prop, replace(base, workers=w, driver="ray"))
            assert isinstance(r, Report)
            first = first or r
            if log_run is not None:
                log_run(
                    f"workers {w}, run {k + 1}/{repeat}: value {r.result}, explore {r.timings['explore_s']:.2f} s"
                    f" (start-up {startup_time(r.timings):.2f} s), total {r.timings['total_s']:.2f} s"
                )
            if best is None or explore_time(r.timings) < explore_time(best.timings):
                best = r
        assert best is not None and first is not None
        kept.append((w, best, first))
    w0, r0, _ = kept[0]
    t0 = explore_time(r0.timings)
    runs = []
    for w, r, r1 in kept:
        ws = r.worker_stats
        owned = [float(s["states"]) for s in ws] or [float(r.states)]
        speedup = t0 / explore_time(r.timings) if explore_time(r.timings) > 0 else float("nan")
        runs.append(
            {
                "workers": w,
                "result": r.result,
                "timings": r.timings,
                "speedup": speedup,
                "efficiency": speedup / (w / w0),
                "bytes_per_state": sum(float(s.get("bytes_sent", 0)) + float(s.get("bytes_answer", 0)) for s in ws)
                / r.states,
                "keys_per_state": sum(float(s.get("keys_sent", 0)) for s in ws) / r.states,
                "driver_bytes_per_state": sum(float(s.get("bytes_driver", 0)) for s in ws) / r.states,
                "worker_cpu": [_cpu_wall(s) for s in ws],
                "balance": max(owned) / (sum(owned) / len(owned)),
                "worker_stats": ws,
                "states": r.states,
                "transitions": r.transitions,
                "first_timings": r1.timings,
            }
        )
    same = all(run["result"] == r0.result and run["states"] == r0.states for run in runs)
    return Scaling(
        model=str(model),
        property=prop,
        constants=base.constants,
        policy=r0.policy,
        states=r0.states,
        transitions=r0.transitions,
        runs=runs,
        same_value=same,
        machine={
            "node": platform.node(),
            "cores": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "address": base.address,
        },
        options=base.to_dict(),
    )


def _cpu_wall(ws: dict[str, Any]) -> dict[str, float]:
    """A worker's CPU and wall seconds in the exploration and in the distributed check (0 where it did none)."""
    return {k: float(ws.get(k, 0.0)) for k in ("explore_cpu_s", "explore_wall_s", "check_cpu_s", "check_wall_s")}


def _cpu_ratio(cpu: list[dict[str, float]]) -> str:
    """The busiest worker's CPU over its wall time, over the whole run (its thread budget holds near the threads)."""
    ratios = [
        (c["explore_cpu_s"] + c["check_cpu_s"]) / w for c in cpu if (w := c["explore_wall_s"] + c["check_wall_s"]) > 0
    ]
    return f"{max(ratios):.2f}" if ratios else "-"


def _value(v: Any) -> str:
    return f"{v:.12g}" if isinstance(v, float) else f"[{v['min']:.12g}, {v['max']:.12g}]"


def table(s: Scaling) -> str:
    """A Markdown table of the runs, with a line on the model above it and one on the values below."""
    lines = [
        f"{Path(s.model).name} {s.constants or ''}  {s.property}; policy {s.policy}; {s.states} states, "
        f"{s.transitions} transitions; {s.machine.get('cores')} cores on {s.machine.get('node')}, "
        f"{s.machine.get('date')}",
        "",
        "| workers | value | explore s (without start-up) | start-up s | assemble s | hand-off s | check s | "
        "total s | speed-up | efficiency | bytes/state | keys/state | balance (max/mean) | worker CPU/wall |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in s.runs:
        t = run["timings"]
        lines.append(
            f"| {run['workers']} | {_value(run['result'])} | {explore_time(t):.2f} | {startup_time(t):.2f} | "
            f"{t['assemble_s']:.2f} | {t.get('handoff_s', 0.0):.2f} | {t['check_s']:.2f} | {t['total_s']:.2f} | "
            f"{run['speedup']:.2f} | {run['efficiency']:.2f} | {run['bytes_per_state']:.1f} | "
            f"{run.get('keys_per_state', 0.0):.1f} | {run['balance']:.3f} | {_cpu_ratio(run.get('worker_cpu', []))} |"
        )
    if s.same_value:
        lines.append(f"\nEvery worker count gave the same value and the same {s.states} states.")
    else:
        got = ", ".join(f"{r['workers']} workers: {_value(r['result'])} ({r['states']} states)" for r in s.runs)
        lines.append(f"\nThe worker counts gave DIFFERENT results ({got}): please report this as a bug.")
    return "\n".join(lines)


def plot(s: Scaling, path: str | Path) -> None:
    """Write a PNG: each run's time per phase (stacked bars), and the speed-up against the ideal (linear)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = [r["workers"] for r in s.runs]
    x = list(range(len(counts)))
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    bottom = [0.0] * len(counts)
    for key, label in PLOT_PHASES:
        h = [startup_time(r["timings"]) if key == "start-up" else float(r["timings"].get(key, 0.0)) for r in s.runs]
        if any(h):
            ax[0].bar(x, h, bottom=bottom, label=label)
            bottom = [b + v for b, v in zip(bottom, h, strict=True)]
    ax[0].set_xticks(x, [str(c) for c in counts])
    ax[0].set_xlabel("workers")
    ax[0].set_ylabel("seconds")
    ax[0].set_title("time per phase")
    ax[0].legend(fontsize=8)
    w0 = counts[0]
    ax[1].plot(counts, [r["speedup"] for r in s.runs], "o-", label="measured (exploration without start-up)")
    ax[1].plot(counts, [c / w0 for c in counts], "--", label="ideal")
    ax[1].set_xscale("log", base=2)
    ax[1].set_xticks(counts, [str(c) for c in counts])
    ax[1].set_xlabel("workers")
    ax[1].set_ylabel(f"speed-up over {w0} worker{'s' if w0 > 1 else ''}")
    ax[1].set_title("speed-up")
    ax[1].legend(fontsize=8)
    fig.suptitle(f"{Path(s.model).name} {s.constants or ''}: {s.states:,} states, {s.machine.get('cores')} cores")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def add_parser(sub: Any) -> None:
    """Add the ``scale`` subcommand to the ``distmc`` subparsers ``sub``."""
    p = sub.add_parser(
        "scale",
        help="the scaling experiment: one Ray run per worker count",
        description="Run the same verification with each worker count on Ray and compare them.",
    )
    p.add_argument("model", help="PRISM file (dtmc or mdp), or 'example' for the bundled gridworld")
    p.add_argument("--prop", required=True, help="PCTL property")
    p.add_argument("--const", default=None, help="undefined constants, e.g. N=6,slickness=0.1")
    p.add_argument("--policy", default="uniform", help="as for distmc run (default uniform)")
    p.add_argument("--interface", default=None, help="the policy's interface file (as for distmc run)")
    p.add_argument("--trust-policy", action="store_true", help="as for distmc run")
    p.add_argument("--policy-dtype", default="float64", choices=["float64", "float32"], help="as for distmc run")
    p.add_argument("--mode", default="stochastic", choices=["stochastic", "deterministic", "monolithic"])
    p.add_argument("--workers", default="1,2,4", help="worker counts, e.g. 1,2,4,8 (default 1,2,4)")
    p.add_argument("--address", default=None, help="Ray cluster to join (auto or HOST:PORT); default: a local Ray")
    p.add_argument("--repeat", type=int, default=1, help="runs per worker count; the fastest is kept (default 1)")
    p.add_argument(
        "--threads-per-worker",
        type=int,
        default=None,
        help="compiled-kernel threads per worker (default: the cluster's CPUs divided by the workers)",
    )
    p.add_argument("--policy-servers", type=int, default=0, help="as for distmc run (default 0)")
    p.add_argument("--checker", default="auto", choices=["auto", "storm", "native"], help="as for distmc run")
    p.add_argument("--json", dest="json_path", default=None, help="write the report as JSON")
    p.add_argument("--plot", default=None, help="write time per phase and speed-up as a PNG")
    p.add_argument("--quiet", action="store_true", help="no line per run on standard error")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    """Run ``distmc scale`` with parsed ``args``; returns the exit code (1 when the worker counts disagree)."""
    from distmc._internal.subcommand import one_line_errors
    from distmc.progress import setup_logging

    setup_logging(args.log_level)
    return one_line_errors(
        args.debug, lambda: _run(args), "distmc: interrupted (Ctrl-C); the runs finished so far are not reported"
    )


def _run(args: argparse.Namespace) -> int:
    if args.plot:
        from distmc._internal.deps import require

        require("matplotlib", f"--plot {args.plot}")
    from distmc._internal.subcommand import example_path, options_from_args

    counts = _parse_counts(args.workers)
    s = scale(
        example_path(args.model),
        args.prop,
        counts,
        repeat=args.repeat,
        log_run=None if args.quiet else (lambda line: print(line, file=sys.stderr)),
        options=options_from_args(args, skip=("workers", "plot")),
    )  # --plot: the scaling PNG
    print(table(s))
    if args.json_path:
        write_text(args.json_path, s.to_json(), sync=True)
    if args.plot:
        plot(s, args.plot)
    return 0 if s.same_value else 1
