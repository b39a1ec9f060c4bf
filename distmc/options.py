"""What a run of :func:`distmc.api.verify` does, as one frozen, typed, JSON-saveable object.

:class:`VerifyOptions` holds every option of a run but the model and the property: what to check (more
properties, the checker, the precision), how to explore (constants, policy, mode), where to run (driver, workers,
Ray's resources), limits, checkpoints and outputs. ``distmc run`` builds one from its command line, a script
builds one itself, derives variants with :func:`dataclasses.replace`, and the JSON report saves it
(``"options"``; :meth:`VerifyOptions.from_dict` reads it back)::

    from dataclasses import replace
    from distmc.options import VerifyOptions

    base = VerifyOptions(constants="N=6", policy="trained.pt", workers=2)
    wider = replace(base, constants="N=8", timeout="15m")

An invalid combination stops when the object is made (:class:`~distmc.errors.UsageError`, with the message
``distmc run`` prints for it), before anything is parsed or explored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distmc.errors import UsageError

if TYPE_CHECKING:
    from distmc.check.result import Precision
    from distmc.explore.limits import Limits

__all__ = [
    "CHECKERS",
    "DRIVERS",
    "MODES",
    "RaySettings",
    "VerifyOptions",
    "check_gpu_share",
    "check_ray_resources",
    "export_suffix_error",
    "merged",
]

MODES = ("stochastic", "deterministic", "monolithic")
CHECKERS = ("auto", "storm", "native", "distributed")
DRIVERS = ("local", "ray")
RESOLVE = ("none", "uniform")
POLICY_DTYPES = ("float64", "float32")
EXPORT_SUFFIXES = (".drn", ".umb")

#: Fields that are not saved (:meth:`VerifyOptions.to_dict`) nor compared: the run's callbacks.
_CALLBACK = {"json": False}


def _callback() -> Any:
    return field(default=None, compare=False, repr=False, metadata=_CALLBACK)


def export_suffix_error(path: str | Path) -> str | None:
    """Why ``--export PATH`` cannot be written (its suffix chooses the format), or None."""
    if Path(path).suffix not in EXPORT_SUFFIXES:
        return f"--export {path}: the file name must end in .drn or .umb"
    return None


def check_gpu_share(requested: float) -> None:
    """``--gpus-per-worker``: 0, a fraction up to 1, or a whole number of GPUs."""
    if requested < 0 or (requested > 1 and requested != int(requested)):
        raise UsageError(f"--gpus-per-worker must be 0, a fraction up to 1, or a whole number, not {requested}")


def check_ray_resources(threads_per_worker: int | None, policy_servers: int) -> None:
    """``--threads-per-worker`` at least 1 (or None: automatic), ``--policy-servers`` 0 or more."""
    if threads_per_worker is not None and threads_per_worker < 1:
        raise UsageError(f"--threads-per-worker must be at least 1, not {threads_per_worker}")
    if policy_servers < 0:
        raise UsageError(f"--policy-servers must be 0 or more, not {policy_servers}")


@dataclass(frozen=True)
class RaySettings:
    """Where a Ray run runs: the part of :class:`VerifyOptions` the Ray driver takes, validated when made.

    The fields mean what :class:`VerifyOptions`' fields of the same names mean; ``VerifyOptions.ray`` is the one
    of a run, and the box front end (:mod:`distmc.abstract`) makes its own.
    """

    workers: int = 1
    address: str | None = None
    gpus_per_worker: float | None = None
    threads_per_worker: int | None = None
    policy_servers: int = 0

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise UsageError(f"--workers must be at least 1, not {self.workers}")
        check_ray_resources(self.threads_per_worker, self.policy_servers)
        if self.gpus_per_worker is not None:
            check_gpu_share(self.gpus_per_worker)


def _text(value: str | Path | None) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class VerifyOptions:
    """Every option of :func:`distmc.api.verify` but the model and the property.

    What to check:
        props: more properties (each may hold several, ``;``-separated, and ``const`` definitions), all checked on
            one exploration with verify's ``prop``; ``report.results`` has one entry each.
        checker: ``storm`` (the reference), ``native`` (distmc's own value iteration on induced DTMCs,
            :mod:`distmc.check.native`), ``distributed`` (the same on the Ray workers, where the rows stay) or
            ``auto``: Storm unless it would not fit in memory (``max_memory``, else the machine's available
            memory); then native in-process, distributed under the Ray driver.
        precision: relative precision of the sound methods (``--precision``); at most one of it and
            ``precision_abs``. Neither: the bounds within 1e-12 absolute and 1e-6 relative
            (:class:`~distmc.check.result.Precision`). Either one also gives MDPs sound bounds.
        precision_abs: absolute precision of the sound methods (``--precision-abs``).
        exact: check with Storm's exact rational engine (models up to
            :data:`~distmc.check.checker.EXACT_MAX_TRANSITIONS` transitions; a check that takes longer than
            :data:`~distmc.check.dispatch.EXACT_TIMEOUT_S`, or than ``timeout`` leaves, stops with
            :class:`~distmc.errors.ResourceLimitError`).
        sound_mdp: check induced MDPs by Storm's interval iteration, with bounds (``--sound-mdp``); else by
            Storm's default min-max method, which states none.

    How to explore:
        constants: undefined constants, ``"N=3,p=0.1"`` (or a mapping).
        policy: ``"uniform"``, a policy file (TorchScript, state_dict, SB3 ``.zip``) or ``module:function``
            (see :func:`distmc.policy.load_policy`).
        interface: interface file of the network (features, actions, output); default: the one saved beside the
            policy file (``trained.pt`` -> ``trained.json``), else every variable and action label.
        trust_policy: allow policy formats whose loading runs code stored in the file (SB3 ``.zip``).
        policy_dtype: the network's arithmetic, ``float64`` (default: the same answer on every machine) or
            ``float32`` (faster on large networks; the bounds then cover the checker's error only), in every
            format (:mod:`distmc.policy.batched`); ``Report.policy_dtype`` says what it ran in.
        mode: ``stochastic``, ``deterministic`` or ``monolithic``.
        threshold: in stochastic mode, keep actions with pi(a|s) > threshold.
        resolve: ``none`` (same-label choices stay nondeterministic) or ``uniform``.

    Where to run:
        workers: number of partitions (Ray actors with the ray driver).
        driver: ``local`` (in-process, one partition) or ``ray``; default (:attr:`run_driver`): local for one
            worker with no address, checkpoint, policy servers or distributed checker.
        address: a Ray cluster to join (``auto`` or ``HOST:PORT``); None starts a local Ray when needed.
        gpus_per_worker: Ray driver: the GPU share each worker asks for (None: the cluster's GPUs split evenly
            over the workers, at most one each; 0: policies on the CPU).
        threads_per_worker: the threads each worker may keep busy (numba's, torch's, Arrow's and BLAS's pools;
            the in-process run is one worker); None: under Ray the cluster's CPUs divided by the workers, at least
            one, in-process every core.
        policy_servers: Ray driver: 0, every worker loads its own policy replica; S > 0, S policy-server actors
            (one GPU each where the cluster has them) evaluate the policy for the workers.

    Limits and checkpoints:
        max_states: stop with :class:`~distmc.errors.ResourceLimitError` (and its partial report) beyond this
            many states.
        max_memory: the same beyond this much memory (bytes, or a size such as ``"8G"``).
        timeout: the same after this long (seconds, or ``"15m"``).
        checkpoint_dir: write every explored level there (Arrow IPC, :mod:`distmc.distributed.checkpoint`); a lost
            worker is then replaced and the run goes on. Uses the Ray driver.
        resume: continue the run checkpointed in this directory (model, property, policy and mode come from it;
            arguments that are given must agree). Uses the Ray driver; ``workers`` may differ from the first run.
        horizon_cut: when every property is step-bounded (``F<=k``, ``U<=k``, ``C<=k``, ``I=k``), leave the states
            deeper than the deepest bound unexpanded (``--horizon-cut``): the answer is exact, the model smaller
            than Storm's builder's (:func:`distmc.check.partial.horizon_of`).
        width: explore in rounds (in this process, or on the Ray workers with ``workers`` > 1), each round's
            budget of states twice the last one's, checking after each, until every property's bounds are at most
            this wide (``--width``; ``report.rounds``); ``max_states`` caps the budget.
        order: the order of a budgeted exploration (:mod:`distmc.explore.priority`): ``mass`` (the frontier states
            the most probability reaches first; the default with ``width``) or ``bfs`` (the default with
            ``horizon_cut``). Given without ``width``, one round of ``max_states`` states in that order.
        A run stopped by a limit (or Ctrl-C) reports bounds from the explored part (``report.partial``,
        ``report.bounds``; :mod:`distmc.check.partial`).

    Outputs:
        export_path: also write the induced model (``.umb`` or ``.drn``).
        keep_model: verify also returns the :class:`~distmc.assemble.reducer.InducedModel`.
        traces: also find the K most probable paths to the target of a reachability property
            (:mod:`distmc.explain.traces`; ``Report.traces``, ``Report.traces_mass``).
        values: also write the property's value in every state to this Parquet file
            (:mod:`distmc.explain.values`); ``Report.riskiest_states`` lists the 5 states most at risk.
        plot: also draw the values as a heatmap over two variables into this image (:mod:`distmc.explain.plot`).
        plot_vars: the heatmap's variables, ``"x,y"`` (default: the first two int variables).

    Callbacks:
        progress: called after every explored level with a dict (depth, states, frontier, transitions, ...).
        phases: called with a phase's name (``parsing``, ``exploring``, ``assembling``, ``exporting``,
            ``handing to Storm``, ``checking``) and a detail when it starts (:mod:`distmc._internal.phases`; the
            live line shows it, ``--log-level info`` logs each phase's start and end).

    Paths (``pathlib.Path`` too) are kept as text, ``constants`` as ``"N=3,p=0.1"`` (a mapping is joined so)
    and ``props`` (any sequence) as a tuple, so that two runs asked alike compare equal, the object hashes, and
    it reads back from its JSON. ``progress`` and
    ``phases`` (callbacks) are neither saved nor compared.
    """

    # what to check (the property itself is verify's argument)
    props: tuple[str, ...] = ()
    checker: str = "auto"
    precision: float | None = None
    precision_abs: float | None = None
    exact: bool = False
    sound_mdp: bool = False
    # how to explore
    constants: str | None = None
    policy: str | None = "uniform"
    interface: str | None = None
    trust_policy: bool = False
    policy_dtype: str = "float64"
    mode: str = "stochastic"
    threshold: float = 0.0
    resolve: str = "none"
    # where to run
    workers: int = 1
    driver: str | None = None
    address: str | None = None
    gpus_per_worker: float | None = None
    threads_per_worker: int | None = None
    policy_servers: int = 0
    # limits and checkpoints
    max_states: int | None = None
    max_memory: str | int | None = None
    timeout: str | float | None = None
    checkpoint_dir: str | None = None
    resume: str | None = None
    horizon_cut: bool = False
    width: float | None = None
    order: str | None = None
    # outputs
    export_path: str | None = None
    keep_model: bool = False
    traces: int = 0
    values: str | None = None
    plot: str | None = None
    plot_vars: str | None = None
    # callbacks (not saved)
    progress: Callable[[dict[str, Any]], None] | None = _callback()  # numbers; after exploration "phase": a line
    phases: Callable[[str, str], None] | None = _callback()

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise the given values once, here
        if isinstance(self.constants, Mapping):
            set_(self, "constants", ",".join(f"{k}={v}" for k, v in self.constants.items()))
        set_(self, "props", tuple(self.props or ()))
        for name in ("interface", "checkpoint_dir", "resume", "export_path", "values", "plot"):
            set_(self, name, _text(getattr(self, name)))
        self._validate()

    def _validate(self) -> None:
        self.ray  # noqa: B018 - made (and so validated) once, here
        if self.order is not None and self.order not in ("mass", "bfs"):
            raise UsageError(f"--order must be mass or bfs, not '{self.order}'")
        if self.width is not None and not (0.0 <= self.width < float("inf")):
            raise UsageError(f"--width must be a non-negative number, not {self.width}")
        if self.order == "mass" and self.horizon_cut:
            raise UsageError(
                "--horizon-cut needs the breadth-first order (a state's depth is known when it is "
                "expanded): use --order bfs"
            )
        if self.checker not in CHECKERS:
            raise UsageError(f"--checker must be auto, storm, native or distributed, not '{self.checker}'")
        if self.mode not in MODES:
            raise UsageError(f"mode must be one of {', '.join(MODES)}, not '{self.mode}'")
        if self.policy_dtype not in POLICY_DTYPES:
            raise UsageError(f"--policy-dtype must be float64 or float32, not '{self.policy_dtype}'")
        if self.resolve not in RESOLVE:
            raise UsageError(f"--resolve must be 'none' or 'uniform', not '{self.resolve}'")
        if not 0.0 <= self.threshold < 1.0:
            raise UsageError(f"--threshold must be in [0, 1), not {self.threshold}")
        self.check_precision  # noqa: B018
        if self.exact and self.checker in ("native", "distributed"):
            raise UsageError(f"--exact checks with Storm's exact engine: not with --checker {self.checker}")
        self.limits  # noqa: B018
        if self.traces < 0:
            raise UsageError(f"--traces must be 0 or more, not {self.traces}")
        if self.plot_vars is not None and self.plot is None:
            raise UsageError("--plot-vars chooses the axes of --plot FILE.png: give --plot too")
        if self.export_path is not None and (why := export_suffix_error(self.export_path)):
            raise UsageError(why)
        if (
            self.resume is not None
            and self.checkpoint_dir is not None
            and Path(self.checkpoint_dir).resolve() != Path(self.resume).resolve()
        ):
            raise UsageError("--resume DIR goes on writing to DIR: do not give another --checkpoint-dir")
        self._validate_driver()
        self.check_distributed(self.checker)

    def _validate_driver(self) -> None:
        if self.driver is None:
            return
        if self.driver not in DRIVERS:
            raise UsageError(f"--driver must be 'local' or 'ray', not '{self.driver}'")
        if self.driver != "local":
            return
        if self.workers != 1:
            raise UsageError("the local driver runs one partition: use --driver ray for --workers > 1")
        if self.policy_servers:
            raise UsageError("policy servers serve Ray workers: use --driver ray (or leave --driver out)")
        if (self.checkpoint_dir is not None or self.resume is not None) and self.width is None and self.order is None:
            raise UsageError("checkpoints are written by the Ray driver: use --driver ray (or leave --driver out)")
        if self.checker == "distributed":
            raise UsageError(
                "--checker distributed checks on the Ray workers: use --driver ray (or leave --driver out)"
            )

    def check_rounds(self) -> None:
        """``--width`` and ``--order``: each round's check runs in this process (not ``--checker distributed``)."""
        if (self.width is not None or self.order is not None) and self.checker == "distributed":
            raise UsageError(
                "--width and --order check each round's explored part in this process (Storm or the "
                "native checker): use --checker auto, storm or native with them (the workers keep "
                "exploring between rounds)"
            )

    def check_distributed(self, checker: str) -> None:
        """What ``checker`` (this run's, or the checkpoint's after ``--resume``) cannot do with these outputs."""
        if checker == "distributed" and (self.keep_model or self.export_path is not None):
            raise UsageError(
                "--checker distributed leaves the model on the workers: to export it (or keep it), "
                "use --checker storm or native, which gather it into this process"
            )

    # -- what the run derives from them (each made once, when the options are: that validates them) ------------

    @cached_property
    def ray(self) -> RaySettings:
        """The Ray driver's options: workers, address, GPU share, threads and policy servers."""
        return RaySettings(
            self.workers, self.address, self.gpus_per_worker, self.threads_per_worker, self.policy_servers
        )

    @cached_property
    def check_precision(self) -> Precision:
        """What the checkers are asked for (``precision``, ``precision_abs``, ``exact``, ``sound_mdp``)."""
        from distmc.check.result import Precision

        return Precision.from_options(self.precision, self.precision_abs, self.exact, self.sound_mdp)

    @cached_property
    def limits(self) -> Limits:
        """The exploration's limits (``max_states``, ``max_memory``, ``timeout``), parsed."""
        from distmc.explore.limits import Limits, parse_duration, parse_memory

        return Limits(self.max_states, parse_memory(self.max_memory), parse_duration(self.timeout))

    @property
    def run_driver(self) -> str:
        """``driver``, or its default: local for one worker with nothing that needs Ray, else ray."""
        if self.driver is not None:
            return self.driver
        if self.width is not None or self.order is not None:  # rounds: one worker in this process (checkpoints too)
            return "local" if self.workers == 1 and self.address is None and not self.policy_servers else "ray"
        local = (
            self.workers == 1
            and self.address is None
            and self.resume is None
            and self.checkpoint_dir is None
            and not self.policy_servers
            and self.checker != "distributed"
        )
        return "local" if local else "ray"

    # -- building, and the JSON form ---------------------------------------------------------------------------

    @classmethod
    def build(cls, options: VerifyOptions | None = None, /, **changes: Any) -> VerifyOptions:
        """``options`` (default: the defaults) with ``changes`` to its fields; an unknown name is a TypeError."""
        unknown = sorted(set(changes) - _FIELDS)
        if unknown:
            raise TypeError(f"verify() got an unexpected keyword argument '{unknown[0]}'")
        if options is None:
            return cls(**changes)
        return dataclasses.replace(options, **changes) if changes else options

    def to_dict(self) -> dict[str, Any]:
        """The saved options (JSON types; callbacks left out): what ``from_dict`` reads back."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.metadata.get("json", True):
                value = getattr(self, f.name)
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VerifyOptions:
        """The options ``to_dict`` gave (a report's ``"options"``); an unknown name is a TypeError."""
        saved = {f.name for f in fields(cls) if f.metadata.get("json", True)}
        unknown = sorted(set(data) - saved)
        if unknown:
            raise TypeError(f"VerifyOptions has no saved option '{unknown[0]}'")
        given: dict[str, Any] = dict(data)  # props: a JSON list, made a tuple again
        return cls(**given)


_FIELDS = frozenset(f.name for f in fields(VerifyOptions))


def merged(options: VerifyOptions | Mapping[str, Any] | None, base: VerifyOptions | None = None) -> VerifyOptions:
    """``options`` as a :class:`VerifyOptions`: itself, or ``base`` with a mapping's changes."""
    if isinstance(options, VerifyOptions):
        return options
    return VerifyOptions.build(base, **dict(options or {}))
