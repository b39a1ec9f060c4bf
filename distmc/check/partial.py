"""Sound bounds from a partial model: what a run that stopped before the fixpoint can still say.

A run that stops exploring early (``--max-states``, ``--max-memory``, ``--timeout``, Ctrl-C) has explored some
states (their rows are known) and found others it did not expand: the *frontier*. Each frontier state gets one
self-loop row (:func:`close_frontier`), and every property is checked twice on the explored part, once with the
frontier counted as failing (``lo``) and once as satisfying (``hi``); the exact value of the whole model lies in
``[lo, hi]``, because a path's fate is decided by what it does before it reaches the frontier, and from a frontier
state the unknown rest is worth between 0 and 1 (or, for rewards, between the least and the greatest reward that
the remaining steps can collect). The frontier is counted "as satisfying" by changing the labels of the frontier
states (:class:`~distmc.check.sides.Side`), which every checker reads (Storm's labelling in place, the native checker's arrays):

=============================  ===========================================  =========================================
property                       lo (frontier failing)                        hi (frontier satisfying)
=============================  ===========================================  =========================================
``P [F phi]``, ``[phi1 U phi2]``  the labels as they are (a frontier state     ``phi2`` set on the frontier states where
and ``<=k``/``<k`` forms       satisfying ``phi2`` has value 1, any other   ``phi1`` holds
                               one 0)
``U`` with a lower step bound  ``phi2`` cleared on the frontier             ``phi1`` and ``phi2`` set on the frontier
``P [G phi]``                  ``phi`` cleared on the frontier              the labels as they are
``P [X phi]``                  exact while the initial states are expanded  (the successors' labels are known)
``R [F phi]``, ``R [C]``       ``phi`` set on the frontier (no reward       infinite: not bounded (unless the frontier
                               beyond it)                                   is reached with probability 0)
``R [C<=k]``                   frontier reward: the least reward of one     the greatest reward of one step, every
                               step (0 for non-negative rewards)            remaining step
``R [I=k]``                    the least state reward                       the greatest state reward
``S``, ``LRA``, ``T``, nested  not bounded: [0, 1] for probabilities,       ``[-inf, inf]`` for rewards
=============================  ===========================================  =========================================

The greatest (least) reward of one step comes from the reward structure's items: the sum of the positive
(negative) state-reward values plus the largest (least) sum over one action's items. It is known only when every
value is a constant; a value that depends on the state leaves the upper bound infinite (and the lower one assumes
non-negative rewards, as Storm's reachability rewards do). An MDP (``--mode monolithic``) is bounded the same way,
for ``min`` and for ``max``.

The horizon cut (:func:`horizon_of`) is the other use of the frontier: a step-bounded property (``F<=k``,
``U<=k``, ``C<=k``, ``I=k``) is decided within ``k`` steps, so a state first found at depth ``k`` (breadth-first
level ``k``) need not be expanded; with its self-loop and its own labels and rewards the check is exact.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import stormpy
import stormpy.logic as sl

from distmc.assemble.reducer import InducedModel
from distmc.check.properties import PropertySet, PropertySpec
from distmc.check.result import CheckResult, Precision, decide, result_entry
from distmc.check.sides import BOUNDED_REWARD, Side, plan_sides, step_reward_bounds
from distmc.errors import PropertyError
from distmc.explore.partition import Explored
from distmc.model.program import Model

__all__ = ["FRONTIER_LABEL", "check_partial", "close_frontier", "frontier_probability", "horizon_of"]

#: The label of the frontier states in the check of the probability of reaching them.
FRONTIER_LABEL = "__frontier"

#: Absolute precision of the probability of reaching the frontier (a figure of the report, not of the bounds), and
#: the most iterations spent on it.
REACH_PRECISION = 1e-6
REACH_MAX_ITERATIONS = 5_000

_STRICT = re.compile(r"U<(?!=)")
_BUILTIN = ("deadlock",)


# -- the frontier in the explored model -----------------------------------------------------------------------------


def close_frontier(explored: Explored, first: int) -> int:
    """Give every state with an id from ``first`` on (found, not expanded) one self-loop row of probability 1.

    The explorers number states in breadth-first discovery order and expand them in that order, so the states
    not expanded when exploration stops are a tail of the ids. Their rows carry zero action rewards; they are not
    marked terminal, so their own state rewards and labels stay (what the horizon cut needs; the bounds set the
    frontier's rewards themselves). Sets ``explored.frontier``; returns the number of frontier states.
    """
    n = explored.n_states
    ids = np.arange(first, n, dtype=np.int64)  # [F]
    f = int(ids.shape[0])
    explored.frontier = ids
    if f == 0:
        return 0
    explored.loop = _padded(explored.loop, n)
    explored.deadlock = _padded(explored.deadlock, n)
    explored.row_state = np.concatenate([explored.row_state, ids])
    explored.row_action = np.concatenate([explored.row_action, np.full(f, -1, dtype=np.int64)])
    last = explored.branch_offsets[-1]
    explored.branch_offsets = np.concatenate([explored.branch_offsets, last + 1 + np.arange(f, dtype=np.int64)])
    explored.target_chunks = [*explored.target_chunks, ids]
    explored.prob_chunks = [*explored.prob_chunks, np.ones(f)]
    explored.chunk_rows = np.concatenate([explored.chunk_rows, np.array([f], dtype=np.int64)])
    explored.rewards = {k: np.concatenate([v, np.zeros(f)]) for k, v in explored.rewards.items()}
    return f


def _padded(a: np.ndarray, n: int) -> np.ndarray:
    if a.shape[0] >= n:
        return a
    out = np.zeros(n, dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


# -- the horizon cut ------------------------------------------------------------------------------------------------


def _step_bound(spec: PropertySpec) -> int | None:
    """The number of steps that decide ``spec`` (``F<=k``, ``U<k``, ``C<=k``, ``I=k``), or None (unbounded)."""
    f = spec.formula
    if not isinstance(f, (sl.ProbabilityOperatorFormula, sl.RewardOperatorFormula)):
        return None
    sub = f.subformula
    if isinstance(sub, sl.BoundedUntilFormula):
        if sub.is_multi_dimensional:
            return None
        try:
            k = int(str(sub.upper_bound_expression))
        except ValueError:
            return None
        return k - 1 if _STRICT.search(str(sub).replace(" ", "")) else k
    if spec.is_reward and isinstance(sub, (sl.CumulativeRewardFormula, sl.InstantaneousRewardFormula)):
        m = BOUNDED_REWARD.match(str(sub).replace(" ", ""))
        return None if m is None else int(m.group(3))
    return None


def horizon_of(specs: Sequence[PropertySpec]) -> int | None:
    """The depth beyond which no property needs a state: the deepest step bound of all (None: some is unbounded).

    A property that reads the ``deadlock`` label is left uncut: a frontier state's deadlock is not known.
    """
    bounds = []
    for spec in specs:
        k = _step_bound(spec)
        if k is None or spec.builtin_labels & set(_BUILTIN):
            return None
        bounds.append(max(k, 0))
    return max(bounds) if bounds else None


# -- running the checks ---------------------------------------------------------------------------------------------


def _ends(res: CheckResult) -> tuple[Any, Any]:
    """(lower, upper) of a check's answer: its bounds where it states them, else its value."""
    if res.bounds is None:
        return res.value, res.value
    if isinstance(res.bounds, dict):
        return {k: v[0] for k, v in res.bounds.items()}, {k: v[1] for k, v in res.bounds.items()}
    return res.bounds[0], res.bounds[1]


class _StormSides:
    """One Storm model, its labels and state rewards changed in place for a side and put back after it."""

    def __init__(self, storm_model: Any, m: InducedModel) -> None:
        self.model, self.m = storm_model, m

    def _labels(self, labels: dict[str, np.ndarray]) -> None:
        from stormpy.developer import storage as sst

        lab = self.model.labeling
        for name, mask in labels.items():
            if not lab.contains_label(name):
                lab.add_label(name)
            lab.set_states(name, sst.BitVector(self.m.n_states, np.flatnonzero(mask).tolist()))

    def _rewards(self, rewards: dict[str, np.ndarray], where: np.ndarray) -> None:
        for name, vec in rewards.items():
            rm = self.model.get_reward_model(name)  # a reference (reward_models holds copies)
            for s in np.flatnonzero(where).tolist():
                rm.set_state_reward(s, float(vec[s]))

    def run(self, side: Side, frontier: np.ndarray, fn: Callable[[Any], CheckResult]) -> CheckResult:
        self._labels(side.labels)
        self._rewards(side.state_rewards, frontier)
        try:
            return fn(self.model)
        finally:
            self._labels({k: self.m.labels[k] for k in side.labels})
            self._rewards({k: _state_or_zero(self.m, k) for k in side.state_rewards}, frontier)


def _state_or_zero(m: InducedModel, name: str) -> np.ndarray:
    state = m.rewards[name][0]
    return np.zeros(m.n_states) if state is None else state


def with_state_rewards(m: InducedModel) -> None:
    """Give every reward structure of ``m`` a state-reward vector (zeros where it has none), so a side can set one."""
    m.rewards = {k: (np.zeros(m.n_states) if s is None else s, a) for k, (s, a) in m.rewards.items()}


def _native(m: InducedModel, side: Side, spec: PropertySpec, precision: Precision) -> CheckResult:
    from distmc.check.dispatch import check_native_result

    rewards = {k: (side.state_rewards.get(k, s), a) for k, (s, a) in m.rewards.items()}
    return check_native_result(
        dataclasses.replace(m, labels={**m.labels, **side.labels}, rewards=rewards), spec, precision
    )


def _fixed(v: float) -> CheckResult:
    return CheckResult(value=v, bounds=None, method="partial")


def _combine(spec: PropertySpec, lo: CheckResult, hi: CheckResult, checker: str, note: str | None) -> CheckResult:
    """One answer from the two sides: ``[lo's lower end, hi's upper end]``, the midpoint, and a threshold's truth."""
    lo_end, _ = _ends(lo)
    _, hi_end = _ends(hi)
    if isinstance(lo_end, dict) or isinstance(hi_end, dict):
        keys = ("min", "max")
        lo_d = lo_end if isinstance(lo_end, dict) else dict.fromkeys(keys, lo_end)
        hi_d = hi_end if isinstance(hi_end, dict) else dict.fromkeys(keys, hi_end)
        bounds: Any = {k: (float(lo_d[k]), float(hi_d[k])) for k in keys}
        value: Any = {k: _mid(*bounds[k]) for k in keys}
        pick = bounds["min" if spec.threshold is not None and spec.threshold[0].startswith(">") else "max"]
    else:
        bounds = (float(lo_end), float(hi_end))
        value = _mid(*bounds)
        pick = bounds
    if spec.operator == "P":  # a step-bounded check's rounding can leave [0, 1] by an ulp or two
        bounds = {k: _clip(v) for k, v in bounds.items()} if isinstance(bounds, dict) else _clip(bounds)
    truth: Any = None
    decided = None
    if spec.threshold is not None:
        t_lo, t_hi = decide([pick[0]], spec.threshold), decide([pick[1]], spec.threshold)
        decided = t_lo == t_hi
        truth = t_lo if decided else None
    return CheckResult(
        value=value,
        bounds=bounds,
        truth=truth,
        decided=decided,
        method="partial",
        checker=checker,
        check_s=lo.check_s + hi.check_s,
    )


def _clip(b: tuple[float, float]) -> tuple[float, float]:
    return (min(max(b[0], 0.0), 1.0), min(max(b[1], 0.0), 1.0))


def _mid(a: float, b: float) -> float:
    if math.isinf(a) or math.isinf(b):
        return a if not math.isinf(a) else b
    return (a + b) / 2


def _reach_spec(within: int | None) -> PropertySpec:
    """``P=? [F "__frontier"]``, or ``F<=k`` when every property is decided within ``k`` steps."""
    bound = "" if within is None else f"<={within}"
    formula = stormpy.parse_properties(f'P=? [F{bound} "{FRONTIER_LABEL}"]')[0].get_raw_formula()
    return PropertySpec(
        text=str(formula),
        formula=formula,
        quantitative=formula.clone(),
        solution="sound" if within is None else "steps",
    )


def frontier_probability(
    m: InducedModel,
    frontier: np.ndarray,
    storm_model: Any = None,
    precision: Precision | None = None,
    within: int | None = None,
) -> float | dict[str, float] | None:
    """The probability of reaching the frontier from the initial state(s) (an MDP: its min and max).

    ``within``: every property is decided within that many steps (:func:`horizon_of`): the probability of
    reaching the frontier within them, the part of it that matters (a fixed number of steps, cheap).

    The native checker on a DTMC without ``storm_model`` (it reads ``m``'s arrays), Storm's model (a label added to
    it) otherwise (the caller passes it where Storm checks the bounds anyway: its sound iteration is faster). It is
    what the report tells, not part of the bounds: checked to :data:`REACH_PRECISION` in at most
    :data:`REACH_MAX_ITERATIONS` steps of the sound iteration (None where that is not enough: a policy that stays
    long in the explored part without reaching the frontier or an end).
    """
    spec = _reach_spec(within)
    p = Precision(max(REACH_PRECISION, (precision or Precision()).eps))
    if m.kind == "dtmc" and storm_model is None:
        from distmc.check.native import LocalEngine, at_initial, matrix_of, values_of

        labelled = dataclasses.replace(m, labels={**m.labels, FRONTIER_LABEL: frontier})
        try:
            vec = values_of(LocalEngine(matrix_of(m), None, m.initial), labelled, spec, p.eps, REACH_MAX_ITERATIONS)[0]
        except PropertyError:  # not converged: the report says so (None), the bounds do not need it
            return None
        return at_initial(vec, m.initial)
    from distmc.check.checker import check

    sides = _StormSides(storm_model, m)
    sides._labels({FRONTIER_LABEL: frontier})
    return check(storm_model, spec, m.kind, m.initial, p).value


def _storm_check(storm_model: Any, *, spec: PropertySpec, m: InducedModel, precision: Precision) -> CheckResult:
    from distmc.check.checker import check

    return check(storm_model, spec, m.kind, m.initial, precision)


def check_partial(
    props: PropertySet,
    m: InducedModel,
    checkers: list[str],
    precision: Precision,
    storm_model: Callable[[], Any],
    frontier: np.ndarray,
    model: Model,
    nvars: int,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[CheckResult], list[str | None]]:
    """Every property checked twice on the partial model ``m`` (``checkers[i]``: ``storm`` or ``native``).

    ``storm_model`` builds Storm's model of ``m`` once (after the native checks, which read ``m``'s arrays).
    Returns each property's combined answer (:func:`_combine`) and what is not bounded of it (None: nothing).
    """
    import time

    with_state_rewards(m)
    plans = []
    for spec in props.specs:
        bounds = step_reward_bounds(model, spec.reward_name, nvars) if spec.is_reward else None
        plans.append(plan_sides(spec, m, frontier, bounds))
    out: list[CheckResult | None] = [None] * len(props.specs)
    order = sorted(range(len(props.specs)), key=lambda i: checkers[i] != "native")
    storm: _StormSides | None = None
    for i in order:
        spec, (lo, hi, note) = props.specs[i], plans[i]
        results = []
        for side in (lo, hi):
            t = time.perf_counter()
            if side.fixed is not None:
                res = _fixed(side.fixed)
            elif checkers[i] == "native":
                res = _native(m, side, spec, precision)
            else:
                if storm is None:
                    storm = _StormSides(storm_model(), m)
                    t = time.perf_counter()
                res = storm.run(side, frontier, functools.partial(_storm_check, spec=spec, m=m, precision=precision))
            results.append(dataclasses.replace(res, check_s=time.perf_counter() - t))
            if progress is not None:
                progress(f"partial model: {'upper' if side is hi else 'lower'} bound of {spec.text}")
        out[i] = _combine(spec, results[0], results[1], checkers[i], note)
    return [r for r in out if r is not None], [p[2] for p in plans]


def partial_entry(spec: PropertySpec, res: CheckResult, note: str | None) -> dict[str, object]:
    """The report's entry of one property of a partial run: bounds, ``partial``, an undecided threshold's truth."""
    entry = result_entry(spec.text, spec.name, res)
    entry["partial"] = True
    if spec.threshold is not None and res.truth is None:
        entry["truth"] = "undecided"
        entry["decided"] = False
    if note is not None:
        entry["not_bounded"] = note
    return entry


def partial_values(
    engine: Any,
    part: Any,
    spec: PropertySpec,
    frontier: np.ndarray,
    model: Model,
    nvars: int,
    precision: Precision | float,
    max_iterations: int,
) -> tuple[dict[str, np.ndarray], str | None]:
    """Both sides of ``spec`` and the probability of reaching the frontier, on one worker's part (collective).

    ``part`` is a :class:`~distmc.check.worker_part.WorkerPart` (or any labelled model the ``engine`` runs on),
    ``frontier`` ``[n]`` its own frontier states. Every worker runs the same sequence of collective operations (the
    sides depend on the property only). Returns ``lo_value``, ``lo_lower``, ``lo_upper``, ``hi_...`` and ``reach``
    ``[n]`` each, and what is not bounded (None: nothing).
    """
    from distmc.check.native import values_of

    bounds = step_reward_bounds(model, spec.reward_name, nvars) if spec.is_reward else None
    lo, hi, note = plan_sides(spec, part, frontier, bounds)
    out: dict[str, np.ndarray] = {}
    for tag, side in (("lo", lo), ("hi", hi)):
        if side.fixed is not None:
            fixed = np.full(part.n_states, side.fixed)
            out.update({f"{tag}_value": fixed, f"{tag}_lower": fixed, f"{tag}_upper": fixed})
            continue
        labels, rewards = dict(part.labels), dict(part.rewards)
        part.labels = {**labels, **side.labels}
        part.rewards = {k: (side.state_rewards.get(k, s), a) for k, (s, a) in rewards.items()}
        try:
            v, lower, upper = values_of(engine, part, spec, precision, max_iterations)
        finally:
            part.labels, part.rewards = labels, rewards
        out.update({f"{tag}_value": v, f"{tag}_lower": lower, f"{tag}_upper": upper})
    reach_spec = _reach_spec(horizon_of([spec]))
    labels = part.labels
    part.labels = {**labels, FRONTIER_LABEL: frontier}
    try:
        eps = precision if isinstance(precision, float) else precision.eps
        out["reach"] = values_of(engine, part, reach_spec, Precision(max(REACH_PRECISION, eps)), REACH_MAX_ITERATIONS)[
            0
        ]
    except PropertyError:  # not converged on any worker (the gap is global): not reported
        out["reach"] = np.full(part.n_states, np.nan)
    finally:
        part.labels = labels
    return out, note


def combine_sides(spec: PropertySpec, at_initial: dict[str, np.ndarray], checker: str, note: str | None) -> CheckResult:
    """One answer from both sides' values at the initial states ``[I]`` (as :func:`partial_values` names them)."""
    from distmc.check.result import summarise

    sides = []
    for tag in ("lo", "hi"):
        value, bounds = summarise(at_initial[f"{tag}_value"], at_initial[f"{tag}_lower"], at_initial[f"{tag}_upper"])
        sides.append(CheckResult(value=value, bounds=bounds, method="partial"))
    return _combine(spec, sides[0], sides[1], checker, note)
