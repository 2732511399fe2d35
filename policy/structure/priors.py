"""The named numbers the estimator falls back on when a request does not say.

Every prior is a field here, documented, and overridable from the proxy's
configuration (``structure_priors:``), so an operator who knows their agents
can replace a guess with a fact. The online learner then replaces both with
what each request shape actually produced.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class StructurePriors(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Lengths, in output tokens.
    prose_tokens: float = Field(180.0, gt=0, description="a free-prose answer with no other signal")
    prose_after_tool_tokens: float = Field(90.0, gt=0, description="prose answering a tool result")
    reasoning_tokens_default: float = Field(900.0, gt=0, description="thinking on, no effort given")
    reasoning_tokens_low: float = Field(300.0, gt=0, description="reasoning_effort=low")
    reasoning_tokens_medium: float = Field(900.0, gt=0, description="reasoning_effort=medium")
    reasoning_tokens_high: float = Field(2500.0, gt=0, description="reasoning_effort=high")
    json_object_tokens: float = Field(60.0, gt=0, description="json_object with no schema")
    regex_tokens: float = Field(16.0, gt=0, description="a regex-constrained answer")
    grammar_tokens: float = Field(64.0, gt=0, description="a grammar- or structural-tag-constrained answer")
    tool_call_wrapper_tokens: float | None = Field(
        None, ge=0, description="the parser's tags around a call the model writes unforced (tool_choice auto); "
                                "unset: its family's (Qwen3: 4, <tool_call> and </tool_call> are single tokens), "
                                "else 8"
    )
    # Shapes of values a schema leaves open, in characters.
    string_value_chars: float = Field(12.0, gt=0, description="a string value without format or length bounds")
    number_value_chars: float = Field(3.0, gt=0, description="a number value")
    array_items: float = Field(2.0, gt=0, description="items in an array without minItems/maxItems")
    optional_property_share: float = Field(0.3, ge=0, le=1, description="optional keys the model fills")
    open_object_keys: float = Field(2.0, ge=0, description="keys of an object with no properties")
    json_chars_per_token: float = Field(3.0, gt=0, description="JSON tokenises denser than prose")
    text_chars_per_token: float = Field(4.0, gt=0, description="prose: sizes prompts and choice lists")
    # Behaviour under tool_choice=auto.
    p_call_auto: float = Field(0.75, ge=0, le=1, description="a fresh user turn with tools gets a call")
    p_call_after_tool: float = Field(0.45, ge=0, le=1, description="after a tool result, another call")
    p_call_unrelated: float = Field(
        0.2, ge=0, le=1, description="the user's words share none with the tools' names and descriptions"
    )
    p_call_agent_bonus: float = Field(0.1, ge=0, le=1, description="earlier assistant turns called tools")
    extra_parallel_calls: float = Field(0.3, ge=0, description="extra calls when parallel calls are allowed")
    preamble_tokens_with_call: float = Field(0.0, ge=0, description="prose emitted before a call under auto")
    # Model behaviour.
    thinking_by_default: bool | None = Field(
        None, description="the model thinks unless told not to; unset: as its family does (Qwen3's hybrid models "
                          "think, unknown models do not)"
    )
    speculation_blocked_by: tuple[Literal["penalties", "min_p", "logprobs"], ...] = Field(
        ("penalties", "min_p", "logprobs"),
        description="sampling settings the pools' vLLM runs without speculation: V1 up to about 0.11 "
        "(is_spec_decode_unsupported); 0.33 applies penalties and logprobs in its rejection sampler: set []",
    )
    legacy_guided_fields_honoured: bool = Field(
        False, description="the pool runs vLLM < 0.12, which still honours guided_* fields"
    )
    # Safety limits on what a client can make the estimator walk.
    max_schema_depth: int = Field(32, ge=1, description="schema nesting walked; deeper is sized from priors")
    max_schema_nodes: int = Field(4000, ge=10, description="schema nodes walked per schema; the rest from priors")
    max_tools: int = Field(512, ge=1, description="tools sized per request; the rest are ignored")


DEFAULT_PRIORS = StructurePriors()
