"""A verdict for every value of the environment's constants in a region: ``distmc run MODEL --region ...``.

The induced chain is explored **once**, at the region's centre: the policy sees the states, never the constants,
and :func:`~distmc.model.region.check_region` has refused every constant the reachable structure (guards,
assignments, ranges, labels, rewards) depends on, so the same states, rows and policy distributions hold in the
whole region. Then the explored states are expanded once more (no search) at each of the region's ``2^d``
corners, which gives every transition of the induced chain its probability at the corners; the structure must be
the same there (a probability that reaches 0 at a corner is refused). Every entry of the induced chain is
multilinear in the region's constants (checked on the expressions), so its value at any point is the multilinear
interpolation of its corner values and its range over any subregion lies between its values at that
subregion's corners: the entries' intervals over a subregion come without another expansion. The robust value
iteration of :mod:`distmc.check.interval` on these intervals gives sound lower and upper bounds over the
(sub)region; the engine is always that native one (the report says so).

A threshold property (``P<=0.01 [F "crash"]``) is decided per subregion: ``holds`` (the bounds on the right side
of the threshold), ``violated`` (the bounds on the wrong side, with the subregion's centre as a witness point and
its exact value from an ordinary single-value run) or ``undecided``; undecided subregions are halved across their
widest constant, largest first, until the decided ones cover ``coverage`` of the region's volume (default 99%) or
:data:`MAX_SUBREGIONS` are made.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from distmc.assemble.reducer import assemble, merge_csr_rows
from distmc.check.interval import IntervalChain, interval_bounds
from distmc.check.properties import PropertySpec
from distmc.errors import UnsupportedError, UsageError
from distmc.explore.local import BATCH_STATES, explore_local
from distmc.explore.visited import VisitedSet
from distmc.model.program import parse_constants
from distmc.model.region import Region, check_region, parse_region
from distmc.pipeline import Job, Parts

__all__ = ["MAX_SUBREGIONS", "RegionChain", "RegionReport", "build_region_chain", "verify_region"]

#: The most subregions a threshold's refinement makes.
MAX_SUBREGIONS = 1024

ENGINE = "native robust value iteration on the interval chain (corner values, multilinear entries)"


@dataclass
class RegionChain:
    """The induced chain's structure, once, and every transition's probability at the region's corners."""

    region: Region
    parts: Parts
    row_offsets: np.ndarray
    targets: np.ndarray
    corner_prob: np.ndarray  # [2^d, T], corners in Region.corners() order
    initial: np.ndarray
    labels: dict[str, np.ndarray]
    rewards: dict[str, tuple[np.ndarray | None, np.ndarray | None]]

    def probabilities_at(self, point: tuple[float, ...]) -> np.ndarray:
        """``[T]``: every transition's probability at ``point`` (multilinear interpolation of the corners)."""
        out = np.zeros(self.targets.shape[0])
        ts = [(v - lo) / (hi - lo) for v, (_, lo, hi) in zip(point, self.region.params, strict=True)]
        for c, bits in enumerate(np.ndindex(*([2] * len(ts)))):
            w = float(np.prod([t if b else 1.0 - t for t, b in zip(ts, bits, strict=True)]))
            if w:
                out += w * self.corner_prob[c]
        return out

    def chain(self, sub: Region) -> IntervalChain:
        """The interval chain of ``sub`` (inside the region): each entry between its values at ``sub``'s corners."""
        values = np.stack([self.probabilities_at(p) for p in sub.corners()])
        return IntervalChain(
            self.row_offsets,
            self.targets,
            values.min(axis=0),
            values.max(axis=0),
            self.initial,
            self.labels,
            self.rewards,
        )


def _job(base: Job, region: Region, point: tuple[float, ...]) -> Job:
    constants = ",".join(x for x in (base.constants, region.constants(point)) if x)
    return Job(
        base.model_path,
        base.prop,
        constants,
        base.policy,
        base.interface,
        base.mode,
        base.threshold,
        base.resolve,
        base.trust_policy,
        base.policy_dtype,
    )


def _rows_at(parts: Parts, keys: np.ndarray, visited: VisitedSet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets, targets, probabilities) of the merged rows of ``keys`` (in their order) under ``parts``."""
    assert parts.expander is not None
    counts, targets, probs = [], [], []
    for start in range(0, keys.shape[0], BATCH_STATES):
        rows = parts.expander.expand(keys[start : start + BATCH_STATES])
        if rows.n_rows != min(BATCH_STATES, keys.shape[0] - start):
            raise UnsupportedError(
                "the induced model is an MDP (same-label choices, --resolve none): a region needs one row per state"
            )
        off, t, p = merge_csr_rows(rows.branch_offsets, visited.lookup(rows.target_keys), rows.prob)
        counts.append(np.diff(off))
        targets.append(t)
        probs.append(p)
    offsets = np.zeros(keys.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.concatenate(counts), out=offsets[1:])
    return offsets, np.concatenate(targets), np.concatenate(probs)


def build_region_chain(job: Job, region: Region) -> RegionChain:
    """Explore ``job`` once at the region's centre and take every transition's probability at its corners."""
    check_region(job.model_path, region, parse_constants(job.constants))
    center = _job(job, region, region.center()).build()
    assert center.expander is not None
    explored = explore_local(center.expander, center.codec.pack(center.model.initial_states))
    induced = assemble(explored, center.model, center.codec, center.props.atoms, center.reward_names)
    if induced.kind != "dtmc":
        raise UnsupportedError(
            "the induced model is an MDP (same-label choices, --resolve none or monolithic "
            "mode): a region needs an induced DTMC"
        )
    visited = VisitedSet(center.codec.dtype)
    visited.insert(explored.keys)
    offsets, targets = induced.row_offsets, induced.targets
    corner_prob = []
    for corner in region.corners():
        parts = _job(job, region, corner).build(policy=center.policy)
        off, t, p = _rows_at(parts, explored.keys, visited)
        if not (np.array_equal(off, offsets) and np.array_equal(t, targets)):
            raise UnsupportedError(
                f"the induced chain's structure changes at the region's corner "
                f"{region.constants(corner)} (a probability reaches 0 there): keep the region "
                "inside the constants' open range"
            )
        corner_prob.append(p)
    return RegionChain(
        region, center, offsets, targets, np.stack(corner_prob), induced.initial, induced.labels, induced.rewards
    )


@dataclass
class Subregion:
    region: str
    lower: float
    upper: float
    verdict: str | None = None  # holds / violated / undecided (threshold properties)
    witness: str | None = None  # a violated subregion's witness point (--const text)
    witness_value: float | None = None  # its exact value, from a single-value run
    volume: float = 0.0


@dataclass
class RegionReport:
    """The bounds of one property over a region, and a threshold's verdicts per subregion."""

    model: str
    property: str
    region: str
    lower: float
    upper: float
    engine: str
    states: int
    transitions: int
    subregions: list[Subregion] = field(default_factory=list)
    coverage: float | None = None  # the decided share of the region's volume (threshold properties)
    times: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        lines = [
            f"{self.property}  over  {self.region}:  [{self.lower:.12g}, {self.upper:.12g}]",
            f"  engine: {self.engine}; induced dtmc: {self.states} states, {self.transitions} transitions "
            "(explored once)",
        ]
        if self.subregions:
            lines.append(f"  decided: {100 * (self.coverage or 0.0):.2f}% of the region's volume")
            lines.append(f"  {'subregion':<40} {'lower':>14} {'upper':>14}  verdict")
            for s in self.subregions:
                extra = f" (witness {s.witness}: {s.witness_value:.12g})" if s.witness else ""
                lines.append(f"  {s.region:<40} {s.lower:>14.8g} {s.upper:>14.8g}  {s.verdict}{extra}")
        lines.append("  time: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.times.items()))
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _at_initial(values: tuple[np.ndarray, np.ndarray], initial: np.ndarray) -> tuple[float, float]:
    return float(values[0][initial].min()), float(values[1][initial].max())


def bounds_over(rc: RegionChain, spec: PropertySpec, sub: Region, eps: float = 1e-9) -> tuple[float, float]:
    """Sound (lower, upper) of ``spec`` at the initial states over every point of ``sub``."""
    return _at_initial(interval_bounds(rc.chain(sub), spec, eps), rc.initial)


def _holds(cmp: str, bound: float, v: float) -> bool:
    return {"<=": v <= bound, "<": v < bound, ">=": v >= bound, ">": v > bound}[cmp]


def _refine(rc: RegionChain, spec: PropertySpec, coverage: float, witness: Any) -> tuple[list[Subregion], float]:
    assert spec.threshold is not None
    cmp, frac = spec.threshold
    bound = float(frac)
    total = rc.region.volume
    todo = [rc.region]
    done: list[tuple[Region, Subregion]] = []
    decided = 0.0
    while todo:
        todo.sort(key=lambda r: -r.volume)
        sub = todo.pop(0)
        lo, hi = bounds_over(rc, spec, sub)
        verdict = None
        if _holds(cmp, bound, lo) and _holds(cmp, bound, hi):
            verdict = "holds"
        elif not _holds(cmp, bound, lo) and not _holds(cmp, bound, hi):
            verdict = "violated"
        if verdict is None and decided / total < coverage and len(todo) + len(done) + 2 <= MAX_SUBREGIONS:
            todo.extend(sub.split())
            continue
        entry = Subregion(str(sub), lo, hi, verdict or "undecided", volume=sub.volume / total)
        if verdict is not None:
            decided += sub.volume
        if verdict == "violated":
            entry.witness = rc.region.constants(sub.center())
            entry.witness_value = witness(sub.center())
        done.append((sub, entry))
        if decided / total >= coverage:  # the rest stays undecided, unsplit
            for rest in todo:
                r_lo, r_hi = bounds_over(rc, spec, rest)
                done.append((rest, Subregion(str(rest), r_lo, r_hi, "undecided", volume=rest.volume / total)))
            todo = []
    done.sort(key=lambda d: d[0].params)
    return [d[1] for d in done], decided / total


def verify_region(
    model_path: str | Path, prop: str, region: str | Region, *, coverage: float = 0.99, **options: Any
) -> RegionReport:
    """Sound lower and upper bounds of ``prop`` over ``region``, and a threshold's verdict per subregion.

    Args:
        model_path: the PRISM file.
        prop: one property.
        region: Storm's region syntax, ``'0.05<=slip<=0.15'`` (several: comma-separated), or a :class:`Region`.
        coverage: a threshold property's subregions are split until the decided ones cover this share of the
            region's volume (or :data:`MAX_SUBREGIONS` are made).
        options: what a :class:`~distmc.pipeline.Job` takes, as for :func:`distmc.api.verify`: ``constants``
            (the other constants), ``policy``, ``interface``, ``mode``, ``threshold``, ``resolve``,
            ``trust_policy``, ``policy_dtype``.

    Example:
        >>> r = verify_region("benchmarks/envs/delivery.prism", 'P=? [F "delivered"]', "0.05<=slip<=0.15",
        ...                   constants="N=3,FUEL=8")  # doctest: +SKIP
        >>> r.lower <= r.upper
        True
    """
    if not 0.0 < coverage <= 1.0:
        raise UsageError(f"--coverage {coverage} is not in (0, 1]")
    box = parse_region(region) if isinstance(region, str) else region
    job = Job(str(model_path), prop, **options)
    t0 = time.perf_counter()
    rc = build_region_chain(job, box)
    t1 = time.perf_counter()
    if len(rc.parts.props.specs) != 1:
        raise UsageError("--region checks one property at a time")
    spec = rc.parts.spec
    lo, hi = bounds_over(rc, spec, box)
    report = RegionReport(
        str(model_path), spec.text, str(box), lo, hi, ENGINE, int(rc.row_offsets.shape[0] - 1), int(rc.targets.shape[0])
    )
    if spec.threshold is not None:
        from distmc.api import verify

        def witness(point: tuple[float, ...]) -> float:
            c = ",".join(x for x in (job.constants, box.constants(point)) if x)
            r = verify(model_path, spec.text, **{**options, "constants": c})
            return float(r.result)  # type: ignore[union-attr, arg-type]

        report.subregions, report.coverage = _refine(rc, spec, coverage, witness)
    report.times = {"explore and corners": t1 - t0, "check": time.perf_counter() - t1}
    return report
