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
        for d, od in (("min", stormpy.logic.OptimizationDirection.MINIMIZE), ("max", stormpy.logic.OptimizationDirection.MAXIMIZE)):
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
