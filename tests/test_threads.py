"""The thread budget: ``threads_per_worker`` bounds every busy thread of a worker (Ray actor or in-process run).

CPU times are the kernel's (``/proc``, ``time.process_time``), so the bounds hold on a loaded machine too; the
thread counts each worker's pools report are checked as well, since a loaded machine hides an extra busy thread
in the ratio.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from distmc._internal.jit import HAVE_NUMBA, thread_budget, thread_settings
from distmc._internal.threads import ThreadSampler, descendants, process_times, thread_times
from distmc.api import verify

AVOID = str(Path(__file__).resolve().parents[1] / "benchmarks" / "envs" / "avoid.prism")
PROP = 'P=? [F<=100 "crash"]'
SLACK = 0.1  # the budget holds when CPU <= (threads + SLACK) x wall


def test_sampler_finds_a_busy_child() -> None:
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(0.3)"
    child = subprocess.Popen([sys.executable, "-c", burn])
    try:
        with ThreadSampler(lambda: descendants(__import__("os").getpid(), "-c"), interval=0.05) as sampler:
            deadline = time.monotonic() + 60
            while child.poll() is None and time.monotonic() < deadline:
                p = process_times(child.pid)
                if p is not None and p.cpu_s >= 0.3:
                    assert thread_times(child.pid)  # its main thread, named
                    break
                time.sleep(0.05)
    finally:
        child.wait(timeout=60)
    assert process_times(child.pid) is None  # gone
    rep = sampler.report()[child.pid]
    assert rep["cpu_s"] >= 0.2  # type: ignore[operator]
    assert rep["threads"][0][1] == "python" or rep["threads"][0][1].startswith("python")  # type: ignore[index]


@pytest.mark.skipif(not HAVE_NUMBA, reason="the budget bounds numba's pool")
def test_in_process_run_keeps_its_budget() -> None:
    before = thread_settings()
    wall, cpu = time.perf_counter(), time.process_time()
    r = verify(AVOID, PROP, constants="N=6,slickness=0.1", checker="native", driver="local", threads_per_worker=1)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert r.states > 40_000  # big enough batches for every pool to start
    assert cpu <= (1 + SLACK) * wall, f"{cpu:.2f} s CPU in {wall:.2f} s"
    assert thread_settings() == before  # the caller's counts are back
    with thread_budget(1):
        assert thread_settings()["numba"] == 1


@pytest.mark.skipif(not HAVE_NUMBA, reason="the budget bounds numba's pool")
def test_ray_worker_keeps_its_budget(local_ray: None) -> None:
    r = verify(
        AVOID, PROP, constants="N=6,slickness=0.1", driver="ray", workers=1, threads_per_worker=1, checker="distributed"
    )
    local = verify(AVOID, PROP, constants="N=6,slickness=0.1", checker="native", driver="local")
    assert r.result == local.result and r.states == local.states
    (ws,) = r.worker_stats
    assert ws["threads"]["numba"] == 1 and ws["threads"].get("arrow", 1) == 1 and ws["threads"].get("torch", 1) == 1
    cpu, wall = ws["explore_cpu_s"] + ws["check_cpu_s"], ws["explore_wall_s"] + ws["check_wall_s"]
    assert cpu <= (1 + SLACK) * wall, f"the worker used {cpu:.2f} s CPU in {wall:.2f} s"
    # the kernel's count for the whole process, from its start (imports, Ray's own threads, idle time included)
    p = process_times(int(ws["pid"]))  # the actor is kept for a next run: still there
    assert p is not None and p.cpu_s <= (1 + SLACK) * p.age_s, p
