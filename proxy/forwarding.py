"""Send a request upstream, failing over to another pool when the chosen one cannot serve.

Both pools serve the same target, so any of them can answer anything. A
refused connection, a timeout before the first byte, or a 502/503/504 moves the
request to the next pool in the plan's order, within the retry budget and
never past a pool's capacity; so does any failure before the client has been
sent anything: a stream that breaks before its first event, an answer that
breaks before its end. Anything else, 4xx included, passes through.

Every such failure also counts against its replica: enough in a row, or too
large a share of its recent answers, take it out of rotation for a while
(``eject_after_failed_answers``, ``eject_failure_share``), since a replica can
fail its answers while its ``/health`` stays fine, and the retries it causes
would spend the budget that real failovers need.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from starlette.types import Scope

from proxy.gatekeeper import Gatekeeper
from proxy.pools import Pool, Replica
from proxy.upstream import (
    Headers,
    UpstreamAborted,
    UpstreamClient,
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamResponse,
    UpstreamTimeout,
)

log = logging.getLogger("draftgate.forward")

HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer", b"trailers",
    b"transfer-encoding", b"upgrade", b"host", b"content-length",
    # the proxy's server has already answered it (100 Continue) and read the whole body
    b"expect",
})
# the proxy's own server answers with its own date; the upstream's server name is not ours to relay
NOT_RELAYED = HOP_BY_HOP | {b"date", b"server"}
RETRYABLE_STATUS = frozenset({502, 503, 504})
# what each failure before the first byte is counted as: metric kind, reason, status if it is the last
_FAILURES: dict[type[UpstreamError], tuple[str, str, int]] = {
    UpstreamConnectError: ("connect", "connect failed", 502),
    UpstreamTimeout: ("timeout", "timed out before the first byte", 504),
    UpstreamProtocolError: ("protocol", "connection dropped", 502),
}


class NoCapacity(Exception):
    """Every pool is full and stayed full for the queue timeout."""


class UpstreamUnavailable(Exception):
    """No pool could be reached, or the retry budget ran out."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


# How much of an answer must arrive before it is the pool's answer: the headers
# (relayed as it comes), a stream's first event, or the whole of an answer sent whole.
Until = Literal["headers", "first_event", "end"]


@dataclass(slots=True)
class Upstream:
    response: UpstreamResponse
    pool: Pool
    replica: Replica
    failovers: int
    content: bytes | None = None  # the whole body, when it was read to the end (until="end")


def upstream_headers(incoming: Iterable[tuple[bytes, bytes]], pool: Pool,
                     strip_authorization: bool) -> list[tuple[bytes, bytes]]:
    """The client's headers for ``pool``: hop-by-hop ones dropped, the pool's own key
    in place of the client's when it has one. Names arrive lower-cased (ASGI)."""
    drop_auth = strip_authorization or pool.config.api_key is not None
    headers = [(k, v) for k, v in incoming
               if k not in HOP_BY_HOP and not (drop_auth and k == b"authorization")]
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


async def send_with_failover(
    gk: Gatekeeper,
    client: UpstreamClient,
    method: str,
    target: str,
    headers: Iterable[tuple[bytes, bytes]],
    body: bytes,
    order: list[str],
    prefer_replica: tuple[str, str] | None,
    model: str | None,
    until: Until = "headers",
    streamed: bool = False,
    pinned: bool = False,
) -> Upstream:
    """The first pool's answer that can go to the client. ``until`` says when an
    answer counts: until then the client has nothing, and a pool that fails
    meanwhile is failed over like one that refused. A stream's headers come at once
    and its first event after prefill; an answer sent whole is read to its end.

    ``streamed``: the request asked for a stream, whose events must keep coming
    (``first_byte_timeout``); an answer sent whole comes only once generated, so
    it gets ``answer_timeout``.

    ``pinned``: ``prefer_replica`` alone holds state the request needs, so it
    goes there whatever its load and ``order``, and nowhere else: its failure is
    the answer.
    """
    gk.budget.deposit()
    settings = gk.settings
    read_timeout = settings.first_byte_timeout if streamed else settings.answer_timeout
    if pinned and prefer_replica is not None:  # only the holder can answer: any other would know nothing of it
        order = [prefer_replica[0]]
    pools = [p for p in (gk.pool(name) for name in order) if p is not None]
    first = gk.pools.first_with_room(pools) or await gk.pools.wait_for_room(pools, settings.queue_timeout)
    if first is None:
        gk.metrics.shed.labels(model=gk.metrics.model_label(model)).inc()
        raise NoCapacity("every pool is at capacity")
    # every pool once, then again for pools with another replica to try
    candidates = [first] if pinned else ([first] + [p for p in pools if p is not first]) * 2
    failovers = 0
    last_error = "no pool could be reached"
    last_status = 502
    tried: set[str] = set()
    previous: Pool | None = None
    for pool in candidates:
        if pool is not first and not gk.pools.has_room(pool):
            continue
        prefer = prefer_replica[1] if prefer_replica and prefer_replica[0] == pool.name else None
        replica = pool.pick_replica(prefer, exclude=tried, kv_cache_full=settings.kv_cache_full, pinned=pinned)
        if replica is None:
            continue
        if previous is not None:
            if not gk.budget.withdraw():
                gk.metrics.retry_denied.inc()
                raise UpstreamUnavailable(f"{last_error}; retry budget exhausted", last_status)
            failovers += 1
            gk.metrics.failovers.labels(from_pool=previous.name, to_pool=pool.name, reason=last_error[:40]).inc()
        tried.add(replica.url)
        replica.start()
        send_headers = upstream_headers(headers, pool, strip_authorization=bool(settings.api_keys))
        response = None
        content = None
        try:
            response = await client.origin(replica.url).request(
                method, target, send_headers, body, settings.connect_timeout, read_timeout)
            if response.status_code not in RETRYABLE_STATUS:
                content = await _read_until(response, until)
        except (asyncio.CancelledError, UpstreamAborted):  # the client left, or the proxy is stopping
            if response is not None:
                await response.aclose()
            gk.pools.release(replica)
            raise
        except UpstreamError as exc:
            if response is not None:
                await response.aclose()
            gk.pools.release(replica)
            kind, last_error, last_status = _FAILURES.get(type(exc), _FAILURES[UpstreamProtocolError])
            if isinstance(exc, UpstreamConnectError):
                replica.mark_failed()
                log.warning("upstream connect failed", extra={"replica": replica.url, "error": str(exc)})
            else:
                count_failed_answer(gk, pool, replica)
            gk.metrics.upstream_errors.labels(pool=pool.name, kind=kind).inc()
            previous = pool
            continue
        if response.status_code in RETRYABLE_STATUS:
            await response.aclose()
            gk.pools.release(replica)
            gk.metrics.upstream_errors.labels(pool=pool.name, kind=f"http_{response.status_code}").inc()
            count_failed_answer(gk, pool, replica)
            last_error, last_status, previous = f"upstream answered {response.status_code}", response.status_code, pool
            continue
        if until == "end":  # else the answer is good only once it has come whole: the caller says
            replica.answered()
        return Upstream(response, pool, replica, failovers, content)
    raise UpstreamUnavailable(last_error, last_status)


def count_failed_answer(gk: Gatekeeper, pool: Pool, replica: Replica) -> None:
    """Count a failed answer against ``replica``; eject it when that makes enough in a row,
    or too large a share of its recent answers."""
    settings = gk.settings
    in_a_row, limit = replica.failed_answers + 1, settings.eject_after_failed_answers
    seconds = replica.answer_failed(limit, settings.ejection_seconds, share=settings.eject_failure_share,
                                    window=settings.ejection_window)
    if seconds is not None:
        gk.metrics.ejections.labels(pool=pool.name).inc()
        why = (f"{in_a_row} in a row" if limit and in_a_row >= limit else
               f"{settings.eject_failure_share:.0%} or more of at least the last {settings.ejection_window}")
        log.warning("replica ejected: its answers failed, %s; back in rotation in %.0f s", why, seconds,
                    extra={"replica": replica.url})


async def _read_until(response: UpstreamResponse, until: Until) -> bytes | None:
    """Read as much of ``response`` as must come before it counts; the body if read whole."""
    if until == "end" or (until == "first_event" and response.status_code != 200):  # an error goes whole
        return await response.aread()
    if until == "first_event":
        await response.wait_for_body()
    return None
