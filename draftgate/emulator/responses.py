"""vLLM's Responses API (``/v1/responses``), as far as a proxy in front can tell.

What matters to draftgate is where a response lives: with
``VLLM_ENABLE_RESPONSES_API_STORE=1`` vLLM keeps each stored response in the
memory of the server that made it, and only that server can retrieve it
(``GET /v1/responses/{id}``), cancel it, or continue from it
(``previous_response_id``); every other replica answers 404. Without the store,
``store: true`` is silently dropped, as vLLM drops it.

The request is generated as the chat completion it amounts to
(``vllm_request.responses_as_chat``), so tools, JSON formats and
reasoning shape the output as they do on chat; the answer has vLLM's shapes:
the response object with message, reasoning and function-call items, the named
SSE events of a stream, and background mode (queued at once, finished by the
engine, cancellable).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from draftgate.emulator import wire
from draftgate.emulator.pacing import next_event
from draftgate.emulator.request_fields import (
    BadRequest,
    check_cache_salt,
    check_sampling,
    typed,
)
from draftgate.emulator.response_events import LiveItems, Numbered, opened, replayed
from draftgate.emulator.vllm_request import as_bool, responses_as_chat

if TYPE_CHECKING:
    from draftgate.emulator.app import Emulator
    from draftgate.emulator.engine import Sequence
    from draftgate.emulator.textgen import Generated

_TERMINAL = frozenset({"completed", "cancelled", "failed", "incomplete"})
# request fields the response repeats, typed as vLLM's request model types them (a NaN
# where a string belongs is refused there, not written into an answer JSON cannot hold)
_TYPED = {"instructions": str, "user": str, "previous_response_id": str, "metadata": dict, "text": dict,
          "reasoning": dict, "tools": list, "include": list}


def _not_found(response_id: str) -> JSONResponse:
    return wire.error_response(f"Response with id '{response_id}' not found.", 404)


@dataclass(slots=True)
class _Run:
    """One response being generated: what the engine runs and what it fills in."""

    response: dict[str, Any]
    messages: list[dict[str, Any]]
    seq: Sequence
    gen: Generated
    prompt_len: int
    top_logprobs: int | None  # None: the request did not include "message.output_text.logprobs"
    # false (the request's include_reasoning): the reasoning is generated and counted, never shown
    include_reasoning: bool = True
    # output tokens passed on to the listeners so far; not seq.emitted, which runs ahead
    # of the spans still queued for _finish (a stream joining then would get them twice)
    emitted: int = 0
    # the streams following it: each span of tokens as it comes, then None at the end (or a cancel)
    listeners: list[asyncio.Queue[tuple[int, int] | None]] = field(default_factory=list)

    @property
    def item_id(self) -> str:
        return f"msg_{self.response['id'].removeprefix('resp_')}"

    def live_item(self, channel: str, call: int) -> dict[str, Any]:
        """The output item a token of ``channel`` belongs to, as it opens (its final form is ``items_at``'s)."""
        if channel == "reasoning":
            return {"id": _reasoning_id(self.item_id), "type": "reasoning", "summary": [], "content": []}
        if channel == "content":
            return {"id": self.item_id, "type": "message", "role": "assistant", "content": []}
        tool_call = self.gen.calls[call]
        return {"id": f"fc_{tool_call.id}", "type": "function_call", "call_id": tool_call.id, "name": tool_call.name,
                "arguments": ""}

    def items_at(self, position: int) -> list[dict[str, Any]]:
        """The output items of the first ``position`` output tokens, each as it is once its tokens are out."""
        message = wire.chat_message(self.gen, position, self.include_reasoning)
        return _output_items(self.item_id, message, self.logprobs(0, position) if self.top_logprobs is not None
                             else None)

    def logprobs(self, start: int, end: int) -> list[dict[str, Any]]:
        """The output text's logprobs between two positions, as vLLM attaches them to
        ``output_text`` (empty when not asked for; reasoning tokens have none there)."""
        if self.top_logprobs is None:
            return []
        entries = wire.logprobs_content(self.seq, self.gen, start, end, self.top_logprobs)
        return [e for e, t in zip(entries, self.seq.output[start:end]) if t.channel == "content"]


class Responses:
    """The /v1/responses routes of one emulated server, and its response store."""

    def __init__(self, emulator: Emulator, store_enabled: bool) -> None:
        self.emulator = emulator
        self.store_enabled = store_enabled
        self.stored: dict[str, dict[str, Any]] = {}
        self.history: dict[str, list[dict[str, Any]]] = {}  # the conversation each stored response closes
        self.background: dict[str, tuple[asyncio.Future[None], _Run]] = {}

    def routes(self) -> list[Route]:
        return [
            Route("/v1/responses", self.create, methods=["POST"]),
            Route("/v1/responses/{response_id}", self.retrieve, methods=["GET"]),
            Route("/v1/responses/{response_id}/cancel", self.cancel, methods=["POST"]),
        ]

    async def create(self, request: Request) -> Response:
        try:
            body = typed(await self.emulator.read_object(request), "responses")
            if not isinstance(body.get("input"), (str, list)):
                raise BadRequest("input must be a string or a list of items", param="input")
            check_sampling(body, ("max_output_tokens",))
            check_cache_salt(body, max_chars=1024)
            top = body.get("top_logprobs")
            if top is not None and not 0 <= top <= 20:
                raise BadRequest("top_logprobs must be an integer from 0 to 20", param="top_logprobs")
            for name, kind in _TYPED.items():
                if body.get(name) is not None and not isinstance(body[name], kind):
                    raise BadRequest(f"{name} must be of type {kind.__name__}", param=name)
            if body.get("tool_choice") not in (None, "none", "auto", "required") and not isinstance(
                    body["tool_choice"], dict):
                raise BadRequest("tool_choice must be none, auto, required or an object", param="tool_choice")
        except BadRequest as exc:
            return wire.error_response(str(exc), exc.status, exc.param)
        faults = self.emulator.faults  # as on chat: the request waits, or fails, before it runs
        if faults.first_byte_delay:
            await asyncio.sleep(faults.first_byte_delay)
        if faults.error_status and self.emulator.rng.random() < faults.error_rate:
            return wire.error_response("injected fault", faults.error_status)
        store = body.get("store", True) is not False and self.store_enabled
        background = body.get("background") is True
        if background and not store:
            return wire.error_response("background can only be used when `store` is true", 400, "background")
        previous = body.get("previous_response_id")
        if previous is not None and previous not in self.history:
            return _not_found(str(previous))
        chat = responses_as_chat(body)
        messages = chat["messages"] = (self.history[previous] if previous is not None else []) + chat["messages"]
        try:
            seqs, gens, prompt_len = self.emulator.maker.sequences(chat, "chat")
        except ValueError as exc:
            return wire.error_response(str(exc), 400)
        rid = request.headers.get("x-request-id") or f"resp_{uuid.uuid4().hex}"
        run = _Run(self._response(rid, body, "queued" if background else "in_progress"), messages, seqs[0], gens[0],
                   prompt_len, _top_logprobs(body), include_reasoning=body.get("include_reasoning") is not False)
        self.emulator.get_engine().submit(run.seq)
        if store:
            self.stored[rid] = run.response
            self.history[rid] = messages
        if background:
            self.background[rid] = (asyncio.ensure_future(self._finish(run)), run)
            return JSONResponse(dict(run.response))
        if body.get("stream") is True:
            return StreamingResponse(self._events(run), media_type="text/event-stream")
        await self._finish(run)
        return JSONResponse(run.response)

    async def retrieve(self, request: Request) -> Response:
        rid = request.path_params["response_id"]
        response = self.stored.get(rid)
        if response is None:
            return _not_found(rid)
        if as_bool(request.query_params.get("stream")) is not True:  # a query bool, as FastAPI reads one
            return JSONResponse(response)
        after = request.query_params.get("starting_after", "-1")
        if not after.lstrip("-").isdigit():
            return wire.error_response("starting_after must be an integer", 400, "starting_after")
        if self.emulator.faults.first_byte_delay:  # as on create: the stream waits before its first byte
            await asyncio.sleep(self.emulator.faults.first_byte_delay)
        return StreamingResponse(self._replay(response, int(after)), media_type="text/event-stream")

    async def cancel(self, request: Request) -> Response:
        rid = request.path_params["response_id"]
        response = self.stored.get(rid)
        if response is None:
            return _not_found(rid)
        if not response["background"]:
            return wire.error_response("Cannot cancel a synchronous response.", 400)
        running = self.background.pop(rid, None)
        if running is not None and response["status"] not in _TERMINAL:
            task, run = running
            task.cancel()
            self.emulator.get_engine().abort(run.seq)
            response["status"] = "cancelled"
        return JSONResponse(response)

    # ------------------------------------------------------------ generation and shapes

    def _response(self, rid: str, body: dict[str, Any], status: str) -> dict[str, Any]:
        return {
            "id": rid, "created_at": int(time.time()), "incomplete_details": None,
            "instructions": body.get("instructions"), "metadata": body.get("metadata"),
            "model": self.emulator.config.model, "object": "response", "output": [],
            "parallel_tool_calls": body.get("parallel_tool_calls", True), "temperature": body.get("temperature"),
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
            "top_p": body.get("top_p"),
            "background": body.get("background") is True, "max_output_tokens": body.get("max_output_tokens"),
            "previous_response_id": body.get("previous_response_id"), "reasoning": body.get("reasoning"),
            "service_tier": "auto", "status": status, "text": body.get("text"),
            "top_logprobs": body.get("top_logprobs"), "truncation": "disabled", "usage": None, "user": body.get("user"),
        }

    async def _finish(self, run: _Run) -> None:
        """Wait for the engine to finish ``run`` (passing the spans it emits on to its listeners), then fill
        its response in."""
        response, seq = run.response, run.seq
        response["status"] = "in_progress"
        try:
            while True:
                kind, start, end = await next_event(seq)
                if kind == "finish":
                    break
                run.emitted = end
                for listener in run.listeners:
                    listener.put_nowait((start, end))
            self._fill(run)
        finally:
            for listener in run.listeners:
                listener.put_nowait(None)

    def _fill(self, run: _Run) -> None:
        response, seq = run.response, run.seq
        message = wire.chat_message(run.gen, seq.emitted, run.include_reasoning)
        response["output"] = run.items_at(seq.emitted)
        response["status"] = "incomplete" if seq.finish_reason == "length" else "completed"
        if response["status"] == "incomplete":
            response["incomplete_details"] = {"reason": "max_output_tokens"}
        response["usage"] = {"input_tokens": run.prompt_len, "input_tokens_details": {"cached_tokens": 0},
                             "output_tokens": seq.emitted, "output_tokens_details": {"reasoning_tokens": sum(
                                 t.channel == "reasoning" for t in seq.output[: seq.emitted])},
                             "total_tokens": run.prompt_len + seq.emitted}
        if response["id"] in self.history:
            self.history[response["id"]] = run.messages + [message]
        self.background.pop(response["id"], None)

    async def _events(self, run: _Run) -> AsyncIterator[bytes]:
        """vLLM's named SSE events, each output item's as its tokens come (``response_events``)."""
        faults = self.emulator.faults
        if faults.die_before_first_event:
            self.emulator.get_engine().abort(run.seq)
            raise ConnectionAbortedError("injected fault: the server dies during prefill")
        listener: asyncio.Queue[tuple[int, int] | None] = asyncio.Queue()
        run.listeners.append(listener)
        finished = asyncio.ensure_future(self._finish(run))
        sent = 0
        try:
            event = Numbered()
            for chunk in opened(event, run.response):
                yield chunk
            items = LiveItems(run, event)
            while (span := await listener.get()) is not None:
                for chunk in items.span(*span):
                    yield chunk
                sent += 1
                if faults.die_after_tokens is not None and sent >= faults.die_after_tokens:
                    raise ConnectionAbortedError("injected fault: stream dies")
            await finished  # its errors, if any, are the stream's
        finally:
            if not finished.done():
                finished.cancel()
                self.emulator.get_engine().abort(run.seq)
        for chunk in items.finish(run.response):
            yield chunk

    async def _replay(self, response: dict[str, Any], after: int) -> AsyncIterator[bytes]:
        """A stored response's events again, those numbered past ``after``: a finished
        one's at once (each item's text in one delta), a running background one's as
        vLLM streams it, what it has made so far and then each span as it comes."""
        running = self.background.get(response["id"])
        if running is None:
            for chunk in replayed(response, after):
                if chunk:
                    yield chunk
            return
        run = running[1]
        listener: asyncio.Queue[tuple[int, int] | None] = asyncio.Queue()
        run.listeners.append(listener)
        made = run.emitted  # read as the listener joins: every later span reaches it
        try:
            event = Numbered(after)  # what it leaves out (at or before ``after``) comes as b""
            items = LiveItems(run, event)
            for chunk in filter(None, [*opened(event, run.response), *items.span(0, made)]):
                yield chunk
            while (span := await listener.get()) is not None:
                for chunk in filter(None, items.span(*span)):
                    yield chunk
            for chunk in filter(None, items.finish(run.response)):
                yield chunk
        finally:
            run.listeners.remove(listener)


def _reasoning_id(message_id: str) -> str:
    return f"rs_{message_id.removeprefix('msg_')}"


def _top_logprobs(body: dict[str, Any]) -> int | None:
    """How many alternatives each output token's logprob lists, when the request asks for
    logprobs as vLLM reads it (``include`` names them; ``top_logprobs`` is the count)."""
    include = body.get("include")
    if not isinstance(include, list) or "message.output_text.logprobs" not in include:
        return None
    return body.get("top_logprobs") or 0


def _output_items(message_id: str, message: dict[str, Any],
                  logprobs: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """A chat message as Responses output items: reasoning, then the message, then its function calls."""
    items: list[dict[str, Any]] = []
    if message.get("reasoning"):
        items.append({"id": _reasoning_id(message_id), "type": "reasoning", "summary": [],
                      "content": [{"type": "reasoning_text", "text": message["reasoning"]}], "status": "completed"})
    if message.get("content") is not None:
        items.append({"id": message_id, "type": "message", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": message["content"], "annotations": [],
                                   "logprobs": logprobs}]})
    for call in message.get("tool_calls") or []:
        items.append({"id": f"fc_{call['id']}", "type": "function_call", "call_id": call["id"],
                      "name": call["function"]["name"], "arguments": call["function"]["arguments"],
                      "status": "completed"})
    return items
