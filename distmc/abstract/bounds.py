"""Bounds on a network's outputs over boxes of inputs: interval bound propagation and CROWN, batched in torch.

Both take boxes ``lo, hi`` ``[B, d]`` and a specification matrix ``C`` ``[S, A]`` and return lower and upper
bounds ``[B, S]`` of ``C @ f(x)`` over each box. CROWN (Zhang et al. 2018) propagates linear bounds backwards;
the bounds of every hidden pre-activation are themselves computed by CROWN (intersected with IBP's), so each
layer's relaxation is as tight as this method gets. Relaxations:

* ReLU on ``[l, u]`` with ``l < 0 < u``: upper line the chord ``u (x - l) / (u - l)``, lower line ``x`` if
  ``u > -l`` else ``0``; stable neurons are exact.
* tanh on ``[l, u]``: slope ``k = min(tanh'(l), tanh'(u))`` for both lines, which is sound because ``tanh'`` is
  unimodal, so ``tanh'(x) >= k`` on ``[l, u]`` and ``tanh(x) - k x`` is non-decreasing there: lower line through
  ``(l, tanh l)``, upper line through ``(u, tanh u)``.

Everything runs in float64; the final bounds are widened by ``1e-9 (1 + |bound|)`` to cover rounding.
"""

from __future__ import annotations

import numpy as np
import torch

from distmc.abstract.network import Network

__all__ = ["action_masks", "crown", "ibp", "pairwise_spec"]

#: Boxes per CROWN pass (bounds the memory of the ``[B, S, n]`` coefficient tensors).
CHUNK = 2048
SLACK = 1e-9

Layer = tuple[str, torch.Tensor | None, torch.Tensor | None]


def _widen(lb: torch.Tensor, ub: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return lb - SLACK * (1 + lb.abs()), ub + SLACK * (1 + ub.abs())


def _ibp_layers(layers: list[Layer], lo: torch.Tensor, hi: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """IBP bounds of every layer's *input* and of the final output (``len(layers) + 1`` pairs)."""
    out = [(lo, hi)]
    for kind, w, b in layers:
        if kind == "linear":
            assert w is not None and b is not None
            c, r = (lo + hi) / 2, (hi - lo) / 2
            mid, rad = c @ w.T + b, r @ w.abs().T
            lo, hi = mid - rad, mid + rad
        elif kind == "relu":
            lo, hi = lo.clamp(min=0), hi.clamp(min=0)
        else:
            lo, hi = torch.tanh(lo), torch.tanh(hi)
        out.append((lo, hi))
    return out


def _spec_interval(ylo: torch.Tensor, yhi: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Interval bounds of ``c @ y`` for ``y`` in ``[ylo, yhi]``, widened."""
    cp, cn = c.clamp(min=0), c.clamp(max=0)
    return _widen(ylo @ cp.T + yhi @ cn.T, yhi @ cp.T + ylo @ cn.T)


def ibp(net: Network, lo: np.ndarray, hi: np.ndarray, spec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Interval bounds ``[B, S]`` of ``spec @ f(x)`` over the boxes ``[lo, hi]``."""
    tlo, thi = torch.as_tensor(lo, dtype=torch.float64), torch.as_tensor(hi, dtype=torch.float64)
    ylo, yhi = _ibp_layers(net.layers, tlo, thi)[-1]
    lb, ub = _spec_interval(ylo, yhi, torch.as_tensor(spec, dtype=torch.float64))
    return lb.numpy(), ub.numpy()


def _relaxation(kind: str, lb: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Lower slope, lower intercept, upper slope, upper intercept ``[B, n]`` of the activation on ``[lb, u]``."""
    l = lb  # noqa: E741
    if kind == "relu":
        active, dead = l >= 0, u <= 0
        unstable = ~active & ~dead
        denom = torch.where(unstable, u - l, torch.ones_like(u))
        su = torch.where(active, 1.0, torch.where(unstable, u / denom, 0.0))
        bu = torch.where(unstable, -l * u / denom, 0.0)
        sl = torch.where(active, 1.0, torch.where(unstable & (u > -l), 1.0, 0.0))
        return sl.to(l.dtype), torch.zeros_like(l), su.to(l.dtype), bu
    tl, tu = torch.tanh(l), torch.tanh(u)
    k = torch.minimum(1 - tl * tl, 1 - tu * tu)
    return k, tl - k * l, k, tu - k * u


def _fold(
    a: torch.Tensor, s: torch.Tensor, a2: torch.Tensor, s2: torch.Tensor, w: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a * s + a2 * s2) @ w`` ``[B, S, m]`` and ``(a * s + a2 * s2) @ b`` ``[B, S]`` without the ``[B, S, n]`` tensor.

    ``a, a2`` ``[S, n]`` are the same for every box, ``s, s2`` ``[B, n]`` are per box (an activation's slopes):
    ``sum_k a[j, k] s[i, k] w[k, m]`` is one matrix product of ``s`` with ``a[j, k] w[k, m]`` laid out ``[n, S m]``.
    """
    rows, n = a.shape
    m = w.shape[1]
    pw = (a.T[:, :, None] * w[:, None, :]).reshape(n, rows * m)
    pw2 = (a2.T[:, :, None] * w[:, None, :]).reshape(n, rows * m)
    coef = (s @ pw + s2 @ pw2).reshape(-1, rows, m)
    return coef, s @ (a * b).T + s2 @ (a2 * b).T


def _backward(
    layers: list[Layer],
    relax: dict[int, tuple[torch.Tensor, ...]],
    lo: torch.Tensor,
    hi: torch.Tensor,
    c: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """CROWN bounds ``[B, S]`` of ``c @ g(x)``, ``g`` being ``layers``.

    ``c`` is ``[S, out]`` (the same for every box) or ``[B, S, out]`` (per box).

    ``c = None`` means the identity and ``g`` ending in a linear layer (the bounds of each of its outputs): the
    backward pass then starts from that layer's weights, without multiplying an identity by them.

    While the coefficients are the same for every box (before the first activation), they are kept as one ``[S, n]``
    matrix; the first activation's per-box slopes are folded into the linear layer below it (:func:`_fold`), so no
    ``[B, S, n]`` tensor is made for the widest layer. This is the same arithmetic, reordered.
    """
    top = len(layers) - 1
    boxes = lo.shape[0]
    al: torch.Tensor
    au: torch.Tensor
    if c is None:
        _, w, b = layers[top]
        assert w is not None and b is not None
        al = au = w
        bl = bu = b.expand(boxes, b.shape[0])
        top -= 1
    else:
        al = au = c
        bl = torch.zeros((boxes, c.shape[-2]), dtype=c.dtype)
        bu = torch.zeros((boxes, c.shape[-2]), dtype=c.dtype)
    i = top
    while i >= 0:
        kind, w, b = layers[i]
        if kind == "linear":
            assert w is not None and b is not None
            bl, bu = bl + al @ b, bu + au @ b
            al, au = al @ w, au @ w
            i -= 1
            continue
        sl, il, su, iu = relax[i]
        if al.dim() == 2:  # shared coefficients: the activation's intercepts are matrix products
            alp, aln = al.clamp(min=0), al.clamp(max=0)
            aup, aun = au.clamp(min=0), au.clamp(max=0)
            bl = bl + il @ alp.T + iu @ aln.T
            bu = bu + iu @ aup.T + il @ aun.T
            below = layers[i - 1] if i > 0 else None
            if below is not None and below[0] == "linear":
                _, w2, b2 = below
                assert w2 is not None and b2 is not None
                al, dl = _fold(alp, sl, aln, su, w2, b2)
                au, du = _fold(aup, su, aun, sl, w2, b2)
                bl, bu = bl + dl, bu + du
                i -= 2
                continue
            al = alp * sl[:, None, :] + aln * su[:, None, :]
            au = aup * su[:, None, :] + aun * sl[:, None, :]
            i -= 1
            continue
        sl, il, su, iu = (t[:, None, :] for t in relax[i])
        alp, aln = al.clamp(min=0), al.clamp(max=0)
        bl = bl + (alp * il).sum(-1) + (aln * iu).sum(-1)
        al = alp * sl + aln * su
        aup, aun = au.clamp(min=0), au.clamp(max=0)
        bu = bu + (aup * iu).sum(-1) + (aun * il).sum(-1)
        au = aup * su + aun * sl
        i -= 1
    if al.dim() == 2:
        al, au = al.expand(boxes, *al.shape), au.expand(boxes, *au.shape)
    mid, rad = ((lo + hi) / 2)[:, :, None], ((hi - lo) / 2)[:, :, None]
    lb = (al @ mid)[..., 0] - (al.abs() @ rad)[..., 0] + bl
    ub = (au @ mid)[..., 0] + (au.abs() @ rad)[..., 0] + bu
    return lb, ub


def _crown_chunk(
    layers: list[Layer], lo: torch.Tensor, hi: torch.Tensor, spec: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    interval = _ibp_layers(layers, lo, hi)
    relax: dict[int, tuple[torch.Tensor, ...]] = {}
    for i, (kind, _, _) in enumerate(layers):
        if kind == "linear":
            continue
        pl, pu = _widen(*_backward(layers[:i], relax, lo, hi, None))
        pl, pu = torch.maximum(pl, interval[i][0]), torch.minimum(pu, interval[i][1])
        relax[i] = _relaxation(kind, pl, pu)
    lb, ub = _widen(*_backward(layers, relax, lo, hi, spec))
    ilb, iub = _spec_interval(*interval[-1], spec)  # the same IBP the layers above used, not computed again
    return torch.maximum(lb, ilb), torch.minimum(ub, iub)


def crown(net: Network, lo: np.ndarray, hi: np.ndarray, spec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CROWN bounds ``[B, S]`` of ``spec @ f(x)`` over the boxes ``[lo, hi]`` (intersected with IBP's)."""
    tlo, thi = torch.as_tensor(lo, dtype=torch.float64), torch.as_tensor(hi, dtype=torch.float64)
    c = torch.as_tensor(spec, dtype=torch.float64)
    lbs, ubs = [], []
    with torch.no_grad():
        for s in range(0, tlo.shape[0], CHUNK):
            lb, ub = _crown_chunk(net.layers, tlo[s : s + CHUNK], thi[s : s + CHUNK], c)
            lbs.append(lb)
            ubs.append(ub)
    if not lbs:
        return np.zeros((0, spec.shape[0])), np.zeros((0, spec.shape[0]))
    return torch.cat(lbs).numpy(), torch.cat(ubs).numpy()


def pairwise_spec(n_actions: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``e_j - e_a`` for every ordered pair ``j != a``, and the action ``a`` each row is about."""
    rows, about = [], []
    for a in range(n_actions):
        for j in range(n_actions):
            if j != a:
                r = np.zeros(n_actions)
                r[j], r[a] = 1.0, -1.0
                rows.append(r)
                about.append(a)
    return np.array(rows).reshape(-1, n_actions), np.array(about, dtype=np.int64)


def action_masks(net: Network, lo: np.ndarray, hi: np.ndarray, method: str = "crown") -> np.ndarray:
    """``[B, A]`` bool: action ``a`` may be the argmax somewhere in the box (not provably beaten by another).

    Action ``a`` is ruled out when some ``j`` has ``f_j(x) - f_a(x) > 0`` on the whole box (then ``a`` is never
    the argmax there, ties included). Every point's argmax is therefore inside its box's mask.
    """
    n = net.n_outputs
    spec, about = pairwise_spec(n)
    if n == 1:
        return np.ones((lo.shape[0], 1), dtype=bool)

    def masks(lb: np.ndarray) -> np.ndarray:
        beaten = np.zeros((lb.shape[0], n), dtype=bool)
        for a in range(n):
            beaten[:, a] = (lb[:, about == a] > 0).any(axis=1)
        return ~beaten

    out = masks(ibp(net, lo, hi, spec)[0])
    if method == "crown":  # CROWN only where interval bounds leave the action open
        open_ = np.flatnonzero(out.sum(axis=1) > 1)
        if open_.size:
            out[open_] &= masks(crown(net, lo[open_], hi[open_], spec)[0])
    return out
