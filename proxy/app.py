"""The draftgate HTTP service: an OpenAI-compatible gate in front of vLLM pools.

Chat and text completions are gated; every other ``/v1/*`` request passes
through to a plain pool. The request body reaches the backend byte for byte;
headers pass except hop-by-hop ones; responses come back unchanged, plus
three ``x-draftgate-*`` headers.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response, StreamingResponse

from policy.structure import chat_completion, chat_view
from policy.vllm_fields import as_bool, streams, wants_usage
from proxy.auth import bearer_token, token_matches
from proxy.catalog import ModelCatalog
from proxy.config import ConfigError, ProxySettings
from proxy.cors import CorsForOwnAnswers, CorsPolicy
from proxy.disconnect import ClientGone, cancelled_if_client_leaves
from proxy.errors import openai_error, stream_error_event
from proxy.forwarding import (
    NoCapacity,
    Upstream,
    UpstreamUnavailable,
    count_failed_answer,
    downstream_headers,
    send_with_failover,
    upstream_target,
)
from proxy.gatekeeper import Gatekeeper, Plan, explained_as
from proxy.hot_routes import HotRoutes
from proxy.monitor import Monitor
from proxy.observe import Observation, parse_json
from proxy.passthrough import PassThrough, has_dot_segment
from proxy.recorder import Recorder
from proxy.relay import relay_events
from proxy.request_body import BadRequest, read_body, read_json, validate
from proxy.shutdown import Shutdown, shutting_down_error, shutting_down_event
from proxy.stored_responses import (
    CREATE_PATH,
    SNIFF_BYTES,
    ResponseHolders,
    continued_response_id,
    stored,
)
from proxy.upstream import UpstreamAborted, UpstreamClient, UpstreamError

log = logging.getLogger("draftgate.proxy")

# vLLM serves these beside /v1 (clients count tokens with /tokenize before they
# send); the proxy passes them through as it does the rest of /v1. Not
# /invocations: it is SageMaker's door to the gated routes, and would bypass the gate.
VLLM_ROUTES_OUTSIDE_V1 = ("/tokenize", "/detokenize", "/version", "/pooling", "/classify", "/score", "/rerank",
                          "/v2/rerank")


class Proxy:
    """Request handling; one instance per app."""

    def __init__(self, settings: ProxySettings, reload_settings: Callable[[], ProxySettings] | None = None) -> None:
        self.gk = Gatekeeper(settings)
        self.started_with = settings  # what a reload cannot change stays as it was here
        self.reload_settings = reload_settings
        # one trust for https pools, on the hot path and off it (read at startup)
        tls = settings.upstream_tls()
        self.upstream = UpstreamClient(tls)  # the hot path (see proxy/upstream.py for why not httpx)
        self.client = httpx.AsyncClient(timeout=10.0, verify=tls)  # health checks, scrapes, model lists
        self.recorder = Recorder(self.gk)
        self.monitor = Monitor(self.gk.pools, self.client, lambda: self.gk.settings, on_scrape=self.recorder.on_scrape,
                               on_replicas_changed=self.forget_gone_replicas)
        self.catalog = ModelCatalog(self.gk.pools, self.client)
        self.holders = ResponseHolders(settings.response_holders_capacity)
        self.pass_through = PassThrough(self.gk, self.upstream, self.catalog, self.holders)
        self.shutdown = Shutdown(self.upstream)
        self.recorder.warn_if_attribution_unsound()

    # ------------------------------------------------------------ gated routes

    async def chat(self, request: Request) -> Response:
        return await self._gated(request, "chat", "/v1/chat/completions")

    async def completions(self, request: Request) -> Response:
        return await self._gated(request, "completions", "/v1/completions")

    async def responses(self, request: Request) -> Response:
        """The Responses API: gated as the chat completion it amounts to (``policy.structure.responses_api``)
        when ``gate_responses`` says so, else passed through like the other /v1 routes."""
        if not self.gk.settings.gate_responses:
            return await self.passthrough(request)
        return await self._gated(request, "responses", CREATE_PATH)

    async def _gated(self, request: Request, endpoint: str, path: str) -> Response:
        started = time.perf_counter()
        try:
            self._authorize(request)
            raw, body = await read_json(request, *self._body_limits())
            validate(body, endpoint)
            await self.catalog.check(body)
            if endpoint == "responses" and (continued_response_id(body) or as_bool(body.get("background"))):
                # State decides where these go (the holder of the response continued), or
                # the answer is fetched later, past the proxy's sight: nothing to gate.
                return await self.pass_through(request, raw, body)
            plan = self._plan(chat_view(body) if endpoint == "responses" else body, endpoint)
        except BadRequest as exc:
            # no model label: a rejected request's model name is whatever the client typed
            self.gk.metrics.requests.labels(model="", route="none", status=str(exc.status)).inc()
            return exc.response()
        self.gk.metrics.decisions.labels(model=self.gk.metrics.model_label(plan.model), route=plan.decision.route,
                                         reason=self.gk.decision_reason(plan)).inc()
        overhead = time.perf_counter() - started
        request_id = request.headers.get("x-request-id")  # headers already parsed by read_json
        observation = Observation(request_id=request_id[:128] if request_id else None,
                                  reshape=chat_completion if endpoint == "responses" else None)
        try:
            # until a stream's first event the client has nothing either: it may leave meanwhile
            async with cancelled_if_client_leaves(request.receive):
                return await self._answer(request, path, raw, plan, observation, overhead)
        except ClientGone:
            return Response(status_code=499)

    def _plan(self, body: dict[str, Any], endpoint: str) -> Plan:
        model = body.get("model")
        serving = self.catalog.pools_serving(model)
        try:
            return self.gk.plan(body, endpoint, serving, context=self.catalog.context_of(model))
        except Exception as exc:  # a bug in the gate must not lose the request
            log.exception("the gate failed on a request; routing it to a plain pool")
            self.gk.metrics.gate_errors.inc()
            return self.gk.fallback_plan(body, endpoint, exc, serving)

    async def _answer(self, request: Request, path: str, raw: bytes, plan: Plan, observation: Observation,
                      overhead: float) -> Response:
        """Send upstream, failing over as needed, and answer: relayed as a stream, or whole."""
        gk = self.gk
        prefer = (plan.affinity.placement.pool, plan.affinity.placement.replica) if plan.affinity else None
        streamed = streams(plan.body)
        try:
            upstream = await send_with_failover(gk, self.upstream, "POST", upstream_target(request.scope, path),
                                                request.scope["headers"], raw, plan.order, prefer, plan.model,
                                                until="first_event" if streamed else "end", streamed=streamed)
        except NoCapacity:
            self.recorder.finish(plan, None, observation, 503, overhead)
            return openai_error(503, "all pools are at capacity; retry shortly", code="overloaded",
                                headers={"retry-after": "1", **plan.headers()})
        except UpstreamUnavailable as exc:
            self.recorder.finish(plan, None, observation, exc.status, overhead)
            return openai_error(exc.status, f"no pool could serve the request: {exc}", code="upstream_unavailable")
        except UpstreamAborted:
            self.recorder.finish(plan, None, observation, 503, overhead)
            return shutting_down_error()
        except asyncio.CancelledError:
            self.recorder.finish(plan, None, observation, 499, overhead)
            raise
        observation.failovers = upstream.failovers
        headers = downstream_headers(upstream.response.headers) + _raw(plan.headers(upstream.pool.name))
        if streamed and upstream.response.status_code == 200:
            strip = not wants_usage(plan.body)
            stream = StreamingResponse(self._stream(plan, upstream, observation, strip, overhead), status_code=200)
            stream.raw_headers = headers
            return stream
        return await self._whole(plan, upstream, observation, headers, overhead)

    async def _whole(self, plan: Plan, upstream: Upstream, observation: Observation,
                     headers: list[tuple[bytes, bytes]], overhead: float) -> Response:
        resumed = time.perf_counter()
        status = upstream.response.status_code
        content = upstream.content or b""  # read to its end while it could still fail over
        await upstream.response.aclose()
        observation.first_byte_at = observation.finished_at = time.perf_counter()
        response = Response(content=content, status_code=status)  # sets content-length
        response.raw_headers += headers
        overhead += time.perf_counter() - resumed
        if status == 200:
            self._remember_holder(plan, upstream, content)
        if status == 200 and "content-encoding" not in upstream.response.headers:
            observation.unread_answer = content
            observation.complete = True
        # What the response taught us is recorded after it has gone to the client:
        # none of it is the client's latency. (A BackgroundTask runs a coroutine on the
        # event loop; a plain function would go to a worker thread, racing the loop over
        # the learner and the metrics.)
        response.background = BackgroundTask(self._settle, plan, upstream, observation, status, overhead)
        return response

    async def _settle(self, plan: Plan, upstream: Upstream, observation: Observation, status: int,
                      overhead: float) -> None:
        """Read the answer a response ended with, once it has gone to the client; then record and release."""
        try:
            await observation.feed_unread_answer()
        except Exception:  # the answer has gone; only what it would have taught us is lost
            log.exception("reading a finished answer failed")
        finally:  # the replica is released whatever happens to the reading
            self._finish(plan, upstream, observation, status, overhead)

    def _remember_holder(self, plan: Plan, upstream: Upstream, head: bytes) -> None:
        """Note which replica stores the response an answer begins, before the client has its
        id: a follow-up sent the moment it has must find the holder without a lookup."""
        if plan.endpoint == "responses" and stored(plan.body):
            self.holders.remember_from_answer(head[:SNIFF_BYTES], upstream.pool.name, upstream.replica.url)

    def _finish(self, plan: Plan, upstream: Upstream, observation: Observation, status: int,
                overhead: float) -> None:
        try:
            # observe before releasing: attribution windows close only when nothing is in flight
            self.recorder.finish(plan, upstream, observation, status, overhead)
        except Exception:  # the answer has gone; only what it would have taught us is lost
            log.exception("recording a finished request failed")
        finally:
            self.gk.pools.release(upstream.replica)

    async def _stream(self, plan: Plan, upstream: Upstream, observation: Observation, strip_usage: bool,
                      overhead: float) -> AsyncIterator[bytes]:
        status = 200
        relayed = 0  # events: a Responses stream numbers them from 0, and an error must come next
        try:
            async for events in relay_events(upstream.response.aiter_raw(), observation, strip_usage):
                if observation.first_byte_at is None:
                    observation.first_byte_at = time.perf_counter()
                    self._remember_holder(plan, upstream, events[0])
                relayed += len(events)
                yield b"".join(events)
            if observation.complete:
                upstream.replica.answered()
        except UpstreamError as exc:
            status = 502
            self.gk.metrics.upstream_errors.labels(pool=upstream.pool.name, kind="mid_stream").inc()
            count_failed_answer(self.gk, upstream.pool, upstream.replica)
            yield stream_error_event(502, f"upstream failed mid-stream: {type(exc).__name__}",
                                     relayed if plan.endpoint == "responses" else None)
        except UpstreamAborted:
            status = 503
            yield shutting_down_event(relayed if plan.endpoint == "responses" else None)
        except asyncio.CancelledError:
            status = 499
            raise
        finally:
            observation.finished_at = time.perf_counter()
            await upstream.response.aclose()
            if status == 200 and not observation.complete:
                status = 499
            if observation.unread_answer is None:
                self._finish(plan, upstream, observation, status, overhead)
            else:
                # the stream's end goes to the client once this generator returns, and that
                # must not wait for a 10 MB reading; the task releases the replica when done
                self.shutdown.settle_later(self._settle(plan, upstream, observation, status, overhead))

    # ------------------------------------------------------------ checks

    def _body_limits(self) -> tuple[int, float]:
        """How much of a request body the proxy reads, and how long it waits on a pause in it."""
        settings = self.gk.settings
        return settings.max_body_bytes, settings.client_body_timeout

    def _authorize(self, request: Request) -> None:
        keys = self.gk.settings.api_keys
        if not keys or request.method == "OPTIONS":
            # a browser's CORS preflight carries no credentials; vLLM's key check lets it by too
            return
        if not token_matches(bearer_token(request.headers.get("authorization", "")), keys):
            raise BadRequest(401, "invalid or missing API key", code="invalid_api_key")

    # ------------------------------------------------------------ other routes

    async def models(self, request: Request) -> Response:
        try:
            self._authorize(request)  # as vLLM guards every /v1 route with its key
        except BadRequest as exc:
            return exc.response()
        data = await self.catalog.refresh()
        if not data:
            return openai_error(503, "no pool answered /v1/models", code="upstream_unavailable")
        return JSONResponse({"object": "list", "data": data})

    async def passthrough(self, request: Request) -> Response:
        """Other /v1/* requests, and vLLM's own routes outside /v1, go to a plain pool
        that serves the model they name, with the same failover."""
        try:
            # the key first: a client without one learns nothing of which paths exist
            self._authorize(request)
            if has_dot_segment(request.scope["path"]):
                raise BadRequest(404, "Not Found: a path with '.' or '..' segments names no route")
            raw = await read_body(request, *self._body_limits())
        except BadRequest as exc:
            return exc.response()
        return await self.pass_through(request, raw, parse_json(raw) if raw else None)

    async def explain(self, request: Request) -> Response:
        try:
            self._authorize(request)
            _, body = await read_json(request, *self._body_limits())
            if not isinstance(body, dict):
                raise BadRequest(400, "request body must be a JSON object")
            await self.catalog.keep_fresh(body.get("model"))  # the model's context bounds the estimate
            return JSONResponse(self.gk.explanation(self._plan(*explained_as(body))))
        except BadRequest as exc:
            return exc.response()

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        # Health checks decide, not ejections: a proxy whose pools all fail their answers
        # still forwards, and its clients are better served by those answers than by a
        # Service that has dropped every proxy for being unready.
        healthy = {p.name: sum(r.healthy for r in p.replicas.values()) for p in self.gk.pools}
        ejected = {p.name: sum(r.healthy and not r.in_rotation for r in p.replicas.values()) for p in self.gk.pools}
        status = 200 if any(healthy.values()) else 503
        return JSONResponse({"ready": status == 200, "healthy_replicas": healthy, "ejected_replicas": ejected},
                            status_code=status)

    async def metrics(self, request: Request) -> Response:
        self.recorder.refresh_gauges()
        return Response(generate_latest(self.gk.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def reload(self, request: Request) -> Response:
        token = self.gk.settings.admin_token
        if token is None:
            return openai_error(403, "reload is disabled: set admin_token in the configuration")
        if not token_matches(bearer_token(request.headers.get("authorization", "")), [token]):
            return openai_error(401, "invalid admin token", code="invalid_admin_token")
        try:
            pending = self.do_reload()
        except ConfigError as exc:
            return openai_error(400, str(exc), code="invalid_configuration")
        return JSONResponse({"reloaded": True, "pools": [p.name for p in self.gk.pools], "restart_needed": pending})

    def cors_policy(self) -> CorsPolicy:
        """The CORS settings now in force (a reload changes them)."""
        settings = self.gk.settings
        return CorsPolicy(settings.allowed_origins, settings.allow_credentials)

    def do_reload(self) -> list[str]:
        """Apply the configuration file as it is now; returns the changed keys that
        only a restart applies (compared with what the proxy started with)."""
        if self.reload_settings is None:
            raise ConfigError("this proxy was started without a configuration file to reload")
        settings = self.reload_settings()
        self.gk.reload(settings)
        self.forget_gone_replicas()
        pending = settings.restart_needed(self.started_with)
        if pending:
            log.warning("configuration reloaded, but %s changed and take effect only at restart", ", ".join(pending))
        else:
            log.info("configuration reloaded")
        return pending

    def forget_gone_replicas(self) -> None:
        """Drop what is kept per replica URL for URLs no pool has any more."""
        live = {url for pool in self.gk.pools for url in pool.replicas}
        self.upstream.keep_only(live)
        self.recorder.keep_only(live)


def _raw(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


def create_app(settings: ProxySettings,
               reload_settings: Callable[[], ProxySettings] | None = None) -> CorsForOwnAnswers:
    proxy = Proxy(settings, reload_settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        proxy.monitor.start()
        proxy.shutdown.loop = loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGHUP, _sighup, proxy)
        except (ValueError, RuntimeError, NotImplementedError):
            pass  # not the main thread (in-process tests): reload via the endpoint
        try:
            yield
        finally:
            await proxy.shutdown.wait_for_settling()
            await proxy.monitor.stop()
            await proxy.client.aclose()
            proxy.upstream.close()

    app = FastAPI(title="draftgate", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.add_api_route("/v1/models", proxy.models, methods=["GET"])
    # HEAD too: some load balancers' health checks send it
    app.add_api_route("/health", proxy.health, methods=["GET", "HEAD"])
    app.add_api_route("/ready", proxy.ready, methods=["GET", "HEAD"])
    app.add_api_route("/metrics", proxy.metrics, methods=["GET"])
    app.add_api_route("/draftgate/explain", proxy.explain, methods=["POST"])
    app.add_api_route("/draftgate/reload", proxy.reload, methods=["POST"])
    for path in ("/v1/{rest:path}", *VLLM_ROUTES_OUTSIDE_V1):
        # OPTIONS: browsers' CORS preflights, answered by a pool as its --allowed-origins say
        app.add_api_route(path, proxy.passthrough, methods=["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # routing's own 404 and 405, in the shape of every other error the proxy sends
        return openai_error(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error", extra={"path": request.url.path})
        return openai_error(500, "internal error in draftgate; the request was not forwarded")

    app.state.proxy = proxy
    gated = HotRoutes(app, {"/v1/chat/completions": proxy.chat, "/v1/completions": proxy.completions,
                            CREATE_PATH: proxy.responses})
    return CorsForOwnAnswers(gated, proxy.cors_policy)


def _sighup(proxy: Proxy) -> None:
    try:
        proxy.do_reload()
    except ConfigError as exc:
        log.error("reload failed, keeping the previous configuration: %s", exc)
