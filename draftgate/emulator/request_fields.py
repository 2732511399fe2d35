"""A request's fields typed as vLLM's request models type them, before anything reads them.

vLLM validates a body into a pydantic model in lax mode, so ``"stream": "true"``
streams there, ``"max_tokens": "40"`` caps at 40, and a temperature of
``"hot"`` is refused with a 400. The emulator types a body the same way, through
its own lax readers (``vllm_request``), then checks ranges on the
typed values: a test of the proxy sees what vLLM would do with such a request.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from draftgate.emulator.vllm_request import CONSTRAINT_FIELDS, as_bool, as_float, as_int, is_thinking_budget


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param = status, param


_BOOLEANS = ("stream", "echo", "ignore_eos", "include_reasoning", "skip_special_tokens", "add_generation_prompt",
             "continue_final_message", "parallel_tool_calls", "store", "background")
_INTEGERS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "min_tokens", "n", "seed", "top_k",
             "top_logprobs")
_NUMBERS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
_RESPONSES_ONLY = frozenset({"store", "background", "max_output_tokens"})
_RESPONSES_FIELDS = _RESPONSES_ONLY | {"stream", "parallel_tool_calls", "top_logprobs", "temperature", "top_p"}
_CHAT_FIELDS = frozenset(_BOOLEANS + _INTEGERS + _NUMBERS) - _RESPONSES_ONLY  # completions' too
_KINDS: tuple[tuple[tuple[str, ...], Callable[[Any], Any], str], ...] = (
    (_BOOLEANS, as_bool, "a boolean"), (_INTEGERS, as_int, "an integer"), (_NUMBERS, as_float, "a number"))


def typed(body: dict[str, Any], endpoint: str) -> dict[str, Any]:
    """A copy of ``body`` with its scalar fields as vLLM reads them; BadRequest for one it refuses.

    ``endpoint``: chat, completions or responses. The Responses model has fewer fields
    (the rest pass as extras, untyped, there as in vLLM); chat's ``logprobs`` is a
    switch, completions' a count."""
    if endpoint != "responses" and body.get("stream_options") and not body.get("stream"):
        # vLLM checks this before it types the fields: "false" is a stream here, and {} no options
        raise BadRequest("Stream options can only be defined when `stream=True`.", param="stream_options")
    out = dict(body)
    fields = _RESPONSES_FIELDS if endpoint == "responses" else _CHAT_FIELDS
    for names, reader, kind in _KINDS:
        for name in names:
            if name in fields:
                _type(out, name, reader, kind)
    if endpoint == "completions":
        _type(out, "logprobs", as_int, "an integer")
    elif endpoint == "chat":
        _type(out, "logprobs", as_bool, "a boolean")
    options = out.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise BadRequest("stream_options must be an object", param="stream_options")
        options = dict(options)
        options.setdefault("include_usage", True)  # vLLM's default: {} asks for usage
        for name in ("include_usage", "continuous_usage_stats"):
            _type(options, name, as_bool, "a boolean", prefix="stream_options.")
        out["stream_options"] = options
    return out


def _type(fields: dict[str, Any], name: str, reader: Callable[[Any], Any], kind: str, prefix: str = "") -> None:
    value = fields.get(name)
    if value is None:
        return
    read = reader(value)
    if read is None:
        raise BadRequest(f"{prefix}{name} must be {kind}, got {str(value)[:40]!r}", param=prefix + name)
    fields[name] = read


def check_sampling(body: dict[str, Any], caps: tuple[str, ...]) -> None:
    """The ranges every generating route checks alike, on a ``typed`` body (a token cap is
    positive; ``NaN`` or ``1e400`` as a temperature is refused, not echoed)."""
    for name in caps:
        value = body.get(name)
        if value is not None and value < 1:
            raise BadRequest(f"{name} must be a positive integer", param=name)
    temperature = body.get("temperature")
    if temperature is not None and not 0 <= temperature <= 2:
        raise BadRequest("temperature must be a number between 0 and 2", param="temperature")
    top_p = body.get("top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p}.", param="top_p")


def check_structured_outputs(body: dict[str, Any]) -> None:
    """``structured_outputs`` as vLLM's StructuredOutputsParams takes it: exactly one
    constraint, and a ``json`` schema given as text must parse."""
    structured = body.get("structured_outputs")
    if structured is None:
        return
    if not isinstance(structured, dict):
        raise BadRequest("structured_outputs must be an object", param="structured_outputs")
    count = sum(structured.get(kind) is not None for kind in CONSTRAINT_FIELDS)
    if count != 1:
        raise BadRequest("You can only use one kind of structured outputs constraint but multiple are specified"
                         if count else "You must use one kind of structured outputs constraint but none are specified",
                         param="structured_outputs")
    schema = structured.get("json")
    if isinstance(schema, str):
        try:
            parsed = json.loads(schema)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise BadRequest("structured_outputs.json is not a JSON schema object", param="structured_outputs")
    elif schema is not None and not isinstance(schema, dict):
        raise BadRequest("structured_outputs.json must be a schema object or its text", param="structured_outputs")


def check_cache_salt(body: dict[str, Any], max_chars: int | None = None) -> None:
    """``max_chars``: vLLM's Responses model bounds the salt (1,024 characters); chat's does not."""
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise BadRequest("Parameter 'cache_salt' must be a non-empty string if provided.", param="cache_salt")
    if salt is not None and max_chars is not None and len(salt) > max_chars:
        raise BadRequest(f"cache_salt should have at most {max_chars} characters", param="cache_salt")


def check_thinking_budget(body: dict[str, Any]) -> None:
    """``thinking_token_budget`` as vLLM validates it."""
    budget = body.get("thinking_token_budget")
    if budget is not None and not is_thinking_budget(budget):
        raise BadRequest("`thinking_token_budget` must be a non-negative integer or -1 for unlimited.",
                         param="thinking_token_budget")
