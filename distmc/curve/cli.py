"""``distmc curve MODEL --prop ... --policies CKPT ...``: see :mod:`distmc.curve.curve`."""

from __future__ import annotations

import argparse
from typing import Any

from distmc._internal.atomic import write_text
from distmc._internal.subcommand import add_run_options, guarded

__all__ = ["add_parser", "main"]


def add_parser(sub: Any) -> None:
    """Add the ``curve`` subcommand to the ``distmc`` subparsers ``sub``."""
    p = sub.add_parser(
        "curve",
        help="verify a training run's checkpoints: value against training step",
        description="Verify each checkpoint for the property on one shared exploration (every "
        "policy's induced DTMC is a reweighting of the MDP of all actions), print the "
        "value against the training step and the time per checkpoint, and plot it.",
    )
    add_run_options(p, policy=False)
    p.add_argument("--policies", nargs="+", required=True, metavar="CKPT", help="policy files in training order")
    p.add_argument(
        "--steps",
        default=None,
        help="their training steps, comma-separated (default: the last number in each file name)",
    )
    p.add_argument("--separate", action="store_true", help="a full distmc run per checkpoint instead (comparison)")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="draw value and time per checkpoint")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    """Run ``distmc curve`` with parsed ``args``."""

    def body() -> None:
        from distmc._internal.subcommand import example_path, options_from_args
        from distmc.curve.curve import curve, plot_curve
        from distmc.errors import UsageError

        if args.plot:
            from distmc._internal.deps import require

            require("matplotlib", f"--plot {args.plot}")
        try:
            steps = None if args.steps is None else [int(s) for s in args.steps.split(",")]
        except ValueError:
            raise UsageError(f"--steps must be integers separated by commas, not '{args.steps}'") from None
        report = curve(
            example_path(args.model),
            args.prop,
            list(args.policies),
            options_from_args(args, skip=("json_path", "plot", "steps")),
            steps=steps,
            separate=args.separate,
        )
        print(report.table())
        if args.plot:
            plot_curve(report, args.plot)
        if args.json_path:
            write_text(args.json_path, report.to_json(), sync=True)

    return guarded(args, body)
