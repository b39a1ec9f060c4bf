"""Resident memory of distmc's pipeline phase by phase (explore, assemble, hand-off to Storm), in one process.

Prints the current and peak resident set size after importing, after the kernel is ready, at every BFS level,
after assembly and after Storm holds the model. Usage (from the repository root)::

    python benchmarks/memory_profile.py --const xMax=8,yMax=8,slickness=0.1
"""

from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "coolmc" / "avoid.prism"


def rss(tag: str) -> None:
    with open("/proc/self/statm") as f:
        cur = int(f.read().split()[1]) * resource.getpagesize() / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"| {tag} | {cur:.0f} | {peak:.0f} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--const", default="xMax=8,yMax=8,slickness=0.1")
    ap.add_argument("--prop", default="P=? [F<=100 COLLISION=true]")
    a = ap.parse_args(argv)
    print(f"# {Path(a.model).name} {a.const}  {a.prop}  (stochastic, uniform policy)")
    print("| phase | current RSS MB | peak RSS MB |")
    print("|---|---|---|")
    import stormpy  # noqa: F401

    from distmc.assemble.reducer import assemble
    from distmc.assemble.storm import to_storm
    from distmc.explore.local import explore_local
    from distmc.pipeline import Job

    rss("imports")
    parts = Job(a.model, a.prop, a.const, "uniform", mode="stochastic").build()
    assert parts.expander is not None
    m, spec, codec, e = parts.model, parts.spec, parts.codec, parts.expander
    e.expand(codec.pack(m.initial_states))
    rss("kernel ready")
    explored = explore_local(e, codec.pack(m.initial_states), progress=lambda d: rss(f"depth {d['depth']}"))
    rss("explored")
    induced = assemble(explored, m, codec, spec.atoms, [])
    del explored
    rss(f"assembled ({induced.n_states} states, {induced.n_transitions} transitions)")
    to_storm(induced)
    rss("Storm holds the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
