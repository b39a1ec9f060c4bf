"""The check of a run's properties on its one induced model, and what exploring for all of them costs.

:func:`check_properties` hands every property of a :class:`~distmc.check.properties.PropertySet` to its checker
(Storm, or distmc's native one) and returns one :class:`~distmc.check.result.CheckResult` each, timed.
:func:`single_property_states` counts, for each property, the states its own property-driven exploration would
have found: the states reachable from the initial ones without passing through one of its terminal states, which
is exactly what its own breadth-first search would reach (its successors are the same).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import select
import signal
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from distmc.assemble.reducer import LABEL_CHUNK, InducedModel, absorbing
from distmc.assemble.storm import to_storm
from distmc.check.checker import EXACT_MAX_TRANSITIONS, check
from distmc.check.properties import PropertySet, PropertySpec
from distmc.check.result import VALUE_FILTERS, CheckResult, Precision, decide, summarise, widen
from distmc.errors import (
    CheckerProcessError,
    DistmcError,
    PropertyError,
    ResourceLimitError,
    SlowConvergenceError,
    UsageError,
)
from distmc.model.packing import StateCodec

__all__ = [
    "EXACT_TIMEOUT_S",
    "SLOW_NOTE",
    "check_native_result",
    "check_properties",
    "single_property_states",
    "slow_chain_sentence",
    "vector_result",
]

#: The report's line under a value that the exact engine gave because value iteration converged too slowly.
SLOW_NOTE = (
    "value iteration converges too slowly on this model ({why}): answered by Storm's exact engine on the "
    "rationals of the induced floats"
)

#: Seconds the exact engine may take (all properties together) unless ``--timeout`` leaves less. Its time depends
#: on the digits of the rationals, not only on the model's size: the induced floats of a policy network have 53-bit
#: denominators, and the bundled gridworld (N=6, 13,094 transitions) did not finish in 600 s, while crowds-5-5
#: (13,041 transitions of the program's short decimals) took 0.18 s (``benchmarks/RESULTS.md``).
EXACT_TIMEOUT_S = 120.0


def check_native_result(
    induced: InducedModel, spec: PropertySpec, precision: Precision, progress: Callable[[str], None] | None = None
) -> CheckResult:
    """The native checker's answer as a :class:`CheckResult`.

    The bounds of an unbounded property are the sound iteration's own lower and upper bounds at the initial
    states (widened by :data:`~distmc.check.result.ROUNDING_ULPS`); step-bounded ones state none.
    """
    from distmc.check.native import native_values

    if precision.exact:
        raise UsageError("the native checker does not check with the exact engine: use --checker storm")
    model = induced
    if spec.is_reward and len(induced.rewards) > 1:  # the native checker reads the one structure the model has
        name = str(spec.reward_name)
        model = dataclasses.replace(induced, rewards={name: induced.rewards[name]})
    init = induced.initial
    if init.shape[0] > 1 and spec.filter in ("avg", "sum", "first", "count"):
        raise PropertyError(
            f"the native checker answers filter({spec.filter}, ...) over one initial state only: use --checker storm"
        )
    value, lower, upper = native_values(model, spec, precision, progress=progress)
    return vector_result(spec, value[init], lower[init], upper[init], "native")


def vector_result(
    spec: PropertySpec, value: np.ndarray, lower: np.ndarray, upper: np.ndarray, checker: str
) -> CheckResult:
    """A native or distributed check's :class:`CheckResult` from its vectors at the initial states ``[I]``.

    Value, bounds (``lower``/``upper``, widened for rounding; a step-bounded property's those of its steps'
    rounding where :func:`~distmc.check.native.values_of` gives them, else none), a value filter
    over the initial states (:data:`~distmc.check.result.VALUE_FILTERS`) applied to both, and, for a threshold, the
    truth (at every initial state; ``exists``: at one; ``count``: the value is the number of initial states that
    satisfy it) and whether the bounds settle it in every initial state.
    """
    lo: np.ndarray | None
    hi: np.ndarray | None
    if spec.solution == "sound":
        lo, hi = widen(lower, upper, spec.operator == "P")
    elif spec.solution == "steps" and not np.array_equal(lower, upper):  # the steps' rounding, bounded
        lo, hi = (np.clip(lower, 0.0, 1.0), np.clip(upper, 0.0, 1.0)) if spec.operator == "P" else (lower, upper)
    else:
        lo = hi = None
    result, bounds = summarise(value, lo, hi, spec.filter if spec.filter in VALUE_FILTERS else None)
    truth = decided = None
    if spec.threshold is not None:
        each = [decide([v], spec.threshold) for v in value.tolist()]
        truth = any(each) if spec.filter == "exists" else all(each)
        if lo is not None and hi is not None:
            decided = all(
                decide([a], spec.threshold) == decide([b], spec.threshold) == t
                for a, b, t in zip(lo.tolist(), hi.tolist(), each, strict=True)
            )
        if spec.filter == "count":
            return CheckResult(value=float(sum(each)), method=spec.solution, checker=checker)
    return CheckResult(value=result, bounds=bounds, truth=truth, decided=decided, method=spec.solution, checker=checker)


def slow_chain_sentence(why: str, transitions: int, exact_possible: bool) -> str:
    """The sentence a run stops with when value iteration converges too slowly (see :func:`check_properties`)."""
    if transitions <= EXACT_MAX_TRANSITIONS:
        todo = (
            "check it with --exact (Storm's exact engine, no iteration)"
            if exact_possible
            else "check it with --checker storm --exact (Storm's exact engine, no iteration)"
        )
    else:
        todo = (
            f"the model is too large for --exact ({transitions:,} transitions, at most "
            f"{EXACT_MAX_TRANSITIONS:,}): check a smaller instance with --exact, or ask a coarser precision"
        )
    return f"{why}; {todo}"


def _forked(fn: Callable[[], Any], timeout_s: float, partial: dict[str, Any]) -> Any:
    """``fn()`` run in a forked child process, stopped (and reported) after ``timeout_s`` seconds.

    Storm's exact engine cannot be interrupted from Python; a child process can. The child inherits the induced
    model (no copy) and sends the result back pickled.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            payload = pickle.dumps(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            payload = pickle.dumps(("error", exc if isinstance(exc, DistmcError) else CheckerProcessError(str(exc))))
        with os.fdopen(w, "wb") as out:
            out.write(payload)
        os._exit(0)
    os.close(w)
    chunks, deadline = [], time.monotonic() + timeout_s
    with os.fdopen(r, "rb") as inp:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([inp], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise ResourceLimitError(
                    f"--exact: Storm's exact engine did not finish within {timeout_s:.0f} s (the rationals of the "
                    f"induced floats can have thousands of digits); run without --exact for a sound bound",
                    partial,
                )
            data = inp.read1(1 << 20)
            if not data:
                break
            chunks.append(data)
    os.waitpid(pid, 0)
    if not chunks:
        raise CheckerProcessError("--exact: the exact check ended without an answer (its process was killed)")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "error":
        raise value
    return value


def check_properties(
    props: PropertySet,
    induced: InducedModel,
    checkers: list[str],
    precision: Precision,
    storm_model: Callable[[], Any],
    exact_timeout_s: float = EXACT_TIMEOUT_S,
    progress: Callable[[str], None] | None = None,
    codec: StateCodec | None = None,
) -> list[CheckResult]:
    """Check each property of ``props`` with its checker (``checkers[i]``: ``storm`` or ``native``).

    ``storm_model`` builds (once, on first use) Storm's model of ``induced``: it may release ``induced``'s
    transitions, so the native checks run first, and so do the reward-bounded path formulas whose targets other
    properties keep expanded: Storm checks those on a copy of ``induced`` with the targets absorbing
    (:func:`~distmc.assemble.reducer.absorbing`; ``codec`` decodes the states for it). With ``precision.exact``
    every check runs in a child process that is stopped after ``exact_timeout_s`` seconds. ``progress``: the
    native checker's steps (the live line). A check whose value iteration converges too slowly
    (:class:`~distmc.errors.SlowConvergenceError`) is answered by the exact engine instead where the model is small
    enough (within ``exact_timeout_s``), else it stops with the sentence saying what to use.
    """
    if precision.exact:
        partial = {"states": induced.n_states, "transitions": induced.n_transitions, "frontier": 0}
        return _forked(
            lambda: _check_all(props, induced, checkers, precision, storm_model, codec=codec), exact_timeout_s, partial
        )
    return _check_all(props, induced, checkers, precision, storm_model, progress, codec, exact_timeout_s)


def _check_all(
    props: PropertySet,
    induced: InducedModel,
    checkers: list[str],
    precision: Precision,
    storm_model: Callable[[], Any],
    progress: Callable[[str], None] | None = None,
    codec: StateCodec | None = None,
    exact_timeout_s: float = EXACT_TIMEOUT_S,
) -> list[CheckResult]:
    out: list[CheckResult | None] = [None] * len(props.specs)
    # reward-bounded formulas may need a copy of the transitions: before Storm's hand-off may release them
    copied = [checkers[i] != "native" and s.bound_rewards and codec is not None for i, s in enumerate(props.specs)]
    order = sorted(range(len(props.specs)), key=lambda i: (checkers[i] != "native", not copied[i]))
    built: list[Any] = []
    for i in order:
        spec = props.specs[i]
        t = time.perf_counter()
        # one copy at a time, made when its property is checked (None: the targets are absorbing already)
        copy = absorbing(induced, _terminal_states(induced, spec, codec, True)) if copied[i] and codec else None
        try:
            if checkers[i] == "native":
                res = check_native_result(induced, spec, precision, progress)
            elif copy is not None:  # Storm's reward-bounded method on the copy with the targets absorbing
                res = check(to_storm(copy, exact=precision.exact), spec, induced.kind, induced.initial, precision)
                del copy
            else:
                if not built:
                    built.append(storm_model())
                    t = time.perf_counter()
                res = check(built[0], spec, induced.kind, induced.initial, precision)
        except SlowConvergenceError as exc:
            res = _exact_instead(induced, spec, str(exc), exact_timeout_s)
        used = "storm-exact" if res.method == "exact" else checkers[i]
        out[i] = dataclasses.replace(res, checker=used, check_s=time.perf_counter() - t)
    return [r for r in out if r is not None]


def _terminal_states(induced: InducedModel, spec: PropertySpec, codec: StateCodec, stop: bool = False) -> np.ndarray:
    """``[N]`` bool: the states of ``induced`` that ``spec``'s own exploration would not expand.

    ``stop``: the property's ``stop`` states instead (:class:`~distmc.check.properties.PropertySpec`).
    """
    terminal = np.zeros(induced.n_states, dtype=bool)
    if spec.stop if stop else spec.terminal:
        for start in range(0, induced.n_states, LABEL_CHUNK):
            states = codec.unpack(induced.keys[start : start + LABEL_CHUNK])
            terminal[start : start + states.shape[0]] = spec.terminal_mask(states, stop)
    return terminal


def _exact_instead(induced: InducedModel, spec: PropertySpec, why: str, timeout_s: float) -> CheckResult:
    """Storm's exact engine on a model where value iteration converges too slowly, or the sentence to stop with.

    It needs the model's transitions (kept for models the exact engine takes, see ``distmc.api``) and at most
    :data:`~distmc.check.checker.EXACT_MAX_TRANSITIONS` of them; it runs in a child process stopped after
    ``timeout_s``.
    """
    have = induced.n_transitions == 0 or bool(induced.target_chunks)
    if induced.n_transitions > EXACT_MAX_TRANSITIONS or not have:
        raise SlowConvergenceError(slow_chain_sentence(why, induced.n_transitions, True)) from None
    exact = Precision(exact=True)
    partial = {"states": induced.n_states, "transitions": induced.n_transitions, "frontier": 0}
    try:
        res = _forked(
            lambda: check(to_storm(induced, exact=True), spec, induced.kind, induced.initial, exact), timeout_s, partial
        )
    except ResourceLimitError:
        raise SlowConvergenceError(
            f"{why}; Storm's exact engine, tried instead, did not finish within {timeout_s:.0f} s either (the "
            "rationals of the induced floats can have thousands of digits): ask a coarser precision "
            "(--precision-abs) or check a smaller instance"
        ) from None
    reason = why.split(": ", 1)[-1]
    return dataclasses.replace(res, note=SLOW_NOTE.format(why=reason))


def single_property_states(induced: InducedModel, props: PropertySet, codec: StateCodec) -> list[int]:
    """For each property, the number of states its own exploration would have found (see the module docstring).

    One breadth-first search over ``induced``'s transitions per property (the targets are concatenated once).
    """
    n = induced.n_states
    targets = induced.targets
    state_start = induced.row_offsets[induced.row_groups[:-1]]  # [N] first branch of each state's rows
    state_end = induced.row_offsets[induced.row_groups[1:]]
    out = []
    for spec in props.specs:
        terminal = _terminal_states(induced, spec, codec)
        seen = np.zeros(n, dtype=bool)
        seen[induced.initial] = True
        frontier = np.unique(induced.initial)
        while frontier.size:
            f = frontier[~terminal[frontier]]
            lengths = state_end[f] - state_start[f]
            total = int(lengths.sum())
            if total == 0:
                break
            base = np.repeat(state_start[f] - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
            succ = np.unique(targets[base + np.arange(total)])
            frontier = succ[~seen[succ]]
            seen[frontier] = True
        out.append(int(seen.sum()))
    return out
