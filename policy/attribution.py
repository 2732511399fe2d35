"""Per-class acceptance from pool-wide counters, when responses carry no per-request metrics.

Over a scrape window ``w`` the pool's accepted-token counter grows by
``A_w``; the proxy knows how many output tokens of each class ``N_{c,w}`` it
sent there. A token is either an accepted draft token or one the target
emitted itself, so with ``a_c = tau_c / (tau_c + 1)`` the share of class-c
tokens that were accepted drafts, ``A_w = sum_c a_c * N_{c,w}`` exactly (in
expectation). That is linear in ``a_c``: non-negative least squares over
windows gives ``a_c`` in [0, 1), hence ``tau_c = a_c / (1 - a_c)``.

Sound only when this proxy sent all of the pool's traffic in each window.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence

import numpy as np

CLASSES = ("s", "r", "f")
_MAX_SHARE = 0.98  # tau = 49: beyond any real depth, keeps tau finite


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares by enumerating active sets (a handful of columns)."""
    n = a.shape[1]
    best, best_err = np.zeros(n), float(np.sum(b * b))
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sub = a[:, cols]
            x, *_ = np.linalg.lstsq(sub, b, rcond=None)
            if np.any(x < 0):
                continue
            full = np.zeros(n)
            full[list(cols)] = x
            err = float(np.sum((a @ full - b) ** 2))
            if err < best_err - 1e-12:
                best, best_err = full, err
    return best


class CounterAttribution:
    """Windows of (accepted-token delta, class token counts) for one pool."""

    def __init__(self, max_windows: int = 120) -> None:
        self.windows: deque[tuple[float, tuple[float, float, float]]] = deque(maxlen=max_windows)

    def add_window(self, accepted_delta: float, class_tokens: Sequence[float]) -> None:
        if accepted_delta < 0 or sum(class_tokens) <= 0:
            return  # counter reset or an idle window: nothing to learn
        self.windows.append((float(accepted_delta), tuple(float(x) for x in class_tokens)))  # type: ignore[arg-type]

    def tau(self) -> dict[str, float | None]:
        """Per-class tau; None for a class this pool has not seen."""
        if len(self.windows) < 2:
            return {c: None for c in CLASSES}
        a = np.array([w[1] for w in self.windows])
        b = np.array([w[0] for w in self.windows])
        seen = a.sum(axis=0) > 0
        shares = np.zeros(3)
        shares[seen] = nnls(a[:, seen], b)
        out: dict[str, float | None] = {}
        for i, c in enumerate(CLASSES):
            if not seen[i]:
                out[c] = None
                continue
            share = min(shares[i], _MAX_SHARE)
            out[c] = share / (1.0 - share)
        return out
