"""The K most probable paths of an induced DTMC from an initial state to the first visit of the property's target.

For ``P=? [F phi]``, ``P=? [psi U phi]`` and their step-bounded forms (``<=k``, ``<k``), a *trace* is a finite
path ``s_0 s_1 ... s_n`` of the induced DTMC with ``s_0`` initial, ``s_n`` a ``phi`` state, every earlier state a
``psi & !phi`` state (``psi`` is ``true`` for ``F``) and, for a bounded property, ``n <= k``. Paths may repeat
states. Its probability is the product of its transition probabilities, so the K most probable traces are the K
shortest walks under the weight ``-log p``. They are found exactly, not sampled:

1. ``h(s)``: the least weight of a path from ``s`` to a ``phi`` state through ``psi & !phi`` states (Dijkstra
   backwards from the ``phi`` states on the transposed graph), and for a bounded property ``hops(s)``, the least
   number of steps (breadth-first, backwards);
2. a best-first search over path prefixes, each ordered by ``g + h(last state)`` with ``g`` its own weight: since
   ``h`` is the exact remaining weight, a prefix's key is the weight of its best completion, complete traces leave
   the queue in non-decreasing weight, and only prefixes of the K best traces (and their ties) are ever expanded.
   This is the search of Eppstein's sidetrack order made lazy (the K* algorithm of Aljazzar and Leue, which was
   designed for probabilistic counterexamples); over ``(state, steps)`` for a bounded property, where a prefix
   that cannot reach ``phi`` in the steps it has left (``steps + hops > k``) is dropped, so the search stays
   finite and exact there too, with ``h`` still a lower bound.

Ties (equal weights) leave the queue last-in first-out, which goes depth first and lists the smaller state id
first; the order is a function of the induced model alone, and the model is the same, state for state, for any
number of workers, so the traces are too. Cost: two passes over the transitions for the transposed graph (4 bytes
each, and 8 for its probabilities while Dijkstra runs), Dijkstra (O(T log N)), then O(K L d log) for K traces of L
steps and d successors per state.

The induced model's row of a state fuses its actions (``sum_a pi(a|s) P(s,a,.)``), so which action a step took is
not in it. :func:`annotate` expands the traces' states again with the run's kernel and policy (a few hundred
states: cheap) and names, for each step, the action whose share ``pi(a|s) P(s,a,s')`` of the step's probability is
the largest (the first in the model's action order on a tie), with ``pi`` the weight the induced model gave it
(the policy's probability; renormalised over the kept actions under ``--threshold``, 1 under
``--mode deterministic``; for a ``dtmc`` model, the command's label and no ``pi``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numba as nb
import numpy as np

from distmc.assemble.reducer import InducedModel
from distmc.check.forms import reachability, unsupported
from distmc.check.native import matrix_of
from distmc.check.properties import PropertySpec
from distmc.errors import PropertyError, ResourceLimitError
from distmc.explore.expander import Expander
from distmc.model.kernel import NO_ACTION
from distmc.model.packing import StateCodec
from distmc.model.program import Model

__all__ = ["MAX_PREFIXES", "Trace", "annotate", "check_traceable", "format_trace", "most_probable_paths", "state_text"]

log = logging.getLogger(__name__)

#: Path prefixes the search may create before it gives up (each 40 B): far more than K traces of any length need
#: when ``h`` is exact; a bounded property whose best paths are much longer than its bound can need more.
MAX_PREFIXES = 50_000_000

_NO_HOPS = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Trace:
    """One path of the induced model.

    Attributes:
        probability: the product of its step probabilities.
        states: ``[n + 1]`` int64 state ids, ``states[0]`` initial, ``states[-1]`` a target state.
        step_prob: ``[n]`` float64, the induced model's probability of each step.
    """

    probability: float
    states: np.ndarray
    step_prob: np.ndarray


def check_traceable(spec: PropertySpec, kind: str = "dtmc") -> None:
    """Raise :class:`PropertyError` unless traces can be found for ``spec`` on an induced ``kind`` model."""
    if spec.is_reward:
        raise PropertyError(
            f"--traces: '{spec.text}' is a reward property; traces are the most probable paths to "
            "the target of a P=? [F phi] or [psi U phi] property (also step-bounded)"
        )
    if kind != "dtmc":
        raise PropertyError(
            f"--traces: the induced model of '{spec.text}' is an MDP (same-label choices, or "
            "--mode monolithic), so a path has no single probability; use --resolve uniform, or a "
            "policy mode on an mdp"
        )
    why = unsupported(spec, "dtmc")
    if why is not None:
        raise PropertyError(f"--traces: '{spec.text}' is not a reachability property traces can explain ({why})")


@nb.njit(cache=True, nogil=True)
def _chunk(first_row, u):  # pragma: no cover - compiled
    # the chunk holding row u: the last chunk starting at or before it (empty chunks start where the next does)
    return np.searchsorted(first_row, u, side="right") - 1


@nb.njit(cache=True, nogil=True)
def _branch(p, ix, j):  # pragma: no cover - compiled
    # branch j's probability in a chunk: p[j], or p[ix[j]] where the chunk is compact (a table and an index)
    return p[ix[j]] if ix.shape[0] > 0 else p[j]


@nb.njit(cache=True, nogil=True)
def _prob(row_offsets, first_row, chunk_base, t_list, p_list, i_list, u, v):  # pragma: no cover - compiled
    # P[u, v], by binary search in row u (targets are sorted within a row, and v is one of them)
    c = _chunk(first_row, u)
    t = t_list[c]
    lo, hi = row_offsets[u] - chunk_base[c], row_offsets[u + 1] - chunk_base[c]
    while lo < hi:
        mid = (lo + hi) // 2
        if t[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return _branch(p_list[c], i_list[c], lo)


@nb.njit(cache=True, nogil=True)
def _before(key, a, b, lifo):  # pragma: no cover - compiled
    # heap order: smaller key first; ties by index, smaller first (Dijkstra) or larger first (lifo: the search)
    if key[a] != key[b]:
        return key[a] < key[b]
    return a > b if lifo else a < b


@nb.njit(cache=True, nogil=True)
def _put(heap, pos, i, item):  # pragma: no cover - compiled
    # heap slot i holds item (pos, when not empty, tracks each item's slot: Dijkstra's decrease-key)
    heap[i] = item
    if pos.shape[0]:
        pos[item] = i


@nb.njit(cache=True, nogil=True)
def _sift_up(heap, pos, key, i, lifo):  # pragma: no cover - compiled
    item = heap[i]
    while i > 0:
        parent = (i - 1) // 2
        if not _before(key, item, heap[parent], lifo):
            break
        _put(heap, pos, i, heap[parent])
        i = parent
    _put(heap, pos, i, item)


@nb.njit(cache=True, nogil=True)
def _pop(heap, pos, key, size, lifo):  # pragma: no cover - compiled
    # removes and returns heap[0]; the heap then has size - 1 items
    top = heap[0]
    size -= 1
    if size > 0:
        item = heap[size]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= size:
                break
            if child + 1 < size and _before(key, heap[child + 1], heap[child], lifo):
                child += 1
            if not _before(key, heap[child], item, lifo):
                break
            _put(heap, pos, i, heap[child])
            i = child
        _put(heap, pos, i, item)
    return top


@nb.njit(cache=True, nogil=True)
def _in_probs(in_off, row_offsets, first_row, chunk_base, t_list, p_list, i_list):  # pragma: no cover - compiled
    # the probability of every predecessor entry of ChunkedCSR.transpose (filled in its order: chunks, rows,
    # branches), so that Dijkstra reads P[u, v] beside u instead of searching u's row
    fill = in_off[:-1].copy()
    out = np.empty(in_off[-1], np.float64)
    for c in range(len(t_list)):
        t = t_list[c]
        p = p_list[c]
        ix = i_list[c]
        b = chunk_base[c]
        for r in range(first_row[c], first_row[c + 1]):
            for j in range(row_offsets[r] - b, row_offsets[r + 1] - b):
                v = t[j]
                out[fill[v]] = _branch(p, ix, j)
                fill[v] += 1
    return out


@nb.njit(cache=True, nogil=True)
def _distance_to_target(in_off, sources, in_prob, interior, target):  # pragma: no cover - compiled
    # Dijkstra backwards: h[s] = least sum of -log p from s to a target state through interior states.
    n = interior.shape[0]
    h = np.full(n, np.inf)
    heap = np.empty(n, np.int64)
    pos = np.full(n, -1, np.int64)  # -1: never queued, -2: settled
    size = 0
    for v in range(n):
        if target[v]:
            h[v] = 0.0
            heap[size] = v
            pos[v] = size
            size += 1  # keys all 0, ids increasing: already a heap
    while size > 0:
        v = _pop(heap, pos, h, size, False)
        size -= 1
        pos[v] = -2
        for k in range(in_off[v], in_off[v + 1]):
            u = sources[k]
            if u == v or not interior[u] or h[u] <= h[v]:  # settled, or no shorter through v (weights >= 0)
                continue
            d = h[v] - np.log(in_prob[k])
            if d < h[u]:
                h[u] = d
                if pos[u] == -1:
                    heap[size] = u
                    pos[u] = size
                    size += 1
                _sift_up(heap, pos, h, pos[u], False)
    return h


@nb.njit(cache=True, nogil=True)
def _hops_to_target(in_off, sources, interior, target, none):  # pragma: no cover - compiled
    # breadth-first backwards: the least number of steps from s to a target state through interior states
    n = interior.shape[0]
    hops = np.full(n, none, np.int64)
    queue = np.empty(n, np.int64)
    head, tail = 0, 0
    for v in range(n):
        if target[v]:
            hops[v] = 0
            queue[tail] = v
            tail += 1
    while head < tail:
        v = queue[head]
        head += 1
        for k in range(in_off[v], in_off[v + 1]):
            u = sources[k]
            if interior[u] and hops[u] == none:
                hops[u] = hops[v] + 1
                queue[tail] = u
                tail += 1
    return hops


@nb.njit(cache=True, nogil=True)
def _grow(a, size):  # pragma: no cover - compiled
    out = np.empty(size, a.dtype)
    out[: a.shape[0]] = a
    return out


@nb.njit(cache=True, nogil=True)
def _search(
    row_offsets,
    first_row,
    chunk_base,
    t_list,
    p_list,
    i_list,
    interior,
    target,
    h,
    hops,
    initial,
    k_paths,
    bound,
    max_prefixes,
):  # pragma: no cover - compiled
    # Best-first search over path prefixes (see the module docstring). Prefix i: its last state st[i], the prefix
    # it extends par[i] (-1: none), weight g[i], steps ln[i], key f[i] = g[i] + h[st[i]]. Returns the prefix
    # arrays, the complete traces' prefix ids in order, and -1 if max_prefixes was reached (else 0).
    cap = 1024
    st = np.empty(cap, np.int64)
    par = np.empty(cap, np.int64)
    ln = np.empty(cap, np.int64)
    g = np.empty(cap)
    f = np.empty(cap)
    heap = np.empty(cap, np.int64)
    nopos = np.empty(0, np.int64)
    size, count = 0, 0
    found = np.empty(k_paths, np.int64)
    nf = 0
    for s in initial:
        if (interior[s] or target[s]) and h[s] < np.inf and (bound < 0 or hops[s] <= bound):
            st[count], par[count], ln[count], g[count], f[count] = s, -1, 0, 0.0, h[s]
            heap[size] = count
            _sift_up(heap, nopos, f, size, True)
            size += 1
            count += 1
    while size > 0 and nf < k_paths:
        i = _pop(heap, nopos, f, size, True)
        size -= 1
        u = st[i]
        if target[u]:
            found[nf] = i
            nf += 1
            continue
        c = _chunk(first_row, u)
        t = t_list[c]
        p = p_list[c]
        ix = i_list[c]
        lo, hi = row_offsets[u] - chunk_base[c], row_offsets[u + 1] - chunk_base[c]
        for j in range(hi - 1, lo - 1, -1):  # descending: the smallest id is pushed last, so popped first on a tie
            v = t[j]
            q = _branch(p, ix, j)
            if q <= 0.0 or not (interior[v] or target[v]) or h[v] == np.inf:
                continue
            if bound >= 0 and ln[i] + 1 + hops[v] > bound:
                continue
            if count == max_prefixes:
                return st[:count], par[:count], found[:nf], -1
            if count == st.shape[0]:
                cap = 2 * cap
                st, par, ln, g, f, heap = (
                    _grow(st, cap),
                    _grow(par, cap),
                    _grow(ln, cap),
                    _grow(g, cap),
                    _grow(f, cap),
                    _grow(heap, cap),
                )
            st[count], par[count], ln[count] = v, i, ln[i] + 1
            g[count] = g[i] - np.log(q)
            f[count] = g[count] + h[v]
            heap[size] = count
            _sift_up(heap, nopos, f, size, True)
            size += 1
            count += 1
    return st[:count], par[:count], found[:nf], 0


def most_probable_paths(
    m: InducedModel, spec: PropertySpec, k: int, *, max_prefixes: int = MAX_PREFIXES
) -> list[Trace]:
    """The ``k`` most probable traces of the induced DTMC ``m`` for ``spec`` (fewer if fewer exist).

    Raises:
        PropertyError: for a reward property, an MDP, or a property other than (bounded) reachability.
        ResourceLimitError: when the search needs more than ``max_prefixes`` prefixes.
    """
    check_traceable(spec, m.kind)
    if k < 1:
        return []
    phi1, phi2, bound = reachability(spec, m)
    target = np.ascontiguousarray(phi2, dtype=bool)
    interior = np.ascontiguousarray(phi1 & ~phi2, dtype=bool)
    a = matrix_of(m)
    in_off, sources = a.transpose()
    in_prob = _in_probs(in_off, a.row_offsets, a.first_row, a.chunk_base, a.t_list, a.p_list, a.i_list)
    h = _distance_to_target(in_off, sources, in_prob, interior, target)
    del in_prob
    if bound is not None:
        hops = _hops_to_target(in_off, sources, interior, target, _NO_HOPS)
    else:
        hops = np.zeros(0, dtype=np.int64)
    del in_off, sources
    initial = np.ascontiguousarray(np.unique(m.initial), dtype=np.int64)
    st, par, found, status = _search(
        a.row_offsets,
        a.first_row,
        a.chunk_base,
        a.t_list,
        a.p_list,
        a.i_list,
        interior,
        target,
        h,
        hops,
        initial,
        int(k),
        -1 if bound is None else max(int(bound), 0),
        int(max_prefixes),
    )
    if status < 0:
        raise ResourceLimitError(
            f"--traces {k}: the search for the most probable paths of '{spec.text}' needed more than "
            f"{max_prefixes} path prefixes (a step bound much shorter than the likeliest paths makes it wide); "
            "ask for fewer traces"
        )
    out = []
    for i in found.tolist():
        ids = []
        while i >= 0:
            ids.append(int(st[i]))
            i = int(par[i])
        states = np.array(ids[::-1], dtype=np.int64)
        step = np.array(
            [
                _prob(a.row_offsets, a.first_row, a.chunk_base, a.t_list, a.p_list, a.i_list, int(u), int(v))
                for u, v in zip(states[:-1], states[1:], strict=True)
            ],
            dtype=np.float64,
        )
        out.append(Trace(float(np.prod(step)), states, step))
    # The search orders by summed -log p; the products can differ from that order in the last bit: sort by them.
    order = sorted(range(len(out)), key=lambda j: -out[j].probability)
    return [out[j] for j in order]


def _valuation(model: Model, state: np.ndarray) -> dict[str, int | bool]:
    return {v.name: (bool(x) if v.is_bool else int(x)) for v, x in zip(model.variables, state.tolist(), strict=True)}


def annotate(
    traces: list[Trace], m: InducedModel, model: Model, codec: StateCodec, expander: Expander
) -> list[dict[str, Any]]:
    """The traces as the report's JSON: ``{"probability", "path": [{"state", "action", "pi", "p"}, ...]}``.

    ``expander`` is the run's (its kernel, policy, mode and threshold; under the Ray driver one built from the
    run's job, with the same ``policy_dtype``): it expands the traces' states again to find which action each step
    took (module docstring). Its policy computes in the run's arithmetic (float64 by default), so ``pi`` is the
    weight the induced model was built with, whichever batch the state is in now. ``p`` is the step's probability in the induced model
    (null on the last state, like ``action`` and ``pi``).
    """
    if not traces:
        return []
    src = np.unique(np.concatenate([t.states[:-1] for t in traces]))
    keys = m.keys[src]
    states = codec.unpack(keys) if src.size else np.zeros((0, len(model.variables)), dtype=np.int64)
    exp = expander.kernel.expand(states, keys)
    cs, ca = exp.choice_state, exp.choice_action
    if expander.policy is not None:
        enabled = np.zeros((src.shape[0], len(model.actions)), dtype=bool)
        enabled[cs, ca] = True
        weights = expander.action_weights(states, enabled)  # [B, A_model]
        w = weights[cs, ca]
        pair = cs * (len(model.actions) + 1) + ca
        kept = w > 0
        _, inv, cnt = np.unique(np.where(kept, pair, -1), return_inverse=True, return_counts=True)
        w = np.where(kept, w / cnt[inv], 0.0)  # --resolve uniform: a label's weight split among its choices
    else:  # a dtmc model: its choices fused uniformly, no policy
        weights = None
        w = 1.0 / np.bincount(cs, minlength=src.shape[0])[cs]
    first = np.searchsorted(cs, np.arange(src.shape[0] + 1))
    where = {int(s): i for i, s in enumerate(src.tolist())}
    all_states = codec.unpack(m.keys[np.unique(np.concatenate([t.states for t in traces]))])
    decoded = dict(zip(np.unique(np.concatenate([t.states for t in traces])).tolist(), all_states, strict=True))
    out = []
    for tr in traces:
        path = []
        for n, s in enumerate(tr.states.tolist()):
            step: dict[str, Any] = {"state": _valuation(model, decoded[s]), "action": None, "pi": None, "p": None}
            if n < tr.states.shape[0] - 1:
                i = where[s]
                nxt = m.keys[tr.states[n + 1]]
                share: dict[int, float] = {}
                for c in range(int(first[i]), int(first[i + 1])):
                    lo, hi = int(exp.branch_offsets[c]), int(exp.branch_offsets[c + 1])
                    hit = exp.prob[lo:hi][exp.succ_keys[lo:hi] == nxt]
                    if hit.size and w[c] > 0:
                        share[int(ca[c])] = share.get(int(ca[c]), 0.0) + float(w[c] * hit.sum())
                p = float(tr.step_prob[n])
                if not share or abs(sum(share.values()) - p) > 1e-9 * max(p, 1e-300) + 1e-15:
                    log.warning(
                        "trace step from state %d: the actions' shares %s do not add up to the induced probability %r",
                        s,
                        share,
                        p,
                    )
                if share:
                    best = max(share, key=lambda a: (share[a], -a))
                    label = model.actions[best] if best != NO_ACTION else None
                    step["action"] = None if (weights is None and not label) else label
                    step["pi"] = None if weights is None else float(weights[i, best])
                step["p"] = p
            path.append(step)
        out.append({"probability": tr.probability, "path": path})
    return out


def state_text(state: dict[str, Any]) -> str:
    """A valuation as ``x=3 y=1 done=false``."""
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in state.items())


def format_trace(trace: dict[str, Any], max_lines: int = 20) -> list[str]:
    """One step a line (``x=3 y=1 ...  -> action (pi 0.91, p 0.82)``), at most ``max_lines`` with the rest elided."""
    lines = []
    for step in trace["path"]:
        text = state_text(step["state"])
        if step["p"] is not None:
            act = "" if step["action"] is None else f" {step['action'] or '(unlabelled)'}"
            pi = "" if step["pi"] is None else f"pi {step['pi']:.3g}, "
            text += f"  ->{act} ({pi}p {step['p']:.3g})"
        lines.append(text)
    if len(lines) > max_lines:
        head = max_lines // 2
        tail = max_lines - head - 1
        lines = [*lines[:head], f"... {len(lines) - head - tail} steps elided ...", *lines[-tail:]]
    return lines
