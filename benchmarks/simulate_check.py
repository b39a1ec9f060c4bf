"""An independent check of a verified value by simulation: Monte Carlo episodes against ``P=? [F<=k phi]``.

For models too large for Storm on this machine (avoid 12x12), the value distmc's native checker computes has no
Storm reference. This script estimates the same probability from episodes of the same policy in distmc's
Gymnasium environment (:mod:`distmc.gym`; its own step semantics, no explorer, reducer or checker involved) and
reports the estimate, its standard error and the verified value's distance in standard errors. Usage::

    python benchmarks/simulate_check.py --const xMax=12,yMax=12,slickness=0.1 --target COLLISION=true \\
        --horizon 100 --episodes 20000 --value 0.180390717815
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "coolmc" / "avoid.prism"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--const", default="xMax=12,yMax=12,slickness=0.1")
    ap.add_argument("--target", default="COLLISION=true", help="the state formula phi of F<=k phi")
    ap.add_argument("--horizon", type=int, default=100, help="k")
    ap.add_argument("--episodes", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--value", type=float, default=None, help="the verified value to compare with")
    a = ap.parse_args(argv)

    from distmc.check.properties import parse_property
    from distmc.gym import PrismEnv
    from distmc.gym.rollout import rollout
    from distmc.model.program import load_model

    model = load_model(a.model, a.const)
    (atom,) = parse_property(f"P=? [F {a.target}]", model).atoms.values()
    model.labels["_target"] = atom  # the episode ends where phi holds, as the verified model's terminal states
    env = PrismEnv(model, done_label="_target", max_steps=a.horizon)
    t0 = time.perf_counter()
    res = rollout(env, None, a.episodes, seed=a.seed, labels=["_target"])  # uniform over the enabled actions
    seconds = time.perf_counter() - t0
    hits = res.reached["_target"]
    p = float(hits.mean())
    se = float((p * (1 - p) / hits.size) ** 0.5)
    print(
        f"{Path(a.model).name} {a.const}: P(F<={a.horizon} {a.target}) by simulation = {p:.5f} +- {se:.5f} (1 SE), "
        f"{a.episodes} episodes, uniform policy, seed {a.seed}, {seconds:.1f} s"
    )
    if a.value is not None:
        z = (a.value - p) / se if se > 0 else float("inf")
        print(f"verified value {a.value!r}: {z:+.2f} standard errors from the estimate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
