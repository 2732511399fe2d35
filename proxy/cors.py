"""CORS headers on the answers the proxy makes itself.

vLLM wraps every response in Starlette's CORS middleware (``--allowed-origins``,
default ``*``), errors included. Through the proxy, a pool's answers keep the
pool's ``access-control-*`` headers, and preflights go to a pool. What the pool
never sees has none: the model list the proxy merges, a 401 for a wrong key, a
413, a 503 when shedding. A browser then reports a CORS failure instead of the
error, or cannot list models at all. This layer gives those answers the headers
vLLM would have given, from the same two settings.

It only adds the header where a response has none, so a pool's own answer is
never rewritten; requests without an ``Origin`` (every non-browser client) pass
through untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_ALLOW_ORIGIN = b"access-control-allow-origin"


class CorsPolicy:
    """``allowed_origins`` and ``allow_credentials``, read as vLLM's middleware reads them."""

    def __init__(self, allowed_origins: Sequence[str], allow_credentials: bool) -> None:
        self.any_origin = "*" in allowed_origins
        self.origins = frozenset(allowed_origins)
        self.allow_credentials = allow_credentials

    def headers_for(self, origin: str) -> list[tuple[bytes, bytes]]:
        """The headers a response to ``origin`` carries; none if the origin is not allowed."""
        if not (self.any_origin or origin in self.origins):
            return []
        if self.any_origin and not self.allow_credentials:
            return [(_ALLOW_ORIGIN, b"*")]
        # A credentialed answer must name the origin (browsers refuse "*" there),
        # and then caches must key on it.
        headers = [(_ALLOW_ORIGIN, origin.encode("latin-1")), (b"vary", b"Origin")]
        if self.allow_credentials:
            headers.append((b"access-control-allow-credentials", b"true"))
        return headers


class CorsForOwnAnswers:
    """An ASGI layer: adds ``policy()``'s headers to responses to a browser that lack them.

    ``policy`` is called per browser request, so a configuration reload applies
    to the next one.
    """

    def __init__(self, app: ASGIApp, policy: Callable[[], CorsPolicy]) -> None:
        self.app = app
        self.policy = policy
        self.state = getattr(app, "state", None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = _origin(scope) if scope["type"] == "http" else None
        if origin is None:
            await self.app(scope, receive, send)
            return
        extra = self.policy().headers_for(origin)
        if not extra:
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if not any(name.lower() == _ALLOW_ORIGIN for name, _ in headers):
                    message = {**message, "headers": headers + extra}
            await send(message)

        await self.app(scope, receive, send_with_cors)


def _origin(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"origin":  # ASGI servers lower-case header names
            return value.decode("latin-1")
    return None
