"""The Draft Law: what speculative decoding saves, as a function of numbers.

Everything here is pure arithmetic on floats (docs/model.md). Output
positions fall in three classes, S (schema-bound), R (reasoning) and F (free
prose); each class has a predictability ``rho = exp(-H)``; a draft with
alignment constant ``kappa`` is accepted at a position with probability
``alpha = 1 - kappa * (1 - rho)``.

Two ways of combining classes are offered, because the data must choose:

* the **mixture** (the source paper): one acceptance for the whole request;
* the **spans** form (the default for decisions): each class is a contiguous
  span with its own acceptance, and a request costs the sum of its spans.

``tau`` is convex in ``alpha``, so the mixture overstates the saving of mixed
requests; the span form never exceeds it.

Break-even is computed exactly, as the root of ``tau(alpha) = gamma * (delta+d)``,
and reported beside the paper's first-order closed form, which is always
below the exact root (it is only valid where ``gamma * eps << 1``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

CLASSES: tuple[str, str, str] = ("s", "r", "f")
_WEIGHT_TOLERANCE = 1e-6
_ROOT_TOLERANCE = 1e-13
# Below this the R:F split is numerical noise (denormals lose the ratio entirely).
_NEGLIGIBLE_MASS = 1e-12


@dataclass(frozen=True, slots=True)
class ClassMix:
    """Mass fractions of a request's output tokens: schema, reasoning, prose."""

    s: float
    r: float
    f: float

    def __post_init__(self) -> None:
        for name in CLASSES:
            value = getattr(self, name)
            _require_finite(f"w_{name}", value)
            if value < 0:
                raise ValueError(f"w_{name} must be >= 0, got {value}")
        total = self.s + self.r + self.f
        if abs(total - 1.0) > _WEIGHT_TOLERANCE:
            raise ValueError(f"class weights w_s + w_r + w_f must sum to 1, got {total:.6g}")

    @classmethod
    def from_sequence(cls, values: Sequence[float]) -> ClassMix:
        if len(values) != 3:
            raise ValueError(f"a class mix needs three values w_s,w_r,w_f, got {len(values)}")
        return cls(*(float(v) for v in values))

    def items(self) -> Iterable[tuple[str, float]]:
        return ((name, getattr(self, name)) for name in CLASSES)


@dataclass(frozen=True, slots=True)
class ClassRho:
    """Per-class predictability ``rho_c = exp(-H_c)``, each in (0, 1]."""

    s: float
    r: float
    f: float

    def __post_init__(self) -> None:
        for name in CLASSES:
            value = getattr(self, name)
            _require_finite(f"rho_{name}", value)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"rho_{name} must lie in (0, 1], got {value}")

    @classmethod
    def from_sequence(cls, values: Sequence[float]) -> ClassRho:
        if len(values) != 3:
            raise ValueError(f"rho needs three values rho_s,rho_r,rho_f, got {len(values)}")
        return cls(*(float(v) for v in values))

    def of(self, name: str) -> float:
        return float(getattr(self, name))


@dataclass(frozen=True, slots=True)
class Drafter:
    """What one speculation pool costs: depth ``gamma``, verification overhead
    ``delta`` per draft token (relative to a target decode pass), and draft cost
    ``d`` per draft pass (relative to a target decode pass)."""

    gamma: int
    delta: float
    d: float

    def __post_init__(self) -> None:
        if isinstance(self.gamma, bool) or not isinstance(self.gamma, int) or self.gamma < 1:
            raise ValueError(f"gamma must be an integer >= 1, got {self.gamma!r}")
        for name in ("delta", "d"):
            value = getattr(self, name)
            _require_finite(name, value)
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")

    @property
    def overhead(self) -> float:
        """``delta + d``: the per-draft-token cost of a round beyond one target pass."""
        return self.delta + self.d

    @property
    def round_cost(self) -> float:
        """Cost of one round in target decode passes: ``1 + gamma * (delta + d)``."""
        return round_cost(self.gamma, self.delta, self.d)


def round_cost(gamma: float, delta: float, d: float) -> float:
    """``1 + gamma * (delta + d)``, for callers whose inputs are already validated; ``gamma`` is
    the draft tokens a round verifies (fewer than the depth for a lookup drafter, on average)."""
    return 1.0 + gamma * (delta + d)


def rounds_per_token(mix: ClassMix, taus: Mapping[str, float]) -> float:
    """Speculation rounds per output token in the span form: ``sum_c w_c / (tau_c + 1)``."""
    return mix.s / (taus["s"] + 1.0) + mix.r / (taus["r"] + 1.0) + mix.f / (taus["f"] + 1.0)


@dataclass(frozen=True, slots=True)
class Prediction:
    """The law's answer for one request under one combination rule."""

    alpha: float
    tau: float
    saving: float
    speedup: float
    net_cost_ratio: float


@dataclass(frozen=True, slots=True)
class SpanPrediction:
    """The span form: each class has its own acceptance and tau."""

    alpha: Mapping[str, float]
    tau: Mapping[str, float]
    effective_tau: float
    saving: float
    speedup: float
    net_cost_ratio: float


@dataclass(frozen=True, slots=True)
class BreakEvenWs:
    """The schema fraction at which speculation breaks even for a given R:F split.

    ``value`` is None when the threshold is undefined, and ``reason`` says why.
    ``clipped`` is ``"low"`` when the raw root was below 0 (speculation pays with
    no schema mass) and ``"high"`` when it was above 1 (it never pays).
    """

    value: float | None
    clipped: Literal["low", "high"] | None = None
    raw: float | None = None
    reason: str | None = None


# ---------------------------------------------------------------- primitives


def acceptance(rho: float, kappa: float) -> float:
    """Per-position acceptance ``alpha = 1 - kappa * (1 - rho)``, clamped to [0, 1]."""
    _check_kappa(kappa)
    _require_finite("rho", rho)
    if not 0.0 < rho <= 1.0:
        raise ValueError(f"rho must lie in (0, 1], got {rho}")
    return min(1.0, max(0.0, 1.0 - kappa * (1.0 - rho)))


def tau(alpha: float, gamma: int) -> float:
    """Expected accepted prefix per round: ``sum_{i=1..gamma} alpha**i``."""
    _check_alpha(alpha)
    _check_gamma(gamma)
    if alpha == 1.0:
        return float(gamma)
    return alpha * (1.0 - alpha**gamma) / (1.0 - alpha)


def saving_from_tau(tau_value: float, drafter: Drafter) -> float:
    """Saving ``1 - (1 + gamma*(delta+d)) / (tau + 1)``; negative means speculation loses."""
    if not 0.0 <= tau_value <= drafter.gamma + 1e-9:
        raise ValueError(f"tau must lie in [0, gamma={drafter.gamma}], got {tau_value}")
    return 1.0 - drafter.round_cost / (tau_value + 1.0)


def speedup_from_saving(saving: float) -> float:
    """Speedup ``1 / (1 - s)``: the factor by which cost per token shrinks."""
    return 1.0 / (1.0 - saving)


def mixture_rho(mix: ClassMix, rho: ClassRho) -> float:
    """``rho_bar = sum_c w_c * rho_c``: the paper's single predictability."""
    return sum(w * rho.of(name) for name, w in mix.items())


# ---------------------------------------------------------- the two combinations


def predict_mixture(mix: ClassMix, rho: ClassRho, kappa: float, drafter: Drafter) -> Prediction:
    """The paper's form: one acceptance for the whole request from ``rho_bar``."""
    alpha = acceptance(mixture_rho(mix, rho), kappa)
    t = tau(alpha, drafter.gamma)
    s = saving_from_tau(t, drafter)
    return Prediction(alpha, t, s, speedup_from_saving(s), 1.0 - s)


def predict_spans(mix: ClassMix, rho: ClassRho, kappa: float, drafter: Drafter) -> SpanPrediction:
    """Span form: ``s = 1 - (1 + gamma*(delta+d)) * sum_c w_c / (tau_c + 1)``."""
    alphas = {name: acceptance(rho.of(name), kappa) for name in CLASSES}
    return predict_spans_from_alpha(mix, alphas, drafter)


def predict_spans_from_alpha(
    mix: ClassMix, alphas: Mapping[str, float], drafter: Drafter
) -> SpanPrediction:
    """Span form from per-class acceptances measured directly (e.g. ngram drafters)."""
    taus = {name: tau(alphas[name], drafter.gamma) for name in CLASSES}
    return predict_spans_from_tau(mix, taus, drafter, alphas)


def predict_spans_from_tau(
    mix: ClassMix,
    taus: Mapping[str, float],
    drafter: Drafter,
    alphas: Mapping[str, float] | None = None,
) -> SpanPrediction:
    """Span form from per-class tau, e.g. as calibration measured it."""
    rounds = rounds_per_token(mix, taus)
    net = drafter.round_cost * rounds
    saving = 1.0 - net
    effective_tau = 1.0 / rounds - 1.0
    return SpanPrediction(
        alpha=dict(alphas) if alphas is not None else {},
        tau=dict(taus),
        effective_tau=effective_tau,
        saving=saving,
        speedup=speedup_from_saving(saving),
        net_cost_ratio=net,
    )


# ------------------------------------------------------------ marginal value


def marginal_tau_per_ws(mix: ClassMix, rho: ClassRho, kappa: float, gamma: int) -> float:
    """Exact ``dtau/dw_S`` (mixture form) for moving mass from F to S.

    ``kappa * (rho_S - rho_F) * sum_{i=1..gamma} i * alpha**(i-1)``. Zero where the
    acceptance clamp is active, since alpha does not move there.
    """
    _check_gamma(gamma)
    raw_alpha = 1.0 - kappa * (1.0 - mixture_rho(mix, rho))
    if not 0.0 < raw_alpha < 1.0:
        return 0.0
    slope = sum(i * raw_alpha ** (i - 1) for i in range(1, gamma + 1))
    return kappa * (rho.s - rho.f) * slope


def marginal_tau_per_ws_paper(rho: ClassRho, kappa: float, gamma: int) -> float:
    """The paper's alpha -> 1 limit: ``gamma*(gamma+1)/2 * kappa*(rho_S - rho_F)``."""
    _check_kappa(kappa)
    _check_gamma(gamma)
    return gamma * (gamma + 1) / 2.0 * kappa * (rho.s - rho.f)


# ------------------------------------------------------------------ break-even


def break_even_alpha(drafter: Drafter) -> float | None:
    """Exact break-even acceptance: the root of ``tau(alpha) = gamma * (delta + d)``.

    Returns None when speculation never pays (``delta + d >= 1``: even perfect
    acceptance only matches the cost), and 0.0 when it always pays (no overhead).
    """
    target = drafter.gamma * drafter.overhead
    if drafter.overhead >= 1.0:
        return None
    if target <= 0.0:
        return 0.0
    lo, hi = 0.0, 1.0
    # tau is increasing and smooth on [0, 1]: bisection is exact enough and
    # cannot fail, which matters more here than speed.
    while hi - lo > _ROOT_TOLERANCE:
        mid = 0.5 * (lo + hi)
        if tau(mid, drafter.gamma) > target:
            hi = mid
        else:
            lo = mid
    return 0.5 * (lo + hi)


def break_even_eps(drafter: Drafter) -> float | None:
    """Exact ``eps* = 1 - alpha*``; None when speculation never pays."""
    alpha = break_even_alpha(drafter)
    return None if alpha is None else 1.0 - alpha


def break_even_eps_closed_form(drafter: Drafter) -> float | None:
    """The paper's first-order ``eps* = 2 * (1 - delta - d) / (gamma + 1)``.

    Reported for comparison only: it is below the exact root everywhere and the
    product never decides on it. None when ``delta + d >= 1``.
    """
    if drafter.overhead >= 1.0:
        return None
    return 2.0 * (1.0 - drafter.overhead) / (drafter.gamma + 1)


def break_even_ws(
    eps_star: float | None, kappa: float, rho: ClassRho, mix: ClassMix
) -> BreakEvenWs:
    """Map a break-even mismatch ``eps*`` to a schema fraction (mixture form).

    Only the R:F split of ``mix`` matters: ``w_S`` is what is being solved for.
    """
    _check_kappa(kappa)
    if eps_star is None:
        return BreakEvenWs(None, reason="speculation never pays at this depth (delta + d >= 1)")
    non_schema = mix.r + mix.f
    if non_schema <= _NEGLIGIBLE_MASS:
        return BreakEvenWs(None, reason="w_R + w_F = 0: the R:F split that w_S* depends on is undefined")
    rho_n = (mix.r * rho.r + mix.f * rho.f) / non_schema
    if rho.s <= rho_n:
        return BreakEvenWs(
            None,
            reason=f"rho_S ({rho.s:.4g}) <= rho of the other classes ({rho_n:.4g}): "
            "schema mass does not raise acceptance",
        )
    rho_star = 1.0 - eps_star / kappa
    raw = (rho_star - rho_n) / (rho.s - rho_n)
    return _clip_ws(raw)


def break_even_ws_spans(taus: Mapping[str, float], drafter: Drafter, mix: ClassMix) -> BreakEvenWs:
    """Break-even schema fraction in the span form, for the R:F split of ``mix``.

    The span saving is linear in ``w_S`` once the R:F split is fixed, so the
    root has a closed form: solve ``round_cost * sum_c w_c/(tau_c+1) = 1``.
    """
    non_schema = mix.r + mix.f
    if non_schema <= _NEGLIGIBLE_MASS:
        return BreakEvenWs(None, reason="w_R + w_F = 0: the R:F split that w_S* depends on is undefined")
    cost_s = 1.0 / (taus["s"] + 1.0)
    cost_n = (mix.r / (taus["r"] + 1.0) + mix.f / (taus["f"] + 1.0)) / non_schema
    if cost_s >= cost_n:
        return BreakEvenWs(None, reason="tau_S <= tau of the other classes: schema mass does not help")
    # rounds per token at w_S = x: x*cost_s + (1-x)*cost_n; break-even where it equals 1/round_cost
    raw = (cost_n - 1.0 / drafter.round_cost) / (cost_n - cost_s)
    return _clip_ws(raw)


# ------------------------------------------------------------- depth, totals


def best_depth(
    gammas: Iterable[int],
    mix: ClassMix,
    rho: ClassRho,
    kappa: float,
    delta: float,
    d: float,
    rule: Literal["spans", "mixture"] = "spans",
) -> tuple[int, float]:
    """The depth with the highest predicted saving, and that saving."""
    best: tuple[int, float] | None = None
    for gamma in gammas:
        drafter = Drafter(gamma, delta, d)
        if rule == "spans":
            saving = predict_spans(mix, rho, kappa, drafter).saving
        else:
            saving = predict_mixture(mix, rho, kappa, drafter).saving
        if best is None or saving > best[1]:
            best = (gamma, saving)
    if best is None:
        raise ValueError("gammas must name at least one depth")
    return best


def composed_cost(
    prefill_cost: float,
    decode_cost: float,
    hit_rate: float,
    hit_cost_ratio: float,
    net_cost_ratio: float,
    retries: float = 1.0,
) -> float:
    """``C_total = nu * [(1 - h + h*c_hit) * C_pre + (c_net/c_1) * C_dec]``.

    Valid only while routing does not move requests between caches (docs/model.md).
    """
    for name, value in (("prefill_cost", prefill_cost), ("decode_cost", decode_cost)):
        _require_finite(name, value)
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if not 0.0 <= hit_rate <= 1.0:
        raise ValueError(f"hit_rate must lie in [0, 1], got {hit_rate}")
    if not 0.0 <= hit_cost_ratio <= 1.0:
        raise ValueError(f"hit_cost_ratio must lie in [0, 1], got {hit_cost_ratio}")
    if net_cost_ratio < 0:
        raise ValueError(f"net_cost_ratio must be >= 0, got {net_cost_ratio}")
    if retries < 1.0:
        raise ValueError(f"retries (nu) must be >= 1, got {retries}")
    prefill = (1.0 - hit_rate + hit_rate * hit_cost_ratio) * prefill_cost
    return retries * (prefill + net_cost_ratio * decode_cost)


# ----------------------------------------------------------------- validation


def _clip_ws(raw: float) -> BreakEvenWs:
    if raw <= 0.0:
        return BreakEvenWs(0.0, clipped="low", raw=raw, reason="pays with no schema mass")
    if raw >= 1.0:
        return BreakEvenWs(1.0, clipped="high", raw=raw, reason="never pays, even with w_S = 1")
    return BreakEvenWs(raw, raw=raw)


def _require_finite(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")


def _check_kappa(kappa: float) -> None:
    _require_finite("kappa", kappa)
    if kappa <= 0:
        raise ValueError(f"kappa must be > 0, got {kappa}")


def _check_alpha(alpha: float) -> None:
    _require_finite("alpha", alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")


def _check_gamma(gamma: int) -> None:
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma must be an integer >= 1, got {gamma!r}")
