"""Fitting the calibration from measurements: pure functions of numbers.

What the four-arm protocol measures becomes the model's parameters here:
per-class tau from per-request acceptance and class mixes; per-class entropy
(hence rho) from the plain pool's top_logprobs; kappa from mismatch against
unpredictability; the round overhead delta + d from round time against depth.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from draftgate.policy import law
from draftgate.policy.attribution import nnls

CLASSES = ("s", "r", "f")
T = TypeVar("T")


def invert_tau(tau_value: float, gamma: int) -> float:
    """The acceptance alpha whose tau(alpha, gamma) equals ``tau_value`` (clamped)."""
    if tau_value <= 0:
        return 0.0
    if tau_value >= gamma:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if law.tau(mid, gamma) < tau_value:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _by_class(samples: Sequence[tuple[dict[str, float], float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = np.array([[w.get(c, 0.0) for c in CLASSES] for w, _ in samples])
    b = np.array([y for _, y in samples])
    seen = a.sum(axis=0) > 1e-6
    return a, b, seen


def class_tau(samples: Sequence[tuple[dict[str, float], float]]) -> dict[str, float | None]:
    """Per-class tau from (class mix, request tau) pairs, in the span form.

    A request of mix w takes ``sum_c w_c / (tau_c + 1)`` rounds per token, which is
    linear in ``u_c = 1/(tau_c + 1)``: non-negative least squares over requests.
    """
    if not samples:
        return {c: None for c in CLASSES}
    a, b, seen = _by_class([(w, 1.0 / (t + 1.0)) for w, t in samples])
    u = np.zeros(3)
    u[seen] = nnls(a[:, seen], b)
    return {c: (1.0 / max(u[i], 1e-6) - 1.0 if seen[i] else None) for i, c in enumerate(CLASSES)}


def class_entropy(samples: Sequence[tuple[dict[str, float], float]]) -> dict[str, float | None]:
    """Per-class mean entropy from (class mix, request mean entropy) pairs."""
    if not samples:
        return {c: None for c in CLASSES}
    a, b, seen = _by_class(samples)
    h = np.zeros(3)
    h[seen] = nnls(a[:, seen], b)
    return {c: (float(h[i]) if seen[i] else None) for i, c in enumerate(CLASSES)}


def kappa_through_origin(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Least squares through 0 of eps = kappa * (1 - rho): pairs of (1 - rho, eps)."""
    sxx = sum(x * x for x, _ in pairs)
    if sxx <= 0:
        return None
    return sum(x * y for x, y in pairs) / sxx


def overhead(c_t: float, rounds: Sequence[tuple[int, float]]) -> float | None:
    """delta + d from (gamma, time per round), with the intercept fixed at c_T.

    round = c_T * (1 + gamma * (delta + d)): least squares of (round/c_T - 1) on gamma
    through the origin, which uses every depth measured.
    """
    if c_t <= 0 or not rounds:
        return None
    sxx = sum(g * g for g, _ in rounds)
    return max(0.0, sum(g * (r / c_t - 1.0) for g, r in rounds) / sxx)


def slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Ordinary least-squares slope (with intercept), floored at 0."""
    if len(xs) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None
    return max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx)


def bootstrap(samples: Sequence[T], statistic: Callable[[Sequence[T]], float | None], rounds: int = 200,
              seed: int = 0) -> float | None:
    """Standard deviation of ``statistic`` over resamples of ``samples``."""
    if len(samples) < 3:
        return None
    rng = random.Random(seed)
    values = []
    for _ in range(rounds):
        value = statistic([rng.choice(samples) for _ in samples])
        if value is not None and np.isfinite(value):
            values.append(value)
    return float(np.std(values)) if len(values) > 2 else None
