"""A request body read the way vLLM's server reads it, written from vLLM's side.

The emulator shares nothing with the gate but the wire, so it keeps its own
reading of what vLLM does with a body: lax scalar typing (vLLM's request models
are pydantic models, so ``"stream": "true"`` streams), which of the
``structured_outputs`` fields is the constraint, a named ``tool_choice``, a
completions batch, the sampling settings older V1 engines will not speculate
(``is_spec_decode_unsupported``), and the Responses API as the chat request
vLLM's ``serving_responses`` builds from it. If the proxy read a body
differently, the tests that run it against this server would show it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import TypeAdapter, ValidationError

_READERS = {bool: TypeAdapter(bool), int: TypeAdapter(int), float: TypeAdapter(float)}

# vLLM's StructuredOutputsParams: exactly one of these is the constraint
CONSTRAINT_FIELDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


def _lax(kind: type, value: Any) -> Any:
    if value is None:
        return None
    try:
        return _READERS[kind].validate_python(value)
    except ValidationError:
        return None


def as_bool(value: Any) -> bool | None:
    """True, "true", "yes", 1 ... as pydantic's lax mode reads them; None where vLLM sees none or refuses."""
    return _lax(bool, value)


def as_int(value: Any) -> int | None:
    return _lax(int, value)


def as_float(value: Any) -> float | None:
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:  # past float range: pydantic refuses it
            return None
    return _lax(float, value)


def is_thinking_budget(value: Any) -> bool:
    """vLLM reads ``thinking_token_budget`` strictly: a whole number from -1 (none)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= -1


def completion_prompts(body: dict[str, Any]) -> list[Any]:
    """A completions ``prompt`` split as vLLM splits a batch: a list of strings, or of
    token-id lists, is several prompts; anything else is one."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        return prompt
    return [prompt]


def output_constraint(structured: dict[str, Any]) -> tuple[str, Any] | None:
    """The (field, value) that constrains the output; ``json_object: false`` builds no grammar."""
    for name in CONSTRAINT_FIELDS:
        value = structured.get(name)
        if value is not None and (name != "json_object" or as_bool(value)):
            return name, value
    return None


def forced_function(tool_choice: Any) -> str | None:
    """The function a ``tool_choice`` object names: vLLM constrains the output to its parameters."""
    if not isinstance(tool_choice, dict) or not isinstance(tool_choice.get("function"), dict):
        return None
    name = tool_choice["function"].get("name")
    return name if isinstance(name, str) else None


# -------------------------------------------------------------- sampling

_PENALTY_NEUTRAL = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def sampling_value(body: dict[str, Any], name: str, defaults: dict[str, float], neutral: float) -> float:
    """The value the server samples with: the request's, else the model's generation default."""
    value = as_float(body.get(name))
    if value is not None and math.isfinite(value):
        return value
    return float(defaults.get(name, neutral))


def runs_without_speculation(body: dict[str, Any], defaults: dict[str, float], endpoint: str,
                             blocked_by: list[str]) -> bool:
    """Whether an engine whose rejection sampler lacks ``blocked_by`` runs ``body`` unspeculated
    (vLLM V1 up to about 0.11: penalties, ``min_p``, logprobs)."""
    if "penalties" in blocked_by and any(
            abs(sampling_value(body, name, defaults, neutral) - neutral) > 1e-9
            for name, neutral in _PENALTY_NEUTRAL.items()):
        return True
    if "min_p" in blocked_by and sampling_value(body, "min_p", defaults, 0.0) > 1e-9:
        return True
    if "logprobs" in blocked_by:
        if endpoint == "completions":
            return as_int(body.get("logprobs")) is not None
        return bool(as_bool(body.get("logprobs")) or as_int(body.get("top_logprobs")))
    return False


# -------------------------------------------------------------- the Responses API

_CARRIED = ("model", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "frequency_penalty",
            "presence_penalty", "seed", "stream", "parallel_tool_calls", "structured_outputs",
            "chat_template_kwargs", "cache_salt")


def responses_as_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat request vLLM builds from a Responses request: ``instructions`` and ``input``
    become messages, flat function tools nest, ``text.format`` becomes a response format,
    ``reasoning.effort`` and ``max_output_tokens`` keep their meaning."""
    chat = {key: body[key] for key in _CARRIED if key in body}
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list):
        messages += [m for m in map(_input_item, given) if m is not None]
    chat["messages"] = messages
    if isinstance(body.get("tools"), list):
        chat["tools"] = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")
                                                           if k in t}}
                         for t in body["tools"] if isinstance(t, dict) and t.get("type") == "function"]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        chat["tool_choice"] = ({"type": "function", "function": {"name": choice.get("name")}}
                               if choice.get("type") == "function" else "auto")
    elif choice is not None:
        chat["tool_choice"] = choice
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        chat["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": fmt.get("name"), "schema": fmt.get("schema")}}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    if "max_output_tokens" in body:
        chat["max_tokens"] = body["max_output_tokens"]
    include = body.get("include")
    if isinstance(include, list) and "message.output_text.logprobs" in include:
        chat["logprobs"] = True
        if "top_logprobs" in body:
            chat["top_logprobs"] = body["top_logprobs"]
    return chat


def _input_item(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        return None
    kind = item.get("type", "message")
    if kind == "message" and isinstance(item.get("role"), str):
        content = item.get("content")
        if isinstance(content, list):
            content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        return {"role": item["role"], "content": content if isinstance(content, str) else ""}
    if kind == "function_call":
        call = {"id": item.get("call_id"), "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if kind == "function_call_output":
        output = item.get("output")
        return {"role": "tool", "tool_call_id": item.get("call_id"), "content": output if isinstance(output, str) else ""}
    return None


# -------------------------------------------------------------- Anthropic's Messages API

_MESSAGES_CARRIED = ("model", "temperature", "top_p", "top_k", "chat_template_kwargs", "stream")
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "ctx": "user", "msg": "user"}
_BLOCKS = frozenset({"text", "image", "tool_use", "tool_result", "tool_reference", "thinking", "redacted_thinking"})
_ANTHROPIC_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def messages_problem(body: dict[str, Any]) -> tuple[str, str] | None:
    """What vLLM's request model refuses in a Messages body, as (message, field); None if nothing.
    ``thinking`` and any other field it does not declare are ignored, as pydantic ignores them."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model is required", "model"
    cap = body.get("max_tokens")
    if as_int(cap) is None or isinstance(cap, bool) or as_int(cap) <= 0:
        return "max_tokens must be a positive integer", "max_tokens"
    messages = body.get("messages")
    if not isinstance(messages, list):
        return "messages must be a list", "messages"
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            return "each message needs a role of user, assistant or system", "messages"
        content = message.get("content")
        if not isinstance(content, (str, list)) or isinstance(content, list) and not all(
                isinstance(b, dict) and b.get("type") in _BLOCKS for b in content):
            return "message content must be a string or a list of content blocks", "messages"
    choice = body.get("tool_choice")
    if choice is not None and (not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none")
                               or choice.get("type") == "tool" and not choice.get("name")):
        return "tool_choice must be auto, any, none, or tool with a name", "tool_choice"
    tools = body.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("input_schema"), dict)
            for t in tools)):
        return "each tool needs a name and an input_schema object", "tools"
    return None


def messages_as_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat request vLLM's Messages serving builds from a checked (``messages_problem``) body."""
    chat = {key: body[key] for key in _MESSAGES_CARRIED if key in body}
    chat["max_tokens"] = chat["max_completion_tokens"] = as_int(body["max_tokens"])
    if isinstance(body.get("stop_sequences"), list):
        chat["stop"] = body["stop_sequences"]
    if as_bool(body.get("stream")):
        chat["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    system = _blocks_text(body.get("system")) + "".join(
        _blocks_text(m["content"]) for m in body["messages"] if _ROLES[m["role"]] == "system")
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in body["messages"]:
        role = _ROLES[message["role"]]
        if role != "system":
            messages += _turn(role, message["content"])
    chat["messages"] = messages
    config = body.get("output_config")
    if isinstance(config, dict):
        fmt = config.get("format")
        if isinstance(fmt, dict) and isinstance(fmt.get("schema"), dict):
            chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "json_schema",
                                                                              "schema": fmt["schema"]}}
        if config.get("effort") is not None:
            chat["reasoning_effort"] = config["effort"]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        chat["tool_choice"] = (_ANTHROPIC_CHOICES[choice["type"]] if choice["type"] != "tool" else
                               {"type": "function", "function": {"name": choice["name"]}})
    if isinstance(body.get("tools"), list):
        chat["tools"] = [{"type": "function", "function": {"name": t["name"], "description": t.get("description"),
                                                           "parameters": t["input_schema"]}} for t in body["tools"]]
        chat.setdefault("tool_choice", "auto")
    return chat


def _blocks_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(b["text"] for b in content if b.get("type") == "text" and isinstance(b.get("text"), str)
                   and not b["text"].startswith("x-anthropic-billing-header"))


def _turn(role: str, content: Any) -> list[dict[str, Any]]:
    """One turn as chat messages; a user's tool results go before it, as tool messages."""
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    before: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for block in content:
        kind = block["type"]
        if kind == "text" and block.get("text"):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            reasoning.append(block["thinking"])
        elif kind == "tool_use":
            calls.append({"id": block.get("id") or "call_0", "type": "function",
                          "function": {"name": block.get("name") or "", "arguments": json.dumps(block.get("input") or {})}})
        elif kind == "tool_result" and role == "user":
            result = block.get("content")
            text = result if isinstance(result, str) else "\n".join(
                i.get("text", "") for i in result if isinstance(i, dict) and i.get("type") == "text") \
                if isinstance(result, list) else ""
            before.append({"role": "tool", "tool_call_id": block.get("tool_use_id") or "", "content": text})
        elif kind == "tool_result":
            parts.append({"type": "text", "text": f"Tool result: {block.get('content') or ''}"})
    message: dict[str, Any] = {"role": role}
    if reasoning:
        message["reasoning"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    if parts:
        message["content"] = parts[0]["text"] if len(parts) == 1 else "".join(p["text"] for p in parts)
    keep = not (role == "user" and "content" not in message)
    return before + ([message] if keep else [])
