"""Anthropic's Messages API (``/v1/messages``) read as the chat completion vLLM makes of it.

vLLM serves this API by converting each request into a chat completion request
and each answer back, so the gate reads a Messages request as that chat request
and measures a Messages answer as that chat completion. The conversion follows
vLLM's (``vllm/entrypoints/anthropic/serving.py``), not Anthropic's documentation,
where the two differ:

- ``tool_choice`` ``any`` is ``required``, ``tool`` with a name is that named
  function, ``none`` is ``none``; with tools and no choice, ``auto``.
- ``thinking`` (and its ``budget_tokens``) is not read by vLLM: whether the model
  thinks is its chat template's default or ``chat_template_kwargs``, as on chat.
- ``output_config.format`` is a JSON-schema response format, ``output_config.effort``
  the reasoning effort; ``stop_sequences`` are ``stop``.
- ``system`` (a string or text blocks, and any ``system``-role message) is one
  system message; ``tool_use`` blocks are the assistant's calls and ``tool_result``
  blocks the tool messages that answer them; ``thinking`` blocks are reasoning.

An answer is measured from its content blocks (``text``, ``thinking``, ``tool_use``
with its ``input``) and usage; a stream event by event, each read alone: a
``tool_use`` block's index numbers its call, so no state is carried between events.
Nothing here raises on what a client or a server can send.
"""

from __future__ import annotations

import json
from typing import Any

# fields the chat request spells alike (vLLM's extras included)
_SHARED = ("model", "temperature", "top_p", "top_k", "stream", "chat_template_kwargs")
_MAX_ITEMS = 4096
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
_STOP_REASONS = {"end_turn": "stop", "max_tokens": "length", "stop_sequence": "stop", "tool_use": "tool_calls"}


def messages_chat_view(body: Any) -> dict[str, Any]:
    """The chat completion request that ``body``, a Messages request, amounts to in vLLM."""
    if not isinstance(body, dict):
        return {}
    view = {key: body[key] for key in _SHARED if key in body}
    view["messages"] = _messages(body)
    if "max_tokens" in body:
        view["max_tokens"] = body["max_tokens"]
    if isinstance(body.get("stop_sequences"), list):
        view["stop"] = body["stop_sequences"]
    if view.get("stream") is True:
        view["stream_options"] = {"include_usage": True}  # vLLM always asks for usage on this route
    tools = body.get("tools")
    if isinstance(tools, list):
        view["tools"] = [_tool(t) for t in tools[:_MAX_ITEMS] if isinstance(t, dict)]
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        view["tool_choice"] = choice
    elif view.get("tools"):
        view["tool_choice"] = "auto"
    config = body.get("output_config")
    if isinstance(config, dict):
        fmt = config.get("format")
        if isinstance(fmt, dict) and isinstance(fmt.get("schema"), dict):
            view["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "json_schema", "schema": fmt["schema"]}}
        if config.get("effort") is not None:
            view["reasoning_effort"] = config["effort"]
    return view


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    given = body.get("messages")
    given = given[:_MAX_ITEMS] if isinstance(given, list) else []
    system = _text_of(body.get("system")) + "".join(
        _text_of(m.get("content")) for m in given if isinstance(m, dict) and m.get("role") == "system")
    if system:
        messages.append({"role": "system", "content": system})
    for message in given:
        if isinstance(message, dict) and message.get("role") != "system":
            messages += _converted(message)
    return messages


def _converted(message: dict[str, Any]) -> list[dict[str, Any]]:
    """One Messages turn as chat messages: a user's tool results become tool messages of
    their own, before it; an assistant's are text, as vLLM writes them."""
    role = message.get("role") if message.get("role") in ("user", "assistant") else "user"
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        return []
    blocks = _Blocks(content)
    results = [{"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": _text_of(b.get("content"))}
               for b in blocks.results] if role == "user" else []
    if role == "assistant":
        blocks.texts += [f"Tool result: {_text_of(b.get('content'))}" for b in blocks.results]
    converted = blocks.chat_message(role)
    # a user turn of tool results alone is its tool messages (vLLM drops the empty user message)
    keep = len(converted) > 1 or (role == "assistant" and not results)
    return results + ([converted] if keep else [])


class _Blocks:
    """A turn's or an answer's content blocks, by kind."""

    def __init__(self, content: list[Any]) -> None:
        self.texts: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []
        for block in content[:_MAX_ITEMS]:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                self.texts.append(block["text"])
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                self.reasoning.append(block["thinking"])
            elif kind == "tool_use":
                self.calls.append({"index": len(self.calls), "id": block.get("id"), "type": "function",
                                   "function": {"name": block.get("name"), "arguments": _dumped(block.get("input"))}})
            elif kind == "tool_result":
                self.results.append(block)

    def chat_message(self, role: str) -> dict[str, Any]:
        """The chat message these blocks make: its fields only where there is something."""
        message: dict[str, Any] = {"role": role}
        if self.texts:
            message["content"] = "".join(self.texts)
        if self.reasoning:
            message["reasoning"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = self.calls
        return message


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(b["text"] for b in content[:_MAX_ITEMS]
                   if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))


def _dumped(value: Any) -> str:
    try:
        return json.dumps(value if value is not None else {})
    except (TypeError, ValueError):
        return "{}"


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {"name": tool.get("name"), "description": tool.get("description"),
                "parameters": tool.get("input_schema")}
    return {"type": "function", "function": {k: v for k, v in function.items() if v is not None}}


def _tool_choice(choice: Any) -> Any:
    if not isinstance(choice, dict):
        return None
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return _CHOICES.get(kind) if isinstance(kind, str) else None


def messages_chat_chunk(payload: Any) -> dict[str, Any] | None:
    """A Messages answer (a whole message, or one stream event) as the chat completion
    (or chunk) it stands for; None for an event that says nothing to measure."""
    if not isinstance(payload, dict):
        return None
    kind = payload.get("type")
    if kind == "message":
        return _whole(payload)
    if kind == "message_start":
        message = payload.get("message")
        if not isinstance(message, dict):
            return None
        return {"id": message.get("id"), "choices": [], "usage": _usage(message.get("usage"))}
    if kind == "message_delta":
        delta = payload.get("delta")
        reason = _STOP_REASONS.get(delta.get("stop_reason")) if isinstance(delta, dict) else None
        chunk: dict[str, Any] = {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}
        if isinstance(payload.get("usage"), dict):
            chunk["usage"] = _usage(payload["usage"])
        return chunk
    index = payload.get("index")
    if kind == "content_block_start":
        block = payload.get("content_block")
        if isinstance(block, dict) and block.get("type") == "tool_use":
            call = {"index": index, "id": block.get("id"), "type": "function", "function": {"name": block.get("name")}}
            return _delta({"tool_calls": [call]})
        return None
    if kind == "content_block_delta":
        delta = payload.get("delta")
        if not isinstance(delta, dict):
            return None
        part = delta.get("type")
        if part == "text_delta":
            return _delta({"content": delta.get("text")})
        if part == "thinking_delta":
            return _delta({"reasoning": delta.get("thinking")})
        if part == "input_json_delta":
            return _delta({"tool_calls": [{"index": index, "function": {"arguments": delta.get("partial_json")}}]})
    return None


def _whole(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    chat_message = _Blocks(content if isinstance(content, list) else []).chat_message("assistant")
    return {"id": message.get("id"), "usage": _usage(message.get("usage")),
            "choices": [{"index": 0, "message": chat_message,
                         "finish_reason": _STOP_REASONS.get(message.get("stop_reason"))}]}


def _delta(delta: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta}]}


def _usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    return {"prompt_tokens": usage.get("input_tokens"), "completion_tokens": usage.get("output_tokens")}
