"""The gated routes, served without FastAPI's machinery in between.

Chat and text completions are the proxy's whole traffic, and its latency
budget is about a millisecond. FastAPI's routing, dependency solving and
middleware stack cost a fifth of the proxy's CPU per request on the reference
machine and give these two routes nothing: they read raw bytes and answer with
prebuilt responses. Every other request (metrics, health, explain, the
pass-through) still goes to the FastAPI app.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from draftgate.proxy.endpoints import error_shape_of

log = logging.getLogger("draftgate.proxy")

Handler = Callable[[Request], Awaitable[Response]]


class HotRoutes:
    """An ASGI app: ``POST`` to a path in ``routes`` runs its handler, the rest goes to ``app``."""

    def __init__(self, app: ASGIApp, routes: dict[str, Handler]) -> None:
        self.app = app
        self.routes = routes
        self.state = getattr(app, "state", None)  # the FastAPI app's state, for whoever holds this app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if handler is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)
        try:
            response = await handler(request)
        except Exception:
            log.exception("unexpected error", extra={"path": scope["path"]})
            response = error_shape_of(scope["path"])(500, "internal error in draftgate; the request was not forwarded")
        await response(scope, receive, send)
