"""What the subcommands share: their run options, the :class:`~distmc.options.VerifyOptions` of a command line."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from importlib import resources
from typing import Any

from distmc.errors import DistmcError
from distmc.options import VerifyOptions

__all__ = ["add_run_options", "example_path", "guarded", "one_line_errors", "options_from_args"]


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


def one_line_errors(
    debug: bool, body: Callable[[], int | None], interrupted: str | None = "distmc: interrupted (Ctrl-C)"
) -> int:
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


def example_path(name: str) -> str:
    """``example``: the bundled gridworld model; any other name is a path, returned as it is."""
    if name == "example":
        return str(resources.files("distmc") / "examples" / "gridworld.prism")
    return name


def _example_policy(policy: str, interface: str | None) -> tuple[str, str | None]:
    """``--policy example``: the bundled gridworld network and, unless one is given, its interface file."""
    if policy != "example":
        return policy, interface
    examples = resources.files("distmc") / "examples"
    return str(examples / "gridworld_policy.pt"), interface or str(examples / "gridworld_policy.json")


#: ``run``'s options whose destination is not the :class:`~distmc.options.VerifyOptions` field of the same name.
_FIELD_OF = {"const": "constants", "export": "export_path"}


def options_from_args(args: argparse.Namespace, skip: tuple[str, ...] = ()) -> VerifyOptions:
    """The :class:`~distmc.options.VerifyOptions` of a parsed ``run`` (or ``scale``) command line.

    Every parsed option that is a field (under its own name or :data:`_FIELD_OF`'s) goes in, but those in
    ``skip``; ``--policy example`` becomes the bundled network and its interface. ``--prop`` and ``--props`` are
    verify's property, not options.
    """
    fields = set(VerifyOptions.__dataclass_fields__)
    given = {_FIELD_OF.get(k, k): v for k, v in vars(args).items() if k not in skip}
    given = {k: v for k, v in given.items() if k in fields and k != "props"}
    given["policy"], given["interface"] = _example_policy(given.get("policy", "uniform"), given.get("interface"))
    return VerifyOptions(**given)
