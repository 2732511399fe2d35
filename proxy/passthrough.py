"""Requests the gate has no choice to make for, sent on as they came.

Other ``/v1/*`` routes and vLLM's own beside them go to a plain pool that
serves the model the body names, with the same failover as gated requests.
What concerns a stored response goes to the replica holding it
(``proxy/stored_responses.py``), and a newly stored one teaches the proxy where
it lives as its answer passes.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from policy.vllm_fields import streams
from proxy.catalog import ModelCatalog
from proxy.errors import openai_error
from proxy.forwarding import (
    NoCapacity,
    UpstreamUnavailable,
    count_failed_answer,
    downstream_headers,
    raw_path,
    send_with_failover,
    upstream_target,
)
from proxy.gatekeeper import Gatekeeper
from proxy.pools import Pool, Replica
from proxy.relay import RelayedBody
from proxy.shutdown import shutting_down_error
from proxy.stored_responses import (
    CREATE_PATH,
    SNIFF_BYTES,
    ResponseHolders,
    continued_response_id,
    stored,
    stored_response_id,
    streams_stored_response,
)
from proxy.upstream import UpstreamAborted, UpstreamClient, UpstreamError

log = logging.getLogger("draftgate.proxy")


def has_dot_segment(path: str) -> bool:
    """Whether ``path`` (percent-decoded, as the ASGI scope has it) has a "." or ".." segment.

    vLLM answers 404 to such a path, as it does not resolve one, and the proxy
    answers it so without sending it on: a hop in between that did resolve it
    (nginx does) would lead it out of /v1, past the routes the proxy passes on,
    to ``/invocations`` (the gate's back door) or an admin route.
    """
    return "/." in path and any(segment in (".", "..") for segment in path.split("/"))


class PassThrough:
    """Sends a request on unchanged and relays its answer chunk by chunk."""

    def __init__(self, gk: Gatekeeper, upstream: UpstreamClient, catalog: ModelCatalog,
                 holders: ResponseHolders) -> None:
        self.gk = gk
        self.upstream = upstream
        self.catalog = catalog
        self.holders = holders

    async def __call__(self, request: Request, raw: bytes, named: Any) -> Response:
        """``raw``: the body as read; ``named``: it parsed, when it is JSON (else None)."""
        order = self.gk.plain_first(self.catalog.pools_serving(named.get("model") if isinstance(named, dict) else None))
        try:
            holder = await self._holder_of_stored_response(request, named, order)
            streamed = streams(named) or streams_stored_response(
                request.method, raw_path(request.scope), request.scope["query_string"])
            upstream = await send_with_failover(self.gk, self.upstream, request.method,
                                                upstream_target(request.scope), request.scope["headers"], raw,
                                                order, (holder[0].name, holder[1].url) if holder else None, None,
                                                streamed=streamed, pinned=holder is not None)
        except NoCapacity:
            return openai_error(503, "all pools are at capacity; retry shortly", headers={"retry-after": "1"})
        except UpstreamUnavailable as exc:
            return openai_error(exc.status, f"no pool could serve the request: {exc}")
        except UpstreamAborted:
            return shutting_down_error()

        # a new stored response: whoever made it is the only one who can say more of it
        sniffing = (request.method == "POST" and request.scope["path"] == CREATE_PATH
                    and upstream.response.status_code == 200 and stored(named))

        async def body() -> AsyncIterator[bytes]:
            nonlocal sniffing
            head = b""
            try:
                async for chunk in upstream.response.aiter_raw():
                    if sniffing:
                        head += chunk
                        sniffing = not self.holders.remember_from_answer(
                            head, upstream.pool.name, upstream.replica.url) and len(head) < SNIFF_BYTES
                    yield chunk
                upstream.replica.answered()
            except UpstreamError as exc:  # bytes have gone: too late for another pool
                self.gk.metrics.upstream_errors.labels(pool=upstream.pool.name, kind="mid_body").inc()
                count_failed_answer(self.gk, upstream.pool, upstream.replica)
                log.warning("a passed-through answer broke midway; the client's connection is dropped",
                            extra={"replica": upstream.replica.url, "path": request.url.path, "error": str(exc)})
                raise
            finally:
                await upstream.response.aclose()
                self.gk.pools.release(upstream.replica)

        relayed = RelayedBody(body(), status_code=upstream.response.status_code)
        relayed.raw_headers = downstream_headers(upstream.response.headers) + [
            (b"x-draftgate-route", upstream.pool.name.encode("latin-1"))]
        return relayed

    async def _holder_of_stored_response(self, request: Request, named: Any,
                                         order: list[str]) -> tuple[Pool, Replica] | None:
        """The replica holding the stored response this request is about or continues from, if any does."""
        rid = stored_response_id(raw_path(request.scope)) or continued_response_id(named)
        if rid is None:
            return None
        settings = self.gk.settings
        # a lookup is as quick to answer as a health check
        return await self.holders.locate(self.upstream, rid, [p for p in map(self.gk.pool, order) if p is not None],
                                         request.scope["headers"], bool(settings.api_keys), settings.connect_timeout,
                                         settings.health_timeout)
