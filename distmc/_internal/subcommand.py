"""What the ``shield`` and ``curve`` subcommands share: the options of their runs, and their error handling."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from typing import Any

from distmc.errors import DistmcError

__all__ = ["add_run_options", "guarded"]


def add_run_options(p: argparse.ArgumentParser, *, policy: bool = True) -> None:
    """The options of ``distmc run`` that choose how each run of the subcommand explores and checks."""
    p.add_argument("model", help="PRISM file (mdp), or 'example' for the bundled gridworld")
    p.add_argument("--prop", required=True, help="PCTL property, e.g. 'P=? [F<=30 \"crash\"]'")
    p.add_argument("--const", default=None, help="undefined constants, e.g. N=5,slickness=0.1")
    if policy:
        p.add_argument("--policy", default="uniform", help="as for distmc run")
    p.add_argument("--interface", default=None, help="the policy's interface file (as for distmc run)")
    p.add_argument("--trust-policy", action="store_true", help="as for distmc run")
    p.add_argument("--mode", default="stochastic", choices=["stochastic", "deterministic"])
    p.add_argument("--threshold", type=float, default=0.0, help="as for distmc run")
    p.add_argument(
        "--checker", default="auto", choices=["auto", "storm", "native", "distributed"], help="as for distmc run"
    )
    p.add_argument("--json", dest="json_path", default=None, help="write the report as JSON")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def guarded(args: argparse.Namespace, body: Callable[[], Any]) -> int:
    """Run ``body`` (which prints its result); a :class:`DistmcError` is one line and its exit code."""
    from distmc.progress import setup_logging

    setup_logging(args.log_level)
    try:
        body()
    except KeyboardInterrupt:
        print("distmc: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except DistmcError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"distmc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0
