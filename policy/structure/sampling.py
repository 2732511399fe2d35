"""Sampling settings: what temperature a request really runs at, and whether
vLLM will speculate on it at all.

vLLM applies the model's generation defaults (Qwen3: temperature 0.6, top_p
0.95, top_k 20) when a client omits a field, so the pool's declared defaults
are part of every estimate. Some settings make vLLM run a request without
speculation even on a speculation pool; for those the gate predicts zero saving.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from draftgate.policy.vllm_fields import as_bool, as_float, as_int

_EPS = 1e-5
LEGACY_BLOCKERS = ("penalties", "min_p", "logprobs")
_PENALTIES = (("frequency_penalty", 0.0), ("presence_penalty", 0.0), ("repetition_penalty", 1.0))
# what speculation_blockers reads of a body: one that sets none of them is blocked by the defaults alone


class SamplingDefaults(BaseModel):
    """The sampling defaults a pool's server applies when the client omits them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(1.0, ge=0.0, description="the default temperature; acceptance falls as it rises")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling")
    top_k: int = Field(-1, description="-1: off")
    min_p: float = Field(0.0, ge=0.0, le=1.0, description="over 0, some vLLM versions will not speculate")
    repetition_penalty: float = Field(1.0, gt=0.0, description="other than 1, some vLLM versions will not speculate")
    presence_penalty: float = Field(0.0, description="other than 0, some vLLM versions will not speculate")
    frequency_penalty: float = Field(0.0, description="other than 0, some vLLM versions will not speculate")


QWEN3_DEFAULTS = SamplingDefaults(temperature=0.6, top_p=0.95, top_k=20)
NO_DEFAULTS = SamplingDefaults()


def effective(body: dict[str, Any], name: str, defaults: SamplingDefaults) -> tuple[float, bool]:
    """The value a server would use for ``name``, and whether it came from the defaults."""
    number = as_float(body.get(name))
    # NaN or infinity is no setting a server runs with (nor an integer past float range,
    # which vLLM refuses): the pool's default stands in
    if number is not None and math.isfinite(number):
        return number, False
    return float(getattr(defaults, name)), True


def speculation_blockers(body: dict[str, Any], defaults: SamplingDefaults, endpoint: str,
                         blocked_by: Collection[str] = LEGACY_BLOCKERS) -> list[str]:
    """Settings with which the pools' vLLM runs the request without speculation.

    ``blocked_by`` names which kinds apply: V1 engines up to about 0.11 refuse
    penalties, ``min_p`` and logprobs (``is_spec_decode_unsupported``); the pinned
    0.33 handles all of them in its rejection sampler, so it blocks none.
    """
    blockers = []
    if "penalties" in blocked_by:
        for name, neutral in _PENALTIES:
            if name not in body and getattr(defaults, name) == neutral:
                continue  # the usual case, without the full lookup
            value, from_default = effective(body, name, defaults)
            if abs(value - neutral) > _EPS:
                source = " (pool default)" if from_default else ""
                blockers.append(f"{name}={value:g}{source}")
    if "min_p" in blocked_by and ("min_p" in body or defaults.min_p):
        min_p, from_default = effective(body, "min_p", defaults)
        if min_p > _EPS:
            blockers.append(f"min_p={min_p:g}" + (" (pool default)" if from_default else ""))
    if "logprobs" in blocked_by:
        if endpoint == "completions":  # there logprobs is how many to return
            if as_int(body.get("logprobs")) is not None:
                blockers.append("logprobs requested")
        elif as_bool(body.get("logprobs")) or as_int(body.get("top_logprobs")):
            blockers.append("logprobs requested")
    return blockers
