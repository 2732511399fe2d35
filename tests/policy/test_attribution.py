"""Counter attribution: per-class tau from pool counters (policy/attribution)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from draftgate.policy.attribution import CounterAttribution, nnls


@settings(max_examples=50, deadline=None)
@given(st.floats(0.1, 7.0), st.floats(0.1, 3.0), st.floats(0.0, 2.0), st.integers(0, 2**31))
def test_recovers_per_class_tau_from_mixed_windows(tau_s: float, tau_r: float, tau_f: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    attribution = CounterAttribution()
    shares = np.array([t / (t + 1) for t in (tau_s, tau_r, tau_f)])
    for _ in range(30):
        tokens = rng.integers(0, 2000, size=3).astype(float)
        attribution.add_window(float(tokens @ shares), tokens)
    got = attribution.tau()
    for name, truth in zip("srf", (tau_s, tau_r, tau_f)):
        assert abs(got[name] - truth) < 1e-6 * (1 + truth) or abs(got[name] - truth) < 1e-4


def test_unseen_classes_are_none_and_noise_is_tolerated() -> None:
    attribution = CounterAttribution()
    rng = np.random.default_rng(1)
    for _ in range(40):
        s, f = rng.integers(100, 1000), rng.integers(100, 1000)
        accepted = 0.85 * s + 0.3 * f + rng.normal(0, 5)
        attribution.add_window(accepted, (s, 0, f))
    tau = attribution.tau()
    assert tau["r"] is None
    assert abs(tau["s"] - 0.85 / 0.15) < 0.5 and abs(tau["f"] - 0.3 / 0.7) < 0.05


def test_nnls_keeps_coefficients_non_negative() -> None:
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    b = np.array([1.0, -1.0, 0.0])
    x = nnls(a, b)
    assert np.all(x >= 0)
