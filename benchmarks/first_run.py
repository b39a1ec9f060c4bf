"""The README's first run, cold (nothing compiled yet) and warm: where a new user's first seconds go.

Runs ``distmc run example --const N=6 --policy example --prop 'P=? [F "crash"]'`` (the README's first command)
as a new process, each time timed from its start to its exit, with ``--json`` for the phases it reports:

* ``cold``: as after a fresh install: an empty numba cache (``NUMBA_CACHE_DIR`` a new directory, so no compiled
  routine is found) and an empty bytecode cache (``PYTHONPYCACHEPREFIX`` a new directory);
* ``warm``: the same command again, with the caches the cold run left.

``--venv DIR`` runs it in a fresh virtual environment instead (``python -m venv DIR``, then the README's install:
``pip install torch==2.13.0 DIR_OF_REPO``, not editable, so pip compiles the bytecode as it would for a user), which
also times the install. Usage (from the repository root, with nothing else running)::

    python benchmarks/first_run.py --repeat 3
    python benchmarks/first_run.py --venv /tmp/fresh
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMAND = ["run", "example", "--const", "N=6", "--policy", "example", "--prop", 'P=? [F "crash"]']


def timed(distmc: list[str], env: dict[str, str], out: Path) -> dict[str, float]:
    """One run of the command: its wall seconds, the phases its report gives, and its import time alone."""
    t0 = time.perf_counter()
    subprocess.run([*distmc, *COMMAND, "--json", str(out)], env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    rep = json.loads(out.read_text())
    t = rep["timings"]
    return {
        "wall_s": wall,
        "total_s": t["total_s"],
        "parse_s": t.get("parse_s", 0.0),
        "explore_s": t.get("explore_s", 0.0),
        "assemble_s": t.get("assemble_s", 0.0),
        "handoff_s": t.get("handoff_s", 0.0),
        "check_s": t.get("check_s", 0.0),
        "outside_s": wall - t["total_s"],  # interpreter start, imports, the report's output
        "result": rep["result"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="cold/warm pairs (each cold with fresh caches)")
    ap.add_argument("--venv", type=Path, default=None, help="a fresh virtual environment here (removed first)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = ap.parse_args()
    rows: list[dict[str, object]] = []
    base = dict(os.environ)
    distmc = [sys.executable, "-m", "distmc.cli"]
    if args.venv is not None:
        subprocess.run(["rm", "-rf", str(args.venv)], check=True)
        subprocess.run([sys.executable, "-m", "venv", str(args.venv)], check=True)
        py = str(args.venv / "bin" / "python")
        t0 = time.perf_counter()
        subprocess.run([py, "-m", "pip", "install", "--quiet", "torch==2.13.0", str(REPO)], check=True)
        rows.append({"run": "install", "wall_s": time.perf_counter() - t0})
        distmc = [str(args.venv / "bin" / "distmc")]
        base.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            env = dict(base)
            if args.venv is None:  # a fresh venv's caches are empty anyway (its first run is the cold one)
                env["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(dir=tmp)
                env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(dir=tmp)
            for kind in ("cold", "warm") if args.venv is None or i == 0 else ("warm",):
                row: dict[str, object] = {"run": kind, **timed(distmc, env, Path(tmp) / "r.json")}
                rows.append(row)
                print(
                    json.dumps(
                        {k: round(v, 2) if isinstance(v, float) and k != "result" else v for k, v in row.items()}
                    ),
                    flush=True,
                )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
