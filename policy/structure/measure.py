"""Measure the S/R/F split a response actually had.

Tool-call names and arguments are S (but the name of a call to the function
``tool_choice`` names, which the server adds); content under a JSON response format or
structured output is S; ``reasoning`` (older servers: ``reasoning_content``)
is R; other content is F. ``usage.completion_tokens`` is split in proportion
to characters unless a token counter is plugged in: none is required. Where
usage counts the reasoning tokens (``completion_tokens_details``), that count
is taken as it is, and only the rest is split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from draftgate.policy.structure.constraints import named_function, output_is_structured
from draftgate.policy.structure.estimates import ClassTokens
from draftgate.policy.structure.priors import DEFAULT_PRIORS


class TokenCounter(Protocol):
    """Anything that counts tokens in a string, e.g. a wrapped HF tokenizer."""

    def count(self, text: str) -> int: ...


@dataclass(frozen=True, slots=True)
class ObservedStructure:
    tokens: ClassTokens
    chars: ClassTokens
    total_tokens: float
    tool_calls: int
    source: str  # "usage" (split by characters), "tokenizer", or "characters"

    @property
    def w_s(self) -> float:
        return self.tokens.s / self.total_tokens if self.total_tokens > 0 else 0.0

    @property
    def w_r(self) -> float:
        return self.tokens.r / self.total_tokens if self.total_tokens > 0 else 0.0

    @property
    def w_f(self) -> float:
        return self.tokens.f / self.total_tokens if self.total_tokens > 0 else 0.0


@dataclass(slots=True)
class TextParts:
    """The text of one response by class, accumulated from a body or stream deltas."""

    arguments: list[str] = field(default_factory=list)  # of tool calls
    names: list[str] = field(default_factory=list)  # of tool calls
    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    tool_call_ids: set[Any] = field(default_factory=set)
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None  # usage.completion_tokens_details, where the server counts them

    def add_message(self, message: Any, choice: Any = 0) -> None:
        """A message (non-streamed) or a delta (streamed): the same fields.

        ``choice``: the choice's index. Each of ``n`` choices numbers its calls from 0,
        so a call is told apart by the pair."""
        if not isinstance(message, dict):
            return
        for key in ("reasoning", "reasoning_content"):
            text = message.get(key)
            if isinstance(text, str):
                self.reasoning.append(text)
                break
        content = message.get("content")
        if isinstance(content, str):
            self.content.append(content)
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            for i, call in enumerate(calls):
                if not isinstance(call, dict):
                    continue
                key = call.get("index", call.get("id", i))
                # hashable keys only: an answer's fields are not to be trusted to be ints
                self.tool_call_ids.add((choice if isinstance(choice, int) else 0,
                                        key if isinstance(key, (int, str)) else i))
                fn = call.get("function")
                if isinstance(fn, dict):
                    if isinstance(fn.get("name"), str):
                        self.names.append(fn["name"])
                    if isinstance(fn.get("arguments"), str):
                        self.arguments.append(fn["arguments"])

    def add_choice(self, choice: Any) -> None:
        if not isinstance(choice, dict):
            return
        if "message" in choice:
            self.add_message(choice["message"], choice.get("index", 0))
        elif "delta" in choice:
            self.add_message(choice["delta"], choice.get("index", 0))
        elif isinstance(choice.get("text"), str):  # /v1/completions
            self.content.append(choice["text"])

    def add_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        if _is_count(usage.get("completion_tokens")):
            self.completion_tokens = usage["completion_tokens"]
        details = usage.get("completion_tokens_details")
        if isinstance(details, dict) and _is_count(details.get("reasoning_tokens")):
            self.reasoning_tokens = details["reasoning_tokens"]

    def add_chunk(self, chunk: Any) -> None:
        """One parsed SSE chunk, or a whole non-streamed body."""
        if not isinstance(chunk, dict):
            return
        choices = chunk.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                self.add_choice(choice)
        self.add_usage(chunk.get("usage"))


def measure_parts(body: Any, parts: TextParts, counter: TokenCounter | None = None,
                  legacy_guided_honoured: bool = False, reasoning_hidden: bool = False) -> ObservedStructure:
    """``legacy_guided_honoured``: the pools still read ``guided_*`` fields (vLLM < 0.12), so
    content under one is schema-bound, as the estimate assumed.

    ``reasoning_hidden``: the request thinks with ``include_reasoning`` false. vLLM then
    drops the reasoning from the answer but counts its tokens in usage, so what the
    visible text does not account for is reasoning.
    """
    structured = output_is_structured(body, legacy_guided_honoured)
    content = "".join(parts.content)
    named = isinstance(body, dict) and named_function(body.get("tool_choice")) is not None
    written_names = "" if named else "".join(parts.names)  # a named function's name is the server's
    schema_text = written_names + "".join(parts.arguments) + (content if structured else "")
    prose_text = "" if structured else content
    reasoning_text = "".join(parts.reasoning)
    chars = ClassTokens(float(len(schema_text)), float(len(reasoning_text)), float(len(prose_text)))
    calls = len(parts.tool_call_ids)
    if counter is not None:
        tokens = ClassTokens(
            float(counter.count(schema_text)), float(counter.count(reasoning_text)), float(counter.count(prose_text))
        )
        if reasoning_hidden and not reasoning_text and parts.completion_tokens is not None:
            tokens = ClassTokens(tokens.s, max(0.0, parts.completion_tokens - tokens.s - tokens.f), tokens.f)
        return ObservedStructure(tokens, chars, tokens.total, calls, "tokenizer")
    if parts.completion_tokens is not None:
        total = float(parts.completion_tokens)
        tokens = _split_usage(total, chars, parts.reasoning_tokens, reasoning_hidden)
        return ObservedStructure(tokens, chars, total, calls, "usage")
    tokens = _by_characters(chars)
    return ObservedStructure(tokens, chars, tokens.total, calls, "characters")


def _split_usage(total: float, chars: ClassTokens, reported_reasoning: int | None, hidden: bool) -> ClassTokens:
    """``total`` completion tokens by class: reasoning as the server counted it, or as
    what the visible text leaves over when it was hidden; the rest by characters."""
    reasoning: float | None = None
    # a count of 0 beside reasoning text is a parser that does not count, not a fact
    if reported_reasoning is not None and reported_reasoning <= total and (reported_reasoning > 0 or not chars.r):
        reasoning = float(reported_reasoning)
    elif hidden and not chars.r:
        visible = _by_characters(chars)
        reasoning = max(0.0, total - visible.s - visible.f)
    if reasoning is None:
        if chars.total <= 0:
            return ClassTokens(0.0, 0.0, total)
        scale = total / chars.total
        return ClassTokens(chars.s * scale, chars.r * scale, chars.f * scale)
    rest, visible_chars = total - reasoning, chars.s + chars.f
    if visible_chars <= 0:
        return ClassTokens(0.0, reasoning, rest)
    return ClassTokens(rest * chars.s / visible_chars, reasoning, rest * chars.f / visible_chars)


def _by_characters(chars: ClassTokens) -> ClassTokens:
    """Tokens from characters alone, at the priors' ratios."""
    per_json, per_text = DEFAULT_PRIORS.json_chars_per_token, DEFAULT_PRIORS.text_chars_per_token
    return ClassTokens(chars.s / per_json, chars.r / per_text, chars.f / per_text)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def measure(body: Any, response: Any, counter: TokenCounter | None = None,
            legacy_guided_honoured: bool = False, reasoning_hidden: bool = False) -> ObservedStructure:
    """The realised class token counts of a finished, non-streamed response."""
    parts = TextParts()
    parts.add_chunk(response)
    return measure_parts(body, parts, counter, legacy_guided_honoured, reasoning_hidden)
