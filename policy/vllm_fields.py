"""A request's scalar fields, read as vLLM reads them.

vLLM's request models are pydantic models in lax mode: ``"stream": "true"``
streams, ``"max_tokens": "450"`` caps at 450 and ``"temperature": "0.2"`` runs
at 0.2, where a strict reading would see no stream, no cap and no setting. A
proxy that read them otherwise would buffer a stream its client asked for, or
weigh a request vLLM runs differently. So these readers use pydantic's own lax
validators, and agree with vLLM by construction, not by a list of cases kept
in step by hand.

Each returns None where vLLM would see no value (``null``, or the field
absent) or would refuse the request with a 400; the caller decides what that
means. The usual JSON types take a fast path: these run on every request.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

_BOOL = TypeAdapter(bool)
_INT = TypeAdapter(int)
_FLOAT = TypeAdapter(float)


def as_bool(value: Any) -> bool | None:
    """``"true"``, ``"yes"``, ``"on"``, ``1`` and ``1.0`` are true, as their opposites are false."""
    if value is True or value is False or value is None:
        return value
    return _lax(_BOOL, value)


def as_int(value: Any) -> int | None:
    """``450``, ``450.0`` and ``"450"`` are 450 (and, as pydantic has it, ``true`` is 1)."""
    if type(value) is int or value is None:
        return value
    return _lax(_INT, value)


def as_float(value: Any) -> float | None:
    """``0.2`` and ``"0.2"`` are 0.2; NaN and infinity are read too, for the caller to refuse."""
    if type(value) is float or value is None:
        return value
    if type(value) is int:  # "temperature": 0, as most clients send it
        try:
            return float(value)
        except OverflowError:  # past float range, which pydantic refuses
            return None
    return _lax(_FLOAT, value)


def _lax(reader: TypeAdapter[Any], value: Any) -> Any:
    try:
        return reader.validate_python(value)
    except ValidationError:
        return None


def is_thinking_budget(value: Any) -> bool:
    """Whether vLLM takes ``value`` as a ``thinking_token_budget``: it reads that field
    strictly (no "256", no 256.0), a whole number from -1, which means none."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= -1


def prompts_of(body: Any) -> list[Any]:
    """A completions body's prompts, as vLLM splits a batch: a list of strings, or of
    lists of token ids, is several prompts; a string or one list of token ids is one."""
    prompt = body.get("prompt") if isinstance(body, dict) else None
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        return prompt
    return [prompt]


def streams(body: Any) -> bool:
    """Whether vLLM answers ``body`` as a stream."""
    return isinstance(body, dict) and as_bool(body.get("stream")) is True


def wants_usage(body: Any) -> bool:
    """Whether a stream's client asked for its usage chunk: vLLM's ``stream_options``
    defaults ``include_usage`` to true, so ``{}`` asks for it."""
    options = body.get("stream_options") if isinstance(body, dict) else None
    return isinstance(options, dict) and as_bool(options.get("include_usage", True)) is True
