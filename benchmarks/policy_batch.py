"""The cost of a policy's forward passes: per-state time against the batch size, and float64 against float32.

The batch size is fixed (a state's action distribution must not depend on how many states share its batch, or two
worker counts would build different models; see `distmc/policy/batched.py`), so it was chosen by the first
measurement: for the benchmark networks' shapes (2x64 and 2x1024 MLPs) it times forward passes of 64 to 16384 rows
on this machine's CPU (float32, `torch.inference_mode`, one thread and all of them) and prints microseconds per state.

`--dtype` measures what float64 policy arithmetic (distmc's default, `--policy-dtype float64`) costs against
float32: the same networks, as distmc runs them (`distmc.policy.batched.TorchPolicy`: TorchScript, converted to the
dtype, fixed batches of 1024 rows), over 65,536 states of a model with 10 features, on one thread and on all,
both dtypes in one run, alternated, the best of `--repeat`. It prints states per second.

Usage (from the repository root)::

    python benchmarks/policy_batch.py            # batch sizes (float32)
    python benchmarks/policy_batch.py --dtype    # float64 against float32, states/s
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def mlp(hidden: int, inputs: int, outputs: int) -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(inputs, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, outputs),
        torch.nn.Softmax(dim=-1),
    ).eval()


def batch_sizes() -> None:
    sizes = [64, 256, 1024, 4096, 16384]
    print("| network | threads | " + " | ".join(f"{b} rows: us/state" for b in sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    for hidden, inputs, outputs in [(64, 10, 5), (1024, 10, 5)]:
        net = mlp(hidden, inputs, outputs)
        for threads in sorted({1, torch.get_num_threads()}):
            torch.set_num_threads(threads)
            cells = []
            for b in sizes:
                x = torch.rand((b, inputs))
                with torch.inference_mode():
                    net(x)
                    reps = max(3, 20000 // b)
                    t = time.perf_counter()
                    for _ in range(reps):
                        net(x)
                    cells.append((time.perf_counter() - t) / reps / b * 1e6)
            print(f"| 2x{hidden} | {threads} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")


#: A model with 10 variables in [0, 15] and 5 actions (only its variables matter here: the network's inputs).
MODEL = (
    "mdp\nmodule m\n"
    + "".join(f"  v{i} : [0..15] init 0;\n" for i in range(10))
    + "".join(
        f"  [a{a}] true -> 1 : " + " & ".join(f"(v{i}'=mod(v{i}+{a},16))" for i in range(10)) + ";\n" for a in range(5)
    )
    + "endmodule\n"
)


def dtypes(repeat: int, n_states: int) -> None:
    from distmc.model.program import load_model
    from distmc.policy import load_policy

    with tempfile.TemporaryDirectory() as tmp:
        prism = Path(tmp) / "m.prism"
        prism.write_text(MODEL)
        model = load_model(prism)
        states = np.random.default_rng(0).integers(0, 16, size=(n_states, 10))
        print(f"{n_states} states per pass in batches of 1024 rows, best of {repeat}, the dtypes alternated")
        print()
        print("| network | threads | float32: states/s | float64: states/s | float64 time / float32 time |")
        print("|---|---|---|---|---|")
        for hidden in (64, 1024):
            path = Path(tmp) / f"net{hidden}.pt"
            torch.jit.script(mlp(hidden, 10, 5)).save(str(path))
            pols = {d: load_policy(str(path), model, dtype=d) for d in ("float32", "float64")}
            for threads in sorted({1, os.cpu_count() or 1}):
                torch.set_num_threads(threads)  # fixed here, not distmc's calibration (noisy on a loaded machine)
                best = {d: float("inf") for d in pols}
                for _ in range(repeat):
                    for d, pol in pols.items():  # alternated, so that load on the machine hits both alike
                        t = time.perf_counter()
                        pol.forward(states)
                        best[d] = min(best[d], time.perf_counter() - t)
                r32, r64 = n_states / best["float32"], n_states / best["float64"]
                print(
                    f"| 2x{hidden} | {threads} | {r32:,.0f} | {r64:,.0f} | {best['float64'] / best['float32']:.2f} |",
                    flush=True,
                )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", action="store_true", help="float64 against float32 (states/s) instead of batch sizes")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--states", type=int, default=65536)
    args = ap.parse_args()
    print(
        f"machine: {platform.node()}, {os.cpu_count()} cores, {platform.processor() or platform.machine()}; "
        f"{time.strftime('%Y-%m-%d %H:%M')}; torch {torch.__version__}, {torch.get_num_threads()} threads available"
    )
    print()
    if args.dtype:
        dtypes(args.repeat, args.states)
    else:
        batch_sizes()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
