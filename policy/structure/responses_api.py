"""The Responses API (``/v1/responses``) read as the chat completion it amounts to.

A Responses request says what a chat request says, in other places: tools are
flat (``{"type": "function", "name": ...}``), a JSON format sits in
``text.format``, the thinking effort in ``reasoning.effort``, the cap in
``max_output_tokens``, the conversation in ``input``. Translated, everything
the estimator, the learner and the affinity table know applies unchanged; and
a finished response (its ``output`` items and ``usage``) translated back into a
chat completion is measured as one. Nothing here raises on what a client or a
server can send: what is not understood is left out.
"""

from __future__ import annotations

from typing import Any

# fields both APIs spell alike (vLLM's extras included): sampling, and what the proxy reads besides
_SHARED = ("model", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "frequency_penalty",
           "presence_penalty", "seed", "stream", "parallel_tool_calls", "structured_outputs",
           "chat_template_kwargs", "user", "store", "include_reasoning", "cache_salt", "prompt_cache_key",
           "session_id", "safety_identifier")
_LOGPROBS = "message.output_text.logprobs"  # in ``include``, as vLLM reads it: logprobs come only then
_MAX_ITEMS = 4096
_ENDED = ("response.completed", "response.incomplete")  # a tuple: a client may send an unhashable "type"


def chat_view(body: Any) -> dict[str, Any]:
    """The chat completion request that ``body``, a Responses request, amounts to."""
    if not isinstance(body, dict):
        return {}
    view = {key: body[key] for key in _SHARED if key in body}
    view["messages"] = _messages(body)
    tools = body.get("tools")
    if isinstance(tools, list):
        view["tools"] = [_tool(t) for t in tools[:_MAX_ITEMS] if isinstance(t, dict) and t.get("type") == "function"]
    if "tool_choice" in body:
        view["tool_choice"] = _tool_choice(body["tool_choice"])
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        view["response_format"] = {"type": "json_schema", "json_schema": {"name": fmt.get("name"),
                                                                          "schema": fmt.get("schema")}}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
        view["response_format"] = {"type": "json_object"}
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        view["reasoning_effort"] = reasoning["effort"]
    if "max_output_tokens" in body:
        view["max_tokens"] = body["max_output_tokens"]
    include = body.get("include")
    if isinstance(include, list) and _LOGPROBS in include:
        # ``top_logprobs`` alone asks for nothing, and with the include even 0 asks for the sampled token's
        view["logprobs"] = True
        if "top_logprobs" in body:
            view["top_logprobs"] = body["top_logprobs"]
    return view


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        messages.append({"role": "system", "content": instructions})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list):
        for item in given[:_MAX_ITEMS]:
            message = _message(item)
            if message is not None:
                messages.append(message)
    return messages


def _message(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        return None
    kind = item.get("type", "message")
    if kind == "message" and isinstance(item.get("role"), str):
        content = item.get("content")
        if isinstance(content, list):  # input_text / output_text parts
            content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        return {"role": item["role"], "content": content if isinstance(content, str) else ""}
    if kind == "function_call":
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": item.get("call_id"), "type": "function",
             "function": {"name": item.get("name"), "arguments": item.get("arguments")}}]}
    if kind == "function_call_output":
        output = item.get("output")
        return {"role": "tool", "tool_call_id": item.get("call_id"), "content": output if isinstance(output, str)
                else ""}
    return None  # reasoning items and the like say nothing of what comes next


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict):
        if choice.get("type") == "function":
            return {"type": "function", "function": {"name": choice.get("name")}}
        return "auto"  # allowed_tools, a built-in tool: a call may come, none is forced
    return choice


def chat_completion(payload: Any) -> dict[str, Any] | None:
    """A finished response (a whole body, or the event that ends a stream) as a chat
    completion: its message text, reasoning and function calls, and its usage.
    None for anything else (the events before the end say nothing the end does not)."""
    if not isinstance(payload, dict):
        return None
    if payload.get("type") in _ENDED:
        payload = payload.get("response")
        if not isinstance(payload, dict):
            return None
    elif payload.get("object") != "response":
        return None
    content: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    output = payload.get("output")
    for item in output[:_MAX_ITEMS] if isinstance(output, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            content += _texts(item.get("content"))
        elif kind == "reasoning":
            reasoning += _texts(item.get("content")) or _texts(item.get("summary"))
        elif kind == "function_call":
            calls.append({"id": item.get("call_id"), "index": len(calls), "type": "function",
                          "function": {"name": item.get("name"), "arguments": item.get("arguments")}})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content), "tool_calls": calls}
    if reasoning:
        message["reasoning"] = "".join(reasoning)
    chunk: dict[str, Any] = {"id": payload.get("id"), "choices": [{"index": 0, "message": message}]}
    usage = payload.get("usage")
    if isinstance(usage, dict):
        chunk["usage"] = {"prompt_tokens": usage.get("input_tokens"), "completion_tokens": usage.get("output_tokens")}
        details = usage.get("output_tokens_details")
        if isinstance(details, dict):
            chunk["usage"]["completion_tokens_details"] = {"reasoning_tokens": details.get("reasoning_tokens")}
    return chunk


def _texts(parts: Any) -> list[str]:
    if not isinstance(parts, list):
        return []
    return [p["text"] for p in parts[:_MAX_ITEMS] if isinstance(p, dict) and isinstance(p.get("text"), str)]
