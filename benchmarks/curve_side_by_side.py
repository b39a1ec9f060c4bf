"""Issue 24: one checkpoint's full run against its check on the shared exploration, alternating, in one process.

Usage: ``nice -n 5 python benchmarks/curve_side_by_side.py 32`` after ``benchmarks/shield_curve.py`` (its
checkpoints in /tmp/distmc-shield-curve/checkpoints); the argument is the gridworld's N (N^4 states). Prints the
shared exploration's time, three (full run, shared check) pairs, and a profile of the last shared check.
"""

import cProfile
import glob
import pstats
import sys
import time
from importlib import resources

from distmc.api import verify
from distmc.curve.engine import SharedModel
from distmc.options import VerifyOptions

GRID = str(resources.files("distmc") / "examples" / "gridworld.prism")
pols = sorted(glob.glob("/tmp/distmc-shield-curve/checkpoints/step-*.pt2"))
N = sys.argv[1]
o = VerifyOptions(constants=f"N={N}", checker="native")
verify(GRID, 'P=? [F<=30 "crash"]', o, policy=pols[0])
t = time.perf_counter()
sm = SharedModel(GRID, 'P=? [F<=30 "crash"]', o)
print("shared explore", round(time.perf_counter() - t, 2))
sm.check(pols[0], 0)
for i in range(3):
    t = time.perf_counter()
    r = verify(GRID, 'P=? [F<=30 "crash"]', o, policy=pols[1])
    a = time.perf_counter() - t
    pr = cProfile.Profile()
    pr.enable()
    t = time.perf_counter()
    p = sm.check(pols[1], 1)
    b = time.perf_counter() - t
    pr.disable()
    print(f"full {a:.2f} {r.timings}\nshared check {b:.2f}")
    if i == 2:
        pstats.Stats(pr).sort_stats("tottime").print_stats(10)
