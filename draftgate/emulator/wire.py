"""OpenAI/vLLM response shapes built from an emulated sequence's tokens."""

from __future__ import annotations

import math
import time
from typing import Any

from starlette.responses import JSONResponse

from draftgate.emulator.engine import Sequence
from draftgate.emulator.textgen import Generated, OutputToken


def error_response(message: str, status: int, param: str | None = None) -> JSONResponse:
    kind = {400: "BadRequestError", 404: "NotFoundError", 413: "BadRequestError"}.get(status, "InternalServerError")
    return JSONResponse(error_body(message, status, kind, param), status_code=status)


def error_body(message: str, status: int, err_type: str, param: str | None = None) -> dict[str, Any]:
    """vLLM's error shape: ``code`` is the integer status."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens, "prompt_tokens_details": None}


def _groups(tokens: list[OutputToken], start: int, end: int) -> list[tuple[str, int, str, bool]]:
    """Consecutive tokens of ``start:end`` of one channel (and call) joined:
    (channel, call, text, whether its first token is the first of its call)."""
    groups: list[tuple[str, int, str, bool]] = []
    for position in range(start, end):
        tok = tokens[position]
        if groups and groups[-1][0] == tok.channel and groups[-1][1] == tok.call and tok.channel != "tool_name":
            channel, call, text, first = groups[-1]
            groups[-1] = (channel, call, text + tok.text, first)
        else:
            before = tokens[position - 1] if position else None
            first = before is None or before.call != tok.call or before.channel not in ("tool_name", "tool_args")
            groups.append((tok.channel, tok.call, tok.text, first))
    return groups


def chat_deltas(gen: Generated, start: int, end: int, include_reasoning: bool = True) -> list[dict[str, Any]]:
    """The stream deltas for output tokens ``start:end`` of one choice; ``include_reasoning``
    false (the request's) leaves the reasoning out, as vLLM does."""
    deltas = []
    for channel, call, text, first in _groups(gen.tokens, start, end):
        if channel == "reasoning":
            if include_reasoning:
                deltas.append({"reasoning": text})
        elif channel == "content":
            deltas.append({"content": text})
        elif channel == "tool_name" or first:
            # a call opens with its name: a token of its own when the model writes it, or, for
            # a named function (whose name the server adds), beside the first of its arguments
            c = gen.calls[call]
            arguments = "" if channel == "tool_name" else text
            deltas.append({"tool_calls": [{"index": call, "id": c.id, "type": "function",
                                           "function": {"name": c.name, "arguments": arguments}}]})
        else:
            deltas.append({"tool_calls": [{"index": call, "function": {"arguments": text}}]})
    return deltas


def chat_message(gen: Generated, end: int, include_reasoning: bool = True) -> dict[str, Any]:
    """The assistant message for the first ``end`` output tokens (its reasoning left out
    when ``include_reasoning`` is false; usage still counts those tokens)."""
    reasoning, content = [], []
    arguments: dict[int, list[str]] = {}
    for tok in gen.tokens[:end]:
        if tok.channel == "reasoning":
            reasoning.append(tok.text)
        elif tok.channel == "content":
            content.append(tok.text)
        elif tok.channel == "tool_args":
            arguments.setdefault(tok.call, []).append(tok.text)
        elif tok.channel == "tool_name":
            arguments.setdefault(tok.call, [])
    calls = [
        {"id": gen.calls[i].id, "type": "function",
         "function": {"name": gen.calls[i].name, "arguments": "".join(parts)}}
        for i, parts in sorted(arguments.items())
    ]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(content) if content or not calls else None,
        "tool_calls": calls,
    }
    if reasoning and include_reasoning:
        message["reasoning"] = "".join(reasoning)
    return message


def logprobs_content(seq: Sequence, gen: Generated, start: int, end: int, top: int) -> list[dict[str, Any]]:
    """Per-token logprobs of the target distribution (index 0 is the emitted token)."""
    entries = []
    for pos in range(start, end):
        text = gen.tokens[pos].text
        if seq.positions is None:
            lp = [0.0]
        else:
            lp = [float(x) for x in seq.positions.target_logprobs[pos][: max(1, top)]]
        alternatives = [{"token": text if j == 0 else f"<alt{j}>", "logprob": max(lp[j], -9999.0),
                         "bytes": list((text if j == 0 else f"<alt{j}>").encode())} for j in range(min(top, len(lp)))]
        entries.append({"token": text, "logprob": max(lp[0], -9999.0), "bytes": list(text.encode()),
                        "top_logprobs": alternatives})
    return entries


def finish_reason(gen: Generated, truncated: bool) -> str:
    if truncated:
        return "length"
    return "tool_calls" if gen.calls else "stop"


def safe_float(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return default
    return float(value)


def spec_metrics(seqs: list[Sequence], per_request_metrics: str) -> dict[str, Any] | None:
    """An answer's ``metrics``, as ``--per-request-spec-decode-metrics`` gives them (none: no field);
    null for a request of several sequences, as vLLM's are."""
    if per_request_metrics == "none":
        return None
    if len(seqs) != 1:
        return {"speculative_decoding": None}
    return {"speculative_decoding": seqs[0].spec.as_json(per_request_metrics == "detailed")}


def final_body(rid: str, model: str, body: dict[str, Any], endpoint: str, seqs: list[Sequence],
               gens: list[Generated], prompt_len: int, metrics: dict[str, Any] | None) -> dict[str, Any]:
    """A whole (non-streamed) chat or text completion of ``seqs``, as vLLM answers it."""
    top = body.get("top_logprobs") or 0
    want_logprobs = body.get("logprobs") is True if endpoint == "chat" else isinstance(body.get("logprobs"), int)
    choices = []
    for i, (seq, gen) in enumerate(zip(seqs, gens)):
        logprobs = None
        if want_logprobs:
            logprobs = {"content": logprobs_content(seq, gen, 0, seq.emitted,
                                                    top if endpoint == "chat" else body["logprobs"])}
        if endpoint == "chat":
            message = chat_message(gen, seq.emitted, body.get("include_reasoning") is not False)
            choices.append({"index": i, "message": message, "logprobs": logprobs,
                            "finish_reason": seq.finish_reason, "stop_reason": None})
        else:
            choices.append({"index": i, "text": "".join(t.text for t in gen.tokens[: seq.emitted]),
                            "logprobs": logprobs, "finish_reason": seq.finish_reason, "stop_reason": None,
                            "prompt_logprobs": None})
    out: dict[str, Any] = {
        "id": rid, "object": "chat.completion" if endpoint == "chat" else "text_completion",
        "created": int(time.time()), "model": model, "choices": choices,
        "usage": usage(prompt_len, sum(s.emitted for s in seqs)),
    }
    if metrics is not None:
        out["metrics"] = metrics
    return out
