"""``distmc shield``: a shield for a trained policy, refined until the shielded policy verifies within a budget.

The loop (:func:`shield`):

1. verify the policy with its per-state values (``--values``: in this process, or one table part per Ray worker
   with ``--checker distributed``);
2. the risk of every enabled action in every state reached (:mod:`distmc.shield.risk`: one step by that action,
   then the policy);
3. keep, in each state, the actions still allowed whose risk is at most the round's budget (the safest ones, ties
   within :data:`TIE`, where none is): the allowed sets only ever shrink, so the loop ends; the first budget is
   :data:`START` x ``delta`` (only the riskiest actions go), each next one a quarter of it, the last round's 0;
4. write the shield table and the shielded policy's manifest (:mod:`distmc.policy.shielded`) and **verify the
   shielded policy** like any other policy, with its per-state values;
5. stop when its value is at most ``delta``, or when nothing more can be removed (every allowed set already holds
   only its safest actions); else the next round takes risks from the shielded policy's values with a smaller
   budget;
6. once a shield meets ``delta``, ``relax`` more verifications bisect (geometrically) between its budget and the
   next larger one, from the allowed sets and values it started from, for the largest budget that still meets
   ``delta``: the shield that removes least among those tried.

Keeping only the actions whose risk is below the policy's own mix never raises an unbounded reachability value
(see :mod:`distmc.shield.risk`); the verification, not that argument, is what the report states. The result is
the least restrictive verified shield that meets ``delta``, or, when none does, the one with the smallest value:
its table and manifest are written, and a separate ``distmc run --policy MANIFEST`` of the same property gives the
same value (the same explored model, checked the same way).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from distmc._internal.atomic import atomic_path, write_text
from distmc.errors import PropertyError, UsageError
from distmc.explain.values import read_values
from distmc.options import VerifyOptions
from distmc.pipeline import Job, Parts
from distmc.policy.shielded import KeyIndex, ShieldTable, write_manifest
from distmc.shield.risk import action_risks

__all__ = ["ShieldReport", "shield"]

log = logging.getLogger(__name__)

#: Risks this close to a state's smallest count as equally safe.
TIE = 1e-12

#: The first round's budget, in multiples of delta: the shield starts by removing only the riskiest actions, and
#: tightens (a quarter each round) only while the shielded policy does not verify within delta.
START = 16.0

#: States listed where the shield acts most.
TOP = 5


@dataclass
class ShieldReport:
    """What :func:`shield` found (``distmc shield --json`` writes it)."""

    property: str
    delta: float
    value_before: float
    value_after: float
    met: bool  # value_after <= delta
    states_before: int
    states_after: int
    shielded_states: int  # states of the table (the shield allows fewer actions there than are enabled)
    changed_states: int  # explored states (of the unshielded run) where the shield removes policy mass
    mass_removed: float  # sum over those states of the policy's probability on removed actions
    mass_removed_mean: float  # the same divided by the unshielded run's states
    rounds: list[dict[str, Any]] = field(default_factory=list)  # budget, value, states, shielded states, seconds
    reward: str | None = None  # the reward property, R{"name"}=? [C<=K]
    reward_before: float | None = None
    reward_after: float | None = None
    top_states: list[dict[str, Any]] = field(default_factory=list)
    shield_path: str = ""
    policy_path: str = ""
    unknown_branches: int = 0  # branches to states no exploration reached (risk counted as 1)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def summary(self) -> str:
        verdict = (
            f"<= delta {self.delta:g}"
            if self.met
            else f"> delta {self.delta:g}: the smallest value the shield reached (nothing more to remove)"
        )
        lines = [
            f"{self.property}: {self.value_before:.12g} without the shield, {self.value_after:.12g} with it ({verdict})",
            f"  explored states: {self.states_before} without, {self.states_after} with the shield; the shield "
            f"restricts {self.shielded_states} states; it changes the policy in {self.changed_states} of the "
            f"{self.states_before} states, removing {self.mass_removed:.6g} of probability mass "
            f"({self.mass_removed_mean:.4g} per state on average)",
        ]
        if self.reward is not None:
            lines.append(
                f"  {self.reward}: {self.reward_before:.10g} without, {self.reward_after:.10g} with the shield"
            )
        lines.append("  rounds: " + "; ".join(f"budget {r['budget']:.3g} -> {r['value']:.10g}" for r in self.rounds))
        if self.top_states:
            lines.append("  where the shield acts most (policy mass removed):")
            for t in self.top_states:
                lines.append(
                    f"    {t['state']}: removes {', '.join(t['removed'])} ({t['mass']:.4f} of pi), keeps "
                    f"{', '.join(t['allowed'])}; value there {t['value']:.6g}"
                )
        lines.append(
            f"  shield table: {self.shield_path}; shielded policy: {self.policy_path} "
            f"(distmc run --policy {self.policy_path})"
        )
        return "\n".join(lines)


def _step_bound(text: str) -> int | None:
    m = re.search(r"\bF\s*<=\s*(\d+)", text) or re.search(r"\bU\s*<=\s*(\d+)", text)
    return int(m.group(1)) if m else None


def _reward_property(reward: str, steps: int | None, prop: str) -> str:
    k = steps if steps is not None else _step_bound(prop)
    if k is None:
        raise UsageError(
            f"--reward {reward}: the property '{prop}' has no step bound; give --reward-steps K for "
            f'R{{"{reward}"}}=? [C<=K]'
        )
    return f'R{{"{reward}"}}=? [C<={k}]'


@dataclass
class _Values:
    """A run's per-state values: states ``[K, V]``, their values ``[K]`` and a key index."""

    states: np.ndarray
    value: np.ndarray
    index: KeyIndex

    @classmethod
    def read(cls, path: str | Path, parts: Parts) -> _Values:
        table = read_values(path)
        names = table.column_names
        states = np.stack(
            [
                np.asarray(table.column(v.name).to_numpy(zero_copy_only=False), dtype=np.int64)
                for v in parts.model.variables
            ],
            axis=1,
        )
        col = "value" if "value" in names else "value_max"  # an induced MDP: the worst case
        value = np.asarray(table.column(col).to_numpy(zero_copy_only=False), dtype=np.float64)
        return cls(states, value, KeyIndex(parts.codec.pack(states)))


class _Shield:
    """The allowed sets (model actions) of every state seen so far: grows by key, sets only shrink."""

    def __init__(self, n_actions: int) -> None:
        self.keys = np.zeros(0, dtype=np.uint64)
        self.states = np.zeros((0, 0), dtype=np.int64)
        self.allowed = np.zeros((0, n_actions), dtype=bool)
        self.enabled = np.zeros((0, n_actions), dtype=bool)
        self.risk = np.zeros((0, n_actions))  # the last risks computed for each state (NaN: not enabled)
        self.index = KeyIndex(self.keys)

    def rows_of(self, keys: np.ndarray, states: np.ndarray, enabled: np.ndarray) -> np.ndarray:
        """The rows of ``keys`` ``[B]``, new ones added with every enabled action allowed."""
        rows = self.index.find(keys)
        new = rows < 0
        if new.any():
            n0 = self.keys.shape[0]
            self.keys = np.concatenate([self.keys, keys[new]]) if n0 else keys[new].copy()
            self.states = np.concatenate([self.states, states[new]]) if n0 else states[new].copy()
            self.allowed = np.concatenate([self.allowed, enabled[new]])
            self.enabled = np.concatenate([self.enabled, enabled[new]])
            self.risk = np.concatenate([self.risk, np.full(enabled[new].shape, np.nan)])
            rows[new] = n0 + np.arange(int(new.sum()))
            self.index = KeyIndex(self.keys)
        return rows

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """The allowed sets and risks now (:meth:`restore` returns to them)."""
        return self.allowed.copy(), self.risk.copy()

    def restore(self, snap: tuple[np.ndarray, np.ndarray]) -> None:
        """Back to ``snap``; states seen since then allow every enabled action again."""
        allowed, risk = snap
        k = allowed.shape[0]
        self.allowed[:k], self.risk[:k] = allowed, risk
        self.allowed[k:], self.risk[k:] = self.enabled[k:], np.nan

    def restricted(self) -> np.ndarray:
        """``[S]`` bool: rows where the shield allows fewer actions than are enabled."""
        return (self.allowed != self.enabled).any(axis=1)


def _restrict(risk: np.ndarray, allowed: np.ndarray, budget: float) -> np.ndarray:
    """The actions of ``allowed`` ``[B, A]`` with risk ``[B, A]`` within ``budget``; the safest where none is."""
    r = np.where(allowed, risk, np.inf)
    best = r.min(axis=1, keepdims=True)
    keep = allowed & (r <= budget + TIE)
    none = ~keep.any(axis=1)
    keep[none] = allowed[none] & (r[none] <= best[none] + TIE)
    return keep


def shield(
    model_path: str | Path,
    prop: str,
    delta: float,
    options: VerifyOptions | None = None,
    *,
    out: str | Path = "shield",
    reward: str | None = None,
    reward_steps: int | None = None,
    max_rounds: int = 8,
    relax: int = 2,
    **kw: Any,
) -> ShieldReport:
    """Compute, refine and verify a shield that brings ``prop`` (a risk: lower is safer) to at most ``delta``.

    Args:
        model_path: the PRISM mdp.
        prop: ``P=? [F "crash"]``-like: the probability to keep low (step-bounded or not).
        delta: the value the shielded policy must verify to.
        options: the runs' :class:`~distmc.options.VerifyOptions` (policy, constants, mode, driver, workers,
            checker...).
        out: the folder for ``shield.parquet``, ``shielded.json`` (the shielded policy) and the rounds' files.
        reward: a reward structure whose expected total over the property's step bound (or ``reward_steps``) is
            reported before and after (what safety costs).
        reward_steps: K of ``R{"reward"}=? [C<=K]`` (default: the property's step bound).
        max_rounds: the most verifications of a shielded policy while tightening.
        relax: once a shield meets ``delta``, this many more verifications look for a larger budget that still
            meets it (a shield that removes less); the one with the largest such budget is the result.
        kw: changes to ``options`` by name.

    Example:
        >>> r = shield("avoid.prism", 'P=? [F<=30 "crash"]', 0.05, constants="N=5,slickness=0.1",
        ...            policy="policy.pt")  # doctest: +SKIP
        >>> r.value_after <= 0.05
        True
    """
    from distmc.api import verify

    opts = VerifyOptions.build(options, **kw)
    if opts.mode == "monolithic":
        raise UsageError("distmc shield restricts a policy: use --mode stochastic or deterministic")
    if not 0.0 <= delta <= 1.0:
        raise UsageError(f"--delta must be a probability in [0, 1], not {delta}")
    if max_rounds < 1:
        raise UsageError(f"--max-rounds must be at least 1, not {max_rounds}")
    parts = Job.of(str(model_path), prop, opts).build()  # the run's own job: policy, mode and the policy's dtype
    spec = parts.spec
    if len(parts.props.specs) != 1 or spec.is_reward or spec.operator != "P":
        raise PropertyError(f"distmc shield lowers one probability, P=? [...]: not '{prop}'")
    if parts.expander is None or parts.expander.policy is None:
        raise UsageError(f"{model_path} has no choices for a policy to make (a dtmc): nothing to shield")
    expander = parts.expander
    assert expander.policy is not None
    model, codec, kernel = parts.model, parts.codec, expander.kernel
    to_policy = expander.model_to_policy
    policy_actions = list(expander.policy.actions)
    outdir = Path(out)
    work = outdir / "rounds"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    run_opts = VerifyOptions.build(
        opts, keep_model=False, export_path=None, traces=0, plot=None, plot_vars=None, props=()
    )

    def run(policy: str, values: Path | None, text: str = prop) -> Any:
        return verify(
            model_path,
            text,
            VerifyOptions.build(run_opts, policy=policy, values=None if values is None else str(values)),
        )

    before = run(opts.policy or "uniform", work / "values-0.parquet")
    vals = _Values.read(work / "values-0.parquet", parts)
    base_states, base_value = vals.states, vals.value
    sh = _Shield(len(model.actions))
    rounds: list[dict[str, Any]] = []
    best: tuple[float, int, Any] = (float(before.result), 0, before)  # round 0: no shield
    budget = min(1.0, START * float(delta))
    unknown = 0
    r = 0

    def attempt(b: float, v: _Values) -> tuple[Any, float] | None:
        """Restrict by budget ``b`` on the values ``v``; verify the shield (None: it would change nothing)."""
        nonlocal r, unknown
        ar = action_risks(model, kernel, codec, parts.props.terminal_mask, v.states, v.index, v.value)
        unknown = max(unknown, ar.unknown)
        rows = sh.rows_of(codec.pack(v.states), v.states, ar.enabled)
        old = sh.allowed[rows]
        new = _restrict(ar.risk, old, b)
        if not (new != old).any():
            return None
        r += 1
        sh.allowed[rows] = new
        sh.risk[rows] = ar.risk
        _, manifest = _write_round(work, r, sh, model, to_policy, policy_actions, opts, prop, delta)
        rep = run(str(manifest), work / f"values-{r}.parquet")
        value = float(rep.result)
        rounds.append(
            {
                "round": r,
                "budget": b,
                "value": value,
                "states": rep.states,
                "shielded_states": int(sh.restricted().sum()),
                "seconds": rep.timings.get("total_s", 0.0),
            }
        )
        log.info("shield round %d: budget %.3g, value %.12g, %d states", r, b, value, rep.states)
        return rep, value

    met: tuple[tuple[np.ndarray, np.ndarray], _Values, float] | None = None
    while float(before.result) > delta and len(rounds) < max_rounds:
        snap = sh.snapshot()
        got = attempt(budget, vals)
        if got is None:
            if budget == 0.0:
                break  # every state keeps only its safest actions: nothing more can be removed
            budget = 0.0 if len(rounds) + 1 >= max_rounds else budget / 4
            continue
        rep, value = got
        if value < best[0]:
            best = (value, r, rep)
        if value <= delta:
            met = (snap, vals, budget)
            break
        vals = _Values.read(work / f"values-{r}.parquet", parts)
        budget = 0.0 if len(rounds) + 1 >= max_rounds else budget / 4
    if met is not None and relax > 0:
        # delta is met: look between this budget and the next larger one for a shield that removes less
        snap, v, lo = met
        hi = min(1.0, 4 * lo)
        for _ in range(relax if 0 < lo < hi else 0):
            mid = float(np.sqrt(lo * hi))
            sh.restore(snap)
            got = attempt(mid, v)
            if got is not None and got[1] <= delta:
                lo, best = mid, (got[1], r, got[0])
            else:
                hi = mid
    value_after, r_best, after = best
    if r_best == 0:  # no round was needed (or none changed anything): the empty shield, verified as such
        _, manifest = _write_round(work, 0, sh, model, to_policy, policy_actions, opts, prop, delta)
        after = run(str(manifest), None)
        value_after = float(after.result)
    shield_path, policy_path = outdir / "shield.parquet", outdir / "shielded.json"
    with atomic_path(shield_path) as tmp:
        shutil.copyfile(work / f"shield-{r_best}.parquet", tmp)
    write_manifest(
        policy_path,
        opts.policy or "uniform",
        shield_path,
        opts.interface,
        model=str(model_path),
        constants=opts.constants,
        property=prop,
        delta=delta,
        value=value_after,
    )
    final = ShieldTable.read(shield_path, model, policy_actions)

    # what the shield changes, measured on the unshielded run's states
    ar0 = action_risks(
        model, kernel, codec, parts.props.terminal_mask, base_states, KeyIndex(codec.pack(base_states)), base_value
    )
    enabled = ar0.enabled
    has = enabled.any(axis=1)
    pi = np.zeros(enabled.shape)
    pi[has] = expander.action_weights(base_states[has], enabled[has])
    allowed_model = np.ones(enabled.shape, dtype=bool)
    rows = KeyIndex(codec.pack(final.states)).find(codec.pack(base_states))
    hit = rows >= 0
    cols = np.flatnonzero(to_policy >= 0)
    allowed_model[np.ix_(np.flatnonzero(hit), cols)] = final.allowed[rows[hit]][:, to_policy[cols]]
    removed = (pi * ~allowed_model).sum(axis=1)
    reward_text = reward_before = reward_after = None
    if reward is not None:
        reward_text = _reward_property(reward, reward_steps, prop)
        reward_before = float(run(opts.policy or "uniform", None, reward_text).result)
        reward_after = float(run(str(policy_path), None, reward_text).result)
    top = np.argsort(-removed, kind="stable")[:TOP]
    top_states = [
        {
            "state": model.describe_state(base_states[i]),
            "mass": float(removed[i]),
            "value": float(base_value[i]),
            "removed": [model.actions[a] for a in np.flatnonzero(enabled[i] & ~allowed_model[i])],
            "allowed": [model.actions[a] for a in np.flatnonzero(enabled[i] & allowed_model[i])],
        }
        for i in top
        if removed[i] > 0
    ]
    report = ShieldReport(
        property=prop,
        delta=float(delta),
        value_before=float(before.result),
        value_after=value_after,
        met=value_after <= delta,
        states_before=before.states,
        states_after=after.states,
        shielded_states=int(final.states.shape[0]),
        changed_states=int((removed > 0).sum()),
        mass_removed=float(removed.sum()),
        mass_removed_mean=float(removed.sum() / max(1, base_states.shape[0])),
        rounds=rounds,
        reward=reward_text,
        reward_before=reward_before,
        reward_after=reward_after,
        top_states=top_states,
        shield_path=str(shield_path),
        policy_path=str(policy_path),
        unknown_branches=unknown,
    )
    write_text(outdir / "report.json", report.to_json(), sync=True)
    return report


def _write_round(
    work: Path,
    r: int,
    sh: _Shield,
    model: Any,
    to_policy: np.ndarray,
    actions: list[str],
    opts: VerifyOptions,
    prop: str,
    delta: float,
) -> tuple[Path, Path]:
    """Round ``r``'s shield table (the restricted states, allowed sets over the policy's actions) and manifest."""
    keep = np.flatnonzero(sh.restricted())
    states = sh.states[keep] if sh.states.shape[0] else np.zeros((0, len(model.variables)), dtype=np.int64)
    cols = np.flatnonzero(to_policy >= 0)
    allowed = np.zeros((keep.size, len(actions)), dtype=bool)
    allowed[:, to_policy[cols]] = sh.allowed[keep][:, cols]
    risk = {f"risk_{model.actions[c]}": sh.risk[keep, c] for c in cols}  # for people: each action's risk
    table_path = ShieldTable(actions, states, allowed).write(work / f"shield-{r}.parquet", model, risk)
    manifest = write_manifest(
        work / f"shielded-{r}.json", opts.policy or "uniform", table_path, opts.interface, property=prop, delta=delta
    )
    return table_path, manifest
