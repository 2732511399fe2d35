"""Requests and answers laid out as Qwen3's chat template lays them out for the model.

A copy-based drafter copies from the token sequence the model actually sees, so
the tool list must sit in the system prompt as the template puts it (one JSON
object per line inside ``<tools>``, after the instruction that shows the call
format), earlier calls as ``<tool_call>`` blocks, tool results as
``<tool_response>`` blocks, and an answer's calls as the model writes them.
Thinking is off (the template's empty ``<think>`` block ends the prompt): the
committed answers have no reasoning.

An answer is rendered as segments, each with the kind of token it holds, so a
replay can say what was copied: the call format (``syntax``), a function's
``name``, an argument's ``key`` and ``value``, ``prose`` and ``code``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

Segment = tuple[str, str]  # (text, kind)

_TOOLS_HEADER = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                 "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_TOOLS_FOOTER = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                 "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                 "\"arguments\": <args-json-object>}\n</tool_call>")
_NO_THINKING = "<think>\n\n</think>\n\n"
_FENCE = re.compile(r"```.*?(?:```|$)", re.DOTALL)


def _json(value: Any) -> str:
    """As the template's ``tojson`` writes it: ", " and ": " separators, text kept as it is."""
    return json.dumps(value, ensure_ascii=False)


def prompt(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> str:
    """The prompt the model reads, up to and including the start of its own turn."""
    parts: list[str] = []
    rest = list(messages)
    system = rest.pop(0).get("content") if rest and rest[0].get("role") == "system" else None
    if tools:
        parts.append("<|im_start|>system\n" + (f"{_text(system)}\n\n" if system else "") + _TOOLS_HEADER
                     + "".join("\n" + _json(tool) for tool in tools) + _TOOLS_FOOTER + "<|im_end|>\n")
    elif system:
        parts.append(f"<|im_start|>system\n{_text(system)}<|im_end|>\n")
    for i, message in enumerate(rest):
        role = message.get("role")
        if role == "assistant":
            parts.append("<|im_start|>assistant\n" + "".join(text for text, _ in answer(message)))
            parts.append("\n")
        elif role == "tool":
            opening = i == 0 or rest[i - 1].get("role") != "tool"
            closing = i == len(rest) - 1 or rest[i + 1].get("role") != "tool"
            parts.append(("<|im_start|>user" if opening else "") + "\n<tool_response>\n"
                         + _text(message.get("content")) + "\n</tool_response>" + ("<|im_end|>\n" if closing else ""))
        else:
            parts.append(f"<|im_start|>{role}\n{_text(message.get('content'))}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n" + _NO_THINKING


def answer(message: dict[str, Any]) -> list[Segment]:
    """An assistant message as the model writes it, ``<|im_end|>`` included, in typed segments."""
    segments: list[Segment] = []
    content = _text(message.get("content"))
    if content:
        segments += _prose(content)
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function", {})
        arguments = function.get("arguments")
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            parsed = None
        segments.append(("\n" if i or content else "", "syntax"))
        segments.append(('<tool_call>\n{"name": "', "syntax"))
        segments.append((str(function.get("name", "")), "name"))
        segments.append(('", "arguments": ', "syntax"))
        segments += _value(parsed) if isinstance(parsed, dict) else [(str(arguments), "value")]
        segments.append(("}\n</tool_call>", "syntax"))
    segments.append(("<|im_end|>", "syntax"))
    return [(text, kind) for text, kind in segments if text]


def _value(value: Any) -> list[Segment]:
    """JSON as ``json.dumps`` writes it, its keys and its leaf values told apart from its syntax."""
    if isinstance(value, dict):
        out: list[Segment] = [("{", "syntax")]
        for i, (key, item) in enumerate(value.items()):
            out += [((", " if i else "") + '"', "syntax"), (_json(str(key))[1:-1], "key"), ('": ', "syntax")]
            out += _value(item)
        return out + [("}", "syntax")]
    if isinstance(value, list):
        out = [("[", "syntax")]
        for i, item in enumerate(value):
            out += ([(", ", "syntax")] if i else []) + _value(item)
        return out + [("]", "syntax")]
    if isinstance(value, str):
        return [('"', "syntax"), (_json(value)[1:-1], "value"), ('"', "syntax")]
    return [(_json(value), "value")]


def _prose(text: str) -> list[Segment]:
    """Text, with fenced code told apart from prose."""
    out: list[Segment] = []
    at = 0
    for match in _FENCE.finditer(text):
        out += [(text[at:match.start()], "prose"), (match.group(), "code")]
        at = match.end()
    return out + [(text[at:], "prose")]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def kinds_of_tokens(segments: Iterable[Segment], starts: list[int]) -> list[str]:
    """The kind of each token, by the segment its first character falls in."""
    bounds: list[tuple[int, str]] = []
    at = 0
    for text, kind in segments:
        bounds.append((at, kind))
        at += len(text)
    kinds, j = [], 0
    for start in starts:
        while j + 1 < len(bounds) and bounds[j + 1][0] <= start:
            j += 1
        kinds.append(bounds[j][1] if bounds else "prose")
    return kinds
