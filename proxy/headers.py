"""What of a request and its answer crosses the proxy: the headers sent upstream
and relayed back, and the request target.

Hop-by-hop headers stop at the proxy; a pool's own key replaces the client's;
the client's path goes upstream as the client wrote it.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import Scope

from draftgate.proxy.pools import Pool
from draftgate.proxy.upstream import Headers

HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer", b"trailers",
    b"transfer-encoding", b"upgrade", b"host", b"content-length",
    # the proxy's server has already answered it (100 Continue) and read the whole body
    b"expect",
})
CLIENT_KEYS = frozenset({b"authorization", b"x-api-key"})
# the proxy's own server answers with its own date; the upstream's server name is not ours to relay
NOT_RELAYED = HOP_BY_HOP | {b"date", b"server"}


def upstream_headers(incoming: Iterable[tuple[bytes, bytes]], pool: Pool,
                     strip_authorization: bool) -> list[tuple[bytes, bytes]]:
    """The client's headers for ``pool``: hop-by-hop ones dropped, the pool's own key
    in place of the client's when it has one (the client's, either way it came:
    a bearer token or Anthropic's ``x-api-key``). Names arrive lower-cased (ASGI)."""
    drop_auth = strip_authorization or pool.config.api_key is not None
    headers = [(k, v) for k, v in incoming
               if k not in HOP_BY_HOP and not (drop_auth and k in CLIENT_KEYS)]
    if pool.config.api_key is not None:
        headers.append((b"authorization", f"Bearer {pool.config.api_key.get_secret_value()}".encode("latin-1")))
    return headers


def raw_path(scope: Scope) -> str:
    """The client's path as it wrote it: the decoded one reads %2F as /, another path."""
    raw = scope.get("raw_path")
    return raw.decode("latin-1") if raw else scope["path"]


def upstream_target(scope: Scope, path: str | None = None) -> str:
    """The request target sent upstream: ``path``, or else the client's (``raw_path``),
    and the query string untouched."""
    if path is None:
        path = raw_path(scope)
    query = scope.get("query_string", b"")  # not request.url: it parses the whole URL
    return f"{path}?{query.decode('latin-1')}" if query else path


def downstream_headers(upstream: Headers) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers the client gets, lower-cased, as raw ASGI pairs."""
    return [(k, v) for k, v in ((k.lower(), v) for k, v in upstream.raw) if k not in NOT_RELAYED]
