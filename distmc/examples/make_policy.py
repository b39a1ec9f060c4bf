"""Train the small policy bundled with distmc for ``gridworld.prism`` (N=6) and save it as TorchScript.

The bundled files ``gridworld_policy.pt`` and ``gridworld_policy.json`` are the output of this script; run it
again to regenerate them (it takes a few seconds on one CPU core and gives the same network, byte for byte, every
time and from any checkout)::

    python distmc/examples/make_policy.py            # writes next to this file
    python distmc/examples/make_policy.py --out DIR  # writes DIR/gridworld_policy.{pt,json}

What it trains: a ``Linear(4, 16) - Tanh - Linear(16, 4) - softmax`` network over the inputs ``(x, y, px, py)``
(the agent's and the patrol's positions, divided by N-1 inside the network) that outputs probabilities over
``(up, down, left, right)``. The "training" is supervised imitation of a one-step look-ahead heuristic on every
state of the N=6 grid: among the moves the agent can make, take the one that minimises

    (Manhattan distance of the intended cell to the goal corner (N-1, N-1)) + AVOID * P(crash in the next step),

where the crash probability is exact for one step of the model (the agent slips with probability ``slip`` and
stays; the patrol moves one cell along the axis of the agent's action, as the synchronised commands in
``gridworld.prism`` say). It is a stand-in for a policy trained by reinforcement learning: small, deterministic
to rebuild, and measurably better than the uniform policy (``distmc run example --const N=6 --policy example
--prop 'P=? [F "crash"]'`` against ``--policy uniform``). It is trained for N=6 only.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

#: Grid size the policy is trained for (``const int N`` of gridworld.prism).
N = 6
#: Slip probability of gridworld.prism.
SLIP = 0.1
#: Weight of the next-step crash probability against one cell of distance to the goal.
AVOID = 20.0
#: Output order of the network (the interface's ``actions``), and each action's move of the agent.
ACTIONS = ["up", "down", "left", "right"]
MOVES = {"up": (0, 1), "down": (0, -1), "left": (-1, 0), "right": (1, 0)}
FEATURES = ["x", "y", "px", "py"]
STEPS = 600
SEED = 0


class GridPolicy(torch.nn.Module):
    """``[B, 4]`` float (x, y, px, py) -> ``[B, 4]`` probabilities over (up, down, left, right)."""

    def __init__(self, n: int = N, hidden: int = 16) -> None:
        super().__init__()
        self.scale = 1.0 / float(n - 1)
        self.body = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.body(x * self.scale), dim=-1)


def all_states(n: int = N) -> np.ndarray:
    """Every (x, y, px, py) of the grid where the game is still on (no crash, goal not reached): ``[S, 4]`` int64."""
    g = np.stack(np.meshgrid(*[np.arange(n)] * 4, indexing="ij"), axis=-1).reshape(-1, 4)
    crash = (g[:, 0] == g[:, 2]) & (g[:, 1] == g[:, 3])
    goal = (g[:, 0] == n - 1) & (g[:, 1] == n - 1)
    return g[~crash & ~goal]


def heuristic_action(s: np.ndarray, n: int = N) -> int:
    """Index into :data:`ACTIONS` of the heuristic's move in state ``s`` = (x, y, px, py)."""
    x, y, px, py = (int(v) for v in s)
    best, best_score = -1, np.inf
    for a, name in enumerate(ACTIONS):
        dx, dy = MOVES[name]
        tx, ty = x + dx, y + dy
        if not (0 <= tx < n and 0 <= ty < n):
            continue  # not enabled in this state
        # The patrol moves +-1 (clamped) along the axis of the agent's action, each with probability 1/2.
        if dy:
            patrol = [(px, min(py + 1, n - 1)), (px, max(py - 1, 0))]
        else:
            patrol = [(min(px + 1, n - 1), py), (max(px - 1, 0), py)]
        crash = sum(0.5 * ((1 - SLIP) * ((tx, ty) == p) + SLIP * ((x, y) == p)) for p in patrol)
        score = (n - 1 - tx) + (n - 1 - ty) + AVOID * crash
        if score < best_score:
            best, best_score = a, score
    return best


def train(steps: int = STEPS, seed: int = SEED) -> tuple[GridPolicy, float]:
    """Fit :class:`GridPolicy` to the heuristic on every state; returns the network and its training accuracy."""
    torch.manual_seed(seed)
    states = all_states()
    targets = torch.tensor([heuristic_action(s) for s in states])
    x = torch.tensor(states, dtype=torch.float32)
    net = GridPolicy()
    opt = torch.optim.Adam(net.parameters(), lr=0.03)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.nll_loss(torch.log(net(x) + 1e-12), targets)
        loss.backward()
        opt.step()
    with torch.no_grad():
        accuracy = float((net(x).argmax(dim=1) == targets).float().mean())
    return net, accuracy


def _relative_sources(debug_pkl: bytes) -> bytes:
    """A TorchScript debug record with the absolute paths it names made relative: this file's, torch's sources'."""
    record = pickle.loads(debug_pkl)
    if not (isinstance(record, tuple) and record and record[0] == "FORMAT_WITH_STRING_TABLE"):
        return debug_pkl
    here = str(Path(__file__).resolve())
    torch_root = str(Path(torch.__file__).resolve().parent.parent) + "/"  # site-packages of wherever torch is

    def stable(s: object) -> object:
        if s == here:
            return "distmc/examples/make_policy.py"
        if isinstance(s, str) and s.startswith(torch_root):
            return s[len(torch_root) :]  # "torch/nn/modules/linear.py": not the venv's path
        return s

    table = tuple(stable(s) for s in record[1])
    return pickle.dumps((record[0], table, *record[2:]), protocol=2)


def save_reproducible(net: torch.nn.Module, path: Path) -> None:
    """``torch.jit.save`` of ``net`` whose bytes depend on the network only, not on where the checkout lies.

    TorchScript's debug records name the source file by its absolute path; they are rewritten with the
    repository-relative one (the archive's ``serialization_id`` is derived from the records, so it follows).
    """
    from distmc._internal.atomic import atomic_path  # here, not above: the lines of forward are in the archive

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / path.name  # same file name: the archive's records are named after it
        torch.jit.script(net).save(str(raw))
        reader = torch._C.PyTorchFileReader(str(raw))
        with atomic_path(path, same_name=True, errors=(OSError, RuntimeError)) as out:
            writer = torch._C.PyTorchFileWriter(str(out))
            for name in reader.get_all_records():
                if name == ".data/serialization_id":
                    continue  # the writer adds its own
                data = reader.get_record(name)
                if name.endswith(".debug_pkl"):
                    data = _relative_sources(data)
                writer.write_record(name, data, len(data))
            writer.write_end_of_file()
            del writer  # the file closed before it is renamed


def main(argv: list[str] | None = None) -> None:
    """Train and write ``gridworld_policy.pt`` (TorchScript) and ``gridworld_policy.json`` (interface)."""
    from distmc._internal.atomic import write_text

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="output folder")
    args = p.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":
        # TorchScript writes a module's constants in set order, which string hashing randomises per process: the
        # same network would get other bytes on every run. Run again with hashing fixed.
        cmd = [sys.executable, str(Path(__file__).resolve()), "--out", str(args.out)]
        sys.exit(subprocess.run(cmd, env={**os.environ, "PYTHONHASHSEED": "0"}).returncode)
    torch.set_num_threads(1)  # same floating-point reductions, hence the same network, on every machine
    net, accuracy = train()
    args.out.mkdir(parents=True, exist_ok=True)
    save_reproducible(net.eval(), args.out / "gridworld_policy.pt")
    interface = {"features": FEATURES, "actions": ACTIONS, "output": "probabilities"}
    write_text(args.out / "gridworld_policy.json", json.dumps(interface, indent=2) + "\n")
    print(f"wrote {args.out / 'gridworld_policy.pt'} (agreement with the heuristic on all states: {accuracy:.1%})")


if __name__ == "__main__":
    main()
