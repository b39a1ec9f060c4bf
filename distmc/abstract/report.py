"""Output of ``distmc abstract``: a table of initial boxes, a JSON report, and plots (as the MOSAIC paper shows).

2-D systems get a heatmap of the upper bound over the initial region; higher dimensions get MOSAIC's Figure 4: a
histogram of the volume per bound and a bubble scatter of the boxes on their first two principal components.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from distmc._internal.atomic import save_figure
from distmc.abstract.envs import ContinuousEnv
from distmc.abstract.refine import Analysis

__all__ = ["pca_centres", "plot", "summary", "to_json"]


def summary(a: Analysis, env: ContinuousEnv, rows: int = 20) -> str:
    """Text report: the settings, the refinement history, and the worst ``rows`` boxes by upper bound."""
    lines = [
        f"distmc abstract {a.env}: horizon {a.horizon}, fault {a.fault}, threshold {a.threshold:g}, "
        f"{a.stats.get('abstraction', 'lattice')} abstraction",
        *(
            f"  {k} region: " + ", ".join(f"{n}=[{lo:g}, {hi:g}]" for n, (lo, hi) in r.items())
            for k, r in a.regions.items()
        ),
        f"  {a.lo.shape[0]} initial boxes, {a.stats.get('abstract_states', 0)} abstract states "
        + (
            f"({a.stats.get('box_states', 0)} boxes, {a.stats.get('image_states', 0)} images), "
            if "box_states" in a.stats
            else "(tree nodes, all steps), "
        )
        + f"{a.stats.get('elapsed_s', 0):.2f} s (split {a.stats.get('split_s', 0):.2f} s, "
        f"{a.stats.get('workers', 1)} workers)",
        f"  safe volume (upper <= {a.threshold:g}): {a.safe_fraction():.4f}; surely unsafe (lower > "
        f"{a.threshold:g}): {a.unsafe_fraction():.4f}; lower >= 0.5: {a.fraction(a.lower >= 0.5):.4f}",
        "  step  boxes  safe_fraction  unsafe_fraction  lower>=0.5"
        + ("  mean_gap" if a.point_max is not None else "")
        + "  elapsed_s",
    ]
    for h in a.history:
        gap = f"  {h['mean_gap']:>8.4f}" if "mean_gap" in h else ""
        lines.append(
            f"  {h['step']:>4}  {h['boxes']:>5}  {h['safe_fraction']:>13.4f}  {h['unsafe_fraction']:>15.4f}"
            f"  {h.get('lower_half_fraction', 0.0):>10.4f}{gap}  {h['elapsed_s']:>9.1f}"
        )
    if a.point_max is not None and a.inside is not None:
        worst = int(np.argmax(a.upper - a.point_max))
        lines.append(
            f"  --validate: every sampled point within its box's bounds: {bool(a.inside.all())} "
            f"({int((~a.inside).sum())} boxes not); mean gap upper - largest point probability "
            f"{a.mean_gap():.4f}, worst {a.upper[worst] - a.point_max[worst]:.4f} (box {worst})"
        )
    if "stopped" in a.stats:
        lines.append(f"  {a.stats['stopped']}")
    order = np.argsort(-a.upper, kind="stable")[:rows]
    names = "  ".join(f"{n:>21}" for n in env.state_names)
    lines.append(f"  worst {len(order)} boxes by upper bound:\n  {names}  {'lower':>7}  {'upper':>7}")
    for i in order:
        cells = "  ".join(f"[{a.lo[i, j]:+.4f},{a.hi[i, j]:+.4f}]" for j in range(env.dim))
        lines.append(f"  {cells}  {a.lower[i]:7.4f}  {a.upper[i]:7.4f}")
    return "\n".join(lines)


def to_json(a: Analysis, env: ContinuousEnv) -> str:
    """Every box with its bounds, the history and the statistics."""
    doc: dict[str, Any] = {
        "env": a.env,
        "state_names": list(env.state_names),
        "horizon": a.horizon,
        "fault": a.fault,
        "threshold": a.threshold,
        "safe_fraction": a.safe_fraction(),
        "unsafe_fraction": a.unsafe_fraction(),
        "regions": {k: {n: [_num(lo), _num(hi)] for n, (lo, hi) in r.items()} for k, r in a.regions.items()},
        "history": a.history,
        "stats": a.stats,
        "boxes": [
            {"lo": a.lo[i].tolist(), "hi": a.hi[i].tolist(), "lower": float(a.lower[i]), "upper": float(a.upper[i])}
            for i in range(a.lo.shape[0])
        ],
    }
    if a.point_max is not None and a.inside is not None:
        doc["validate"] = {
            "all_inside": bool(a.inside.all()),
            "mean_gap": a.mean_gap(),
            "worst_gap": float((a.upper - a.point_max).max()),
        }
        for i, b in enumerate(doc["boxes"]):
            b["point_max"], b["inside"] = float(a.point_max[i]), bool(a.inside[i])
    return json.dumps(doc, indent=1)


def _num(x: float) -> float | str:
    """A bound for JSON: infinities as the strings ``"inf"``/``"-inf"`` (JSON has no infinity)."""
    return x if np.isfinite(x) else ("inf" if x > 0 else "-inf")


def pca_centres(a: Analysis) -> tuple[np.ndarray, np.ndarray]:
    """The box centres ``[I, d]`` on their first two principal components (``[I, 2]``) and the variance shares.

    Each dimension is scaled by the initial region's width first, so the components do not favour the variable
    with the largest units; the centres are weighted by volume, as the region is.
    """
    width = a.hi.max(axis=0) - a.lo.min(axis=0)
    c = (a.lo + a.hi) / 2 / np.where(width > 0, width, 1.0)
    v = a.volumes() / a.volumes().sum()
    mean = v @ c
    x = (c - mean) * np.sqrt(v)[:, None]
    _, sing, vt = np.linalg.svd(x, full_matrices=False)
    share = sing**2 / max(float((sing**2).sum()), 1e-300)
    comps = vt[:2] if vt.shape[0] >= 2 else np.vstack([vt, np.zeros_like(vt)])
    return (c - mean) @ comps.T, np.pad(share[:2], (0, max(0, 2 - share.shape[0])))


def plot(a: Analysis, env: ContinuousEnv, path: str | Path, dims: tuple[int, int] | None = None) -> None:
    """Heatmap of the upper bound (2-D), or MOSAIC's Figure 4 (higher dimensions).

    Figure 4 is the volume histogram of the bounds and a PCA bubble scatter of the boxes (bubble area by volume,
    colour by upper bound).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    d = env.dim
    title = f"{a.env}: P(fail within {a.horizon})"
    note = f"fault {a.fault}, safe fraction {a.safe_fraction():.3f} at {a.threshold:g}"
    order = np.argsort(a.upper, kind="stable")  # worst drawn last (on top)
    if d == 2:
        i, j = dims if dims is not None else (0, 1)
        fig, ax = plt.subplots(figsize=(6, 5))
        rects = [Rectangle((a.lo[k, i], a.lo[k, j]), a.hi[k, i] - a.lo[k, i], a.hi[k, j] - a.lo[k, j]) for k in order]
        pc = PatchCollection(rects, cmap="RdYlGn_r", edgecolor="k", linewidth=0.2)
        pc.set_array(a.upper[order])
        pc.set_clim(0, 1)
        ax.add_collection(pc)
        ax.set_xlim(a.lo[:, i].min(), a.hi[:, i].max())
        ax.set_ylim(a.lo[:, j].min(), a.hi[:, j].max())
        ax.set_xlabel(env.state_names[i])
        ax.set_ylabel(env.state_names[j])
        ax.set_title(f"{title} upper bound\n{note}")
        fig.colorbar(pc, ax=ax, label="upper bound on failure probability")
    else:
        fig, (h, ax) = plt.subplots(1, 2, figsize=(13, 5))
        v = a.volumes()
        bins = np.linspace(0, 1, 21)
        h.hist(a.upper, bins=bins, weights=v / v.sum(), color="tab:red", alpha=0.7, label="upper")
        h.hist(a.lower, bins=bins, weights=v / v.sum(), color="tab:blue", alpha=0.5, label="lower")
        h.set_xlabel("bound on failure probability")
        h.set_ylabel("fraction of the initial volume")
        h.legend()
        h.set_title(f"{a.env}: volume per bound ({a.lo.shape[0]} boxes)")
        xy, share = pca_centres(a)
        area = 4 + 400 * np.sqrt(v / v.max())  # area by volume (square root: the smallest boxes stay visible)
        sc = ax.scatter(
            xy[order, 0],
            xy[order, 1],
            s=area[order],
            c=a.upper[order],
            cmap="RdYlGn_r",
            vmin=0,
            vmax=1,
            edgecolors="k",
            linewidths=0.2,
            alpha=0.8,
        )
        ax.set_xlabel(f"first principal component ({share[0]:.0%} of the variance)")
        ax.set_ylabel(f"second principal component ({share[1]:.0%})")
        ax.set_title(f"{title}: boxes on their principal components\n(bubble area by volume) {note}")
        fig.colorbar(sc, ax=ax, label="upper bound on failure probability")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
