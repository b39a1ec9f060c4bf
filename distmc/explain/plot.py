"""``--plot FILE.png``: a heatmap of the property's per-state value over two model variables.

Each cell ``(x, y)`` aggregates the explored states with those two values that have not reached the property's
target yet (a target state's value is 1 and says nothing of the way there): the left panel shows the mean of
their values, the right one the maximum (the other variables, e.g. an opponent's position, vary within a cell),
each with its own colour scale. Cells no such state has are left blank. With traces, the most probable one is drawn over both panels as the
sequence of its states' ``(x, y)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from distmc._internal.atomic import save_figure
from distmc.errors import MissingDependencyError, UsageError
from distmc.model.program import Model

__all__ = ["aggregate", "plot_values", "plot_variables", "require_matplotlib"]


def require_matplotlib() -> Any:
    """``matplotlib.pyplot`` with the file-only Agg backend; a :class:`~distmc.errors.MissingDependencyError` saying how to get it if missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError(
            "--plot needs matplotlib, which is not installed: pip install matplotlib"
        ) from None
    return plt


def plot_variables(model: Model, given: str | list[str] | tuple[str, ...] | None) -> tuple[int, int]:
    """Layout indices of the two plotted variables: ``given`` (``"x,y"``), else the first two ``int`` variables."""
    names = [v.name for v in model.variables]
    if given is None:
        ints = [i for i, v in enumerate(model.variables) if not v.is_bool]
        if len(ints) < 2:
            raise UsageError(
                f"--plot: {model.path.name} has fewer than two int variables; name two with "
                f"--plot-vars (variables: {', '.join(names)})"
            )
        return ints[0], ints[1]
    pair = [s.strip() for s in given.split(",")] if isinstance(given, str) else list(given)
    if len(pair) != 2 or pair[0] == pair[1]:
        raise UsageError(f"--plot-vars takes two different variables, as in x,y (not '{given}')")
    bad = [p for p in pair if p not in names]
    if bad:
        raise UsageError(
            f"--plot-vars: {', '.join(bad)} is not a variable of {model.path.name} (variables: {', '.join(names)})"
        )
    return names.index(pair[0]), names.index(pair[1])


def aggregate(
    states: np.ndarray, values: np.ndarray, ix: int, iy: int, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, max ``[ny, nx]`` (NaN where no state is) and count of ``values`` ``[N]`` per cell of variables ix, iy."""
    nx, ny = int(hi[ix] - lo[ix] + 1), int(hi[iy] - lo[iy] + 1)
    cell = (states[:, iy] - lo[iy]) * nx + (states[:, ix] - lo[ix])
    count = np.bincount(cell, minlength=nx * ny)
    total = np.bincount(cell, weights=values, minlength=nx * ny)
    top = np.full(nx * ny, -np.inf)
    np.maximum.at(top, cell, values)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    top = np.where(count > 0, top, np.nan)
    return mean.reshape(ny, nx), top.reshape(ny, nx), count.reshape(ny, nx)


def plot_values(
    path: str | Path,
    model: Model,
    states: np.ndarray,
    values: np.ndarray,
    title: str,
    *,
    variables: tuple[int, int],
    trace: list[dict[str, Any]] | None = None,
    include: np.ndarray | None = None,
) -> Path:
    """Write the heatmap of ``values`` ``[N]`` over ``states`` ``[N, V]`` to ``path`` (the suffix picks the format).

    Args:
        path: the image file.
        model: the model (variable names and bounds).
        states: the explored states, layout order.
        values: their values.
        title: what the values are (the property, the model and the policy).
        variables: layout indices of the x and y variables.
        trace: the most probable trace's path (the report's ``traces[0]["path"]``), drawn over the heatmap.
        include: ``[N]`` bool, the states aggregated (default: all); the others are left out of every cell.
    """
    plt = require_matplotlib()
    ix, iy = variables
    xv, yv = model.variables[ix], model.variables[iy]
    if include is not None:
        states, values = states[include], values[include]
    mean, top, count = aggregate(states, values, ix, iy, model.lo, model.hi)
    others = [v.name for i, v in enumerate(model.variables) if i not in (ix, iy)]
    over = ", ".join(others) if others else "nothing else"
    extent = (xv.lo - 0.5, xv.hi + 0.5, yv.lo - 0.5, yv.hi + 0.5)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), constrained_layout=True)
    for ax, grid, what in ((axes[0], mean, "mean"), (axes[1], top, "max")):
        img = ax.imshow(
            np.ma.masked_invalid(grid),
            origin="lower",
            extent=extent,
            cmap="magma_r",
            interpolation="nearest",
            aspect="auto",
        )
        ax.set_title(f"{what} over {over}")
        ax.set_xlabel(xv.name)
        ax.set_ylabel(yv.name)
        if trace:
            xs = [step["state"][xv.name] for step in trace]
            ys = [step["state"][yv.name] for step in trace]
            ax.plot(xs, ys, "-o", color="tab:cyan", lw=2, ms=4, label="most probable path")
            ax.plot(xs[:1], ys[:1], "s", color="tab:green", ms=9, label="start")
            ax.plot(xs[-1:], ys[-1:], "X", color="tab:red", ms=11, label="target reached")
        fig.colorbar(img, ax=ax, label=f"{what} value")
    if trace:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=9)
    which = "explored states" if include is None else "explored states not at the target"
    fig.suptitle(
        f"{title}\nvalue of the {which} by ({xv.name}, {yv.name}): {states.shape[0]} states in "
        f"{int((count > 0).sum())} cells"
    )
    return save_figure(fig, path, dpi=110)
