"""The native checker's update order by strongly connected components (:mod:`distmc.check.topological`).

The components against a plain reference (mutual reachability), the order (every edge leaving a component points to
a lower height), one pass for an acyclic chain whose states may stay (their loops solved at once), the values the
same for any thread count, and the bounds of both orders containing Storm's exact value.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from distmc._internal.jit import HAVE_NUMBA
from distmc.api import verify
from distmc.check.kernels import ChunkedCSR
from distmc.check.native import LocalEngine, matrix_of, values_of
from distmc.check.properties import parse_properties
from distmc.check.topological import components
from distmc.model.program import load_model


def _csr(edges: dict[int, list[tuple[int, float]]], n: int, chunks: int = 2) -> ChunkedCSR:
    offsets = np.zeros(n + 1, dtype=np.int64)
    targets: list[int] = []
    probs: list[float] = []
    for s in range(n):
        for t, p in edges.get(s, []):
            targets.append(t)
            probs.append(p)
        offsets[s + 1] = len(targets)
    cut = int(offsets[n // 2])  # two chunks of whole rows
    t_arr, p_arr = np.array(targets, dtype=np.int64), np.array(probs)
    if chunks == 1 or cut in (0, len(targets)):
        return ChunkedCSR(offsets, [t_arr], [p_arr], n)
    return ChunkedCSR(offsets, [t_arr[:cut], t_arr[cut:]], [p_arr[:cut], p_arr[cut:]], n)


def _reach(edges: dict[int, list[tuple[int, float]]], n: int, active: np.ndarray) -> np.ndarray:
    r = np.eye(n, dtype=bool)
    for s in range(n):
        for t, _ in edges.get(s, []):
            if active[s] and active[t]:
                r[s, t] = True
    for k in range(n):  # Warshall
        r |= r[:, [k]] & r[[k], :]
    return r


@pytest.mark.parametrize("seed", range(6))
def test_components_and_their_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 60
    edges = {s: [(int(t), 0.1) for t in rng.choice(n, size=int(rng.integers(1, 4)), replace=False)] for s in range(n)}
    active = rng.random(n) < 0.9
    c = components(_csr(edges, n), active)
    assert np.array_equal(np.sort(c.order), np.flatnonzero(active))  # every active row once, no other
    comp = np.full(n, -1)
    height = np.full(n, -1)
    for k in range(c.count):
        comp[c.order[c.comp_off[k] : c.comp_off[k + 1]]] = k
    for h in range(c.height_off.shape[0] - 1):
        for k in range(c.height_off[h], c.height_off[h + 1]):
            height[c.order[c.comp_off[k] : c.comp_off[k + 1]]] = h
    r = _reach(edges, n, active)
    mutual = r & r.T
    for s in np.flatnonzero(active):
        assert set(np.flatnonzero(comp == comp[s])) == set(np.flatnonzero(mutual[s] & active))
        for t, _ in edges[s]:
            if active[t] and comp[t] != comp[s]:
                assert height[t] < height[s]  # a successor's component is updated first


def _passes(path: str, prop: str, order: str, constants: str | None = None) -> tuple[int, np.ndarray]:
    _, induced = verify(path, prop, constants=constants, keep_model=True)  # type: ignore[misc]
    spec = parse_properties(prop, load_model(path, constants)).specs[0]
    e = LocalEngine(matrix_of(induced), None, induced.initial, order=order)
    count = [0]
    sweep = e.sweep3

    def counted(*a: object) -> None:
        count[0] += 1
        sweep(*a)  # type: ignore[arg-type]

    e.sweep3 = counted  # type: ignore[method-assign]
    values = np.stack(values_of(e, induced, spec))
    return count[0], values


STAYING = """dtmc
module walk
  x : [0..300] init 0;
  y : [0..3] init 0;
  [] x<300 -> 0.4 : (x'=x+1) & (y'=min(y+1, 3)) + 0.4 : (x'=x+1) & (y'=max(y-1, 0)) + 0.15 : true + 0.05 : (y'=3);
  [] x=300 -> true;
endmodule
label "goal" = x=300 & y<2;
"""


def test_an_acyclic_chain_whose_states_stay_is_settled_in_one_pass(tmp_path: Path) -> None:
    path = tmp_path / "staying.prism"
    path.write_text(STAYING)
    passes, values = _passes(str(path), 'P=? [F "goal"]', "components")
    assert passes <= 2  # one pass settles it; the second confirms the bounds
    block_passes, block_values = _passes(str(path), 'P=? [F "goal"]', "blocks")
    assert block_passes <= 2  # the distributed checker's order: the same heights, Jacobi inside a block
    level_passes, level_values = _passes(str(path), 'P=? [F "goal"]', "levels")
    assert level_passes > 20  # the loops iterated: many passes
    assert np.all(values[1] <= level_values[2]) and np.all(level_values[1] <= values[2])  # the bounds overlap
    assert np.all(values[1] <= block_values[2]) and np.all(block_values[1] <= values[2])


@pytest.mark.skipif(not HAVE_NUMBA or __import__("numba").config.NUMBA_NUM_THREADS < 2, reason="numba's threads")
def test_the_values_do_not_depend_on_the_threads(tmp_path: Path) -> None:
    import numba

    from distmc.check import blocks, topological

    path = tmp_path / "staying.prism"
    path.write_text(
        STAYING.replace("x : [0..300]", "x : [0..3000]").replace("x<300", "x<3000").replace("x=300", "x=3000")
    )
    old_block, old_threads = topological.PARALLEL_BLOCK, numba.get_num_threads()
    try:
        topological.PARALLEL_BLOCK = blocks.PARALLEL_BLOCK = 4  # every height of a few states shared out
        for order in ("components", "blocks"):
            numba.set_num_threads(1)
            _, one = _passes(str(path), 'P=? [F "goal"]', order)
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
            _, two = _passes(str(path), 'P=? [F "goal"]', order)
            assert np.array_equal(one, two), order
    finally:
        topological.PARALLEL_BLOCK = blocks.PARALLEL_BLOCK = old_block
        numba.set_num_threads(old_threads)
