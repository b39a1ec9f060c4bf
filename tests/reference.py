"""Storm's own builder and checker as the reference for differential tests and benchmarks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import stormpy

from distmc.check.checker import environment


def storm_reference(path: str | Path, constants: str | None, prop: str) -> dict[str, Any]:
    """States, transitions and value(s) from ``stormpy.build_model(program, properties)`` (property-driven)."""
    prog = stormpy.parse_prism_program(str(path), prism_compatibility=True)
    if constants:
        prog, _ = stormpy.instantiate_constants(prog, constants)
    props = stormpy.parse_properties(prop, prog)
    model = stormpy.build_model(prog, props)
    init = list(model.initial_states)
    f = props[0].get_raw_formula()
    out: dict[str, Any] = {"states": model.nr_states, "transitions": model.nr_transitions, "choices": model.nr_choices}
    if model.is_nondeterministic_model and not f.has_optimality_type:
        vals = {}
        for d, od in (
            ("min", stormpy.logic.OptimizationDirection.MINIMIZE),
            ("max", stormpy.logic.OptimizationDirection.MAXIMIZE),
        ):
            g = f.clone()
            g.set_optimality_type(od)
            r = stormpy.model_checking(model, g, only_initial_states=True, environment=environment())
            vals[d] = [r.get_value(s) for s in init]
        out["result"] = {"min": min(vals["min"]), "max": max(vals["max"])}
    else:
        r = stormpy.model_checking(model, f, only_initial_states=True, environment=environment())
        v = [r.get_value(s) for s in init]
        out["result"] = v[0] if len(v) == 1 else {"min": min(v), "max": max(v)}
    return out


def storm_policy_reference(
    path: str | Path, constants: str | None, prop: str, pi_fn: Any, actions: list[str], deterministic: bool = False
) -> dict[str, Any]:
    """Storm's full (property-driven) MDP, weighted state by state in Python by ``pi_fn(valuation dict) -> [A]``.

    Independent of distmc's kernel, explorer and reducer: the successors come from Storm's builder.
    Returns reachable states, transitions and the value at the initial state.
    """
    import json

    import numpy as np
    from stormpy.developer import storage as sst

    prog = stormpy.parse_prism_program(str(path), prism_compatibility=True)
    if constants:
        prog, _ = stormpy.instantiate_constants(prog, constants)
    props = stormpy.parse_properties(prop, prog)
    opts = stormpy.BuilderOptions(props)
    opts.set_build_choice_labels()
    opts.set_build_state_valuations()
    opts.set_build_all_labels()
    mdp = stormpy.build_model(prog, options=opts)
    m = mdp.transition_matrix
    n = mdp.nr_states
    rows: list[dict[int, float]] = []
    for s in range(n):
        start, end = m.get_row_group_start(s), m.get_row_group_end(s)
        labs = [next(iter(mdp.choice_labeling.get_labels_of_choice(c)), "") for c in range(start, end)]
        row: dict[int, float] = {}
        if end - start == 1 and not labs[0]:  # self-loop of a terminal or deadlock state
            for e in m.get_row(start):
                row[e.column] = row.get(e.column, 0.0) + e.value
        else:
            val = json.loads(str(mdp.state_valuations.to_json(s)))
            raw = np.asarray(pi_fn(val), dtype=float)
            en = np.array([a in labs for a in actions])
            p = np.where(en, raw, 0.0)
            if deterministic:
                q = np.zeros_like(p)
                q[int(np.argmax(np.where(en, p, -1)))] = 1.0
                p = q
            p = p / p.sum()
            for c, lab in zip(range(start, end), labs, strict=True):
                w = p[actions.index(lab)]
                if w > 0:
                    for e in m.get_row(c):
                        row[e.column] = row.get(e.column, 0.0) + w * e.value
        rows.append(row)
    init = list(mdp.initial_states)
    seen, stack = set(init), list(init)
    while stack:
        s = stack.pop()
        for t in rows[s]:
            if t not in seen:
                seen.add(t)
                stack.append(t)
    builder = sst.SparseMatrixBuilder(rows=n, columns=n, entries=sum(len(r) for r in rows), force_dimensions=True)
    for s, row in enumerate(rows):
        for t in sorted(row):
            builder.add_next_value(s, t, row[t])
    labeling = mdp.labeling
    dtmc = sst.SparseDtmc(sst.SparseModelComponents(transition_matrix=builder.build(), state_labeling=labeling))
    f = props[0].get_raw_formula()
    r = stormpy.model_checking(dtmc, f, only_initial_states=True, environment=environment())
    return {"states": len(seen), "transitions": sum(len(rows[s]) for s in seen), "result": r.get_value(init[0])}
