"""``distmc abstract ENV --policy FILE ...``: bounds on failure of a continuous-state controller (MOSAIC)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from distmc._internal.atomic import write_text
from distmc.errors import DistmcError


class BoundsError(DistmcError):
    """--validate found a point outside its box's bounds."""

    exit_code = 9


__all__ = ["add_parser", "main"]


def add_parser(sub: Any) -> None:
    """Add the ``abstract`` subcommand to the ``distmc`` subparsers ``sub``."""
    p = sub.add_parser("abstract", help="bound the failure probability of a continuous-state controller (MOSAIC)")
    from distmc.abstract.envs import ENVS

    p.add_argument(
        "env",
        choices=sorted(ENVS),
        help="the continuous environment (cartpole: Gym's limits; "
        "cartpole-mosaic: MOSAIC's, |x| <= 0.05 and |theta| <= 10 degrees)",
    )
    p.add_argument(
        "--init",
        default=None,
        metavar="VAR=LO:HI,...",
        help="initial region: replace these variables' ranges (the rest keep the environment's)",
    )
    p.add_argument(
        "--safe",
        default=None,
        metavar="VAR=LO:HI,...",
        help="safe box: replace these variables' ranges (-inf/inf allowed); failure is leaving it",
    )
    p.add_argument(
        "--abstraction",
        default="tree",
        choices=["tree", "lattice"],
        help="tree: each image box is its own abstract state (default, tight); lattice: images covered by "
        "lattice cells, the abstract MDP checked by Storm",
    )
    p.add_argument(
        "--validate",
        type=int,
        default=0,
        metavar="N",
        help="exact failure probability of N uniform points per box (every fault outcome enumerated), "
        "checked against the box's bounds; prints the worst and mean gap",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of --validate's points")
    p.add_argument(
        "--time-limit",
        default=None,
        metavar="DURATION",
        help="stop refining before a step that would end past this (e.g. 15m, 900s); the report says so",
    )
    p.add_argument("--policy", required=True, help="controller: JSON spec (with its .pt weights next to it)")
    p.add_argument("--horizon", type=int, default=7, help="decision steps (default 7)")
    p.add_argument("--refine", type=int, default=0, help="refinement steps (default 0)")
    p.add_argument("--threshold", type=float, default=0.05, help="a box is safe if its upper bound is at most this")
    p.add_argument("--fault", default=None, help="fault model: fail:P, sticky:P or both, e.g. sticky:0.2")
    p.add_argument(
        "--min-size",
        type=float,
        default=1 / 64,
        help="refine no box narrower than this fraction of the initial region in every dimension",
    )
    p.add_argument(
        "--max-splits",
        type=int,
        default=None,
        help="bisections per box when splitting by action (default: 0 for the tree, 4 for the lattice)",
    )
    p.add_argument("--bounds", default="crown", choices=["crown", "ibp"], help="network bounds")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local: processes splitting boxes by action; ray: actors (default: the cores, up to 8, for "
        "the tree and on Ray; 1 for the lattice in-process)",
    )
    p.add_argument(
        "--driver",
        default="local",
        choices=["local", "ray"],
        help="explore the abstract MDP in-process (local) or on Ray actors (ray)",
    )
    p.add_argument("--address", default=None, help="with --driver ray: Ray cluster to join (auto or HOST:PORT)")
    p.add_argument("--json", dest="json_path", default=None, help="write the report as JSON")
    p.add_argument("--plot", default=None, help="write a heatmap (2-D) or histogram and projection (PNG)")
    p.add_argument("--rows", type=int, default=20, help="boxes listed in the table")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(handler=main)


def _step_line(h: dict[str, Any]) -> None:
    """One line per refinement step on stderr, as it ends (a long refinement shows where it is)."""
    gap = f", mean gap {h['mean_gap']:.4f}" if "mean_gap" in h else ""
    print(
        f"  step {h['step']}: {h['boxes']} boxes, safe {h['safe_fraction']:.4f}, lower >= 0.5 "
        f"{h['lower_half_fraction']:.4f}{gap}, {h['elapsed_s']:.1f} s",
        file=sys.stderr,
        flush=True,
    )


def main(args: argparse.Namespace) -> int:
    """Run ``distmc abstract`` with parsed ``args``; returns the exit code."""
    from distmc._internal.subcommand import one_line_errors

    return one_line_errors(args.debug, lambda: _run(args), interrupted=None)


def _run(args: argparse.Namespace) -> None:
    """The analysis, its summary, JSON and plot (:func:`main` turns its errors into one line)."""
    if args.plot:
        from distmc._internal.deps import require

        require("matplotlib", f"--plot {args.plot}")  # before the analysis, not after it
    from distmc.abstract.envs import get_env, with_regions
    from distmc.abstract.faults import parse_fault
    from distmc.abstract.network import load_network
    from distmc.abstract.options import AbstractOptions
    from distmc.abstract.refine import analyse, check_fit
    from distmc.abstract.report import plot, summary, to_json
    from distmc.explore.limits import parse_duration

    time_limit = parse_duration(args.time_limit)
    env = with_regions(get_env(args.env), args.init, args.safe)
    faults = parse_fault(args.fault)
    net = load_network(args.policy)
    check_fit(env, net, args.policy)
    options = AbstractOptions(
        args.horizon,
        args.refine,
        args.threshold,
        args.min_size,
        args.max_splits,
        args.workers,
        args.bounds,
        args.driver,
        args.address,
        args.abstraction,
        args.validate,
        args.seed,
        time_limit,
        _step_line,
    )
    result = analyse(env, net, faults, options)
    print(summary(result, env, args.rows))
    if args.json_path:
        write_text(args.json_path, to_json(result, env), sync=True)
    if args.plot:
        plot(result, env, args.plot)
    if result.inside is not None and not result.inside.all():
        raise BoundsError(
            f"--validate: {int((~result.inside).sum())} boxes have a sampled point whose exact "
            "failure probability lies outside the box's bounds (a soundness bug: please report it)"
        )
