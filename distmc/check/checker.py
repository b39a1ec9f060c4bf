"""Model checking of the assembled model with Storm: value, bounds and truth (:class:`~distmc.check.result.CheckResult`)."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import stormpy

from distmc._internal.stderr import storm_lines, storm_quiet
from distmc.check.properties import PropertySpec
from distmc.check.result import (
    DEFAULT_PRECISION,
    TRUTH_FILTERS,
    VALUE_FILTERS,
    CheckResult,
    Precision,
    decide,
    filtered,
    summarise,
    widen,
)
from distmc.errors import PropertyError, SlowConvergenceError

__all__ = [
    "EXACT_MAX_TRANSITIONS",
    "LRA_ELIMINATION_MAX_STATES",
    "MAX_ITERATIONS",
    "check",
    "check_values",
    "environment",
    "long_run_fallback",
    "value_vector",
]

#: Termination precision of Storm's min-max solver for MDPs (absolute, as for DTMCs, unless asked otherwise).
MDP_PRECISION = DEFAULT_PRECISION

#: Absolute precision of the DTMC solver: sound value iteration stops when its lower and upper bounds on every
#: state's value are within this of each other, so the reported value is within it of the exact one.
DTMC_PRECISION = DEFAULT_PRECISION

#: Storm's (and the native checker's) iterations stop after this many steps: on a chain where value iteration
#: converges very slowly (Haddad and Monmege's, ``benchmarks/slow_chain.py``) Storm's sound value iteration would
#: otherwise run for hours; a million steps of it take 1.3 s on that chain's 201 states. The check then goes to the
#: exact engine where the model is small enough, or stops with a sentence saying what to use
#: (:class:`~distmc.errors.SlowConvergenceError`).
MAX_ITERATIONS = 1_000_000

#: A sound check runs Storm again with a finer precision when its bounds do not meet the rule (a rare event under
#: the default rule's relative part); at most this many runs.
MAX_RUNS = 4

#: ``--exact`` checks models up to this many transitions with Storm's rational engine: a guard for its memory
#: (every probability a GMP rational, whose digits grow in the elimination). Its time is limited separately
#: (:data:`distmc.check.dispatch.EXACT_TIMEOUT_S`): it depends on the digits more than on the size.
EXACT_MAX_TRANSITIONS = 200_000


def environment(precision: Precision | None = None, long_run: bool = False, sound_mdp: bool | None = None) -> Any:
    """Storm's solver settings distmc checks with (and the differential tests use for the reference).

    DTMCs: Storm's native solver with sound value iteration at absolute precision 1e-12 by default (a guaranteed
    error bound), instead of Storm's default iterative gmm++ at relative precision 1e-6 (no guarantee). It replaced
    Storm's Eigen solver, which was neither exact nor fast (measured: 2.6e-8 off on the bundled gridworld, N=6,
    against value iteration in numpy, which the value now matches to 1e-12, ``tests/test_checker.py``; 3.9e-9 off
    and 150x as long, 2.7 s against 0.018 s, on the Crazy Climber benchmark's 44,032 states). MDPs: Storm's default
    topological min-max value iteration at the precision (relative criterion; it states no bound), unless
    ``sound_mdp`` (default: the precision's, ``--sound-mdp``): then Storm's interval iteration, with bounds. That
    is not the default: interval iteration ran for minutes on a reward property of a benchmark MDP, and Storm's
    sound value iteration for MDPs did not finish on another (``benchmarks/RESULTS.md``).
    ``precision``: ``--precision`` / ``--precision-abs`` (default: 1e-12 absolute). ``long_run``: a long-run
    average, whose equation systems use interval iteration, without Storm's forced soundness (which selects sound
    value iteration): with it Storm's long-run average on the gridworld was 1.2e-7 off (N=12; S=? ["crash"]
    equals P=? [F "crash"] there), with interval iteration 1.8e-14 (1.5 s against 0.86 s; 9.4 s at N=16, where
    Storm's default gmm++ takes 0.67 s and is 3.8e-7 off).
    """
    p = precision or Precision()
    env = stormpy.Environment()
    solver = env.solver()
    solver.set_linear_equation_solver_type(stormpy.environments.EquationSolverType.NATIVE)
    native = solver.native()
    methods = stormpy.environments.NativeLinearEquationSolverMethod
    native.method = methods.INTERVAL_ITERATION if long_run else methods.SOUND_VALUE_ITERATION
    native.precision = stormpy.Rational(p.eps)
    native.relative_termination_criterion = p.relative
    native.maximal_number_of_iterations = MAX_ITERATIONS
    min_max = solver.min_max()
    min_max.precision = stormpy.Rational(p.eps)
    min_max.maximal_number_of_iterations = MAX_ITERATIONS
    if not (p.sound_mdp if sound_mdp is None else sound_mdp):
        solver.force_soundness = False
        return env
    # interval iteration, not sound value iteration: Storm's sound value iteration for MDPs did not finish in 120 s
    # on the delivery benchmark in Storm's own state order (Pmax=? [F "delivered"], 1,237 states), where interval
    # iteration takes 1 ms; in distmc's order both took 2 ms (benchmarks/RESULTS.md)
    min_max.method = stormpy.environments.MinMaxMethod.INTERVAL_ITERATION
    min_max.relative_termination_criterion = p.relative
    # Forcing soundness makes Storm pick sound value iteration for every equation system, the long-run ones too
    solver.force_soundness = not long_run
    return env


#: Long-run averages on DTMCs with a bottom SCC whose states' values differ (an ergodic queue) are solved by state
#: elimination up to this many states: a direct method, exact up to floating point, but its fill-in grows fast
#: (measured on a two-queue tandem: 0.45 s at 961 states, 3.8 s at 2,116, 17 s at 3,721). Larger ones: Storm's
#: long-run value iteration (:func:`long_run_fallback`).
LRA_ELIMINATION_MAX_STATES = 2_500


def long_run_fallback(n_states: int, precision: Precision | None = None) -> Any:
    """Storm's settings for a long-run average whose bottom SCCs are not trivial (see :func:`environment`).

    Storm computes the long-run average of a bottom SCC whose states' values differ from an equation system (its
    gain-bias equations) that interval iteration cannot solve (it needs bounds Storm does not compute there: Storm
    raises "UnmetRequirementException"), and whose iterative solvers stop at Storm's long-run precision, 1e-6
    relative, which stormpy does not expose (measured: Gauss-Seidel 2e-7 off on an ergodic queue, gmm++ 6e-7 on
    a tandem; ``benchmarks/RESULTS.md``). Up to :data:`LRA_ELIMINATION_MAX_STATES` states: state elimination, a
    direct method (measured 3e-14 off Storm's exact engine on a 169-state tandem queue). Larger: Storm's sound
    long-run value iteration (forced soundness), whose bottom-SCC values are within Storm's fixed 1e-6 relative of
    the exact ones, and sound value iteration at ``precision`` for reaching them.
    """
    env = stormpy.Environment()
    solver = env.solver()
    if n_states <= LRA_ELIMINATION_MAX_STATES:
        solver.set_linear_equation_solver_type(stormpy.environments.EquationSolverType.ELIMINATION)
        solver.force_soundness = False
        return env
    p = precision or Precision()
    solver.set_linear_equation_solver_type(stormpy.environments.EquationSolverType.NATIVE)
    native = solver.native()
    native.method = stormpy.environments.NativeLinearEquationSolverMethod.SOUND_VALUE_ITERATION
    native.precision = stormpy.Rational(p.eps)
    native.relative_termination_criterion = p.relative
    solver.force_soundness = True
    return env


def _is_long_run(formula: Any) -> bool:
    """Whether ``formula`` is a long-run average (``S``/``LRA`` of a state formula, or ``R=? [S]``)."""
    return isinstance(formula, stormpy.logic.LongRunAverageOperatorFormula) or isinstance(
        getattr(formula, "subformula", None), stormpy.logic.LongRunAverageRewardFormula
    )


def _needs_fallback(exc: PropertyError) -> bool:
    return "UnmetRequirementException" in str(exc)


def _model_check(storm_model: Any, formula: Any, only_initial_states: bool, env: Any) -> Any:
    said: list[str] = []
    try:
        with storm_quiet(said):  # Storm logs its warnings and errors on file descriptor 1
            result = stormpy.model_checking(
                storm_model, formula, only_initial_states=only_initial_states, environment=env
            )
    except (RuntimeError, stormpy.exceptions.StormError) as exc:
        lines = storm_lines(str(exc))
        why = lines[0] if lines else type(exc).__name__
        raise PropertyError(f"Storm cannot check '{formula}' on the induced model: {why}") from None
    if any("did not converge" in text for text in said):  # Storm's iterative solver hit MAX_ITERATIONS
        raise SlowConvergenceError(
            f"value iteration converges too slowly on this model: Storm's did not converge on '{formula}' within "
            f"{MAX_ITERATIONS:,} iterations"
        )
    return result


def value_vector(storm_model: Any, formula: Any) -> np.ndarray:
    """The value of ``formula`` (a Storm formula) in every state ``[N]``; MDPs by Storm's default min-max method.

    The MOSAIC front end's (:mod:`distmc.abstract.mdp`) check, left with the min-max settings it was written and
    measured with (``environment(sound_mdp=False)``).
    """
    env = environment(long_run=_is_long_run(formula), sound_mdp=False)
    try:
        result = _model_check(storm_model, formula, False, env)
    except PropertyError as exc:
        if not _needs_fallback(exc):
            raise
        result = _model_check(storm_model, formula, False, long_run_fallback(storm_model.nr_states))
    return np.asarray(result.get_value_vector(), dtype=np.float64)


def _rational(v: Any) -> Fraction | float:
    text = str(v)
    if "inf" in text:
        return math.inf if not text.startswith("-") else -math.inf
    return Fraction(text)


def _float_interval(q: Fraction | float) -> tuple[float, float, float]:
    """``(v, lo, hi)``: the float nearest to ``q`` and the floats just around ``q`` (``lo <= q <= hi``)."""
    v = float(q)
    if not isinstance(q, Fraction):
        return v, v, v
    lo = v if Fraction(v) <= q else math.nextafter(v, -math.inf)
    hi = v if Fraction(v) >= q else math.nextafter(v, math.inf)
    return v, lo, hi


def _direction(storm_model: Any, formula: Any, initial: np.ndarray, env: Any, exact: bool) -> dict[str, Any]:
    """Values (and, exact, rationals) of ``formula`` at ``initial`` ``[I]``."""
    result = _model_check(storm_model, formula, True, env)
    raw = [result.get_value(int(s)) for s in initial]
    if not exact:
        return {"values": np.asarray([float(v) for v in raw], dtype=np.float64), "rationals": None}
    rationals = [_rational(v) for v in raw]
    triples = np.asarray([_float_interval(q) for q in rationals], dtype=np.float64).reshape(-1, 3)
    return {"values": triples[:, 0], "lo": triples[:, 1], "hi": triples[:, 2], "rationals": rationals}


def _sound_direction(
    storm_model: Any, formula: Any, initial: np.ndarray, p: Precision, probability: bool, complement: bool
) -> dict[str, Any]:
    """Values and bounds ``[I]`` at ``initial`` from Storm's sound method, run until they meet ``p``'s rule.

    DTMCs: sound value iteration; MDPs: interval iteration; run again at a finer absolute precision while the
    bounds do not meet the rule (at most :data:`MAX_RUNS` runs).

    The bounds are Storm's own lower and upper bounds of the iteration (``get_lower_bound``/``get_upper_bound``
    of its result), widened by :data:`~distmc.check.result.ROUNDING_ULPS`; where Storm hands out none, the value
    +- the precision it was asked for. Storm's criterion is over the initial states only (its relevant values).
    """
    # the first run: the rule's own criterion (relative to the iterated value, which for G is 1 - the reported one)
    ask = Precision(p.eps, relative=p.relative and not complement, sound_mdp=True, rel=None)
    out: dict[str, Any] = {}
    for _ in range(MAX_RUNS):
        result = _model_check(storm_model, formula, True, environment(ask, sound_mdp=True))
        values = np.asarray([float(result.get_value(int(s))) for s in initial], dtype=np.float64)
        if result.has_lower_bounds() and result.has_upper_bounds():
            lo = np.asarray([float(result.get_lower_bound(int(s))) for s in initial], dtype=np.float64)
            hi = np.asarray([float(result.get_upper_bound(int(s))) for s in initial], dtype=np.float64)
        else:
            pairs = np.asarray(
                [ask.interval(v, probability, complement) for v in values.tolist()], dtype=np.float64
            ).reshape(-1, 2)
            lo, hi = pairs[:, 0], pairs[:, 1]
        lo, hi = np.minimum(lo, values), np.maximum(hi, values)
        wide = widen(lo, hi, probability)
        out = {"values": values, "lo": wide[0], "hi": wide[1], "rationals": None}
        if p.excess(lo, hi) <= 0:
            break
        allowed = p.target(lo, hi)
        width = float((hi - lo).max())
        finer = 0.5 * float(allowed[allowed > 0].min()) if (allowed > 0).any() else 1e-3 * width
        if not ask.relative:
            finer = min(finer, 0.5 * ask.eps)
        if not 0 < finer < 1:
            break
        ask = Precision(finer, sound_mdp=True, rel=None)
    return out


def check(
    storm_model: Any,
    spec: PropertySpec,
    kind: str,
    initial: np.ndarray,
    precision: Precision | None = None,
    *,
    env: Any = None,
) -> CheckResult:
    """The property's value, bounds and truth at the initial state(s).

    A DTMC, or an MDP queried with ``min``/``max`` (given, or implied by a threshold), gives one number per
    initial state; an MDP queried without a direction gives ``{"min": Pmin, "max": Pmax}``. With several initial
    states the value is the range over them, ``{"min": ..., "max": ...}`` (the smallest minimum and the largest
    maximum), and a threshold holds when it holds in every one. ``storm_model`` is a rational model (built with
    ``to_storm(..., exact=True)``) when ``precision.exact``. ``env``: Storm settings to use instead of
    :func:`environment`'s (for benchmarks; the bounds then state what ``precision`` would guarantee).
    """
    p = precision or Precision()
    long_run = _is_long_run(spec.formula)
    single = kind == "dtmc" or spec.has_direction
    formulas = {"": spec.quantitative} if single else {d: spec.with_direction(d) for d in ("min", "max")}
    # an MDP's bounds only from interval iteration (a precision given, or --sound-mdp); Storm's default min-max
    # method states none
    sound = spec.solution == "sound" and (kind == "dtmc" or p.sound_mdp)
    probability = spec.operator in ("P", "LRA")  # long-run averages of a state formula are probabilities too
    complement = isinstance(spec.formula.subformula, stormpy.logic.GloballyFormula)  # Storm: G phi = 1 - F !phi
    if sound and not p.exact and env is None:
        got = {d: _sound_direction(storm_model, f, initial, p, probability, complement) for d, f in formulas.items()}
    else:
        if env is None:
            env = stormpy.environments.exact() if p.exact else environment(p, long_run)
        try:
            got = {d: _direction(storm_model, f, initial, env, p.exact) for d, f in formulas.items()}
        except PropertyError as exc:
            if not (_needs_fallback(exc) and long_run and not p.exact):
                raise
            env = long_run_fallback(storm_model.nr_states, p)
            got = {d: _direction(storm_model, f, initial, env, p.exact) for d, f in formulas.items()}
        if sound and not p.exact:  # a benchmark's own settings: the bounds its precision would state
            for g in got.values():
                pairs = np.asarray(
                    [p.interval(v, probability, complement) for v in g["values"].tolist()], dtype=np.float64
                ).reshape(-1, 2)
                g["lo"], g["hi"] = pairs[:, 0], pairs[:, 1]
    parts: dict[str, Any] = {}
    value_filter = spec.filter if spec.filter in VALUE_FILTERS else None
    lo: np.ndarray | None
    hi: np.ndarray | None
    for d, g in got.items():
        vals = g["values"]
        filt = value_filter
        if p.exact and filt not in (None, "range"):  # the filter's value as a rational, then its floats
            q = _aggregate(filt, g["rationals"])
            g["rationals"] = [q]
            vals, lo, hi = (np.asarray([x], dtype=np.float64) for x in _float_interval(q))
            filt = None
        elif p.exact or sound:
            lo, hi = g["lo"], g["hi"]
        else:
            lo = hi = None
        g["lo_hi"] = (lo, hi)
        parts[d] = summarise(vals, lo, hi, filt)
    if single:
        value, bounds = parts[""]
    else:
        value = {"min": _pick(parts["min"][0], "min"), "max": _pick(parts["max"][0], "max")}
        bounds = (
            None
            if parts["min"][1] is None
            else {"min": _pick_b(parts["min"][1], "min"), "max": _pick_b(parts["max"][1], "max")}
        )
    truth = decided = None
    if spec.threshold is not None and spec.filter in TRUTH_FILTERS:
        count, truth, decided = _truth_filter(spec.filter, spec.threshold, got[""], p.exact)
        if count is not None:  # filter(count, ...): the number of initial states, not a truth value
            value, bounds = count, None
    elif spec.threshold is not None:
        g = got[""]
        if p.exact:
            truth = decide(g["rationals"], spec.threshold)
            decided = True
        else:
            truth = decide(g["values"].tolist(), spec.threshold)
            decided = _decided(bounds, spec.threshold)
    exact_text: str | dict[str, str] | None = None
    if p.exact:
        texts = {d: [str(q) for q in g["rationals"]] for d, g in got.items()}
        exact_text = texts[""][0] if single and len(texts[""]) == 1 else {d: ", ".join(t) for d, t in texts.items()}
    method = "exact" if p.exact else ("iterative" if spec.solution == "sound" and not sound else spec.solution)
    return CheckResult(
        value=value,
        bounds=bounds,
        truth=truth,
        decided=decided,
        exact=exact_text,
        method=method,
        note=NOT_SOUND if method == "iterative" else None,
    )


#: The report's line under an MDP value checked by Storm's default min-max value iteration.
NOT_SOUND = (
    "not sound: Storm's default min-max value iteration on an MDP states no error bound; give --precision "
    "or --precision-abs (or --sound-mdp) for sound bounds by interval iteration"
)


def _aggregate(op: str, values: list[Any]) -> Any:
    """A value filter (``min``, ``max``, ``avg``, ``sum``, ``first``) of ``values`` (floats or rationals)."""
    if op == "first":
        return values[0]
    if op in ("min", "max"):
        return min(values) if op == "min" else max(values)
    total = sum(values[1:], values[0])
    return total / len(values) if op == "avg" else total


def _truth_filter(
    op: str, threshold: tuple[str, Fraction], g: dict[str, Any], exact: bool
) -> tuple[float | None, bool | None, bool | None]:
    """``(count, truth, decided)`` of ``filter(count|forall|exists, P>=p [...], "init")``.

    ``count``: the number of initial states that satisfy the threshold (a value, no truth); ``forall``/``exists``:
    whether all / some do. ``decided``: whether the states' bounds settle it (None without bounds).
    """
    holds = [decide([v], threshold) for v in (g["rationals"] if exact else g["values"].tolist())]
    lo, hi = g["lo_hi"]
    settled = (
        None
        if exact or lo is None
        else [decide([a], threshold) == decide([b], threshold) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
    )
    if op == "count":
        return float(sum(holds)), None, None
    if op == "forall":
        truth = all(holds)
        decided = (
            None
            if settled is None
            else (all(settled) if truth else any(s and not h for s, h in zip(settled, holds, strict=True)))
        )
    else:
        truth = any(holds)
        decided = (
            None
            if settled is None
            else (any(s and h for s, h in zip(settled, holds, strict=True)) if truth else all(settled))
        )
    return None, truth, True if exact else decided


def _pick(v: Any, key: str) -> float:
    """One direction's value over several initial states: its range's ``key`` end (min of min, max of max)."""
    return float(v[key]) if isinstance(v, dict) else float(v)


def _pick_b(b: Any, key: str) -> tuple[float, float]:
    return tuple(b[key]) if isinstance(b, dict) else tuple(b)


def _decided(bounds: Any, threshold: tuple[str, Fraction]) -> bool | None:
    """Whether the bounds settle the comparison (None: no bounds stated)."""
    if bounds is None:
        return None
    if isinstance(bounds, dict):  # several initial states: all hold iff the smallest (or largest) value does
        bounds = bounds["min" if threshold[0].startswith(">") else "max"]
    return decide([bounds[0]], threshold) == decide([bounds[1]], threshold)


def check_values(
    storm_model: Any, spec: PropertySpec, kind: str, initial: np.ndarray
) -> tuple[float | dict[str, float], dict[str, np.ndarray]]:
    """:func:`check`'s result and the value in every state, from the same solver run(s).

    The vectors: ``{"value": [N]}`` for a DTMC or a query with ``min``/``max``, else ``{"value_min": [N],
    "value_max": [N]}``. Storm computes every state's value for the initial states' anyway (all states are
    reachable from them), so asking for the whole vector costs no second check.
    """
    op = spec.filter if spec.filter in VALUE_FILTERS else None  # filter(max, ..., "init"): one value
    if kind == "dtmc" or spec.has_direction:
        vec = value_vector(storm_model, spec.formula)
        return summarise(vec[initial], None, None, op)[0], {"value": vec}
    lo = value_vector(storm_model, spec.with_direction("min"))
    hi = value_vector(storm_model, spec.with_direction("max"))
    if op not in (None, "range"):
        return {"min": filtered(lo[initial], op), "max": filtered(hi[initial], op)}, {"value_min": lo, "value_max": hi}
    return {"min": float(lo[initial].min()), "max": float(hi[initial].max())}, {"value_min": lo, "value_max": hi}
