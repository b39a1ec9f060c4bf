"""The cost of per-level checkpoints: the same Ray run with and without ``--checkpoint-dir``, side by side.

Runs alternate (without, with, without, with, ...) so that load from other processes on a shared machine hits
both alike; the table gives each pair and the ratio of the fastest of each. Both runs must give the identical
model (states, transitions, value). The checkpoint directory is removed after each run.

Usage (from the repository root)::

    python benchmarks/checkpoint_overhead.py --const xMax=8,yMax=8,slickness=0.1 --workers 2 --repeat 2
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "coolmc" / "avoid.prism"


def _disk_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--const", default="xMax=8,yMax=8,slickness=0.1")
    ap.add_argument("--prop", default="P=? [F<=100 COLLISION=true]")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default=None, help="where to write the checkpoints (default: a temporary directory)")
    a = ap.parse_args(argv)

    import ray

    from distmc.api import verify
    from distmc.options import VerifyOptions

    ray.init(address="local", include_dashboard=False, log_to_driver=False, configure_logging=False)
    opts = VerifyOptions(constants=a.const, mode="stochastic", workers=a.workers, driver="ray")
    base = Path(a.dir or tempfile.mkdtemp(prefix="distmc-ckpt-"))
    verify(a.model, a.prop, constants=a.const)  # warm the compiled routines' cache
    runs: dict[bool, list[tuple[float, float, object]]] = {False: [], True: []}
    disk = 0
    for i in range(a.repeat):
        for with_ckpt in (False, True):
            d = base / f"run{i}"
            t0 = time.perf_counter()
            r = verify(a.model, a.prop, opts, checkpoint_dir=d if with_ckpt else None)
            wall = time.perf_counter() - t0
            if with_ckpt:
                disk = _disk_bytes(d)
                shutil.rmtree(d)
            runs[with_ckpt].append((r.timings["explore_s"], wall, r))  # type: ignore[union-attr]
    ray.shutdown()
    r0 = runs[False][0][2]
    for _, _, r in runs[False] + runs[True]:
        assert (r.states, r.transitions, r.result) == (r0.states, r0.transitions, r0.result)  # type: ignore[attr-defined]
    print(
        f"{Path(a.model).name} {a.const}  {a.prop}; stochastic, uniform policy; {r0.states} states, "  # type: ignore[attr-defined]
        f"{r0.transitions} transitions; {a.workers} Ray workers"
    )  # type: ignore[attr-defined]
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}; "
        f"checkpoint on {base} ({disk / 2**20:.0f} MiB per run)"
    )
    print()
    print("| pair | explore s without | explore s with | ratio | total s without | total s with |")
    print("|---|---|---|---|---|---|")
    for i, (no, yes) in enumerate(zip(runs[False], runs[True], strict=True)):
        print(f"| {i + 1} | {no[0]:.2f} | {yes[0]:.2f} | {yes[0] / no[0]:.2f} | {no[1]:.2f} | {yes[1]:.2f} |")
    best_no, best_yes = min(x[0] for x in runs[False]), min(x[0] for x in runs[True])
    print(
        f"\nfastest exploration: {best_no:.2f} s without, {best_yes:.2f} s with checkpoints: "
        f"ratio {best_yes / best_no:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
