"""vLLM's Anthropic Messages API (``/v1/messages``), served as vLLM serves it.

vLLM converts a Messages request into the chat completion request it amounts
to (``vllm_request.messages_as_chat``), generates that, and converts the answer
back: a message with ``thinking``, ``text`` and ``tool_use`` blocks, or a
stream of ``message_start``, ``content_block_start`` / ``_delta`` / ``_stop``,
``message_delta`` and ``message_stop`` events. The shapes here are vLLM's, which
differ from Anthropic's own in places a client may notice: the message id is
the chat completion's (``chatcmpl-...``), a thinking block's signature is a
random hex string, a stream's ``message_start`` omits the message's ``type``
and ``role``, and there are no ``ping`` events. ``thinking`` in the request is
not read: whether the model thinks is the chat template's choice, as on chat.
Errors of the converted request come in Anthropic's error shape; a body that
fails the request model's own checks is refused as every route refuses one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from draftgate.emulator import wire
from draftgate.emulator.request_fields import BadRequest
from draftgate.emulator.tokens import tokenize
from draftgate.emulator.vllm_request import messages_as_chat, messages_problem

if TYPE_CHECKING:
    from draftgate.emulator.app import Emulator

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


class Messages:
    """The /v1/messages routes of one emulated server."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator

    def routes(self) -> list[Route]:
        return [Route("/v1/messages", self.create, methods=["POST"]),
                Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"])]

    async def create(self, request: Request) -> Response:
        try:
            body = await self.emulator.read_object(request)
            if problem := messages_problem(body):
                raise BadRequest(problem[0], param=problem[1])
            chat = self.emulator.checked(messages_as_chat(body), "chat")
        except BadRequest as exc:
            if exc.status == 404:  # an unknown model is the chat request's error, converted
                return _anthropic_error(str(exc), exc.status, "NotFoundError")
            return wire.error_response(str(exc), exc.status, exc.param)
        answer = await self.emulator.generate(request, chat, "chat")
        if isinstance(answer, StreamingResponse):
            return StreamingResponse(_events(answer.body_iterator), media_type="text/event-stream")
        if not isinstance(answer, JSONResponse):  # the client left (499)
            return answer
        payload = json.loads(answer.body)
        if answer.status_code != 200:
            error = payload.get("error", {})
            return _anthropic_error(error.get("message"), answer.status_code, error.get("type"))
        headers = {k: v for k, v in answer.headers.items() if k.startswith("x-")}
        return JSONResponse(_message(payload), headers=headers)

    async def count_tokens(self, request: Request) -> Response:
        try:
            body = await self.emulator.read_object(request)
            problem = messages_problem({"max_tokens": 1, **body})
            if problem:
                raise BadRequest(problem[0], param=problem[1])
        except BadRequest as exc:
            return wire.error_response(str(exc), exc.status, exc.param)
        chat = messages_as_chat({"max_tokens": 1, **body})
        text = "".join(str(m.get("content") or "") for m in chat["messages"])
        count = len(tokenize(text))
        return JSONResponse({"input_tokens": count, "context_management": {"original_input_tokens": count}})


def _anthropic_error(message: Any, status: int, kind: Any) -> JSONResponse:
    """A chat request's error as vLLM's Messages route returns it."""
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status_code=status)


def _message(completion: dict[str, Any]) -> dict[str, Any]:
    """A chat completion as vLLM's Messages answer (its fields that are not None)."""
    choice = completion["choices"][0]
    message = choice["message"]
    content: list[dict[str, Any]] = []
    if message.get("reasoning"):
        content.append({"type": "thinking", "thinking": message["reasoning"], "signature": uuid.uuid4().hex})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        content.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                        "input": json.loads(call["function"]["arguments"])})
    answer: dict[str, Any] = {"id": completion["id"], "type": "message", "role": "assistant", "content": content,
                              "model": completion["model"]}
    reason = _STOP_REASONS.get(choice.get("finish_reason"))
    if reason is not None:
        answer["stop_reason"] = reason
    usage = completion.get("usage") or {}
    answer["usage"] = {"input_tokens": usage.get("prompt_tokens", 0), "output_tokens": usage.get("completion_tokens", 0)}
    return answer


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class _Blocks:
    """The content block a stream has open, as vLLM's converter tracks it: a new kind of
    delta (or a new call) closes it and opens the next, numbered from 0."""

    def __init__(self) -> None:
        self.next_index = 0
        self.kind: str | None = None
        self.call_id: str | None = None
        self.calls: dict[int, str] = {}  # a chat call's index -> its id

    def close(self) -> list[bytes]:
        if self.kind is None:
            return []
        index = self.next_index
        events = []
        if self.kind == "thinking":
            events.append(_event("content_block_delta", {"index": index, "type": "content_block_delta", "delta": {
                "type": "signature_delta", "signature": uuid.uuid4().hex}}))
        events.append(_event("content_block_stop", {"index": index, "type": "content_block_stop"}))
        self.kind = self.call_id = None
        self.next_index += 1
        return events

    def open(self, block: dict[str, Any]) -> list[bytes]:
        events = self.close()
        self.kind = block["type"]
        self.call_id = block.get("id")
        events.append(_event("content_block_start", {"index": self.next_index, "type": "content_block_start",
                                                     "content_block": block}))
        return events

    def delta(self, delta: dict[str, Any]) -> bytes:
        return _event("content_block_delta", {"index": self.next_index, "type": "content_block_delta", "delta": delta})

    def chunk(self, delta: dict[str, Any]) -> list[bytes]:
        """The events one chat delta makes."""
        events: list[bytes] = []
        reasoning = delta.get("reasoning")
        if reasoning:
            if self.kind != "thinking":
                events += self.open({"type": "thinking", "thinking": ""})
            events.append(self.delta({"type": "thinking_delta", "thinking": reasoning}))
        text = delta.get("content")
        if text:
            if self.kind != "text":
                events += self.open({"type": "text", "text": ""})
            events.append(self.delta({"type": "text_delta", "text": text}))
        for call in delta.get("tool_calls") or ():
            fn = call.get("function") or {}
            if call.get("id") is not None:
                self.calls[call["index"]] = call["id"]
                if self.call_id != call["id"] and fn.get("name") is not None:
                    events += self.open({"type": "tool_use", "id": call["id"], "name": fn["name"], "input": {}})
            if fn.get("arguments") and self.call_id == self.calls.get(call["index"]):
                events.append(self.delta({"type": "input_json_delta", "partial_json": fn["arguments"]}))
        return events


async def _events(chunks: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    """A chat completion stream as vLLM's Messages stream."""
    blocks = _Blocks()
    started = False
    finish_reason: str | None = None
    pending = b""
    async for raw in chunks:
        pending += raw if isinstance(raw, bytes) else raw.encode()
        while b"\n\n" in pending:
            event, pending = pending.split(b"\n\n", 1)
            data = event.removeprefix(b"data: ")
            if data == b"[DONE]":
                yield _event("message_stop", {"type": "message_stop"})
                continue
            try:
                chunk = json.loads(data)
            except ValueError:
                yield _event("error", {"type": "error", "error": {"type": "internal_error",
                                                                  "message": "Invalid data format received"}})
                continue
            usage = chunk.get("usage") or {}
            if not started:
                started = True
                yield _event("message_start", {"type": "message_start", "message": {
                    "id": chunk["id"], "content": [], "model": chunk["model"], "stop_reason": None,
                    "stop_sequence": None, "usage": {"input_tokens": usage.get("prompt_tokens", 0), "output_tokens": 0}}})
                continue
            if not chunk["choices"]:  # the usage chunk: the message's end
                for closing in blocks.close():
                    yield closing
                yield _event("message_delta", {"type": "message_delta",
                                               "delta": {"stop_reason": _STOP_REASONS.get(finish_reason or "stop")},
                                               "usage": {"input_tokens": usage.get("prompt_tokens", 0),
                                                         "output_tokens": usage.get("completion_tokens", 0)}})
                continue
            choice = chunk["choices"][0]
            finish_reason = choice.get("finish_reason") or finish_reason
            for out in blocks.chunk(choice.get("delta") or {}):
                yield out
