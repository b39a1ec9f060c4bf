"""Command line: ``distmc run MODEL --prop PCTL ...`` (and ``distmc abstract``, ``scale``, ``shield``, ``curve``).

Exit codes: 0 success (also a run stopped by a limit or Ctrl-C during exploration: it reports bounds from the
explored part, "partial": true); 1 other distmc error; 2 bad command line; 3 bad model; 4 unsupported model feature;
5 bad property; 6 bad policy; 7 resource limit reached where nothing could be checked (a partial report is printed,
and written with --json);
8 worker failure; 130 interrupted (Ctrl-C: one line says what was saved and how to resume). A missing optional
package is an error of kind 1, named with the ``pip install`` that brings it. Errors are one line on standard
error; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from distmc._internal.atomic import write_text
from distmc._internal.subcommand import example_path, options_from_args
from distmc.errors import DistmcError, ResourceLimitError, StorageError
from distmc.options import VerifyOptions, export_suffix_error

__all__ = ["main", "options_from_args"]

#: What ``--checker native`` checks, and ``--driver``'s default: the same words in ``run --help`` and ``docs/options.md``
#: (``tests/test_first_use.py`` holds them to it).
NATIVE_CHECKS = "P=? of F, U and their <=k/<k forms, R=? of F, C<=k, I=k"
DRIVER_DEFAULT = (
    "local for one worker with no --address, --checkpoint-dir, --resume, --policy-servers or "
    "--checker distributed, else ray"
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="distmc", description="Verify RL policies by model checking the induced DTMC.")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="explore, assemble and check")
    run.add_argument(
        "model",
        nargs="?",
        default=None,
        help="PRISM file (dtmc or mdp), or 'example' for the bundled gridworld (not needed with --resume)",
    )
    run.add_argument(
        "--prop",
        action="append",
        default=None,
        help="PCTL property, e.g. 'P=? [F \"crash\"]', 'P>=0.9 [F \"goal\"]', 'S=? [\"goal\"]'; repeat it, "
        "or separate properties with ';', to check several on one exploration",
    )
    run.add_argument(
        "--props",
        default=None,
        metavar="FILE",
        help='a PRISM properties file (one property per line or ;-separated, "name": P=? [...], const '
        "definitions), checked on one exploration with any --prop",
    )
    run.add_argument(
        "--precision",
        type=float,
        default=None,
        metavar="EPS",
        help="relative precision of the sound methods: their bounds within EPS x the value (MDPs too)",
    )
    run.add_argument(
        "--precision-abs",
        type=float,
        default=None,
        metavar="EPS",
        help="absolute precision of the sound methods (MDPs too); neither: bounds within 1e-12 "
        "absolute and 1e-6 relative",
    )
    run.add_argument(
        "--sound-mdp",
        action="store_true",
        help="check induced MDPs (monolithic mode, same-label choices) by Storm's interval iteration, "
        "with bounds, also without a precision; default: Storm's min-max value iteration, no "
        "bounds (not sound)",
    )
    run.add_argument(
        "--exact",
        action="store_true",
        help="check with Storm's exact rational engine (the induced probabilities taken as the "
        "rationals of their floats; up to 200,000 transitions, stopped after 120 s or what "
        "--timeout leaves, exit 7)",
    )
    run.add_argument("--const", default=None, help="undefined constants, e.g. N=3,p=0.1")
    run.add_argument(
        "--policy",
        default="uniform",
        help="'uniform', a TorchScript/state_dict .pt, a Stable-Baselines3 .zip (with --trust-policy), "
        "package.module:function, or 'example' for the bundled gridworld policy (N=6)",
    )
    run.add_argument(
        "--trust-policy",
        action="store_true",
        help="allow policy files whose loading runs code stored in them (SB3 .zip unpickles objects)",
    )
    run.add_argument(
        "--policy-dtype",
        default="float64",
        choices=["float64", "float32"],
        help="the network's arithmetic: float64 (default: the same answer on every machine) or float32 "
        "(faster on large networks; the bounds then cover the checker's error only)",
    )
    run.add_argument(
        "--interface",
        default=None,
        help="interface file (JSON/TOML) of the network; default: POLICY's stem + .json (or "
        ".interface.json) beside it (with --policy example: the bundled one)",
    )
    run.add_argument("--mode", default="stochastic", choices=["stochastic", "deterministic", "monolithic"])
    run.add_argument("--threshold", type=float, default=0.0, help="stochastic mode: keep actions with pi > threshold")
    run.add_argument(
        "--resolve",
        default="none",
        choices=["none", "uniform"],
        help="same-label choices: keep nondeterminism (min/max) or split evenly",
    )
    run.add_argument("--workers", type=int, default=1, help="partitions: Ray actors owning the states by hash")
    run.add_argument(
        "--driver", default=None, choices=["local", "ray"], help=f"local (in-process) or ray; default: {DRIVER_DEFAULT}"
    )
    run.add_argument(
        "--address",
        default=None,
        help="Ray cluster to join (auto or HOST:PORT); default: RAY_ADDRESS if set, else a new local Ray",
    )
    run.add_argument(
        "--gpus-per-worker",
        type=float,
        default=None,
        help="Ray driver: GPU share per worker for its policy replica (default: the cluster's GPUs "
        "split over the workers, at most 1 each; 0: CPU only)",
    )
    run.add_argument(
        "--policy-servers",
        type=int,
        default=0,
        help="Ray driver: 0 (default) gives every worker its own policy replica; N > 0 starts N policy "
        "servers (one GPU each where the cluster has them) that evaluate the policy for the workers",
    )
    run.add_argument(
        "--threads-per-worker",
        type=int,
        default=None,
        help="threads each worker keeps busy, at most (kernels, policy, Arrow; in-process: the one "
        "worker); default: Ray: the cluster's CPUs divided by the workers, at least 1; in-process: "
        "every core",
    )
    run.add_argument(
        "--max-states",
        type=int,
        default=None,
        help="stop exploring beyond this many states: bounds from the explored part",
    )
    run.add_argument(
        "--max-memory",
        default=None,
        help="stop exploring beyond this much memory, e.g. 8G: bounds from the explored part",
    )
    run.add_argument(
        "--timeout",
        default=None,
        help="stop exploring after this long, e.g. 900, 15m, 2h: bounds from the explored part",
    )
    run.add_argument(
        "--horizon-cut",
        action="store_true",
        help="step-bounded properties only (F<=k, U<=k, C<=k, I=k): do not expand states deeper than "
        "the deepest bound (exact answer, smaller model)",
    )
    run.add_argument(
        "--width",
        type=float,
        default=None,
        metavar="EPS",
        help="explore in rounds (in-process, or on the Ray workers with --workers N), doubling the states "
        "each round and checking after each (in this process), "
        "until every property's bounds are at most EPS wide (--max-states caps it)",
    )
    run.add_argument(
        "--order",
        default=None,
        choices=["mass", "bfs"],
        help="order of a budgeted exploration: mass (most probable frontier states first; the default "
        "with --width) or bfs (breadth-first; the default with --horizon-cut)",
    )
    run.add_argument(
        "--checkpoint-dir",
        default=None,
        help="write every explored level there (Arrow IPC): a lost worker is replaced, and a stopped "
        "run continues with --resume (Ray driver)",
    )
    run.add_argument(
        "--resume",
        default=None,
        metavar="DIR",
        help="continue the run checkpointed in DIR (model, property and policy come from it)",
    )
    run.add_argument("--quiet", action="store_true", help="no live progress display")
    run.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="log records to standard error from this level (info: one record per explored level)",
    )
    run.add_argument(
        "--checker",
        default="auto",
        choices=["auto", "storm", "native", "distributed"],
        help="who checks the induced model: storm (the reference), native (distmc's value iteration in "
        "this process), distributed (the same on the Ray workers, where the rows stay: no process "
        "holds the whole model), or auto (default: Storm, unless it would not fit in memory; then "
        f"native in-process, distributed under the Ray driver). native and distributed check "
        f"{NATIVE_CHECKS} of induced DTMCs",
    )
    run.add_argument("--json", dest="json_path", default=None, help="write the report as JSON")
    run.add_argument(
        "--traces",
        type=int,
        default=0,
        metavar="K",
        help="also find the K most probable paths to the property's target (reachability P=? on a DTMC)",
    )
    run.add_argument(
        "--values",
        default=None,
        metavar="FILE.parquet",
        help="also write the property's value in every explored state (Parquet), and list the 5 states most at risk",
    )
    run.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="also draw the per-state values as a heatmap over two variables (with --traces: the most "
        "probable path on it)",
    )
    run.add_argument(
        "--plot-vars",
        default=None,
        metavar="X,Y",
        help="the heatmap's two variables (default: the first two int variables)",
    )
    run.add_argument("--export", default=None, help="write the induced model (.drn or .umb)")
    run.add_argument(
        "--region",
        default=None,
        metavar="LO<=C<=HI,...",
        help="bounds over every value of the constants in this box (explored once; README: Regions)",
    )
    run.add_argument(
        "--coverage",
        type=float,
        default=0.99,
        help="--region with a threshold property: split until this share of the volume is decided",
    )
    run.add_argument("--debug", action="store_true", help="show tracebacks")
    from distmc.abstract.cli import add_parser as add_abstract
    from distmc.curve.cli import add_parser as add_curve
    from distmc.scale import add_parser as add_scale
    from distmc.shield.cli import add_parser as add_shield

    add_abstract(sub)
    add_scale(sub)
    add_shield(sub)
    add_curve(sub)
    return p


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``; an unknown option is reported with its subcommand's usage, not the top-level one."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        _subparser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise KeyError(name)


def _interrupted(args: argparse.Namespace) -> int:
    """Ctrl-C: stop Ray's processes of this run, say in one line what was saved and how to go on; exit 130."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()  # the actors were ended by the driver; this stops the local Ray it started (or disconnects)
    directory = args.resume or args.checkpoint_dir
    level = None
    if directory is not None:
        try:
            level = json.loads((Path(directory) / "meta.json").read_text())["level"]
        except (OSError, ValueError, KeyError):
            pass
    if level is not None and level >= 0:
        saved = (
            f"the checkpoint in {directory} holds the levels up to depth {level}: continue with "
            f"distmc run --resume {directory}"
        )
    else:
        saved = "nothing was saved: run again (with --checkpoint-dir DIR to make the run resumable)"
    print(f"distmc: interrupted (Ctrl-C); {saved}", file=sys.stderr)
    return 130


def _read_props(path: str) -> list[str]:
    """The statements of a PRISM properties file (see :func:`distmc.check.properties.split_statements`)."""
    from distmc.check.properties import split_statements
    from distmc.errors import PropertyError

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PropertyError(f"--props {path}: cannot read it ({exc.strerror})") from None
    statements = split_statements(text)
    if not statements:
        raise PropertyError(f"--props {path}: the file holds no property")
    return statements


def _region(args: argparse.Namespace, prop: str) -> int:
    """``distmc run MODEL --region ...``: the bounds over the region, and a threshold's verdicts (distmc.region)."""
    from distmc.region import verify_region

    report = verify_region(
        example_path(args.model),
        prop,
        args.region,
        coverage=args.coverage,
        constants=args.const,
        policy=args.policy,
        interface=args.interface,
        mode=args.mode,
        threshold=args.threshold,
        resolve=args.resolve,
        trust_policy=args.trust_policy,
        policy_dtype=args.policy_dtype,
    )
    print(report.summary())
    if args.json_path:
        Path(args.json_path).write_text(report.to_json())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``distmc`` command."""
    parser = _parser()
    args = _parse(parser, argv)
    if args.command in ("abstract", "scale", "shield", "curve"):
        return int(args.handler(args))
    run_parser = _subparser(parser, "run")
    if args.resume is None and (args.model is None or (args.prop is None and args.props is None)):
        run_parser.error(
            "a MODEL and --prop (or --props) are required (or --resume DIR to continue a checkpointed run)"
        )
    if args.export is not None and (why := export_suffix_error(args.export)):
        run_parser.error(why)  # checked before the run, not after it: the file's suffix chooses the format
    from distmc.progress import LiveProgress, setup_logging

    setup_logging(args.log_level)
    options: VerifyOptions | None = None
    try:
        from distmc.api import verify

        texts = list(args.prop or [])
        if args.props is not None:
            texts += _read_props(args.props)
        if args.region is not None:
            return _region(args, "; ".join(texts))
        options = options_from_args(args)
        with LiveProgress(enabled=not args.quiet) as progress:
            got = verify(
                None if args.model is None else example_path(args.model),
                "; ".join(texts) if texts else None,
                options,
                progress=progress,
                phases=progress.phase,
            )
        report = got[0] if isinstance(got, tuple) else got  # a tuple only with keep_model, which no option sets
        print(report.summary())
        if args.json_path:
            write_text(args.json_path, report.to_json(), sync=True)
    except KeyboardInterrupt:
        if args.debug:
            traceback.print_exc()
        return _interrupted(args)
    except DistmcError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"distmc: error: {exc}", file=sys.stderr)
        if isinstance(exc, ResourceLimitError) and args.json_path and options is not None:
            partial = {"partial": True, "error": str(exc), **exc.partial, "options": options.to_dict()}
            try:
                write_text(args.json_path, json.dumps(partial, indent=2), sync=True)
            except StorageError as again:  # the partial report's own file: its one line too
                print(f"distmc: error: {again}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
