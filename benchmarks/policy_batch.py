"""Why the policy's forward passes have 1024 rows: per-state cost of one forward pass against its batch size.

The batch size is fixed (a state's action distribution must not depend on how many states share its batch, or two
worker counts would build different models; see `distmc/policy/batched.py`), so it was chosen by this
measurement: for the benchmark networks' shapes (2x64 and 2x1024 MLPs) it times forward passes of 64 to 16384 rows
on this machine's CPU (float32, `torch.inference_mode`, the thread count distmc's calibration picks) and prints
microseconds per state. Usage (from the repository root)::

    python benchmarks/policy_batch.py
"""

from __future__ import annotations

import os
import platform
import time

import torch


def main() -> int:
    sizes = [64, 256, 1024, 4096, 16384]
    print(f"machine: {platform.node()}, {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads available")
    print()
    print("| network | threads | " + " | ".join(f"{b} rows: us/state" for b in sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    for hidden, inputs, outputs in [(64, 10, 5), (1024, 10, 5)]:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                                  torch.nn.ReLU(), torch.nn.Linear(hidden, outputs), torch.nn.Softmax(dim=-1)).eval()
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
