"""The emulated vLLM OpenAI server as an ASGI app (Starlette).

Importable for in-process tests (``create_app``), and served by
``draftgate emulate`` under uvicorn. Routes mirror vLLM's: chat and text
completions (streamed and not), the Responses API (``draftgate/emulator/responses.py``),
Anthropic's Messages API (``draftgate/emulator/messages.py``),
models, health, metrics, tokenize, version, prefix cache reset; plus the debug routes of ``draftgate/emulator/debug.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from draftgate.emulator import truth, wire
from draftgate.emulator.debug import debug_routes
from draftgate.emulator.engine import Sequence, SpecConfig
from draftgate.emulator.faults import CutShort, Faults
from draftgate.emulator.messages import Messages
from draftgate.emulator.metrics import EngineMetrics
from draftgate.emulator.pacing import PacedEngine, next_event
from draftgate.emulator.profile import EngineProfile
from draftgate.emulator.request_fields import (
    BadRequest,
    check_cache_salt,
    check_sampling,
    check_structured_outputs,
    check_thinking_budget,
    typed,
)
from draftgate.emulator.responses import Responses
from draftgate.emulator.sequences import SequenceMaker
from draftgate.emulator.textgen import Generated
from draftgate.emulator.tokens import render_chat_prompt, token_id, tokenize

EMULATOR_NOTE = "draftgate vLLM emulator (no GPU; simulated timing and acceptance)"
EMULATED_VLLM_VERSION = "0.12.0+emulated"  # the API it mirrors (vLLM 0.12 and later)


@dataclass
class EmulatorConfig:
    model: str = "Qwen/Qwen3-32B"
    profile: EngineProfile = field(default_factory=EngineProfile)
    spec: SpecConfig | None = None
    per_request_metrics: str = "none"  # none | summary | detailed
    force_include_usage: bool = False
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    seed: int = 0
    time_scale: float = 1.0
    faults: Faults = field(default_factory=Faults)
    responses_store: bool = False  # vLLM's VLLM_ENABLE_RESPONSES_API_STORE
    # vLLM's --default-chat-template-kwargs: its enable_thinking is the template's default, which
    # a request's own switch overrides (Qwen3 thinks unless told {"enable_thinking": false})
    default_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)


def request_truth(seqs: list[Sequence]) -> dict[str, float]:
    """The ground truth of a request over its sequences (``truth.HEADER``)."""
    each = [s.truth() for s in seqs]
    return {"gpu_seconds": sum(t["gpu_seconds"] for t in each), "ttft": max(t["ttft"] for t in each),
            "tpot": max(t["tpot"] for t in each), "tokens": sum(t["tokens"] for t in each)}


class Emulator:
    """Request handling around one engine."""

    def __init__(self, config: EmulatorConfig) -> None:
        thinking = config.default_chat_template_kwargs.get("enable_thinking")
        if isinstance(thinking, bool):  # the server's template default, under each request's own switches
            config = replace(config, profile=config.profile.model_copy(update={"thinking_by_default": thinking}))
        self.config = config
        self.faults = config.faults
        self.metrics = EngineMetrics(config.model, config.spec.num_speculative_tokens if config.spec else 0)
        self.engine: PacedEngine | None = None
        self.maker = SequenceMaker(config)
        self.rng = self.maker.rng
        self.refuse_hook: Callable[[], None] | None = None
        # the last requests as received, for transparency tests
        self.received: deque[dict[str, Any]] = deque(maxlen=16)

    # ---------------------------------------------------------------- routes

    async def health(self, request: Request) -> Response:
        if self.faults.health_delay:
            await asyncio.sleep(self.faults.health_delay)
        if self.faults.health_503:
            return Response(status_code=503)
        return Response(status_code=200)

    async def models(self, request: Request) -> JSONResponse:
        entry = {"id": self.config.model, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                 "root": self.config.model, "parent": None, "max_model_len": self.get_engine().kv_capacity,
                 "permission": [], "emulated": True, "description": EMULATOR_NOTE}
        return JSONResponse({"object": "list", "data": [entry]})

    async def prometheus(self, request: Request) -> Response:
        if self.faults.metrics_delay:
            await asyncio.sleep(self.faults.metrics_delay)
        reported = self.faults.kv_usage
        self.metrics.kv_usage.set(self.get_engine().kv_usage if reported is None else reported)
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def reset_prefix_cache(self, request: Request) -> Response:
        self.get_engine().reset_prefix_cache()
        return Response(status_code=200)

    async def version(self, request: Request) -> JSONResponse:
        return JSONResponse({"version": EMULATED_VLLM_VERSION})

    async def tokenize(self, request: Request) -> JSONResponse:
        """vLLM's /tokenize: a prompt, or messages as the chat template renders them
        (the count is the ``prompt_tokens`` a chat with those messages reports)."""
        try:
            body = await self.read_object(request)
            if isinstance(body.get("messages"), list):
                text = render_chat_prompt(body["messages"], body.get("tools"))
            elif isinstance(body.get("prompt"), str):
                text = body["prompt"]
            else:
                raise BadRequest("either 'prompt' (a string) or 'messages' (a list) is required", param="prompt")
        except BadRequest as exc:
            return wire.error_response(str(exc), exc.status, exc.param)
        pieces = tokenize(text)
        answer = {"count": len(pieces), "max_model_len": self.get_engine().kv_capacity,
                  "tokens": [token_id(p) for p in pieces],
                  "token_strs": pieces if body.get("return_token_strs") is True else None}
        return CutShort(answer) if self.faults.cut_answer_short else JSONResponse(answer)

    async def chat(self, request: Request) -> Response:
        return await self._complete(request, "chat")

    async def completions(self, request: Request) -> Response:
        return await self._complete(request, "completions")

    # ---------------------------------------------------------------- core

    def get_engine(self) -> PacedEngine:
        """The engine, made on first use (the app's lifespan starts it)."""
        if self.engine is None:
            self.engine = PacedEngine(self.config.profile, self.config.spec,
                                      self.config.max_num_seqs or self.config.profile.max_num_seqs,
                                      self.config.max_num_batched_tokens, self.config.time_scale, self.metrics)
        return self.engine

    async def _complete(self, request: Request, endpoint: str) -> Response:
        try:
            body = self.checked(await self.read_object(request), endpoint)
        except BadRequest as exc:
            return wire.error_response(str(exc), exc.status, exc.param)
        return await self.generate(request, body, endpoint)

    async def generate(self, request: Request, body: dict[str, Any], endpoint: str) -> Response:
        """The answer to a checked chat or completions ``body`` (``checked``): whole, or
        as a stream; the Messages API's route converts it as vLLM does."""
        faults = self.faults
        if faults.first_byte_delay:
            await asyncio.sleep(faults.first_byte_delay)
        if faults.error_status and self.rng.random() < faults.error_rate:
            return wire.error_response("injected fault", faults.error_status)
        try:
            seqs, gens, prompt_len = self.maker.sequences(body, endpoint)
            for seq in seqs:
                self.get_engine().submit(seq)
        except ValueError as exc:
            return wire.error_response(str(exc), 400)
        # as vLLM names a request: after the caller's X-Request-Id when it sent one
        rid = ("chatcmpl-" if endpoint == "chat" else "cmpl-") + (request.headers.get("x-request-id")
                                                                 or uuid.uuid4().hex)
        if body.get("stream"):
            return StreamingResponse(self._stream(rid, body, endpoint, seqs, gens, prompt_len),
                                     media_type="text/event-stream")
        done = asyncio.ensure_future(asyncio.gather(*(self._wait(s) for s in seqs)))
        gone = asyncio.ensure_future(_disconnected(request))
        await asyncio.wait({done, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not done.done():
            for seq in seqs:
                self.get_engine().abort(seq)
            done.cancel()
            # a cancelled gather ends with an exception, logged as "never retrieved" unless read
            done.add_done_callback(lambda f: f.cancelled() or f.exception())
            return Response(status_code=499)
        gone.cancel()
        answer = self._final_body(rid, body, endpoint, seqs, gens, prompt_len)
        if faults.cut_answer_short:
            return CutShort(answer)
        return JSONResponse(answer, headers={truth.HEADER: truth.write(request_truth(seqs))})

    async def read_object(self, request: Request) -> dict[str, Any]:
        """A JSON object body naming this model (or none), as every POST route needs it."""
        # as vLLM checks it: the media type, in any case, and no header is no JSON
        if request.headers.get("content-type", "").lower().split(";", 1)[0].strip() != "application/json":
            raise BadRequest("Unsupported Media Type: Only 'application/json' is allowed")
        raw = await request.body()
        self.received.append({"body": raw.decode("utf-8", "replace"), "headers": dict(request.headers)})
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, a huge integer, deep nesting
            raise BadRequest(f"Invalid JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object")
        model = body.get("model")
        if model and model != self.config.model:  # vLLM serves an empty (or absent) name as its own model
            raise BadRequest(f"The model `{model}` does not exist.", 404, "model")
        return body

    def checked(self, body: dict[str, Any], endpoint: str) -> dict[str, Any]:
        """``body`` typed and checked as vLLM's request models check it; raises BadRequest."""
        body = typed(body, endpoint)
        if endpoint == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages or not all(
                    isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
                raise BadRequest("messages must be a non-empty list of objects with a role", param="messages")
        elif not isinstance(body.get("prompt"), (str, list)):
            raise BadRequest("prompt must be a string or a list", param="prompt")
        check_sampling(body, ("max_tokens", "max_completion_tokens"))
        check_structured_outputs(body)
        check_thinking_budget(body)
        check_cache_salt(body)
        n = body["n"] = 1 if body.get("n") is None else body["n"]
        if not 1 <= n <= 16:
            raise BadRequest("n must be an integer between 1 and 16", param="n")
        if body.get("tools") is not None and not isinstance(body["tools"], list):
            raise BadRequest("tools must be a list", param="tools")
        choice = body.get("tool_choice")
        if choice is not None and choice not in ("none", "auto", "required") and not (
                isinstance(choice, dict) and isinstance(choice.get("function"), dict)
                and isinstance(choice["function"].get("name"), str)):
            raise BadRequest("tool_choice must be none, auto, required or a named function", param="tool_choice")
        return body

    async def _wait(self, seq: Sequence) -> None:
        while True:
            kind, _, _ = await next_event(seq)
            if kind == "finish":
                return

    def _spec_metrics(self, seqs: list[Sequence]) -> dict[str, Any] | None:
        return wire.spec_metrics(seqs, self.config.per_request_metrics if self.config.spec is not None else "none")

    def _final_body(self, rid: str, body: dict[str, Any], endpoint: str, seqs: list[Sequence],
                    gens: list[Generated], prompt_len: int) -> dict[str, Any]:
        return wire.final_body(rid, self.config.model, body, endpoint, seqs, gens, prompt_len,
                               self._spec_metrics(seqs))

    async def _stream(self, rid: str, body: dict[str, Any], endpoint: str, seqs: list[Sequence],
                      gens: list[Generated], prompt_len: int) -> AsyncIterator[bytes]:
        created = int(time.time())
        obj = "chat.completion.chunk" if endpoint == "chat" else "text_completion"
        options = body.get("stream_options") or {}
        include_usage = options.get("include_usage") or self.config.force_include_usage
        want_logprobs = body.get("logprobs") is True if endpoint == "chat" else isinstance(body.get("logprobs"), int)
        top = (body.get("top_logprobs") or 0) if endpoint == "chat" else (body.get("logprobs") or 0)

        # vLLM's continuous_usage_stats: every chunk carries the usage so far (the Messages API asks for it)
        continuous = include_usage and options.get("continuous_usage_stats") is True

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            payload = {"id": rid, "object": obj, "created": created, "model": self.config.model,
                       "choices": choices, **extra}
            if continuous and "usage" not in extra:
                payload["usage"] = wire.usage(prompt_len, sent_tokens)
            return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"

        queue: asyncio.Queue[tuple[int, str, int, int]] = asyncio.Queue()

        async def pump(index: int, seq: Sequence) -> None:
            while True:
                kind, start, end = await next_event(seq)
                await queue.put((index, kind, start, end))
                if kind == "finish":
                    return

        pumps = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(seqs)]
        sent_tokens = 0
        try:
            if self.faults.die_before_first_event:
                raise ConnectionAbortedError("injected fault: the server dies during prefill")
            finished = 0
            announced: set[int] = set()
            while finished < len(seqs):
                index, kind, start, end = await queue.get()
                seq, gen = seqs[index], gens[index]
                if endpoint == "chat" and index not in announced:
                    # as vLLM does, the role chunk goes out with the first token, not before
                    announced.add(index)
                    yield chunk([{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                  "finish_reason": None}])
                if kind == "finish":
                    finished += 1
                    delta_key = "delta" if endpoint == "chat" else "text"
                    yield chunk([{"index": index, delta_key: {} if endpoint == "chat" else "", "logprobs": None,
                                  "finish_reason": seq.finish_reason, "stop_reason": None}])
                    continue
                logprobs = ({"content": wire.logprobs_content(seq, gen, start, end, top)} if want_logprobs else None)
                if endpoint == "chat":
                    for delta in wire.chat_deltas(gen, start, end, body.get("include_reasoning") is not False):
                        yield chunk([{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}])
                        logprobs = None
                else:
                    text = "".join(t.text for t in gen.tokens[start:end])
                    yield chunk([{"index": index, "text": text, "logprobs": logprobs, "finish_reason": None}])
                sent_tokens += end - start
                faults = self.faults
                if faults.malformed_chunk_after_tokens is not None and sent_tokens >= faults.malformed_chunk_after_tokens:
                    yield b'data: {"id": "broken", "choices": [\n\n'
                if faults.die_after_tokens is not None and sent_tokens >= faults.die_after_tokens:
                    raise ConnectionAbortedError("injected fault: stream dies")
            if include_usage:
                extra: dict[str, Any] = {"usage": wire.usage(prompt_len, sum(s.emitted for s in seqs))}
                metrics = self._spec_metrics(seqs)
                if metrics is not None:
                    extra["metrics"] = metrics
                yield chunk([], **extra)
            yield b"data: [DONE]\n\n"
            if self.faults.linger_after_done:
                await asyncio.sleep(self.faults.linger_after_done)
        finally:
            for p in pumps:
                p.cancel()
            for seq in seqs:
                if not seq.finished:
                    self.get_engine().abort(seq)


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def create_app(config: EmulatorConfig) -> Starlette:
    """The emulated server as an ASGI app; its engine starts with the app."""
    emulator = Emulator(config)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        engine = emulator.get_engine()
        engine.start()
        try:
            yield
        finally:
            await engine.stop()

    app = Starlette(
        routes=[
            Route("/health", emulator.health, methods=["GET"]),
            Route("/v1/models", emulator.models, methods=["GET"]),
            Route("/metrics", emulator.prometheus, methods=["GET"]),
            Route("/v1/chat/completions", emulator.chat, methods=["POST"]),
            Route("/v1/completions", emulator.completions, methods=["POST"]),
            Route("/tokenize", emulator.tokenize, methods=["POST"]),
            Route("/version", emulator.version, methods=["GET"]),
            Route("/reset_prefix_cache", emulator.reset_prefix_cache, methods=["POST"]),
            *Responses(emulator, config.responses_store).routes(),
            *Messages(emulator).routes(),
            *debug_routes(emulator),
        ],
        # vLLM's defaults (--allowed-origins, --allowed-methods, --allowed-headers all "*"):
        # browsers' preflights are answered, and answers carry access-control-allow-origin
        middleware=[Middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["*"], allow_headers=["*"])],
        exception_handlers={HTTPException: _routing_error},
        lifespan=lifespan,
    )
    app.state.emulator = emulator
    return app


async def _routing_error(request: Request, exc: Exception) -> Response:
    """An unknown path's 404 and a wrong method's 405, as vLLM's FastAPI app answers them:
    its own handler is for FastAPI's HTTPException, so routing's fall to FastAPI's default."""
    assert isinstance(exc, HTTPException)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
