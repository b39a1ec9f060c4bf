"""Command line: ``distmc run MODEL --prop PCTL ...``.

Exit codes: 0 success; 1 other distmc error; 2 bad command line; 3 bad model; 4 unsupported model feature;
5 bad property; 6 bad policy; 7 resource limit reached; 8 worker failure.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from importlib import resources
from pathlib import Path

from distmc.errors import DistmcError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="distmc", description="Verify RL policies by model checking the induced DTMC.")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="explore, assemble and check")
    run.add_argument("model", help="PRISM file (dtmc or mdp), or 'example' for the bundled gridworld")
    run.add_argument("--prop", required=True, help='PCTL property, e.g. \'P=? [F "crash"]\'')
    run.add_argument("--const", default=None, help="undefined constants, e.g. N=3,p=0.1")
    run.add_argument("--policy", default="uniform",
                     help="'uniform', a TorchScript file, or 'example' for the bundled gridworld policy (N=6)")
    run.add_argument("--interface", default=None,
                     help="interface file (JSON/TOML) of the network (with --policy example: the bundled one)")
    run.add_argument("--mode", default="stochastic", choices=["stochastic", "deterministic", "monolithic"])
    run.add_argument("--threshold", type=float, default=0.0, help="stochastic mode: keep actions with pi > threshold")
    run.add_argument("--resolve", default="none", choices=["none", "uniform"],
                     help="same-label choices: keep nondeterminism (min/max) or split evenly")
    run.add_argument("--workers", type=int, default=1, help="partitions: Ray actors owning the states by hash")
    run.add_argument("--driver", default=None, choices=["local", "ray"],
                     help="local (in-process) or ray; default: local for one worker and no --address, else ray")
    run.add_argument("--address", default=None,
                     help="Ray cluster to join (auto or HOST:PORT); default: start a local Ray when needed")
    run.add_argument("--max-states", type=int, default=None, help="stop beyond this many states")
    run.add_argument("--json", dest="json_path", default=None, help="write the report as JSON")
    run.add_argument("--export", default=None, help="write the induced model (.drn or .umb)")
    run.add_argument("--debug", action="store_true", help="show tracebacks")
    from distmc.abstract.cli import add_parser as add_abstract

    add_abstract(sub)
    return p


def _example_path(name: str) -> str:
    if name == "example":
        return str(resources.files("distmc") / "examples" / "gridworld.prism")
    return name


def _example_policy(policy: str, interface: str | None) -> tuple[str, str | None]:
    """``--policy example``: the bundled gridworld network and, unless one is given, its interface file."""
    if policy != "example":
        return policy, interface
    examples = resources.files("distmc") / "examples"
    return str(examples / "gridworld_policy.pt"), interface or str(examples / "gridworld_policy.json")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``distmc`` command."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "abstract":
        return int(args.handler(args))
    if args.export is not None and Path(args.export).suffix not in (".drn", ".umb"):
        # Checked before the run, not after it: the file's suffix chooses the format.
        parser.error(f"--export {args.export}: the file name must end in .drn or .umb")
    try:
        from distmc.api import verify

        policy, interface = _example_policy(args.policy, args.interface)
        report = verify(
            _example_path(args.model),
            args.prop,
            constants=args.const,
            policy=policy,
            interface=interface,
            mode=args.mode,
            threshold=args.threshold,
            resolve=args.resolve,
            workers=args.workers,
            driver=args.driver,
            address=args.address,
            max_states=args.max_states,
            export_path=args.export,
        )
    except DistmcError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"distmc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(report.summary())  # type: ignore[union-attr]
    if args.json_path:
        Path(args.json_path).write_text(report.to_json())  # type: ignore[union-attr]
    return 0


if __name__ == "__main__":
    sys.exit(main())
