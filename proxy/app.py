"""The draftgate HTTP service: an OpenAI-compatible gate in front of vLLM pools.

Chat Completions, Completions, the Responses API and Anthropic's Messages API
are gated; every other ``/v1/*`` request passes through to a plain pool. The request body reaches the backend byte for
byte (but a ``draftgate_mode`` field, which is the proxy's: ``proxy/callers.py``);
headers pass except hop-by-hop ones; responses come back unchanged, plus
the ``x-draftgate-*`` headers that say what the gate decided.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, PlainTextResponse, Response

from draftgate.policy.vllm_fields import streams, wants_usage
from draftgate.proxy import __version__, admin
from draftgate.proxy.auth import bearer_token, token_matches
from draftgate.proxy.callers import Caller, authenticated_key, caller_of, without_mode_field
from draftgate.proxy.catalog import ModelCatalog
from draftgate.proxy.config import ApiKey, ConfigError, ProxySettings
from draftgate.proxy.cors import CorsForOwnAnswers, CorsPolicy
from draftgate.proxy.disconnect import ClientGone, cancelled_if_client_leaves
from draftgate.proxy.endpoints import GATED, Endpoint, endpoint_of_body, error_shape_of
from draftgate.proxy.errors import openai_error
from draftgate.proxy.exchange import Exchange, Outgoing, Upstreams, answer
from draftgate.proxy.fleet_planning import FleetPlanning
from draftgate.proxy.headers import upstream_target
from draftgate.proxy.hot_routes import HotRoutes
from draftgate.proxy.metrics import ProxyMetrics
from draftgate.proxy.monitor import Monitor
from draftgate.proxy.observe import Observation, parse_json
from draftgate.proxy.passthrough import PassThrough, has_dot_segment
from draftgate.proxy.planner import Planner, RequestPlan, load_calibration_or_defaults
from draftgate.proxy.recorder import Outcome, Recorder
from draftgate.proxy.request_body import BadRequest, read_body, read_json
from draftgate.proxy.shared_state import SharedState
from draftgate.proxy.shutdown import Shutdown
from draftgate.proxy.stored_responses import SNIFF_BYTES, ResponseHolders
from draftgate.proxy.traffic_record import TrafficRecord
from draftgate.proxy.upstream import UpstreamClient

log = logging.getLogger("draftgate.proxy")

# vLLM serves these beside /v1 (clients count tokens with /tokenize before they
# send); the proxy passes them through as it does the rest of /v1. Not
# /invocations: it is SageMaker's door to the gated routes, and would bypass the gate.
VLLM_ROUTES_OUTSIDE_V1 = ("/tokenize", "/detokenize", "/version", "/pooling", "/classify", "/score", "/rerank",
                          "/v2/rerank")


class Proxy:
    """The service's parts, and the handlers of its routes; one instance per app.

    Each part owns one thing: ``upstreams`` the pools, their replicas and the
    client that reaches them; ``planner`` what the gate knows and decides;
    ``recorder`` what finished requests are recorded as; ``monitor`` the
    background health checks and scrapes; ``catalog`` which pool serves which
    model; ``holders`` which replica stores which Responses answer; ``shared``
    the store proxy replicas share, when one is configured; ``shutdown`` how
    stopping ends what still runs. One request's life, lease to release,
    is an ``Exchange`` (``proxy/exchange.py``).
    """

    def __init__(self, settings: ProxySettings, reload_settings: Callable[[], ProxySettings] | None = None) -> None:
        self.settings = settings
        self.started_with = settings  # what a reload cannot change stays as it was here
        self.reload_settings = reload_settings
        self.metrics = ProxyMetrics()
        # one client and one trust for https pools, for every call upstream (read at startup)
        self.client = UpstreamClient(settings.tls.upstream_context())
        self.shutdown = Shutdown(self.client)
        self.upstreams = Upstreams(settings, self.client, self.metrics, self.shutdown)
        pools = self.upstreams.pools
        # the store proxy replicas share, if one is configured (read at startup)
        self.shared = SharedState(settings, self.metrics) if settings.shared_state.address else None
        if self.shared is not None:
            self.upstreams.on_eject = self.shared.eject
        self.planner = Planner(settings, pools, self.metrics, self.shared)
        self.traffic_record = _traffic_record(settings)
        self.recorder = Recorder(self.planner, pools, self.metrics, self.traffic_record)
        self.monitor = Monitor(pools, self.client, lambda: self.settings, on_scrape=self.recorder.on_scrape,
                               on_replicas_changed=self.forget_gone_replicas, shared=self.shared)
        self.planning = FleetPlanning(self.planner, self.metrics, lambda: self.settings)
        self.catalog = ModelCatalog(pools, self.client)
        self.holders = ResponseHolders(settings.response_holders_capacity)
        self.pass_through = PassThrough(self.upstreams, self.catalog, self.holders)
        self.recorder.warn_if_attribution_unsound()

    # ------------------------------------------------------------ gated routes

    def gated(self, endpoint: Endpoint) -> Callable[[Request], Awaitable[Response]]:
        """The handler of a gated endpoint's route."""
        async def handle(request: Request) -> Response:
            return await self._gated(request, endpoint)
        return handle

    async def _gated(self, request: Request, endpoint: Endpoint) -> Response:
        if not endpoint.gated_by(self.settings):
            self.metrics.passed_through.labels(endpoint=endpoint.name, reason="configuration").inc()
            return await self.passthrough(request)
        started = time.perf_counter()
        try:
            key = self._authorize(request)
            raw, body = await read_json(request, *self._body_limits())
            endpoint.check(body)
            caller = caller_of(key, request.headers, body)
            await self.catalog.check(body)
            raw = without_mode_field(raw, body)
            if reason := endpoint.not_gated(body):
                self.metrics.passed_through.labels(endpoint=endpoint.name, reason=reason).inc()
                return await self.pass_through(request, raw, body)
            plan = await self._plan(endpoint.gate_view(body), endpoint.name, caller)
        except BadRequest as exc:
            # no model label: a rejected request's model name is whatever the client typed
            self.metrics.requests.labels(model="", route="none", status=str(exc.status), endpoint=endpoint.name,
                                         key="").inc()
            return exc.response(endpoint.error)
        self.metrics.decisions.labels(model=self.metrics.model_label(plan.model), route=plan.decision.route,
                                      reason=Planner.decision_reason(plan), key=caller.label).inc()
        request_id = request.headers.get("x-request-id")  # headers already parsed by read_json
        observation = Observation(request_id=request_id[:128] if request_id else None, reshape=endpoint.reshape)
        outcome = Outcome(plan, 200, observation, time.perf_counter() - started, sent=body)
        prefer = (plan.affinity.placement.pool, plan.affinity.placement.replica) if plan.affinity else None
        exchange = Exchange(self.upstreams,
                            Outgoing("POST", upstream_target(request.scope, endpoint.path), request.scope["headers"],
                                     raw),
                            plan.order, model=plan.model, prefer=prefer, streamed=streams(plan.body),
                            observation=observation, on_end=lambda ended, status: self._record(outcome, ended, status))

        def respond() -> Response:
            resumed = time.perf_counter()
            response = self._respond(plan, endpoint, exchange)
            outcome.overhead += time.perf_counter() - resumed
            return response

        def refused(status: int) -> None:
            outcome.status = status
            self.recorder.record(outcome)

        try:
            # until a stream's first event the client has nothing either: it may leave meanwhile
            async with cancelled_if_client_leaves(request.receive):
                return await answer(exchange, "first_event" if exchange.streamed else "end", respond, refused,
                                    headers=plan.headers(), shape=endpoint.error)
        except ClientGone:
            return Response(status_code=499)

    async def _plan(self, body: dict[str, Any], endpoint: str, caller: Caller) -> RequestPlan:
        model = body.get("model")
        serving = self.catalog.pools_serving(model)
        context = self.catalog.context_of(model)
        try:
            reading = self.planner.read(body, endpoint, context)
            await self.planner.pull(reading)
            return self.planner.plan(body, endpoint, serving, context=context, caller=caller, reading=reading)
        except Exception as exc:  # a bug in the gate must not lose the request
            log.exception("the gate failed on a request; routing it to a plain pool")
            self.metrics.gate_errors.inc()
            return self.planner.fallback_plan(body, endpoint, exc, serving, caller)

    def _respond(self, plan: RequestPlan, endpoint: Endpoint, exchange: Exchange) -> Response:
        """The answer to the client, relayed as a stream or whole."""
        assert exchange.response is not None and exchange.pool is not None and exchange.replica is not None
        exchange.observation.failovers = exchange.failovers
        headers = _raw(plan.headers(exchange.pool.name))
        pool, replica = exchange.pool.name, exchange.replica.url
        ok = exchange.response.status_code == 200
        # Note which replica stores the response an answer begins, before the client has its
        # id: a follow-up sent the moment it has must find the holder without a lookup.
        stores = ok and endpoint.stores_answer(plan.body)
        if exchange.streamed and ok:
            remember = (lambda head: self.holders.remember_from_answer(head[:SNIFF_BYTES], pool, replica)) \
                if stores else None
            return exchange.events(headers, strip_usage=not wants_usage(plan.body), stream_error=endpoint.stream_error,
                                   on_first=remember)
        if stores:
            self.holders.remember_from_answer((exchange.content or b"")[:SNIFF_BYTES], pool, replica)
        return exchange.whole(headers)

    def _record(self, outcome: Outcome, exchange: Exchange, status: int) -> None:
        outcome.status, outcome.pool, outcome.replica = status, exchange.pool, exchange.replica
        self.recorder.record(outcome)

    # ------------------------------------------------------------ checks

    def _body_limits(self) -> tuple[int, float]:
        """How much of a request body the proxy reads, and how long it waits on a pause in it."""
        return self.settings.max_body_bytes, self.settings.timeouts.client_body

    def _authorize(self, request: Request) -> ApiKey | None:
        """The configured key the request carries (None when the proxy has none); 401 without one."""
        keys = self.settings.api_keys
        if not keys or request.method == "OPTIONS":
            # a browser's CORS preflight carries no credentials; vLLM's key check lets it by too
            return None
        return authenticated_key(request.headers, keys)

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
            return exc.response(error_shape_of(request.scope["path"]))
        return await self.pass_through(request, raw, parse_json(raw) if raw else None)

    async def explain(self, request: Request) -> Response:
        try:
            key = self._authorize(request)
            _, body = await read_json(request, *self._body_limits())
            if not isinstance(body, dict):
                raise BadRequest(400, "request body must be a JSON object")
            await self.catalog.keep_fresh(body.get("model"))  # the model's context bounds the estimate
            endpoint = endpoint_of_body(body)
            caller = caller_of(key, request.headers, body)
            plan = await self._plan(endpoint.gate_view(body), endpoint.name, caller)
            explanation = admin.Explanation(**self.planner.explanation(plan, gated=endpoint.gated_by(self.settings)))
            return JSONResponse(explanation.model_dump(mode="json"))
        except BadRequest as exc:
            return exc.response()

    async def health(self, request: Request) -> Response:
        return JSONResponse(admin.Health(status="ok").model_dump())

    async def ready(self, request: Request) -> Response:
        # Health checks decide, not ejections: a proxy whose pools all fail their answers
        # still forwards, and its clients are better served by those answers than by a
        # Service that has dropped every proxy for being unready.
        pools = self.upstreams.pools
        healthy = {p.name: sum(r.healthy for r in p.replicas.values()) for p in pools}
        ejected = {p.name: sum(r.healthy and not r.in_rotation for r in p.replicas.values()) for p in pools}
        status = 200 if any(healthy.values()) else 503
        readiness = admin.Readiness(ready=status == 200, healthy_replicas=healthy, ejected_replicas=ejected)
        return JSONResponse(readiness.model_dump(), status_code=status)

    async def metrics_page(self, request: Request) -> Response:
        self.recorder.refresh_gauges()
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def reload(self, request: Request) -> Response:
        token = self.settings.admin_token
        if token is None:
            return openai_error(403, "reload is disabled: set admin_token in the configuration")
        if not token_matches(bearer_token(request.headers.get("authorization", "")), [token]):
            return openai_error(401, "invalid admin token", code="invalid_admin_token")
        try:
            pending = self.do_reload()
        except ConfigError as exc:
            return openai_error(400, str(exc), code="invalid_configuration")
        reloaded = admin.Reloaded(reloaded=True, pools=[p.name for p in self.upstreams.pools], restart_needed=pending)
        return JSONResponse(reloaded.model_dump())

    def cors_policy(self) -> CorsPolicy:
        """The CORS settings now in force (a reload changes them)."""
        return CorsPolicy(self.settings.cors.allowed_origins, self.settings.cors.allow_credentials)

    def do_reload(self) -> list[str]:
        """Apply the configuration file as it is now; returns the changed keys that
        only a restart applies (compared with what the proxy started with)."""
        if self.reload_settings is None:
            raise ConfigError("this proxy was started without a configuration file to reload")
        settings = self.reload_settings()
        calibration = load_calibration_or_defaults(settings)  # a bad file raises before anything changes
        self.settings = settings
        self.upstreams.reload(settings)
        self.planner.reload(settings, calibration)
        self.forget_gone_replicas()
        pending = settings.restart_needed(self.started_with)
        if pending:
            log.warning("configuration reloaded, but %s changed and take effect only at restart", ", ".join(pending))
        else:
            log.info("configuration reloaded")
        return pending

    def forget_gone_replicas(self) -> None:
        """Drop what is kept per replica URL for URLs no pool has any more."""
        live = {url for pool in self.upstreams.pools for url in pool.replicas}
        self.client.keep_only(live)
        self.recorder.keep_only(live)


def _traffic_record(settings: ProxySettings) -> TrafficRecord | None:
    """The traffic file ``record_traffic`` names, open for appending (read at startup)."""
    if settings.record_traffic is None:
        return None
    try:
        return TrafficRecord(settings.record_traffic)
    except OSError as exc:
        raise ConfigError(f"record_traffic: cannot write {settings.record_traffic.path}: {exc.strerror}") from None


def _raw(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


def create_app(settings: ProxySettings,
               reload_settings: Callable[[], ProxySettings] | None = None) -> CorsForOwnAnswers:
    proxy = Proxy(settings, reload_settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await proxy.monitor.first_look()  # uvicorn takes connections only once this returns
        proxy.monitor.start()
        proxy.planning.start()
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
            await proxy.planning.stop()
            if proxy.shared is not None:
                await proxy.shared.close()
            if proxy.traffic_record is not None:
                proxy.traffic_record.close()
            proxy.client.close()

    # the document describes the proxy's own endpoints (proxy/admin.py); vLLM's API, relayed, is vLLM's to document
    app = FastAPI(title="draftgate", version=__version__, summary="the proxy's own endpoints",
                  openapi_url="/draftgate/openapi.json", docs_url="/draftgate/docs", redoc_url=None,
                  lifespan=lifespan)
    app.add_api_route("/v1/models", proxy.models, methods=["GET"], include_in_schema=False)
    app.add_api_route("/health", proxy.health, methods=["GET"], response_model=admin.Health,
                      summary="the proxy is up")
    app.add_api_route("/ready", proxy.ready, methods=["GET"], response_model=admin.Readiness,
                      responses={503: {"model": admin.Readiness, "description": "no pool has a healthy replica"}},
                      summary="some pool has a healthy replica")
    for path, handler in (("/health", proxy.health), ("/ready", proxy.ready)):
        # HEAD too: some load balancers' health checks send it (documented once, as GET)
        app.add_api_route(path, handler, methods=["HEAD"], include_in_schema=False)
    app.add_api_route("/metrics", proxy.metrics_page, methods=["GET"], summary="Prometheus metrics (docs/metrics.md)",
                      response_class=PlainTextResponse)
    app.add_api_route("/draftgate/explain", proxy.explain, methods=["POST"], response_model=admin.Explanation,
                      responses=admin.ERRORS, openapi_extra=admin.EXPLAIN_BODY,
                      summary="what the gate reads in a request and where it would send it, without forwarding it")
    app.add_api_route("/draftgate/reload", proxy.reload, methods=["POST"], response_model=admin.Reloaded,
                      responses=admin.ERRORS, summary="apply the configuration file as it is now (admin_token)")
    for path in ("/v1/{rest:path}", *VLLM_ROUTES_OUTSIDE_V1):
        # OPTIONS: browsers' CORS preflights, answered by a pool as its --allowed-origins say
        app.add_api_route(path, proxy.passthrough, methods=["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"],
                          include_in_schema=False)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # routing's own 404 and 405, in the shape of every other error the proxy sends
        return openai_error(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error", extra={"path": request.url.path})
        return error_shape_of(request.url.path)(500, "internal error in draftgate; the request was not forwarded")

    app.state.proxy = proxy
    gated = HotRoutes(app, {path: proxy.gated(endpoint) for path, endpoint in GATED.items()})
    return CorsForOwnAnswers(gated, proxy.cors_policy)


def _sighup(proxy: Proxy) -> None:
    try:
        proxy.do_reload()
    except ConfigError as exc:
        log.error("reload failed, keeping the previous configuration: %s", exc)
