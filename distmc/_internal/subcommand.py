"""What the ``shield`` and ``curve`` subcommands share: the options of their runs, and their error handling."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from typing import Any

from distmc.errors import DistmcError

__all__ = ["add_run_options", "guarded", "one_line_errors"]


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
    """Run ``body`` (which prints its result) after setting up logging; errors as in :func:`one_line_errors`."""
    from distmc.progress import setup_logging

    setup_logging(args.log_level)
    return one_line_errors(args.debug, body)


def one_line_errors(debug: bool, body: Callable[[], int | None],
                    interrupted: str | None = "distmc: interrupted (Ctrl-C)") -> int:
    """``body()``'s exit code (None: 0), with the errors a user sees as one line.

    A :class:`DistmcError` is one line (its traceback with ``debug``) and its exit code; Ctrl-C is the line
    ``interrupted`` and exit code 130 (``interrupted`` None: Ctrl-C is left to the caller).
    """
    try:
        rc = body()
    except KeyboardInterrupt:
        if interrupted is None:
            raise
        print(interrupted, file=sys.stderr)
        return 130
    except DistmcError as exc:
        if debug:
            traceback.print_exc()
        print(f"distmc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0 if rc is None else rc
