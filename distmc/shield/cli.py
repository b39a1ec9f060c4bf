"""``distmc shield MODEL --policy P --prop 'P=? [F "crash"]' --delta D``: see :mod:`distmc.shield.build`."""

from __future__ import annotations

import argparse
from typing import Any

from distmc._internal.atomic import write_text
from distmc._internal.subcommand import add_run_options, guarded

__all__ = ["add_parser", "main"]


def add_parser(sub: Any) -> None:
    """Add the ``shield`` subcommand to the ``distmc`` subparsers ``sub``."""
    p = sub.add_parser(
        "shield",
        help="shield a policy until it verifies within a risk budget",
        description="Compute the risk of each action from the policy's per-state values, remove the "
        "risky ones, and verify the shielded policy, refining until its value is at most "
        "--delta (or nothing more can be removed).",
    )
    add_run_options(p)
    p.add_argument("--delta", type=float, required=True, help="the value the shielded policy must verify to")
    p.add_argument(
        "--out", default="shield", help="folder for shield.parquet, shielded.json and report.json (default ./shield)"
    )
    p.add_argument(
        "--reward",
        default=None,
        help="a reward structure whose expected total is reported before and "
        "after (over the property's step bound, or --reward-steps)",
    )
    p.add_argument("--reward-steps", type=int, default=None, help='K of R{"REWARD"}=? [C<=K]')
    p.add_argument(
        "--max-rounds", type=int, default=8, help="most verifications of a shielded policy while tightening (default 8)"
    )
    p.add_argument(
        "--relax",
        type=int,
        default=2,
        help="after a shield meets --delta, this many more verifications look for one that removes less (default 2)",
    )
    p.add_argument("--workers", type=int, default=1, help="as for distmc run")
    p.add_argument("--driver", default=None, choices=["local", "ray"], help="as for distmc run")
    p.add_argument("--address", default=None, help="as for distmc run")
    p.add_argument("--threads-per-worker", type=int, default=None, help="as for distmc run")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    """Run ``distmc shield`` with parsed ``args``."""

    def body() -> None:
        from distmc._internal.subcommand import example_path, options_from_args
        from distmc.shield.build import shield

        report = shield(
            example_path(args.model),
            args.prop,
            args.delta,
            options_from_args(args, skip=("json_path",)),
            out=args.out,
            reward=args.reward,
            reward_steps=args.reward_steps,
            max_rounds=args.max_rounds,
            relax=args.relax,
        )
        print(report.summary())
        if args.json_path:
            write_text(args.json_path, report.to_json(), sync=True)

    return guarded(args, body)
