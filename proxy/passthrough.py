"""Requests the gate has no choice to make for, sent on as they came.

Other ``/v1/*`` routes and vLLM's own beside them go to a plain pool that
serves the model the body names, with the same failover as gated requests.
What concerns a stored response goes to the replica holding it
(``proxy/stored_responses.py``), and a newly stored one teaches the proxy where
it lives as its answer passes.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from draftgate.policy.vllm_fields import streams
from draftgate.proxy.catalog import ModelCatalog
from draftgate.proxy.exchange import Exchange, Outgoing, Upstreams, answer
from draftgate.proxy.headers import raw_path, upstream_target
from draftgate.proxy.pools import Pool, Replica
from draftgate.proxy.stored_responses import (
    CREATE_PATH,
    SNIFF_BYTES,
    ResponseHolders,
    continued_response_id,
    stored,
    stored_response_id,
    streams_stored_response,
)


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

    def __init__(self, upstreams: Upstreams, catalog: ModelCatalog, holders: ResponseHolders) -> None:
        self.upstreams = upstreams
        self.catalog = catalog
        self.holders = holders

    async def __call__(self, request: Request, raw: bytes, named: Any) -> Response:
        """``raw``: the body as read; ``named``: it parsed, when it is JSON (else None)."""
        model = named.get("model") if isinstance(named, dict) else None
        order = self.upstreams.pools.plain_first(self.catalog.pools_serving(model))
        holder = await self._holder_of_stored_response(request, named, order)
        streamed = streams(named) or streams_stored_response(
            request.method, raw_path(request.scope), request.scope["query_string"])
        exchange = Exchange(self.upstreams, Outgoing(request.method, upstream_target(request.scope),
                                                     request.scope["headers"], raw),
                            order, prefer=(holder[0].name, holder[1].url) if holder else None,
                            pinned=holder is not None, streamed=streamed)
        # a new stored response: whoever made it is the only one who can say more of it
        creates = request.method == "POST" and request.scope["path"] == CREATE_PATH and stored(named)
        return await answer(exchange, "headers", lambda: self._relay(exchange, creates, request.url.path))

    def _relay(self, exchange: Exchange, creates: bool, path: str) -> Response:
        assert exchange.response is not None and exchange.pool is not None and exchange.replica is not None
        pool, replica = exchange.pool.name, exchange.replica.url
        sniffing = creates and exchange.response.status_code == 200
        head = b""

        def sniff(chunk: bytes) -> None:
            nonlocal sniffing, head
            if sniffing:
                head += chunk
                sniffing = not self.holders.remember_from_answer(head, pool, replica) and len(head) < SNIFF_BYTES

        return exchange.raw([(b"x-draftgate-route", pool.encode("latin-1"))], sniff if sniffing else None, path)

    async def _holder_of_stored_response(self, request: Request, named: Any,
                                         order: list[str]) -> tuple[Pool, Replica] | None:
        """The replica holding the stored response this request is about or continues from, if any does."""
        rid = stored_response_id(raw_path(request.scope)) or continued_response_id(named)
        if rid is None:
            return None
        up = self.upstreams
        settings = up.settings
        # a lookup is as quick to answer as a health check
        return await self.holders.locate(up.client, rid, [p for p in map(up.pool, order) if p is not None],
                                         request.scope["headers"], bool(settings.api_keys), settings.timeouts.connect,
                                         settings.health.timeout)
