"""Continuous environments: a concrete step and a sound interval (box) step, with their parameters in one place.

An environment has a state dimension ``dim``, a finite action set (``actions``: the control value of each action),
a concrete step ``step(x, u)`` on a batch of points and an interval step ``step_box(lo, hi, u)`` whose result box
contains ``step(x, u)`` for every ``x`` in ``[lo, hi]``. The interval step is written with the helpers below,
which round every endpoint outwards (``np.nextafter``), so the inclusion holds for the floating-point concrete
step too, not only for the real-valued one.

The failure region is the complement of the closed *safe box* ``[safe_lo, safe_hi]`` (``+-inf`` in the free
dimensions): a box is *failing* if it lies outside the safe box, *possibly failing* if it overlaps its outside.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from distmc.errors import UsageError

__all__ = ["ENVS", "CartPole", "CartPoleMosaic", "ContinuousEnv", "Pendulum", "get_env", "parse_region", "with_regions"]

Iv = tuple[np.ndarray, np.ndarray]


def _down(x: np.ndarray) -> np.ndarray:
    return np.nextafter(x, -np.inf)


def _up(x: np.ndarray) -> np.ndarray:
    return np.nextafter(x, np.inf)


def iadd(a: Iv, b: Iv) -> Iv:
    """Interval sum, rounded outwards."""
    return _down(a[0] + b[0]), _up(a[1] + b[1])


def iscale(a: Iv, c: float) -> Iv:
    """Interval times a constant, rounded outwards."""
    lo, hi = (a[0] * c, a[1] * c) if c >= 0 else (a[1] * c, a[0] * c)
    return _down(lo), _up(hi)


def ishift(a: Iv, c: float | np.ndarray) -> Iv:
    """Interval plus a constant (or a per-box constant array), rounded outwards."""
    return _down(a[0] + c), _up(a[1] + c)


def imul(a: Iv, b: Iv) -> Iv:
    """Interval product, rounded outwards."""
    p = np.stack([a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]])
    return _down(p.min(axis=0)), _up(p.max(axis=0))


def isq(a: Iv) -> Iv:
    """Interval square (tighter than ``imul(a, a)``), rounded outwards."""
    lo2, hi2 = a[0] * a[0], a[1] * a[1]
    lo = np.where(a[0] >= 0, lo2, np.where(a[1] <= 0, hi2, 0.0))
    hi = np.maximum(lo2, hi2)
    return np.maximum(_down(lo), 0.0), _up(hi)


def iinv_pos(a: Iv) -> Iv:
    """``1 / a`` for a strictly positive interval, rounded outwards."""
    if (a[0] <= 0).any():
        raise AssertionError("iinv_pos needs a positive interval")
    return _down(1.0 / a[1]), _up(1.0 / a[0])


def _contains_point(lo: np.ndarray, hi: np.ndarray, phase: float) -> np.ndarray:
    """Whether ``[lo, hi]`` contains ``phase + 2 k pi`` for some integer k (decided with slack, i.e. soundly)."""
    two_pi = 2.0 * math.pi
    k = np.ceil((lo - phase) / two_pi - 1e-9)
    return phase + k * two_pi <= hi + 1e-9


def isin(a: Iv) -> Iv:
    """Interval sine: endpoint values, widened to +-1 where a crest or trough lies inside; rounded outwards."""
    s0, s1 = np.sin(a[0]), np.sin(a[1])
    lo, hi = np.minimum(s0, s1), np.maximum(s0, s1)
    hi = np.where(_contains_point(a[0], a[1], math.pi / 2), 1.0, hi)
    lo = np.where(_contains_point(a[0], a[1], -math.pi / 2), -1.0, lo)
    wide = (a[1] - a[0]) >= 2 * math.pi
    lo, hi = np.where(wide, -1.0, lo), np.where(wide, 1.0, hi)
    # np.sin is accurate to about one ulp: widen by two.
    return np.maximum(_down(_down(lo)), -1.0), np.minimum(_up(_up(hi)), 1.0)


def icos(a: Iv) -> Iv:
    """Interval cosine, as the sine of ``a + pi/2`` (the shift rounded outwards)."""
    return isin(ishift(a, math.pi / 2))


def iclip(a: Iv, lo: float, hi: float) -> Iv:
    """Clipping is monotone: clip both endpoints."""
    return np.clip(a[0], lo, hi), np.clip(a[1], lo, hi)


@dataclass(frozen=True)
class ContinuousEnv:
    """A continuous-state system with discrete actions (see the module docstring).

    Attributes:
        name: short name (``distmc abstract NAME``).
        state_names: one name per dimension.
        actions: ``[A]`` control value of each action (what the network's output ``i`` applies).
        noop: control value applied when an action fails to execute (see :mod:`distmc.abstract.faults`).
        init_lo, init_hi: the initial region.
        safe_lo, safe_hi: the safe box; its complement is the failure region.
        cell: ``[dim]`` cell widths of the lattice of abstract states (see :mod:`distmc.abstract.mdp`).
        episode_steps: episode length of the training environment.
    """

    name: str
    state_names: tuple[str, ...]
    actions: tuple[float, ...]
    noop: float
    init_lo: tuple[float, ...]
    init_hi: tuple[float, ...]
    safe_lo: tuple[float, ...]
    safe_hi: tuple[float, ...]
    cell: tuple[float, ...]
    episode_steps: int = 200
    params: dict[str, float] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return len(self.state_names)

    def arrays(self) -> dict[str, np.ndarray]:
        """The region bounds as float64 arrays."""
        return {
            k: np.asarray(getattr(self, k), dtype=np.float64)
            for k in ("init_lo", "init_hi", "safe_lo", "safe_hi", "cell")
        }

    def step(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Concrete step of points ``x`` ``[N, dim]`` under controls ``u`` ``[N]``."""
        raise NotImplementedError

    def step_box(self, lo: np.ndarray, hi: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A box ``[N, dim]`` containing ``step(x, u)`` for every ``x`` in ``[lo, hi]`` ``[N, dim]``."""
        raise NotImplementedError

    def failed(self, x: np.ndarray) -> np.ndarray:
        """``[N]`` bool: the points are in the failure region."""
        a = self.arrays()
        return np.asarray(((x < a["safe_lo"]) | (x > a["safe_hi"])).any(axis=1))

    def box_flags(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``[N]`` bool each: the boxes ``[N, dim]`` overlap the failure region (*maybe*), lie inside it (*surely*)."""
        a = self.arrays()
        maybe = ((lo < a["safe_lo"]) | (hi > a["safe_hi"])).any(axis=1)
        surely = ((hi < a["safe_lo"]) | (lo > a["safe_hi"])).any(axis=1)
        return np.asarray(maybe), np.asarray(surely)

    def regions(self) -> dict[str, dict[str, list[float]]]:
        """The initial region and the safe box by variable name (``[lo, hi]``; +-inf where the box is open)."""
        return {
            "init": {n: [self.init_lo[i], self.init_hi[i]] for i, n in enumerate(self.state_names)},
            "safe": {n: [self.safe_lo[i], self.safe_hi[i]] for i, n in enumerate(self.state_names)},
        }


PENDULUM = dict(g=10.0, m=1.0, l=1.0, dt=0.05, max_speed=8.0, max_torque=2.0)


class Pendulum(ContinuousEnv):
    """Gym's pendulum (semi-implicit Euler), theta = 0 upright, torques +-2, failure when |theta| > pi/4."""

    def __init__(self) -> None:
        q = math.pi / 4
        super().__init__(
            name="pendulum",
            state_names=("theta", "theta_dot"),
            actions=(-2.0, 2.0),
            noop=0.0,
            init_lo=(-q, -1.0),
            init_hi=(q, 1.0),
            safe_lo=(-q, -math.inf),
            safe_hi=(q, math.inf),
            cell=(math.pi / 2 / 64, 0.125),
            episode_steps=100,
            params=dict(PENDULUM),
        )

    def step(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        p = self.params
        th, thd = x[:, 0], x[:, 1]
        thd = thd + (3 * p["g"] / (2 * p["l"]) * np.sin(th) + 3.0 / (p["m"] * p["l"] ** 2) * u) * p["dt"]
        thd = np.clip(thd, -p["max_speed"], p["max_speed"])
        return np.stack([th + thd * p["dt"], thd], axis=1)

    def step_box(self, lo: np.ndarray, hi: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = self.params
        th, thd = (lo[:, 0], hi[:, 0]), (lo[:, 1], hi[:, 1])
        acc = ishift(iscale(isin(th), 3 * p["g"] / (2 * p["l"])), 3.0 / (p["m"] * p["l"] ** 2) * u)
        thd2 = iclip(iadd(thd, iscale(acc, p["dt"])), -p["max_speed"], p["max_speed"])
        th2 = iadd(th, iscale(thd2, p["dt"]))
        return np.stack([th2[0], thd2[0]], axis=1), np.stack([th2[1], thd2[1]], axis=1)


CARTPOLE = dict(gravity=9.8, masscart=1.0, masspole=0.1, length=0.5, force_mag=10.0, tau=0.02)


class CartPole(ContinuousEnv):
    """Gym's cart-pole (Euler), forces +-10, failure when |x| > 2.4 or |theta| > 12 degrees."""

    #: The dynamics a controller is trained on: a policy for ``cartpole`` fits every variant with these dynamics.
    dynamics = "cartpole"

    def __init__(self) -> None:
        t = 12 * 2 * math.pi / 360
        super().__init__(
            name="cartpole",
            state_names=("x", "x_dot", "theta", "theta_dot"),
            actions=(-10.0, 10.0),
            noop=0.0,
            init_lo=(-0.05,) * 4,
            init_hi=(0.05,) * 4,
            safe_lo=(-2.4, -math.inf, -t, -math.inf),
            safe_hi=(2.4, math.inf, t, math.inf),
            cell=(0.025, 0.05, 0.0125, 0.05),
            episode_steps=200,
            params=dict(CARTPOLE),
        )

    def _consts(self) -> tuple[float, float, float, float]:
        p = self.params
        total = p["masscart"] + p["masspole"]
        return total, p["masspole"] * p["length"], p["gravity"], p["length"]

    def step(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        total, pml, g, length = self._consts()
        tau, mp = self.params["tau"], self.params["masspole"]
        xx, xd, th, thd = x.T
        s, c = np.sin(th), np.cos(th)
        temp = (u + pml * thd**2 * s) / total
        thacc = (g * s - c * temp) / (length * (4.0 / 3.0 - mp * c**2 / total))
        xacc = temp - pml * thacc * c / total
        return np.stack([xx + tau * xd, xd + tau * xacc, th + tau * thd, thd + tau * thacc], axis=1)

    def step_box(self, lo: np.ndarray, hi: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        total, pml, g, length = self._consts()
        tau, mp = self.params["tau"], self.params["masspole"]
        xx, xd, th, thd = ((lo[:, i], hi[:, i]) for i in range(4))
        s, c = isin(th), icos(th)
        temp = iscale(ishift(iscale(imul(isq(thd), s), pml), u), 1.0 / total)
        den = iscale(ishift(iscale(isq(c), -mp / total), 4.0 / 3.0), length)
        thacc = imul(iadd(iscale(s, g), iscale(imul(c, temp), -1.0)), iinv_pos(den))
        xacc = iadd(temp, iscale(imul(thacc, c), -pml / total))
        out = [
            iadd(xx, iscale(xd, tau)),
            iadd(xd, iscale(xacc, tau)),
            iadd(th, iscale(thd, tau)),
            iadd(thd, iscale(thacc, tau)),
        ]
        return np.stack([o[0] for o in out], axis=1), np.stack([o[1] for o in out], axis=1)


class CartPoleMosaic(CartPole):
    """Cart-pole as MOSAIC verified it: Gym's dynamics, failure when |x| > 0.05 or |theta| > 10 degrees.

    From ``environment/cartpole_abstract.py`` of phate09/SafeDRL (the code of Bacci and Parker's MOSAIC paper):
    ``x_threshold = 0.05`` and ``theta_threshold_radians = 10 * 2 * pi / 360``, the initial region
    [-0.05, 0.05]^4 (Gym's reset range) and Euler integration with Gym's constants; the paper's experiment adds
    a sticky action with probability 0.2 (``--fault sticky:0.2``) and horizon 7. The lattice cells are
    ``cartpole``'s (they matter only for ``--abstraction lattice``; finer ones make an image overlap more cells
    than an image key holds).
    """

    def __init__(self) -> None:
        super().__init__()
        t = 10 * 2 * math.pi / 360
        _set(
            self,
            name="cartpole-mosaic",
            safe_lo=(-0.05, -math.inf, -t, -math.inf),
            safe_hi=(0.05, math.inf, t, math.inf),
        )


def _set(env: ContinuousEnv, **values: object) -> None:
    for k, v in values.items():
        object.__setattr__(env, k, v)


def parse_region(env: ContinuousEnv, text: str, flag: str) -> dict[str, tuple[float, float]]:
    """``"x=-0.05:0.05,theta=-0.1:0.1"`` as ``{name: (lo, hi)}``; ``inf``/``-inf`` are allowed, names are checked."""
    out: dict[str, tuple[float, float]] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, eq, rng = part.partition("=")
        lo_s, colon, hi_s = rng.partition(":")
        name = name.strip()
        try:
            if not eq or not colon:
                raise ValueError
            lo, hi = float(lo_s), float(hi_s)
        except ValueError:
            raise UsageError(f"{flag} '{part}': expected VAR=LO:HI, e.g. {env.state_names[0]}=-0.05:0.05") from None
        if name not in env.state_names:
            raise UsageError(
                f"{flag} '{part}': {env.name} has no variable '{name}' (it has {', '.join(env.state_names)})"
            )
        if not lo <= hi or math.isnan(lo) or math.isnan(hi):
            raise UsageError(f"{flag} '{part}': need LO <= HI")
        out[name] = (lo, hi)
    return out


def with_regions(env: ContinuousEnv, init: str | None = None, safe: str | None = None) -> ContinuousEnv:
    """A copy of ``env`` with the named variables' initial range and safe range replaced (``--init``/``--safe``).

    The initial region must be bounded and lie inside the safe box (a run starting outside it has failed before
    any step; bounds are about runs that start safe).
    """
    out = copy.copy(env)
    for text, lo_f, hi_f, flag in ((init, "init_lo", "init_hi", "--init"), (safe, "safe_lo", "safe_hi", "--safe")):
        if text is None:
            continue
        lo, hi = list(getattr(out, lo_f)), list(getattr(out, hi_f))
        for name, (a, b) in parse_region(env, text, flag).items():
            i = env.state_names.index(name)
            lo[i], hi[i] = a, b
        _set(out, **{lo_f: tuple(lo), hi_f: tuple(hi)})
    if not all(map(math.isfinite, out.init_lo + out.init_hi)):
        raise UsageError("--init: the initial region must be bounded")
    if any(a < s for a, s in zip(out.init_lo, out.safe_lo, strict=True)) or any(
        a > s for a, s in zip(out.init_hi, out.safe_hi, strict=True)
    ):
        raise UsageError(
            f"the initial region {_box(out.state_names, out.init_lo, out.init_hi)} does not lie inside "
            f"the safe box {_box(out.state_names, out.safe_lo, out.safe_hi)}"
        )
    return out


def _box(names: tuple[str, ...], lo: tuple[float, ...], hi: tuple[float, ...]) -> str:
    return ",".join(f"{n}={a:g}:{b:g}" for n, a, b in zip(names, lo, hi, strict=True))


#: Each environment by name: its class, built without arguments (each subclass fixes its own fields).
ENVS: dict[str, Callable[[], ContinuousEnv]] = {
    "pendulum": Pendulum,
    "cartpole": CartPole,
    "cartpole-mosaic": CartPoleMosaic,
}


def get_env(name: str) -> ContinuousEnv:
    """The environment called ``name``."""
    if name not in ENVS:
        raise UsageError(f"unknown environment '{name}': choose one of {sorted(ENVS)}")
    return ENVS[name]()
