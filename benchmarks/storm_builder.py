"""distmc's exploration + assembly against Storm's own explicit builder, side by side, in fresh processes.

For a PRISM MDP and a property, two child processes run one after the other on the same machine:

* ``storm``: ``stormpy.build_model(program, properties)``, Storm's property-driven explicit builder on the full MDP
  (what a user of Storm runs); timed from the parsed program to the built model.
* ``distmc``: stochastic mode with the uniform policy (every enabled action kept, so the same reachable states and
  every MDP transition are generated), with the kernel named by ``--kernel``: exploration plus assembly (ends with
  the induced DTMC as CSR arrays in memory) and, reported apart, the hand-off to Storm (``stormpy`` reads the UMB
  archive: then both sides end with a Storm model in memory). No check on either side.

Both count the same work: the full MDP's transitions as Storm reports them (``nr_transitions``); throughput is that
count divided by each side's time. Each child reports its peak resident memory (``ru_maxrss``), which includes
the interpreter and the imported libraries (the import-only peak is printed); distmc's is given before and after
the hand-off.

Usage (from the repository root)::

    python benchmarks/storm_builder.py --const xMax=8,yMax=8,slickness=0.1 --repeat 2

The model defaults to ``../shared/models/coolmc/avoid.prism`` (the paper's Avoidance grid).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "coolmc" / "avoid.prism"
DEFAULT_PROP = "P=? [F<=100 COLLISION=true]"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child_storm(model: str, constants: str, prop: str) -> dict[str, float]:
    import stormpy

    prog = stormpy.parse_prism_program(model, prism_compatibility=True)
    if constants:
        prog, _ = stormpy.instantiate_constants(prog, constants)
    props = stormpy.parse_properties(prop, prog)
    t0 = time.perf_counter()
    m = stormpy.build_model(prog, props)
    dt = time.perf_counter() - t0
    return {
        "seconds": dt,
        "states": m.nr_states,
        "transitions": m.nr_transitions,
        "choices": m.nr_choices,
        "peak_rss_mb": _peak_rss_mb(),
    }


def child_distmc(model: str, constants: str, prop: str, kernel: str) -> dict[str, float]:
    os.environ["DISTMC_KERNEL"] = kernel
    import stormpy  # noqa: F401  (imported by both sides; loaded before timing)

    from distmc.api import verify
    from distmc.assemble.reducer import assemble
    from distmc.assemble.storm import to_storm
    from distmc.explore.local import explore_local
    from distmc.pipeline import Job

    # Warm the compiled routines' on-disk cache on a small instance, so that this run measures exploration, not
    # numba's first compilation on a fresh machine (reported separately as the warm-up time).
    t0 = time.perf_counter()
    verify(model, prop, constants=_tiny(constants), policy="uniform", mode="stochastic")
    warm = time.perf_counter() - t0
    # The same pipeline as verify(), stopped where stormpy.build_model stops: a Storm model in memory.
    parts = Job(model, prop, constants, "uniform", mode="stochastic").build()
    assert parts.expander is not None
    m, spec, codec, expander = parts.model, parts.spec, parts.codec, parts.expander
    t1 = time.perf_counter()
    explored = explore_local(expander, codec.pack(m.initial_states))
    t2 = time.perf_counter()
    induced = assemble(explored, m, codec, spec.atoms, [])
    del explored
    t3 = time.perf_counter()
    peak_csr = _peak_rss_mb()
    storm_model = to_storm(induced)
    t4 = time.perf_counter()
    return {
        "seconds": t3 - t1,
        "explore_s": t2 - t1,
        "assemble_s": t3 - t2,
        "handoff_s": t4 - t3,
        "warmup_s": warm,
        "states": storm_model.nr_states,
        "dtmc_transitions": storm_model.nr_transitions,
        "peak_rss_mb": peak_csr,
        "peak_rss_handoff_mb": _peak_rss_mb(),
    }


def child_baseline(kernel: str) -> dict[str, float]:
    os.environ["DISTMC_KERNEL"] = kernel
    import stormpy  # noqa: F401

    import distmc.api  # noqa: F401
    import distmc.model._compiled  # noqa: F401

    return {"peak_rss_mb": _peak_rss_mb()}


def _tiny(constants: str) -> str:
    """The same constants with every integer >= 3 replaced by 2 (a small instance of the same model)."""
    out = []
    for part in constants.split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            if v.strip().isdigit() and int(v) >= 3:
                v = "2"
            out.append(f"{k}={v}")
    return ",".join(out)


def _spawn(args: list[str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--const", default="xMax=8,yMax=8,slickness=0.1")
    ap.add_argument("--prop", default=DEFAULT_PROP)
    ap.add_argument("--kernel", default="compiled", choices=["compiled", "numpy"])
    ap.add_argument("--repeat", type=int, default=1, help="alternate storm/distmc runs this many times")
    ap.add_argument("--json", default=None, help="write all measurements here")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        kind, *rest = a.child
        res = {"storm": child_storm, "distmc": child_distmc, "baseline": child_baseline}[kind](*rest)
        print(json.dumps(res))
        return 0
    base = _spawn(["baseline", a.kernel])
    runs = []
    for _ in range(a.repeat):
        s = _spawn(["storm", a.model, a.const, a.prop])
        d = _spawn(["distmc", a.model, a.const, a.prop, a.kernel])
        if s["states"] != d["states"]:
            raise AssertionError(f"state counts differ: storm {s['states']}, distmc {d['states']}")
        runs.append((s, d))
    mdp_t = runs[0][0]["transitions"]
    print(f"# {Path(a.model).name} {a.const}  {a.prop}   kernel={a.kernel}")
    print(
        f"# machine: {platform.node()} {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"python {platform.python_version()}; date {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print(
        f"# full MDP: {runs[0][0]['states']} states, {runs[0][0]['choices']} choices, {mdp_t} transitions; "
        f"import-only peak RSS {base['peak_rss_mb']:.0f} MB"
    )
    print(
        "| run | Storm build s | Storm M trans/s | Storm peak MB | distmc explore + assemble s | M trans/s | ratio "
        "| peak MB | memory ratio | + hand-off s | M trans/s | ratio | peak MB | memory ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, (s, d) in enumerate(runs):
        full = d["seconds"] + d["handoff_s"]
        print(
            f"| {i + 1} | {s['seconds']:.2f} | {mdp_t / s['seconds'] / 1e6:.2f} | {s['peak_rss_mb']:.0f} | "
            f"{d['seconds']:.2f} ({d['explore_s']:.2f} + {d['assemble_s']:.2f}) | {mdp_t / d['seconds'] / 1e6:.2f} | "
            f"{s['seconds'] / d['seconds']:.2f}x | {d['peak_rss_mb']:.0f} | {d['peak_rss_mb'] / s['peak_rss_mb']:.2f} | "
            f"{full:.2f} | {mdp_t / full / 1e6:.2f} | {s['seconds'] / full:.2f}x | {d['peak_rss_handoff_mb']:.0f} | "
            f"{d['peak_rss_handoff_mb'] / s['peak_rss_mb']:.2f} |"
        )
    ratios = sorted(s["seconds"] / d["seconds"] for s, d in runs)
    print(f"# median speed ratio (explore + assemble): {ratios[len(ratios) // 2]:.2f}x over {len(runs)} runs")
    print(
        f"# distmc: induced DTMC {runs[0][1]['dtmc_transitions']} transitions; warm-up (a full verify of a small "
        f"instance, before the measured run) {runs[0][1]['warmup_s']:.2f} s"
    )
    if a.json:
        Path(a.json).write_text(json.dumps({"baseline": base, "runs": runs, "args": vars(a)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
