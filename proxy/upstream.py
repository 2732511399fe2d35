"""The proxy's one HTTP/1.1 client: keep-alive connections to each replica.

Every call the proxy makes upstream goes through it: forwarded requests, health
checks, metric scrapes, model lists and stored-response lookups, so all of them
share one set of connections, one TLS setup and one family of errors.

Why not httpx: on this project's 2-core reference machine an httpx round trip
costs about 2 ms of CPU, twice the proxy's whole latency budget. This client
does one thing, send a request and relay the response as it arrives, over
pooled asyncio connections with httptools (the C parser uvicorn uses) reading
the responses. What a mature client does beside that, it does too:

- an idle connection is dropped after ``idle_expiry`` seconds, shorter than the
  server's keep-alive (vLLM serves with uvicorn's 5 s), so a request is never
  written to a connection the server is closing at that moment;
- a response with neither a length nor chunked encoding ends when the server
  closes the connection, as HTTP/1.1 allows;
- at most ``max_connections`` exchanges run at once per origin, the rest wait
  for one to end;
- a response body buffered and not yet read stops the connection reading once
  it holds ``_PAUSE_BYTES``, counted in bytes: a few large events hold as much
  memory as many small ones.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Iterable
from urllib.parse import urlsplit

import httptools

_PAUSE_BYTES = 256 * 1024  # unread body bytes at which a connection stops reading (backpressure)
IDLE_EXPIRY = 4.0  # seconds an idle connection is kept: under the server's keep-alive (uvicorn: 5 s)
MAX_CONNECTIONS = 512  # exchanges at once per origin; a pool's own limits keep well under it


class UpstreamError(Exception):
    """Any failure talking to an upstream server."""


class UpstreamConnectError(UpstreamError):
    """The connection could not be made: refused, unreachable, timed out."""


class UpstreamTimeout(UpstreamError):
    """The server did not answer (or stopped answering) within the read timeout."""


class UpstreamProtocolError(UpstreamError):
    """The connection broke or the response was not valid HTTP."""


class UpstreamAborted(Exception):
    """The proxy ended the exchange itself, because it is shutting down.

    Not an UpstreamError: the pool did nothing wrong, and no other pool should be tried.
    """


class Headers:
    """Response headers as received (raw bytes, order and repeats kept); lookups are
    case-insensitive. Kept raw because the proxy mostly relays them untouched."""

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self.raw = raw

    def get(self, name: str, default: str | None = None) -> str | None:
        wanted = name.lower().encode("latin-1")
        return next((v.decode("latin-1") for k, v in self.raw if k.lower() == wanted), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None


class _Connection(asyncio.Protocol):
    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle = False  # in the pool between exchanges: nothing may arrive then
        self.idle_since = 0.0  # loop time it went idle
        self.holds_slot = False  # counted against the origin's max_connections
        self._reset()

    def _reset(self) -> None:
        loop = asyncio.get_running_loop()
        self.headers_ready: asyncio.Future[object] = loop.create_future()
        self.header_items: list[tuple[bytes, bytes]] = []
        self.chunks: deque[bytes | None | Exception] = deque()
        self.buffered = 0  # bytes in ``chunks``
        self.waiter: asyncio.Future[object] | None = None  # set while a reader waits for a chunk
        self.complete = False
        self.received_any = False
        self.paused = False
        self.keep_alive = False
        self.until_close = False  # the body has no length and no chunks: it ends when the connection does
        self.interim = False  # the message being parsed is a 1xx, to be skipped

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.idle:
            # Bytes no request asked for: whatever sent them, the next response read here
            # could be the answer to someone else's request.
            self.close()
            return
        self.received_any = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamProtocolError("unexpected protocol upgrade"))
        except httptools.HttpParserError as exc:
            self._fail(UpstreamProtocolError(f"invalid HTTP response: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.complete:
            return
        if self.until_close and exc is None:
            self.on_message_complete()  # the server's close is the body's end
            return
        self._fail(UpstreamProtocolError("connection closed before the response was complete"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_items.append((name, value))

    def on_headers_complete(self) -> None:
        if 100 <= self.parser.get_status_code() < 200:
            # An interim response (100 Continue, 103 Early Hints): the real one follows
            # on the same connection. Taken as the answer, it would leave that one to be
            # read as the answer to the connection's next request.
            self.interim = True
            self.header_items = []
            return
        # read it now: once the message is complete the parser has reset and says False
        self.keep_alive = self.parser.should_keep_alive()
        status = self.parser.get_status_code()
        self.until_close = status not in (204, 304) and not any(
            name.lower() in (b"content-length", b"transfer-encoding") for name, _ in self.header_items)
        if not self.headers_ready.done():
            self.headers_ready.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        self._wake()
        if self.buffered >= _PAUSE_BYTES and self.transport is not None and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def took(self, size: int) -> None:
        """``size`` bytes were read out of ``chunks``: resume reading once half the limit is free."""
        self.buffered -= size
        if self.paused and self.buffered < _PAUSE_BYTES // 2 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        self.complete = True
        self.chunks.append(None)
        self._wake()

    def _fail(self, exc: Exception) -> None:
        if not self.headers_ready.done():
            self.headers_ready.set_exception(exc)
            self.headers_ready.exception()  # retrieved: never "exception was never retrieved"
        else:
            self.chunks.append(exc)
            self._wake()
        self.close()

    def abort(self, exc: UpstreamAborted) -> None:
        """End the exchange: whoever waits on it (for headers or a chunk) gets ``exc``
        after what has already arrived, and the connection closes, which vLLM
        takes as the request's cancellation."""
        if not self.complete:
            self._fail(exc)
        self.close()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def reusable(self) -> bool:
        return self.complete and not self.closed and self.keep_alive


class UpstreamResponse:
    def __init__(self, connection: _Connection, read_timeout: float) -> None:
        self._conn = connection
        self._read_timeout = read_timeout
        self.status_code = connection.parser.get_status_code()
        self.headers = Headers(connection.header_items)
        self._released = False

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (transfer encoding removed, content encoding kept).

        What has arrived by each step comes as one piece: a reader that fell behind
        (the proxy under load, a client slow to take its writes) catches up with one
        step per backlog, not one per chunk the server wrote.
        """
        while True:
            chunk = await self._next_chunk()
            if chunk is None:
                return
            yield chunk

    async def aread(self) -> bytes:
        conn = self._conn
        if conn.complete and conn.chunks and conn.chunks[-1] is None:
            # the whole body came with the headers (the usual small answer): no waiting
            chunks = list(conn.chunks)
            conn.chunks.clear()
            conn.took(conn.buffered)
            return b"".join(chunks[:-1])  # type: ignore[arg-type]
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def wait_for_body(self) -> None:
        """Wait until the body's first bytes (or its end) arrive, consuming nothing;
        raise what broke the exchange if it broke first.

        A stream's headers come at once and its first event only after prefill,
        which takes seconds on a long prompt: a server that fails in between has
        sent nothing a client could use, so the request can still go elsewhere.
        """
        conn = self._conn
        if not conn.chunks:
            await self._wait_for_chunk()
        if isinstance(conn.chunks[0], Exception):
            raise conn.chunks[0]

    async def _wait_for_chunk(self) -> None:
        conn = self._conn
        # one future and one timer per wait: asyncio.wait_for would start a task each time
        loop = asyncio.get_running_loop()
        conn.waiter = waiter = loop.create_future()
        timer = loop.call_later(self._read_timeout, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            conn.waiter = None
        if not conn.chunks:
            raise UpstreamTimeout(f"no data for {self._read_timeout}s")

    async def _next_chunk(self) -> bytes | None:
        """The next chunk, joined with those behind it that have arrived too; None at the end."""
        conn = self._conn
        if not conn.chunks:
            await self._wait_for_chunk()
        item = conn.chunks.popleft()
        if type(item) is bytes and conn.chunks and type(conn.chunks[0]) is bytes:
            parts = [item]
            while conn.chunks and type(conn.chunks[0]) is bytes:  # at most _PAUSE_BYTES: reading pauses there
                parts.append(conn.chunks.popleft())  # type: ignore[arg-type]
            item = b"".join(parts)
        if type(item) is bytes:
            conn.took(len(item))
        if isinstance(item, Exception):
            raise item
        return item

    async def aclose(self) -> None:
        """Return the connection to the pool if the response was read to the end, else drop it."""
        if self._released:
            return
        self._released = True
        conn = self._conn
        conn.origin.finished(conn)
        if conn.reusable() and not conn.chunks:
            conn.origin.put_back(conn)
        else:
            conn.close()


_EXPIRED = object()


def _expire(waiter: asyncio.Future[object]) -> None:
    """A read timer fired: wake the waiter with a marker the reader turns into a timeout."""
    if not waiter.done():
        waiter.set_result(_EXPIRED)


class Origin:
    """Connections to one scheme://host:port: those idle between exchanges, and the
    ``max_connections`` slots that exchanges take."""

    def __init__(self, url: str, max_idle: int = 64, tls: ssl.SSLContext | None = None,
                 idle_expiry: float = IDLE_EXPIRY, max_connections: int = MAX_CONNECTIONS) -> None:
        parts = urlsplit(url)
        self.scheme = parts.scheme
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.netloc = parts.netloc
        self.max_idle = max_idle
        self.idle_expiry = idle_expiry
        self.idle: deque[_Connection] = deque()  # the most recently used last
        self.busy: set[_Connection] = set()  # exchanges under way, for abort()
        self.slots = asyncio.Semaphore(max_connections)
        self._ssl = (tls or ssl.create_default_context()) if parts.scheme == "https" else None

    def put_back(self, conn: _Connection) -> None:
        conn._reset()
        if len(self.idle) >= self.max_idle:
            conn.close()
        else:
            conn.idle = True
            conn.idle_since = asyncio.get_running_loop().time()
            self.idle.append(conn)

    def finished(self, conn: _Connection) -> None:
        """An exchange on ``conn`` is over: its slot is free for the next."""
        self.busy.discard(conn)
        if conn.holds_slot:
            conn.holds_slot = False
            self.slots.release()

    def _reusable_idle(self) -> _Connection | None:
        """The most recently used idle connection still fresh; the expired ones are closed."""
        expired_before = asyncio.get_running_loop().time() - self.idle_expiry
        while self.idle and self.idle[0].idle_since < expired_before:
            self.idle.popleft().close()
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                return conn
        return None

    async def _connect(self, timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self), self.host, self.port, ssl=self._ssl), timeout)
        except asyncio.TimeoutError:
            raise UpstreamConnectError(f"connect to {self.netloc} timed out") from None
        except OSError as exc:
            raise UpstreamConnectError(f"connect to {self.netloc} failed: {exc.strerror or exc}") from None
        return conn

    async def request(self, method: str, target: str, headers: Iterable[tuple[bytes, bytes]], body: bytes,
                      connect_timeout: float, read_timeout: float) -> UpstreamResponse:
        """Send a request; ``headers`` are raw (name, value) pairs, as ASGI gives them."""
        start = f"{method} {target} HTTP/1.1\r\nhost: {self.netloc}\r\ncontent-length: {len(body)}\r\n"
        head = [start.encode("latin-1")]
        for name, value in headers:
            head += (name, b": ", value, b"\r\n")
        head.append(b"\r\n")
        head.append(body)
        payload = b"".join(head)
        if self.slots.locked():  # every slot taken: wait for an exchange to end, as long as for an answer
            try:
                await asyncio.wait_for(self.slots.acquire(), read_timeout)
            except asyncio.TimeoutError:
                raise UpstreamTimeout(f"no free connection to {self.netloc} within {read_timeout}s") from None
        else:
            await self.slots.acquire()
        try:
            # A pooled connection the server has since closed fails before any byte comes
            # back; that is not the server refusing us, so try once more on a fresh one.
            while (conn := self._reusable_idle()) is not None:
                try:
                    return await self._exchange(conn, payload, read_timeout)
                except UpstreamProtocolError:
                    if conn.received_any:
                        raise
            conn = await self._connect(connect_timeout)
            return await self._exchange(conn, payload, read_timeout)
        except BaseException:
            self.slots.release()
            raise

    async def get(self, target: str, headers: Iterable[tuple[bytes, bytes]], timeout: float) -> tuple[int, bytes]:
        """A whole GET exchange, status and body: the headers within ``timeout``
        seconds, then the body within as long again. For the proxy's own calls
        (health checks, scrapes, model lists)."""
        response = await self.request("GET", target, headers, b"", timeout, timeout)
        try:
            async with asyncio.timeout(timeout):
                body = await response.aread()
        except TimeoutError:
            raise UpstreamTimeout(f"GET {target}: the body took longer than {timeout}s") from None
        finally:
            await response.aclose()
        return response.status_code, body

    async def _exchange(self, conn: _Connection, payload: bytes, read_timeout: float) -> UpstreamResponse:
        """Send on ``conn``, holding a slot taken by the caller: the slot is the
        response's from here, freed when it is closed (or here, if it fails)."""
        assert conn.transport is not None
        conn.idle = False
        conn.holds_slot = True
        self.busy.add(conn)  # until the response is closed
        try:
            conn.transport.write(payload)
            if not conn.headers_ready.done():
                timer = asyncio.get_running_loop().call_later(read_timeout, _expire, conn.headers_ready)
                try:
                    await conn.headers_ready
                except asyncio.CancelledError:
                    conn.close()
                    raise
                finally:
                    timer.cancel()
            if not conn.headers_ready.done() or conn.headers_ready.result() is _EXPIRED:
                conn.close()
                raise UpstreamTimeout(f"no response headers within {read_timeout}s")
        except BaseException:
            conn.holds_slot = False  # the caller frees it
            self.busy.discard(conn)
            raise
        return UpstreamResponse(conn, read_timeout)

    def abort(self, exc: UpstreamAborted) -> None:
        for conn in list(self.busy):
            conn.abort(exc)

    def close(self) -> None:
        while self.idle:
            self.idle.pop().close()


def tls_context(ca_file: str | None = None, client_cert: str | None = None,
                client_key: str | None = None) -> ssl.SSLContext:
    """How https pools are verified: against ``ca_file`` (a private CA's bundle), or the
    system's trust store; and the client certificate shown to pools that ask for one.
    Raises OSError or ssl.SSLError if a file cannot serve."""
    context = ssl.create_default_context(cafile=ca_file)
    if client_cert is not None:
        context.load_cert_chain(client_cert, client_key)
    return context


class UpstreamClient:
    """One Origin per replica URL; ``tls`` verifies the https ones (default: the system's CAs)."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self._origins: dict[str, Origin] = {}
        self._tls = tls

    def origin(self, base_url: str) -> Origin:
        origin = self._origins.get(base_url)
        if origin is None:
            origin = self._origins[base_url] = Origin(base_url, tls=self._tls)
        return origin

    def __contains__(self, base_url: object) -> bool:
        return base_url in self._origins

    def keep_only(self, base_urls: set[str]) -> None:
        """Drop the origins of replicas that are gone (a rollout behind a headless
        Service renames them all): their idle connections close now, and those
        still busy close when their response does."""
        for url in [u for u in self._origins if u not in base_urls]:
            origin = self._origins.pop(url)
            origin.max_idle = 0  # a connection handed back is closed, not pooled
            origin.close()

    def abort_all(self, exc: UpstreamAborted) -> None:
        """End every exchange under way with ``exc`` (see ``_Connection.abort``)."""
        for origin in self._origins.values():
            origin.abort(exc)

    def close(self) -> None:
        for origin in self._origins.values():
            origin.close()
