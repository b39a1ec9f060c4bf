"""Which checker a run uses: Storm where its import and check fit in memory, else the native or distributed one.

``--checker auto`` keeps Storm (the reference) unless the hand-off and Storm's check would not fit under
``--max-memory`` (or the machine's available memory); a run that names Storm, or has no way out, stops before the
hand-off with a :class:`~distmc.errors.ResourceLimitError` rather than be killed for memory.
"""

from __future__ import annotations

import logging

from distmc.assemble.reducer import InducedModel
from distmc.check.forms import unsupported
from distmc.check.properties import PropertySpec
from distmc.check.result import TRUTH_FILTERS
from distmc.errors import PropertyError, ResourceLimitError
from distmc.explore.limits import Limits, available_bytes, rss_bytes

__all__ = [
    "GATHER_BYTES_PER_TRANSITION",
    "STORM_BYTES_PER_TRANSITION",
    "choose_checker",
    "choose_ray_checker",
    "distributed_why",
]

log = logging.getLogger("distmc.api")


#: Memory the hand-off to Storm and Storm's check need beyond what the process holds after exploration, per
#: transition, when the reducer keeps its copy (Storm's matrix, the UMB import's buffers, the check's submatrix).
#: Measured on avoid 8x8 (36.9 M transitions): 58 B with the reducer's copy released (74 B without); rounded up.
#: On avoid 12x12 (354 M transitions) an estimate of 40 B let a run under --max-memory 21G be killed for memory.
STORM_BYTES_PER_TRANSITION = 80

#: What gathering a Ray run's rows into the driver costs per transition: the rows themselves (int64 target and
#: float64 probability), and with several workers a second copy while they are placed in global order.
GATHER_BYTES_PER_TRANSITION = 16


def distributed_why(spec: PropertySpec, kind: str) -> str | None:
    """Why the distributed checker cannot check ``spec`` (None: it can).

    The native checker's reasons, and filters over truth values (it states no truth value per initial state).
    """
    if spec.filter in TRUTH_FILTERS:
        return f"filter({spec.filter}, ...) is answered by Storm (use --checker storm or auto)"
    return unsupported(spec, kind)


def choose_ray_checker(
    checker: str, limits: Limits, transitions: int, specs: list[PropertySpec], kind: str, workers: int, worker_rss: int
) -> str:
    """``storm`` (gather the rows into this process) or ``distributed`` for a Ray run with the rows on the actors.

    ``auto``: Storm when gathering the rows and Storm's import and check fit in this process (under
    ``--max-memory``, less what the workers hold, else this machine's available memory), else the distributed
    check when it can check every property, else Storm as :func:`choose_checker` decides.
    """
    why = next((f"'{s.text}': {w}" for s in specs if (w := distributed_why(s, kind)) is not None), None)
    if checker == "distributed":
        if why is not None:
            raise PropertyError(f"--checker distributed cannot check {why}")
        return "distributed"
    per = STORM_BYTES_PER_TRANSITION + GATHER_BYTES_PER_TRANSITION * (2 if workers > 1 else 1) - 16
    rss = rss_bytes()
    need = rss + per * transitions
    budget = limits.max_memory - worker_rss if limits.max_memory is not None else rss + available_bytes()
    if need <= budget or why is not None:
        return "storm"
    log.warning(
        "gathering the rows and Storm's check would need about %.1f GiB in this process for %d transitions "
        "(%.1f GiB available): checking on the workers (distributed)",
        need / 2**30,
        transitions,
        budget / 2**30,
    )
    return "distributed"


def choose_checker(
    checker: str, limits: Limits, induced: InducedModel, spec: PropertySpec, depth: int, release: bool
) -> str:
    """``storm`` or ``native`` for ``--checker auto|storm|native``; stop rather than be killed for memory.

    ``auto`` keeps Storm unless its import and check would not fit (the memory under ``--max-memory``, else
    the machine's available memory) and the native checker can check the property. ``storm`` (or ``auto``
    without that way out) with ``--max-memory`` stops before the hand-off when Storm would need more.
    """
    if checker == "native":
        why = unsupported(spec, induced.kind)
        if why is not None:
            raise PropertyError(f"--checker native cannot check '{spec.text}': {why}")
        return "native"
    per = STORM_BYTES_PER_TRANSITION - (16 if release else 0)  # released: our 16 B copy is gone before Storm reads
    rss = rss_bytes()
    need = rss + per * induced.n_transitions
    budget = limits.max_memory if limits.max_memory is not None else rss + available_bytes()
    if need <= budget:
        return "storm"
    why = unsupported(spec, induced.kind)
    if checker == "auto" and why is None:
        log.warning(
            "Storm would need about %.1f GiB for %d transitions (%.1f GiB available): checking with "
            "distmc's native checker",
            need / 2**30,
            induced.n_transitions,
            budget / 2**30,
        )
        return "native"
    if limits.max_memory is None:
        log.warning(
            "Storm may need about %.1f GiB, more than the %.1f GiB available%s",
            need / 2**30,
            budget / 2**30,
            "" if checker == "storm" else f" (the native checker cannot help: {why})",
        )
        return "storm"
    raise ResourceLimitError(
        f"the induced model ({induced.n_states} states, {induced.n_transitions} transitions) is explored, but "
        f"handing it to Storm needs about {need / 2**30:.1f} GiB, more than --max-memory "
        f"{limits.max_memory / 2**30:.1f} GiB; nothing was checked"
        + ("" if checker == "storm" else f" (the native checker cannot check it: {why})"),
        {"states": induced.n_states, "transitions": induced.n_transitions, "frontier": 0, "depth": depth},
    )
