"""The shapes of the proxy's own endpoints (``/draftgate/*``, ``/health``,
``/ready``), as typed models: FastAPI documents them at
``/draftgate/openapi.json`` (and as a page at ``/draftgate/docs``), and the
handlers answer through them, so the page cannot drift from the answers.

The OpenAI-compatible routes are not in that document: they are vLLM's API,
relayed, and documented by vLLM.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClassTokens(_Strict):
    s: float = Field(description="schema-bound tokens")
    r: float = Field(description="reasoning tokens")
    f: float = Field(description="prose tokens")


class CopySources(_Strict):
    text_chars: int = Field(description="characters of message text in the conversation, every role")
    code: bool = Field(description="a fenced code block is in it")
    earlier_calls: int = Field(description="tool calls earlier in the conversation")


class PoolTerms(_Strict):
    pool: str
    saving: float = Field(description="predicted speculative saving on this pool (0 for a plain pool)")
    tau: dict[str, float] = Field(description="predicted accepted draft tokens per round there, by class (s, r, "
                                              "f; zeros on a plain pool): the law's for a model drafter, what the "
                                              "request holds to copy for ngram and suffix")
    cost_per_token: float = Field(description="what the gate minimises: the busy GPU-seconds the request would "
                                              "cause on the pool, per output token")
    gpu_seconds_per_token: float = Field(description="busy GPU-seconds per output token at the pool's load")
    eligible: bool = Field(description="whether the pool could take the request now")
    note: str
    running: float = Field(description="requests running on the pool when decided")
    gamma: int = Field(description="the depth the pool drafts at with this request in it (0: none; dynamic K varies it)")
    extrapolated_beyond: float | None = Field(
        description="the highest load calibration measured, when the pool's load is past it (costs extrapolated)")
    step_increment: float = Field(description="seconds the request would add to each of the pool's steps (an idle "
                                              "pool's whole step)")
    steps: float = Field(description="steps the request would run for there (fewer on a speculation pool)")
    prefill_seconds: float = Field(description="GPU-seconds of its prefill there, less what the pool has cached")
    predicted_tpot: float = Field(description="seconds per output token the request would see there")
    predicted_ttft: float = Field(description="seconds to its first token there: its prefill and a first step")
    meets_targets: bool = Field(description="whether those meet the model's latency targets (true with none set)")
    if_call_seconds: float | None = Field(description="busy GPU-seconds the request would cause there if it calls "
                                                      "a tool (when it may call one or answer in prose)")
    if_answer_seconds: float | None = Field(description="the same if it answers without a call")


class AffinityMatch(_Strict):
    pool: str = Field(description="the pool holding the conversation's prefix")
    cached_tokens: float
    via: str = Field(description="how the conversation was recognised")


class PoolDepth(_Strict):
    pool: str
    configured: int | None = Field(description="speculation.gamma as configured (null: left to the pool)")
    reported: int | None = Field(description="num_speculative_tokens as the pool's /metrics shows it (0: it does "
                                             "not speculate; null: not scraped yet)")
    priced_at: int = Field(description="the depth the gate prices it at: the reported one when there is one "
                                       "(0: priced as plain)")


class KindLawTerms(_Strict):
    kind: str
    pool: str = Field(description="the pool the fleet plan routes the kind to")
    drafter: str = Field(description="the pool's drafter, or on a plain pool the speculating candidate it was "
                                     "not given")
    batch: float = Field(description="the batch the plan predicts the pool runs")
    w_s: float = Field(description="the kind's schema-bound share")
    w_s_star: float | None = Field(description="the share at which the drafter breaks even at that batch (null: "
                                               "none, see reason)")
    pays: bool | None = Field(description="w_s at or above w_s_star")
    reason: str | None
    summary: str = Field(description="the same in a sentence")


class Explanation(_Strict):
    """What the gate reads in a request and where it would send it; nothing is forwarded."""

    w_s: float = Field(description="estimated schema-bound share of the output")
    w_r: float = Field(description="estimated reasoning share")
    w_f: float = Field(description="estimated prose share")
    expected_tokens: ClassTokens
    reasons: list[str] = Field(description="what the estimator read, and why the gate chose as it did")
    temperature: float
    temperature_from_default: bool
    n: int
    speculation_blockers: list[str] = Field(description="settings with which vLLM will not speculate")
    p_tool_call: float
    prompt_tokens: float
    constrained: bool = Field(description="the output is under a grammar")
    thinking: bool
    prompts: int
    reasoning_hidden: bool
    if_call: ClassTokens = Field(description="one output's tokens if the model calls a tool, before caps")
    if_answer: ClassTokens = Field(description="one output's tokens if it answers without a call, before caps")
    confidence: float = Field(description="the share of the estimate that rests on earlier responses of the "
                                          "request's shape (0: the priors alone)")
    observations: int = Field(description="earlier responses of the request's shape that the estimate learned from")
    copyable: CopySources = Field(description="what the answer could copy from: what ngram and suffix pools are "
                                          "priced by")
    route: str = Field(description="the pool the request would go to")
    predicted_saving: float
    predicted_tau: dict[str, float]
    break_even_ws: float | None = Field(description="the schema fraction at which speculation breaks even")
    break_even_note: str | None
    pools: list[PoolTerms]
    affinity: AffinityMatch | None
    kind: str = Field(description="the kind of request the gate reads it as (tool, tool_auto, json, reasoning, "
                                  "prose): what the fleet is planned and routed for")
    assignment: dict[str, float] | None = Field(
        description="the share of its kind each pool takes, when the fleet plan's assignment routed it (null: the "
                    "gate's costs alone, or a reason stronger than the assignment, decided)")
    depths: list[PoolDepth] = Field(description="each speculation pool's depth, as configured, as it reports it, "
                                                "and as priced")
    plan_law: KindLawTerms | None = Field(
        None, description="the Draft Law for the request's kind where the fleet plan routes it, at the batch "
                          "that pool runs (null until the proxy has planned)")


class Reloaded(_Strict):
    reloaded: bool
    pools: list[str]
    restart_needed: list[str] = Field(description="changed keys that only a restart applies")


class Health(_Strict):
    status: str


class Readiness(_Strict):
    ready: bool
    healthy_replicas: dict[str, int] = Field(description="per pool")
    ejected_replicas: dict[str, int] = Field(description="per pool: healthy, but out of rotation for failed answers")


class ErrorDetail(_Strict):
    message: str
    type: str
    param: str | None
    code: str | int | None


class Error(_Strict):
    """Every error the proxy answers itself, in the OpenAI shape."""

    error: ErrorDetail


# what /draftgate/explain takes: any body a gated endpoint takes, told apart by its fields
EXPLAIN_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {
            "type": "object", "additionalProperties": True,
            "description": "a Chat Completions body (messages), a Completions body (prompt) or a Responses "
                           "body (input), as it would be sent"}}},
    },
}
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": Error} for status in (400, 401, 403, 404, 408, 413, 415)
}
