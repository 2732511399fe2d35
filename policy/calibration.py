"""The calibration model: the numbers the gate decides with, versioned.

The proxy needs calibrated parameters before anyone has calibrated, so every
field has a documented default drawn from the source paper's reference
platform (a 32B BF16 target with a same-family 4B draft on an H200) and the
file says whether it holds defaults or measurements. ``draftgate calibrate``
writes the same model with measured values.

Parsing is strict: another schema version, or a value out of range, fails with
a message naming the field, because a silently misread calibration routes
money the wrong way for as long as nobody looks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping
from datetime import datetime, timezone
from typing import Any, Literal, NamedTuple, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from draftgate.policy.copying import CopyRates
from draftgate.policy.law import ClassRho

SCHEMA_VERSION = 1
_MAX_DERIVED = 1024
_OWNER = ("owner",)
T = TypeVar("T")

# Defaults, with where they come from. Each is shown as a default wherever it is used.
DEFAULT_MODEL = "Qwen/Qwen3-32B"
DEFAULT_KAPPA = 0.9  # same-family 4B draft for a 32B target (source paper)
# Class predictabilities chosen so that alpha = 1 - kappa*(1 - rho) is the per-token
# acceptance published for same-family drafts (docs/model.md, "Defaults"): at
# temperature 0, schema-bound 0.95, reasoning 0.78, chat prose 0.65.
DEFAULT_RHO_GREEDY = {"s": 0.944, "r": 0.756, "f": 0.611}
# At Qwen3's sampling default (0.6) acceptance falls a little on text, hardly on schema:
# alpha 0.93, 0.72 and 0.58.
DEFAULT_RHO_SAMPLED = {"s": 0.922, "r": 0.689, "f": 0.533}
DEFAULT_SAMPLED_TEMPERATURE = 0.6
# Draft cost per pass relative to the target: parameter ratio 1/8 for 4B/32B, but a
# small model uses the bandwidth worse; expect 0.2-0.3 at batch 1 (docs/model.md).
DEFAULT_DRAFT_COST = 0.25
# Verification overhead per draft token as running requests grow: nearly free while
# decode is bandwidth-bound, then compute-bound once (gamma+1)*b tokens pass ~200.
DEFAULT_DELTA_BY_LOAD: list[tuple[int, float]] = [
    (1, 0.01), (8, 0.03), (16, 0.06), (32, 0.15), (64, 0.35), (128, 0.70), (256, 1.40)
]
# Seconds per target decode pass at a given batch (32B BF16 on an H200: 64 GB of
# weights over ~4 TB/s achieved is ~16 ms, growing slowly with batch).
DEFAULT_TARGET_PASS_SECONDS: list[tuple[int, float]] = [
    (1, 0.017), (8, 0.018), (32, 0.022), (64, 0.028), (128, 0.040), (256, 0.065)
]
# Prefill seconds per uncached prompt token (~64 GFLOP/token at ~650 TFLOP/s achieved).
DEFAULT_PREFILL_SECONDS_PER_TOKEN = 1.0e-4
DEFAULT_PREFILL_HIT_COST_RATIO = 0.02  # a cached prefix token still costs a little
# Copy-based drafters: priced by what the request holds to copy (copying.py), not by the law.
LOOKUP_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})


class MethodDefaults(NamedTuple):
    """What a drafting method costs per draft pass relative to a target pass, and its
    alignment ``kappa`` (None: the calibration's, which the four arms fit)."""

    draft_cost: float
    kappa: float | None


# Until calibration measures a pool, by method (docs/model.md, "Drafting methods"): a 4B
# draft model costs a fifth to a third of a 32B pass; an EAGLE-3 head is one decoder
# layer and the LM head (~1.2B parameters, read at worse bandwidth); an MTP layer is one
# layer sharing the target's LM head; a lookup runs on the CPU between steps. Heads see the
# target's hidden states, so they are better aligned than a separate model.
METHOD_DEFAULTS: dict[str, MethodDefaults] = {
    "draft_model": MethodDefaults(DEFAULT_DRAFT_COST, None),
    "eagle": MethodDefaults(0.08, 0.75),
    "eagle3": MethodDefaults(0.08, 0.75),
    "mtp": MethodDefaults(0.05, 0.75),
    "medusa": MethodDefaults(0.05, 0.9),
    "ngram": MethodDefaults(0.0, None),
    "ngram_gpu": MethodDefaults(0.0, None),
    "suffix": MethodDefaults(0.0, None),
}


class ClassValues(BaseModel):
    """One number per output class: S (schema), R (reasoning), F (prose)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    s: float
    r: float
    f: float

    def of(self, name: str) -> float:
        return float(getattr(self, name))


class RhoTable(ClassValues):
    """Class predictabilities; each must lie in (0, 1]."""

    @model_validator(mode="after")
    def _in_range(self) -> RhoTable:
        for name in ("s", "r", "f"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"rho.{name} must lie in (0, 1], got {value}")
        return self

    def as_law(self) -> ClassRho:
        return ClassRho(self.s, self.r, self.f)


class Curve(BaseModel):
    """A function of load given as points ``(running_requests, value)``.

    Evaluated piecewise-linearly; beyond the last point it extends the last
    segment's slope, because overhead keeps growing past what was measured.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    points: list[tuple[float, float]] = Field(min_length=1)

    @field_validator("points")
    @classmethod
    def _sorted_and_non_negative(cls, points: list[tuple[float, float]]) -> list[tuple[float, float]]:
        xs = [x for x, _ in points]
        if any(b <= a for a, b in zip(xs, xs[1:])):
            raise ValueError("points must be sorted by strictly increasing load")
        if any(x < 0 or y < 0 for x, y in points):
            raise ValueError("load and value must be >= 0")
        return points

    @property
    def measured_up_to(self) -> float:
        """The highest load with a point: past it, values are extrapolated."""
        return self.points[-1][0]

    def __call__(self, load: float) -> float:
        points = self.points
        if len(points) == 1 or load <= points[0][0]:
            return points[0][1]
        i = 1
        while i < len(points) - 1 and points[i][0] <= load:
            i += 1
        (x0, y0), (x1, y1) = points[i - 1], points[i]
        return max(0.0, y0 + (y1 - y0) * (load - x0) / (x1 - x0))


class CopyCoefficients(BaseModel):
    """``copying.CopyRates`` as a calibration file holds them: the accepted share of each class's tokens at
    depth 4, a base and what each source adds, and the draft tokens proposed per token accepted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    s_base: float = Field(ge=0.0, le=1.0)
    s_history: float = Field(ge=0.0, le=1.0)
    f_base: float = Field(ge=0.0, le=1.0)
    f_context: float = Field(ge=0.0, le=1.0)
    f_code: float = Field(ge=0.0, le=1.0)
    drafted_per_accepted: float = Field(gt=0.0, le=64.0)

    def rates(self) -> CopyRates:
        return CopyRates(self.s_base, self.s_history, self.f_base, self.f_context, self.f_code,
                         self.drafted_per_accepted)


class PoolCalibration(BaseModel):
    """What calibration knows of one speculation pool (method and depth fixed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str = "draft_model"
    gamma: int = Field(8, ge=1, le=64)
    draft_cost: float = Field(DEFAULT_DRAFT_COST, ge=0.0, le=10.0)
    delta: Curve = Curve(points=DEFAULT_DELTA_BY_LOAD)
    # Measured per-class tau at temperature 0, when calibration had the data; the
    # law with kappa and rho is the prior. Not used for a lookup drafter, whose tau
    # follows what each request holds to copy.
    tau_greedy: ClassValues | None = None
    # the method's alignment where it differs from the calibration's kappa (EAGLE, MTP heads)
    kappa: float | None = Field(None, gt=0.0, le=5.0)
    # a lookup drafter's (ngram, suffix) own coefficients of what a request's sources let it copy, fitted
    # on this pool; the committed ones (copying.RATES) where absent
    copy_rates: CopyCoefficients | None = None

    def draft_cost_with(self, configured: float | None) -> float:
        """The drafter's cost d: the pool's configured value where its configuration gives one, else
        what calibration measured."""
        return configured if configured is not None else self.draft_cost


class Calibration(BaseModel):
    """Everything the gate needs, for one target model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = SCHEMA_VERSION
    model: str = DEFAULT_MODEL
    source: Literal["defaults", "measured"] = "defaults"
    created: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    kappa: float = Field(DEFAULT_KAPPA, gt=0.0, le=5.0)
    rho_greedy: RhoTable = RhoTable(**DEFAULT_RHO_GREEDY)
    rho_sampled: RhoTable = RhoTable(**DEFAULT_RHO_SAMPLED)
    sampled_temperature: float = Field(DEFAULT_SAMPLED_TEMPERATURE, gt=0.0, le=2.0)
    target_pass_seconds: Curve = Curve(points=DEFAULT_TARGET_PASS_SECONDS)
    prefill_seconds_per_token: float = Field(DEFAULT_PREFILL_SECONDS_PER_TOKEN, ge=0.0)
    prefill_hit_cost_ratio: float = Field(DEFAULT_PREFILL_HIT_COST_RATIO, ge=0.0, le=1.0)
    pools: dict[str, PoolCalibration] = Field(default_factory=dict)
    sample_sizes: dict[str, int] = Field(default_factory=dict)

    # Values the gate derives from this calibration on every request (per-class tau
    # for a pool at a temperature); a calibration never changes, so each is derived once.
    _derived: dict[Hashable, Any] = PrivateAttr(default_factory=dict)

    @property
    def is_default(self) -> bool:
        return self.source == "defaults"

    def derived(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, remembered under ``key`` for this calibration (bounded: keys can
        carry client-chosen numbers such as a temperature)."""
        derived = self._derived
        if derived.get(_OWNER) != id(self):  # a model_copy starts out sharing the original's dict
            derived = self._derived = {_OWNER: id(self)}
        try:
            return derived[key]  # type: ignore[no-any-return]
        except KeyError:
            pass
        if len(derived) >= _MAX_DERIVED:
            derived.clear()
            derived[_OWNER] = id(self)
        value = derived[key] = compute()
        return value

    def rho_at(self, temperature: float) -> ClassRho:
        """Class predictability at a sampling temperature.

        Linear between the greedy table (T=0) and the sampled table, held flat
        beyond the sampled temperature: acceptance does not recover at higher T.
        """
        t = max(0.0, min(1.0, temperature / self.sampled_temperature))
        g, s = self.rho_greedy, self.rho_sampled
        return ClassRho(
            g.s + (s.s - g.s) * t,
            g.r + (s.r - g.r) * t,
            g.f + (s.f - g.f) * t,
        )

    def pool(self, name: str, gamma: int | None = None, method: str | None = None) -> PoolCalibration:
        """The calibration of a named pool; else of a pool measured with the same method and depth under
        another name (a configuration the fleet plan weighs, a renamed pool); else defaults with that depth
        and method. Never one measured drafting with another method, whose costs say nothing of this one's."""
        measured = self.pools.get(name)
        if measured is not None and (method is None or measured.method == method):
            return measured
        if method is not None and gamma is not None:
            alike = next((p for _, p in sorted(self.pools.items()) if p.method == method and p.gamma == gamma), None)
            if alike is not None:
                return alike
        return _default_pool(gamma, method)


@functools.lru_cache(maxsize=64)
def _default_pool(gamma: int | None, method: str | None) -> PoolCalibration:
    # built once per (depth, method): the gate asks for it several times per request
    fields: dict[str, Any] = {}
    if gamma is not None:
        fields["gamma"] = gamma
    if method is not None:
        fields["method"] = method
        defaults = METHOD_DEFAULTS.get(method)
        if defaults is not None:
            fields["draft_cost"], fields["kappa"] = defaults
    return PoolCalibration(**fields)


class CalibrationError(ValueError):
    """A calibration file that cannot be used, with the field that is wrong."""


def calibration_from_yaml(text: str, origin: str = "calibration") -> Calibration:
    """Parse a calibration document, failing with the offending field named."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:  # one line: where it broke, not the parser's excerpt of the file
        mark = getattr(exc, "problem_mark", None)
        raise CalibrationError(f"{origin}: not valid YAML" + (f" at line {mark.line + 1}" if mark else "")) from None
    return parse_calibration(raw, origin=origin)


def parse_calibration(raw: Any, origin: str = "calibration") -> Calibration:
    if not isinstance(raw, Mapping):
        raise CalibrationError(f"{origin}: expected a mapping at the top level")
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        raise CalibrationError(
            f"{origin}: schema_version is {version!r}, this draftgate reads version {SCHEMA_VERSION}"
        )
    try:
        return Calibration.model_validate(dict(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise CalibrationError(f"{origin}: {where}: {first['msg']}") from None


def dump_calibration(calibration: Calibration) -> str:
    return yaml.safe_dump(calibration.model_dump(mode="json"), sort_keys=False)
