"""What a run found: :class:`Report` (the JSON of ``--json``) and its text summary."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from distmc._internal.phases import PHASES
from distmc.check.result import bound_pairs, result_line
from distmc.explain.report import summary_lines

__all__ = ["EXPLORE_SPLIT", "FLOAT32_NOTE", "Report", "result_line_value"]


#: Parts of the exploration time a driver reports: Ray actors' start-up, the levels (of which ``place_s``: placing
#: each level's rows in global order while the next level runs), gathering the partitions' states and last rows
#: into the reducer (Ray driver); seconds inside the policy's forward passes (in-process driver).
EXPLORE_SPLIT = ("startup_s", "levels_s", "place_s", "gather_s", "policy_s")


#: The summary's line for a policy that ran in float32.
FLOAT32_NOTE = (
    "the policy ran in float32 (asked with --policy-dtype float32, or a network that cannot run in float64: "
    "a warning said why): its probabilities depend on the batch, the BLAS kernel and the CPU in their "
    "last digits (about 1e-7), so the bounds cover the checker's error only, not the policy's rounding"
)


def _time_line(t: dict[str, float]) -> str:
    """The summary's ``time:`` line: every phase that took time, in order, then the total they add up to."""
    parts = [(PHASES[name], t.get(f"{PHASES[name]}_s")) for name in PHASES]
    shown = ", ".join(
        f"{'hand-off' if k == 'handoff' else k} {v:.3f} s"
        for k, v in parts
        if v is not None and (v > 0 or k in ("explore", "check"))
    )
    return f"{shown}, total {t['total_s']:.3f} s"


@dataclass
class Report:
    """What a run found (``--json`` writes it)."""

    result: float | dict[str, float]
    states: int
    transitions: int
    mode: str
    workers: int
    model: str
    property: str
    policy: str
    induced: str  # "dtmc" or "mdp"
    choices: int
    initial_states: int
    depth: int
    policy_states: int
    policy_calls: int = 0  # network calls (fixed-shape batches) that evaluated those states
    timings: dict[str, float] = field(default_factory=dict)
    driver: str = "local"
    worker_stats: list[dict[str, float]] = field(
        default_factory=list
    )  # per Ray actor: states, batches, bytes sent, ...
    restarts: int = 0  # workers lost and replaced from the checkpoint
    checker: str = "storm"  # "storm", "native" (distmc's value iteration, :mod:`distmc.check.native`) or "distributed"
    bounds: list[float] | dict[str, list[float]] | None = None  # guaranteed to contain the exact value (see result.py)
    truth: bool | None = None  # a threshold property's truth value at the initial states
    precision: str = "1e-12 absolute"  # what the sound methods were asked for
    results: list[dict[str, object]] = field(default_factory=list)  # one per property, see :func:`result_entry`
    single_states: list[int] = field(default_factory=list)  # several properties: each one's own model's states
    # resident-set peaks in bytes: this process, and each Ray worker (none in-process)
    memory: dict[str, object] = field(default_factory=lambda: {"driver_peak_bytes": 0, "worker_peak_bytes": []})
    # --traces K: the K most probable paths to the target, [{"probability", "path": [{"state", "action", "pi",
    # "p"}, ...]}], and their summed probability; --values/--plot: the states most at risk (None: not asked)
    traces: list[dict] | None = None
    traces_mass: float | None = None
    riskiest_states: list[dict] | None = None
    options: dict[str, object] = field(default_factory=dict)  # the run's VerifyOptions (``to_dict``)
    # the arithmetic the policy ran in ("float64", or "float32": asked, or a network that cannot run in float64);
    # None without a policy (a dtmc, monolithic mode)
    policy_dtype: str | None = None
    # a run stopped before the fixpoint: every result is bounds from the explored part (distmc.check.partial)
    partial: bool = False
    # the frontier: why exploration stopped, explored and frontier states, the probability of reaching the
    # frontier; also for a horizon cut (then exact: partial is False); None: explored to the fixpoint
    frontier: dict[str, object] | None = None
    # --width / --order: each round's budget, states, explored states, width, bounds and elapsed seconds
    rounds: list[dict[str, Any]] | None = None

    def to_json(self) -> str:
        d = asdict(self)
        for name in ("traces", "traces_mass", "riskiest_states", "rounds"):
            if d[name] is None:
                del d[name]
        return json.dumps(d, indent=2)

    def summary(self) -> str:
        t = self.timings
        lines = (
            "\n".join(result_line(r) for r in self.results) if self.results else f"{self.property}  =  {self.result}"
        )
        cost = ""
        if len(self.single_states) > 1:
            largest = max(self.single_states)
            cost = (
                f"\n  one exploration for {len(self.single_states)} properties: {self.states - largest} states "
                f"more than the largest single-property model ({largest} states)"
            )
        return (
            f"{lines}\n"
            f"  model {self.model} ({self.mode}, policy {self.policy}"
            f"{'' if self.policy_dtype is None else ' in ' + self.policy_dtype}); induced {self.induced}: "
            f"{self.states} states, {self.transitions} transitions, {self.choices} rows, depth {self.depth}\n"
            f"  time: {_time_line(t)}"
            + ("" if self.checker == "storm" else f"\n  checked by distmc's {self.checker} checker, not Storm")
            + ("" if self.policy_dtype != "float32" else f"\n  {FLOAT32_NOTE}")
            + _frontier_line(self.frontier, self.partial)
            + (
                ""
                if not self.rounds
                else "\n  rounds: "
                + ", ".join(f"{r['explored_states']} states -> width {r['width']:.3g}" for r in self.rounds)
            )
            + cost
            + "".join(
                f"\n{line}" for line in summary_lines(self.traces, self.traces_mass, self.riskiest_states, self.result)
            )
        )

    def width(self) -> float:
        """The widest of the bounds (0 for a model explored whole; inf where one is not bounded)."""
        if not self.partial:
            return 0.0
        widest = 0.0
        for r in self.results:
            for lo, hi in bound_pairs(r["bounds"]):
                widest = max(widest, float(hi) - float(lo))
        return widest


def _frontier_line(frontier: dict[str, object] | None, partial: bool) -> str:
    """The summary's line on a model explored in part (a limit) or cut at a horizon; empty for a full one."""
    if frontier is None:
        return ""
    reach = frontier.get("frontier_probability")
    within = frontier.get("frontier_probability_within")
    reached = (
        ""
        if reach is None
        else (
            f", reached with probability {result_line_value(reach)}"
            + ("" if within is None else f" within {within} steps")
        )
    )
    if not partial:
        return (
            f"\n  horizon cut at depth {frontier['horizon']}: {frontier['frontier_states']} states at the horizon "
            "not expanded (exact for the step bound)"
        )
    return (
        f"\n  partial model: exploration stopped ({frontier['reason']}) with {frontier['explored_states']} states "
        f"expanded and {frontier['frontier_states']} found but not expanded{reached}; each result is bounds "
        "[lo, hi] that contain the value of the whole model"
    )


def result_line_value(v: object) -> str:
    if isinstance(v, dict):
        return "[" + ", ".join(f"{x:.3g}" for x in v.values()) + "] (min, max)"
    return f"{v:.3g}" if isinstance(v, float) else str(v)
