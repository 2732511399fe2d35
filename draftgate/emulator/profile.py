"""Engine parameters of an emulated server, with defaults for a 32B target on an H200.

A profile is data (YAML-loadable) so a test can draw every parameter at random
from a seed: nothing downstream should be tuned to one setting.
"""

from __future__ import annotations

import random
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from draftgate.policy.calibration import (
    DEFAULT_PREFILL_SECONDS_PER_TOKEN,
    DEFAULT_TARGET_PASS_SECONDS,
    Curve,
)


class ClassEntropy(BaseModel):
    """Mean next-token entropy of the target, in nats, per output class."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    s: float = Field(0.05, ge=0.0)
    r: float = Field(0.6, ge=0.0)
    f: float = Field(1.05, ge=0.0)

    def of(self, name: str) -> float:
        return float(getattr(self, name))


class Lengths(BaseModel):
    """How long the emulated model's answers are, in tokens (means)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prose: float = 150.0
    prose_after_tool: float = 70.0
    reasoning_default: float = 800.0
    reasoning_low: float = 250.0
    reasoning_medium: float = 800.0
    reasoning_high: float = 2200.0
    spread: float = Field(0.35, ge=0.0, le=2.0, description="sd of log-length")


class EngineProfile(BaseModel):
    """Everything that decides timing, capacity and acceptance of one server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Cost model: round time = c_T(b) * (1 + K*delta(b)) + K*d*c_T(b).
    target_pass_seconds: Curve = Curve(points=DEFAULT_TARGET_PASS_SECONDS)
    delta: Curve = Curve(points=[(1, 0.01), (8, 0.03), (16, 0.06), (32, 0.15), (64, 0.35), (128, 0.7), (256, 1.4)])
    draft_cost: float = Field(0.25, ge=0.0, description="draft pass time relative to the target's (draft_model)")
    draft_cost_ngram: float = Field(0.01, ge=0.0, description="the same for ngram / suffix drafters")
    prefill_seconds_per_token: float = Field(DEFAULT_PREFILL_SECONDS_PER_TOKEN, ge=0.0)
    draft_prefill_ratio: float = Field(0.15, ge=0.0, description="draft model prefill, relative to the target's")
    # Capacity: Qwen3-32B BF16 on 141 GB leaves ~60 GB of KV at ~256 KB/token; the draft's
    # weights (8 GB) and its own KV take a speculation server down to about half.
    kv_capacity_tokens: int = Field(230_000, ge=1024)
    kv_capacity_tokens_spec: int = Field(125_000, ge=1024)
    block_size: int = Field(16, ge=1)
    max_num_seqs: int = Field(256, ge=1)
    # Acceptance: emerges from target and draft distributions, never from the law.
    entropy: ClassEntropy = ClassEntropy()
    entropy_spread: float = Field(0.6, ge=0.0, description="sd of log-entropy within a class")
    entropy_correlation: float = Field(0.9, ge=0.0, lt=1.0, description="AR(1) coefficient along a span")
    draft_misalignment: float = Field(1.3, ge=0.0, description="sd of the draft's logit noise")
    candidates: int = Field(16, ge=2, le=256, description="vocabulary slice each position is drawn over")
    # Behaviour.
    lengths: Lengths = Lengths()
    auto_call_probability: float = Field(0.8, ge=0.0, le=1.0)
    auto_call_probability_after_tool: float = Field(0.4, ge=0.0, le=1.0)
    thinking_by_default: bool = False
    speculation_blocked_by: list[str] = Field(
        default_factory=lambda: ["penalties", "min_p", "logprobs"],
        description="sampling settings run without speculation (older V1 engines); [] as in vLLM 0.33",
    )
    generation_defaults: dict[str, float] = Field(
        default_factory=lambda: {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
    )

    @classmethod
    def load(cls, path: str | Path) -> EngineProfile:
        return cls.model_validate(yaml.safe_load(Path(path).read_text()) or {})

    @classmethod
    def random(cls, seed: int) -> EngineProfile:
        """A plausible H200-class profile with every parameter drawn from ``seed``."""
        rng = random.Random(seed)
        base_pass = rng.uniform(0.012, 0.024)
        growth = rng.uniform(1.5, 3.5)
        passes = [(b, base_pass * (1 + (growth - 1) * (b / 256) ** 1.2)) for b in (1, 8, 32, 64, 128, 256)]
        knee = rng.uniform(20, 60)
        deltas = [(b, rng.uniform(0.005, 0.02) + 0.35 * (b / knee) ** 1.3) for b in (1, 8, 16, 32, 64, 128, 256)]
        return cls(
            target_pass_seconds=Curve(points=passes),
            delta=Curve(points=deltas),
            draft_cost=rng.uniform(0.12, 0.3),
            prefill_seconds_per_token=rng.uniform(0.6e-4, 1.6e-4),
            draft_prefill_ratio=rng.uniform(0.1, 0.2),
            kv_capacity_tokens=rng.randrange(150_000, 300_000),
            kv_capacity_tokens_spec=rng.randrange(80_000, 150_000),
            entropy=ClassEntropy(s=rng.uniform(0.02, 0.12), r=rng.uniform(0.4, 0.8), f=rng.uniform(0.8, 1.4)),
            entropy_spread=rng.uniform(0.3, 0.8),
            entropy_correlation=rng.uniform(0.7, 0.95),
            draft_misalignment=rng.uniform(0.9, 1.7),
            lengths=Lengths(prose=rng.uniform(90, 220), prose_after_tool=rng.uniform(40, 100)),
            auto_call_probability=rng.uniform(0.6, 0.9),
        )
