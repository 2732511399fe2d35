"""Measure the S/R/F split a response actually had.

Tool-call names and arguments are S; content under a JSON response format or
structured output is S; ``reasoning`` (older servers: ``reasoning_content``)
is R; other content is F. ``usage.completion_tokens`` is split in proportion
to characters unless a token counter is plugged in: none is required.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from policy.structure.constraints import output_is_structured
from policy.structure.estimator import ClassTokens


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

    schema: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    tool_call_ids: set[Any] = field(default_factory=set)
    completion_tokens: int | None = None

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
                    for key in ("name", "arguments"):
                        if isinstance(fn.get(key), str):
                            self.schema.append(fn[key])

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
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.completion_tokens = usage["completion_tokens"]

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
                  legacy_guided_honoured: bool = False) -> ObservedStructure:
    """``legacy_guided_honoured``: the pools still read ``guided_*`` fields (vLLM < 0.12), so
    content under one is schema-bound, as the estimate assumed."""
    structured = output_is_structured(body, legacy_guided_honoured)
    content = "".join(parts.content)
    schema_text = "".join(parts.schema) + (content if structured else "")
    prose_text = "" if structured else content
    reasoning_text = "".join(parts.reasoning)
    chars = ClassTokens(float(len(schema_text)), float(len(reasoning_text)), float(len(prose_text)))
    if counter is not None:
        tokens = ClassTokens(
            float(counter.count(schema_text)), float(counter.count(reasoning_text)), float(counter.count(prose_text))
        )
        return ObservedStructure(tokens, chars, tokens.total, len(parts.tool_call_ids), "tokenizer")
    if parts.completion_tokens is not None:
        total = float(parts.completion_tokens)
        if chars.total > 0:
            scale = total / chars.total
            tokens = ClassTokens(chars.s * scale, chars.r * scale, chars.f * scale)
        else:
            tokens = ClassTokens(0.0, 0.0, total)
        return ObservedStructure(tokens, chars, total, len(parts.tool_call_ids), "usage")
    tokens = ClassTokens(chars.s / 3.0, chars.r / 4.0, chars.f / 4.0)
    return ObservedStructure(tokens, chars, tokens.total, len(parts.tool_call_ids), "characters")


def measure(body: Any, response: Any, counter: TokenCounter | None = None,
            legacy_guided_honoured: bool = False) -> ObservedStructure:
    """The realised class token counts of a finished, non-streamed response."""
    parts = TextParts()
    parts.add_chunk(response)
    return measure_parts(body, parts, counter, legacy_guided_honoured)
