"""vLLM's Responses API (``/v1/responses``), as far as a proxy in front can tell.

What matters to draftgate is where a response lives: with
``VLLM_ENABLE_RESPONSES_API_STORE=1`` vLLM keeps each stored response in the
memory of the server that made it, and only that server can retrieve it
(``GET /v1/responses/{id}``), cancel it, or continue from it
(``previous_response_id``); every other replica answers 404. Without the store,
``store: true`` is silently dropped, as vLLM drops it.

Output is prose from the emulated engine (tools are not offered here), with
vLLM's shapes: the response object, the named SSE events of a stream, and
background mode (queued at once, finished by the engine, cancellable).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lab.emulator import wire

if TYPE_CHECKING:
    from lab.emulator.app import Emulator
    from lab.emulator.engine import Sequence

_TERMINAL = frozenset({"completed", "cancelled", "failed", "incomplete"})


def _not_found(response_id: str) -> JSONResponse:
    return wire.error_response(f"Response with id '{response_id}' not found.", 404)


def _messages(body: dict[str, Any], history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation the model sees: the stored history, instructions, then this input."""
    messages = list(history)
    if isinstance(body.get("instructions"), str):
        messages.insert(0, {"role": "system", "content": body["instructions"]})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list):
        for item in given:
            if isinstance(item, dict) and isinstance(item.get("role"), str):
                content = item.get("content")
                if isinstance(content, list):
                    content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
                messages.append({"role": item["role"], "content": str(content)})
            elif isinstance(item, dict) and item.get("type") == "function_call_output":
                messages.append({"role": "tool", "content": str(item.get("output", ""))})
    return messages


@dataclass(slots=True)
class _Run:
    """One response being generated: what the engine runs and what it fills in."""

    response: dict[str, Any]
    messages: list[dict[str, Any]]
    seq: Sequence
    prompt_len: int

    @property
    def item_id(self) -> str:
        return f"msg_{self.response['id'].removeprefix('resp_')}"

    def content(self, start: int, end: int) -> str:
        return "".join(t.text for t in self.seq.output[start:end] if t.channel == "content")


class Responses:
    """The /v1/responses routes of one emulated server, and its response store."""

    def __init__(self, emulator: Emulator, store_enabled: bool) -> None:
        self.emulator = emulator
        self.store_enabled = store_enabled
        self.stored: dict[str, dict[str, Any]] = {}
        self.history: dict[str, list[dict[str, Any]]] = {}  # the conversation each stored response closes
        self.background: dict[str, tuple[asyncio.Future[None], Sequence]] = {}

    def routes(self) -> list[Route]:
        return [
            Route("/v1/responses", self.create, methods=["POST"]),
            Route("/v1/responses/{response_id}", self.retrieve, methods=["GET"]),
            Route("/v1/responses/{response_id}/cancel", self.cancel, methods=["POST"]),
        ]

    async def create(self, request: Request) -> Response:
        from lab.emulator.app import _BadRequest

        try:
            body = await self.emulator._read_object(request)
            if not isinstance(body.get("input"), (str, list)):
                raise _BadRequest("input must be a string or a list of items", param="input")
        except _BadRequest as exc:
            return wire.error_response(str(exc), exc.status, exc.param)
        store = body.get("store", True) is not False and self.store_enabled
        background = body.get("background") is True
        if background and not store:
            return wire.error_response("background can only be used when `store` is true", 400, "background")
        previous = body.get("previous_response_id")
        if previous is not None and previous not in self.history:
            return _not_found(str(previous))
        messages = _messages(body, self.history[previous] if previous is not None else [])
        chat = {"messages": messages, "temperature": body.get("temperature"), "seed": body.get("seed"),
                "max_tokens": body.get("max_output_tokens")}
        seqs, _, prompt_len = self.emulator._sequences({k: v for k, v in chat.items() if v is not None}, "chat")
        rid = request.headers.get("x-request-id") or f"resp_{uuid.uuid4().hex}"
        run = _Run(self._response(rid, body, "queued" if background else "in_progress"), messages, seqs[0],
                   prompt_len)
        self.emulator.get_engine().submit(run.seq)
        if store:
            self.stored[rid] = run.response
            self.history[rid] = messages
        if background:
            self.background[rid] = (asyncio.ensure_future(self._finish(run, None)), run.seq)
            return JSONResponse(dict(run.response))
        if body.get("stream") is True:
            return StreamingResponse(self._events(run), media_type="text/event-stream")
        await self._finish(run, None)
        return JSONResponse(run.response)

    async def retrieve(self, request: Request) -> Response:
        rid = request.path_params["response_id"]
        response = self.stored.get(rid)
        return JSONResponse(response) if response is not None else _not_found(rid)

    async def cancel(self, request: Request) -> Response:
        rid = request.path_params["response_id"]
        response = self.stored.get(rid)
        if response is None:
            return _not_found(rid)
        if not response["background"]:
            return wire.error_response("Cannot cancel a synchronous response.", 400)
        running = self.background.pop(rid, None)
        if running is not None and response["status"] not in _TERMINAL:
            task, seq = running
            task.cancel()
            self.emulator.get_engine().abort(seq)
            response["status"] = "cancelled"
        return JSONResponse(response)

    # ------------------------------------------------------------ generation and shapes

    def _response(self, rid: str, body: dict[str, Any], status: str) -> dict[str, Any]:
        return {
            "id": rid, "created_at": int(time.time()), "incomplete_details": None,
            "instructions": body.get("instructions"), "metadata": body.get("metadata"),
            "model": self.emulator.config.model, "object": "response", "output": [],
            "parallel_tool_calls": body.get("parallel_tool_calls", True), "temperature": body.get("temperature"),
            "tool_choice": body.get("tool_choice", "auto"), "tools": [], "top_p": body.get("top_p"),
            "background": body.get("background") is True, "max_output_tokens": body.get("max_output_tokens"),
            "previous_response_id": body.get("previous_response_id"), "reasoning": body.get("reasoning"),
            "service_tier": "auto", "status": status, "text": body.get("text"), "truncation": "disabled",
            "usage": None, "user": body.get("user"),
        }

    async def _finish(self, run: _Run, deltas: asyncio.Queue[str] | None) -> None:
        """Wait for the engine to finish ``run`` (passing its text on to ``deltas``), then fill its response in."""
        response, seq = run.response, run.seq
        response["status"] = "in_progress"
        while True:
            kind, start, end = await seq.events.get()
            if kind == "finish":
                break
            if deltas is not None:
                await deltas.put(run.content(start, end))
        text = run.content(0, seq.emitted)
        response["output"] = [{"id": run.item_id, "type": "message", "role": "assistant", "status": "completed",
                               "content": [{"type": "output_text", "text": text, "annotations": [],
                                            "logprobs": None}]}]
        response["status"] = "incomplete" if seq.finish_reason == "length" else "completed"
        if response["status"] == "incomplete":
            response["incomplete_details"] = {"reason": "max_output_tokens"}
        response["usage"] = {"input_tokens": run.prompt_len, "input_tokens_details": {"cached_tokens": 0},
                             "output_tokens": seq.emitted, "output_tokens_details": {"reasoning_tokens": 0},
                             "total_tokens": run.prompt_len + seq.emitted}
        if response["id"] in self.history:
            self.history[response["id"]] = run.messages + [{"role": "assistant", "content": text}]
        self.background.pop(response["id"], None)

    async def _events(self, run: _Run) -> AsyncIterator[bytes]:
        """vLLM's named SSE events for one message of output text."""
        number = 0
        item = run.item_id

        def event(kind: str, **fields: Any) -> bytes:
            nonlocal number
            payload = {**fields, "sequence_number": number, "type": kind}
            number += 1
            return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()

        yield event("response.created", response=dict(run.response))
        yield event("response.in_progress", response=dict(run.response))
        yield event("response.output_item.added", output_index=0, item={
            "id": item, "type": "message", "role": "assistant", "status": "in_progress", "content": []})
        yield event("response.content_part.added", item_id=item, output_index=0, content_index=0,
                    part={"type": "output_text", "text": "", "annotations": []})
        deltas: asyncio.Queue[str] = asyncio.Queue()
        finished = asyncio.ensure_future(self._finish(run, deltas))
        try:
            while not (finished.done() and deltas.empty()):
                waiting = asyncio.ensure_future(deltas.get())
                await asyncio.wait({waiting, finished}, return_when=asyncio.FIRST_COMPLETED)
                if not waiting.done():
                    waiting.cancel()
                    continue
                if text := waiting.result():
                    yield event("response.output_text.delta", item_id=item, output_index=0, content_index=0,
                                delta=text, logprobs=[])
            await finished
        finally:
            if not finished.done():
                finished.cancel()
                self.emulator.get_engine().abort(run.seq)
        message = run.response["output"][0]
        part = message["content"][0]
        yield event("response.output_text.done", item_id=item, output_index=0, content_index=0, text=part["text"],
                    logprobs=[])
        yield event("response.content_part.done", item_id=item, output_index=0, content_index=0, part=part)
        yield event("response.output_item.done", output_index=0, item=message)
        yield event("response.completed" if run.response["status"] == "completed" else "response.incomplete",
                    response=run.response)
