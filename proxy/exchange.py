"""One request upstream, from the lease of a replica to its release.

An ``Exchange`` acquires a replica, sends the request, fails over while the
client has been sent nothing, relays the answer (event by event, whole, or as
raw chunks), settles what the answer taught once it has gone, and releases the
replica: that release is written once, in ``_end_attempt``, for every attempt
and every way a request can end. Gated and passed-through requests differ only
in how their answer is relayed and in what ``on_end`` does with the outcome.

Failover: both pools serve the same target, so any of them can answer
anything. A refused connection, a timeout before the first byte, or a
502/503/504 moves the request to the next pool in its order, within the retry
budget and never past a pool's capacity; so does any failure before the client
has been sent anything: a stream that breaks before its first event, an answer
that breaks before its end. Anything else, 4xx included, passes through.

Every such failure also counts against its replica: enough in a row, or too
large a share of its recent answers, take it out of rotation for a while
(``health.eject_after_failed_answers``, ``health.eject_failure_share``), since a replica can
fail its answers while its ``/health`` stays fine, and the retries it causes
would spend the budget that real failovers need.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from draftgate.proxy.budget import RetryBudget
from draftgate.proxy.config import ProxySettings
from draftgate.proxy.errors import ErrorShape, at_capacity_error, openai_error
from draftgate.proxy.headers import downstream_headers, upstream_headers
from draftgate.proxy.metrics import ProxyMetrics
from draftgate.proxy.observe import Observation
from draftgate.proxy.pools import Pool, PoolSet, Replica
from draftgate.proxy.relay import RelayedBody, relay_events
from draftgate.proxy.shutdown import Shutdown, shutting_down_error, shutting_down_message
from draftgate.proxy.upstream import (
    UpstreamAborted,
    UpstreamClient,
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamResponse,
    UpstreamTimeout,
)

log = logging.getLogger("draftgate.forward")

# answers that another pool may do better than: the server, or one in front of it, failed
RETRYABLE_STATUS = frozenset({502, 503, 504})
# what each failure before the first byte is counted as: metric kind, reason, status if it is the last
_FAILURES: dict[type[UpstreamError], tuple[str, str, int]] = {
    UpstreamConnectError: ("connect", "connect failed", 502),
    UpstreamTimeout: ("timeout", "timed out before the first byte", 504),
    UpstreamProtocolError: ("protocol", "connection dropped", 502),
}

# How much of an answer must arrive before it is the pool's answer: the headers
# (relayed as it comes), a stream's first event, or the whole of an answer sent whole.
Until = Literal["headers", "first_event", "end"]


class NoCapacity(Exception):
    """Every pool is full and stayed full for the queue timeout."""


class UpstreamUnavailable(Exception):
    """No pool could be reached, or the retry budget ran out."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


class Upstreams:
    """Where requests go: the pools and their replicas, the retry budget, and the
    one client every upstream call goes through."""

    def __init__(self, settings: ProxySettings, client: UpstreamClient, metrics: ProxyMetrics,
                 shutdown: Shutdown) -> None:
        self.settings = settings
        self.client = client
        self.metrics = metrics
        self.shutdown = shutdown
        self.pools = PoolSet(settings.pools, settings.queue_depth_per_replica)
        self.budget = RetryBudget(settings.retry_budget_ratio, settings.retry_budget_floor)
        # told of each ejection (replica URL, seconds), for the proxies sharing a store
        self.on_eject: Callable[[str, float], None] | None = None
        self._label_pools()

    def reload(self, settings: ProxySettings) -> None:
        """Take a new configuration; requests in flight keep their pool objects."""
        self.settings = settings
        self.pools.adopt(settings.pools)
        self.pools.queue_depth = settings.queue_depth_per_replica
        self.budget.ratio, self.budget.floor = settings.retry_budget_ratio, settings.retry_budget_floor
        self._label_pools()

    def _label_pools(self) -> None:
        for pool in self.pools:  # a pool never ejected shows 0 on the dashboard rather than nothing
            self.metrics.ejections.labels(pool=pool.name)

    def pool(self, name: str) -> Pool | None:
        return self.pools.pools.get(name)

    def count_failed_answer(self, pool: Pool, replica: Replica) -> None:
        """Count a failed answer against ``replica``; eject it when that makes enough in a row,
        or too large a share of its recent answers."""
        health = self.settings.health
        in_a_row, limit = replica.failed_answers + 1, health.eject_after_failed_answers
        seconds = replica.answer_failed(limit, health.ejection_seconds, share=health.eject_failure_share,
                                        window=health.ejection_window)
        if seconds is not None:
            self.metrics.ejections.labels(pool=pool.name).inc()
            if self.on_eject is not None:
                self.on_eject(replica.url, seconds)
            why = (f"{in_a_row} in a row" if limit and in_a_row >= limit else
                   f"{health.eject_failure_share:.0%} or more of at least the last {health.ejection_window}")
            log.warning("replica ejected: its answers failed, %s; back in rotation in %.0f s", why, seconds,
                        extra={"replica": replica.url})


@dataclass(slots=True)
class Outgoing:
    """What goes upstream: the client's method, target and headers (raw ASGI pairs), and its body."""

    method: str
    target: str
    headers: Iterable[tuple[bytes, bytes]]
    body: bytes


class Exchange:
    """One request upstream, from the lease of a replica to its release.

    ``on_end(exchange, status)`` runs once, when the request has ended however it
    ended, after the answer has been settled and before the replica is released:
    attribution windows close only when nothing is in flight.
    """

    def __init__(self, upstreams: Upstreams, outgoing: Outgoing, order: list[str], *, model: str | None = None,
                 prefer: tuple[str, str] | None = None, pinned: bool = False, streamed: bool = False,
                 observation: Observation | None = None,
                 on_end: Callable[[Exchange, int], None] | None = None) -> None:
        self.upstreams = upstreams
        self.outgoing = outgoing
        self.order = order
        self.model = model
        self.prefer = prefer
        self.pinned = pinned  # only ``prefer``'s replica holds state the request needs
        self.streamed = streamed
        self.observation = observation or Observation()
        self.on_end = on_end
        self.pool: Pool | None = None
        self.replica: Replica | None = None
        self.response: UpstreamResponse | None = None
        self.content: bytes | None = None  # the whole body, when it was read to its end before answering
        self.failovers = 0
        self._ended = False

    # ------------------------------------------------------------ lease and failover

    async def open(self, until: Until = "headers") -> None:
        """Lease a replica whose answer can go to the client, failing over as needed.

        ``until`` says when an answer counts: until then the client has nothing,
        and a pool that fails meanwhile is failed over like one that refused. A
        stream's headers come at once and its first event after prefill; an answer
        sent whole is read to its end. A stream's events must keep coming
        (``first_byte_timeout``); an answer sent whole comes only once generated
        (``answer_timeout``).

        Raises NoCapacity, UpstreamUnavailable, UpstreamAborted, or the caller's
        cancellation; nothing is leased then.
        """
        up = self.upstreams
        settings = up.settings
        up.budget.deposit()
        read_timeout = settings.timeouts.first_byte if self.streamed else settings.timeouts.answer
        order = [self.prefer[0]] if self.pinned and self.prefer is not None else self.order
        pools = [p for p in map(up.pool, order) if p is not None]
        first = up.pools.first_with_room(pools) or await up.pools.wait_for_room(pools, settings.timeouts.queue)
        if first is None:
            up.metrics.shed.labels(model=up.metrics.model_label(self.model)).inc()
            raise NoCapacity("every pool is at capacity")
        # every pool once, then again for pools with another replica to try
        candidates = [first] if self.pinned else ([first] + [p for p in pools if p is not first]) * 2
        last_error, last_status = "no pool could be reached", 502
        tried: set[str] = set()
        previous: Pool | None = None
        for pool in candidates:
            if pool is not first and not up.pools.has_room(pool):
                continue
            prefer = self.prefer[1] if self.prefer and self.prefer[0] == pool.name else None
            replica = pool.pick_replica(prefer, exclude=tried, kv_cache_full=settings.kv_cache_full,
                                        pinned=self.pinned)
            if replica is None:
                continue
            if previous is not None:
                if not up.budget.withdraw():
                    up.metrics.retry_denied.inc()
                    raise UpstreamUnavailable(f"{last_error}; retry budget exhausted", last_status)
                self.failovers += 1
                up.metrics.failovers.labels(from_pool=previous.name, to_pool=pool.name,
                                            reason=last_error[:40]).inc()
            tried.add(replica.url)
            failure = await self._attempt(pool, replica, until, read_timeout)
            if failure is None:
                return
            last_error, last_status = failure
            previous = pool
        raise UpstreamUnavailable(last_error, last_status)

    async def _attempt(self, pool: Pool, replica: Replica, until: Until,
                       read_timeout: float) -> tuple[str, int] | None:
        """Try one replica: None when its answer is the client's, else why not and the status to give."""
        up = self.upstreams
        settings = up.settings
        self.pool, self.replica, self.response, self.content = pool, replica, None, None
        self._ended = False
        replica.start()
        headers = upstream_headers(self.outgoing.headers, pool, strip_authorization=bool(settings.api_keys))
        try:
            self.response = await up.client.origin(replica.url).request(
                self.outgoing.method, self.outgoing.target, headers, self.outgoing.body, settings.timeouts.connect,
                read_timeout)
            if self.response.status_code in RETRYABLE_STATUS:
                await self._end_attempt()
                up.metrics.upstream_errors.labels(pool=pool.name, error=f"http_{self.response.status_code}").inc()
                up.count_failed_answer(pool, replica)
                return f"upstream answered {self.response.status_code}", self.response.status_code
            self.content = await _read_until(self.response, until)
        except (asyncio.CancelledError, UpstreamAborted):  # the client left, or the proxy is stopping
            await self._end_attempt()
            raise
        except UpstreamError as exc:
            await self._end_attempt()
            kind, reason, status = _FAILURES.get(type(exc), _FAILURES[UpstreamProtocolError])
            if isinstance(exc, UpstreamConnectError):
                replica.mark_failed()
                log.warning("upstream connect failed", extra={"replica": replica.url, "error": str(exc)})
            else:
                up.count_failed_answer(pool, replica)
            up.metrics.upstream_errors.labels(pool=pool.name, error=kind).inc()
            return reason, status
        if until == "end":  # else the answer is good only once it has come whole: the relay says
            replica.answered()
        return None

    async def _end_attempt(self) -> None:
        """Close the response and release the replica: the one place a replica is released."""
        if self._ended:
            return
        self._ended = True
        try:
            if self.response is not None:
                await self.response.aclose()
        finally:
            if self.replica is not None:
                self.upstreams.pools.release(self.replica)

    # ------------------------------------------------------------ the end

    async def end(self, status: int) -> None:
        """The request is over: settle what its answer taught, run ``on_end``, release."""
        try:
            await self.observation.feed_unread_answer()
        except Exception:  # the answer has gone; only what it would have taught us is lost
            log.exception("reading a finished answer failed")
        try:
            if self.on_end is not None:
                self.on_end(self, status)
        except Exception:
            log.exception("recording a finished request failed")
        finally:
            await self._end_attempt()

    def failed_midway(self, kind: str) -> None:
        """The answer broke after the client had part of it: too late for another pool."""
        assert self.pool is not None and self.replica is not None
        self.upstreams.metrics.upstream_errors.labels(pool=self.pool.name, error=kind).inc()
        self.upstreams.count_failed_answer(self.pool, self.replica)

    # ------------------------------------------------------------ answering the client

    def whole(self, extra_headers: list[tuple[bytes, bytes]]) -> Response:
        """The answer read whole in ``open(until="end")``, with ``end`` run once it has gone:
        none of what it teaches is the client's latency."""
        assert self.response is not None
        observation = self.observation
        status = self.response.status_code
        content = self.content or b""
        observation.first_byte_at = observation.finished_at = time.perf_counter()
        response = Response(content=content, status_code=status)  # sets content-length
        response.raw_headers += downstream_headers(self.response.headers) + extra_headers
        if status == 200 and "content-encoding" not in self.response.headers:
            observation.unread_answer = content
            observation.complete = True
        # a coroutine, so it runs on the event loop, not in a worker thread racing the loop
        response.background = BackgroundTask(self.end, status)
        return response

    def events(self, extra_headers: list[tuple[bytes, bytes]], strip_usage: bool,
               stream_error: Callable[[int, str, int], bytes],
               on_first: Callable[[bytes], None] | None = None) -> Response:
        """The answer relayed as a stream, event by event (``relay_events``), and measured
        on the way. ``stream_error(status, message, events_relayed)`` writes the event that
        ends a stream cut short; ``on_first`` sees the first events relayed."""
        assert self.response is not None
        stream = StreamingResponse(self._relay_events(strip_usage, stream_error, on_first), status_code=200)
        stream.raw_headers = downstream_headers(self.response.headers) + extra_headers
        return stream

    async def _relay_events(self, strip_usage: bool, stream_error: Callable[[int, str, int], bytes],
                            on_first: Callable[[bytes], None] | None) -> AsyncIterator[bytes]:
        assert self.response is not None and self.pool is not None and self.replica is not None
        observation = self.observation
        status = 200
        relayed = 0  # events: a Responses stream numbers them from 0, and an error must come next
        try:
            async for events in relay_events(self.response.aiter_raw(), observation, strip_usage):
                if observation.first_byte_at is None:
                    observation.first_byte_at = time.perf_counter()
                    if on_first is not None:
                        on_first(events[0])
                relayed += len(events)
                yield b"".join(events)
        except UpstreamError as exc:
            status = 502
            self.failed_midway("mid_stream")
            yield stream_error(502, f"upstream failed mid-stream: {type(exc).__name__}", relayed)
        except UpstreamAborted:
            status = 503
            yield stream_error(503, shutting_down_message(), relayed)
        finally:
            # the client has its whole answer once the stream's last event went out, whether it then
            # hangs up before the upstream closes or not: only an unfinished stream is a 499
            observation.finished_at = time.perf_counter()
            if status == 200:
                if observation.complete:
                    self.replica.answered()
                else:
                    status = 499
            if observation.unread_answer is None:
                await self.end(status)
            else:
                # the stream's end goes to the client once this generator returns, and that
                # must not wait for a 10 MB reading; the task releases the replica when done
                self.upstreams.shutdown.settle_later(self.end(status))

    def raw(self, extra_headers: list[tuple[bytes, bytes]], on_chunk: Callable[[bytes], None] | None = None,
            path: str = "") -> Response:
        """The answer relayed as it arrives, chunk by chunk, whatever it is (``RelayedBody``):
        a body that breaks midway leaves the client's connection dropped, never a
        truncated body passed off as whole."""
        assert self.response is not None
        relayed = RelayedBody(self._relay_raw(on_chunk, path), status_code=self.response.status_code)
        relayed.raw_headers = downstream_headers(self.response.headers) + extra_headers
        return relayed

    async def _relay_raw(self, on_chunk: Callable[[bytes], None] | None, path: str) -> AsyncIterator[bytes]:
        assert self.response is not None and self.replica is not None
        status = 200
        try:
            async for chunk in self.response.aiter_raw():
                if on_chunk is not None:
                    on_chunk(chunk)
                yield chunk
            self.replica.answered()
        except UpstreamError as exc:
            status = 502
            self.failed_midway("mid_body")
            log.warning("a passed-through answer broke midway; the client's connection is dropped",
                        extra={"replica": self.replica.url, "path": path, "error": str(exc)})
            raise
        except BaseException:
            status = 499
            raise
        finally:
            await self.end(status)


async def answer(exchange: Exchange, until: Until, respond: Callable[[], Response],
                 refused: Callable[[int], None] | None = None,
                 headers: dict[str, str] | None = None, shape: ErrorShape = openai_error) -> Response:
    """Open ``exchange`` and answer with ``respond()``; or, when no pool can take it,
    with the error that says why, in ``shape`` (``refused(status)`` is told which).
    ``headers``: the proxy's own, on an at-capacity answer too."""
    try:
        await exchange.open(until)
    except NoCapacity:
        status, response = 503, at_capacity_error(headers, shape)
    except UpstreamUnavailable as exc:
        status, response = exc.status, shape(exc.status, f"no pool could serve the request: {exc}",
                                              code="upstream_unavailable")
    except UpstreamAborted:
        status, response = 503, shutting_down_error(shape)
    except asyncio.CancelledError:
        if refused is not None:
            refused(499)
        raise
    else:
        return respond()
    if refused is not None:
        refused(status)
    return response


async def _read_until(response: UpstreamResponse, until: Until) -> bytes | None:
    """Read as much of ``response`` as must come before it counts; the body if read whole."""
    if until == "end" or (until == "first_event" and response.status_code != 200):  # an error goes whole
        return await response.aread()
    if until == "first_event":
        await response.wait_for_body()
    return None

