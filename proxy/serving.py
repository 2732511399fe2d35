"""How uvicorn serves the proxy: one home for its server options, used by
``draftgate serve`` and by the tests that run the proxy in-process."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from proxy.errors import openai_error_bytes

if TYPE_CHECKING:
    from proxy.config import ProxySettings

_OPTIONS: dict[str, Any] = {
    "log_level": "warning",  # the proxy writes its own JSON lines
    "access_log": False,  # the request log line says more, once
    "server_header": False,
    # draftgate never reads the client's address, so X-Forwarded-* rewriting would
    # only cost time on every request
    "proxy_headers": False,
    # the shutdown grace is configuration (graceful_shutdown_seconds): draftgate serve adds it
}


def uvicorn_options(settings: ProxySettings) -> dict[str, Any]:
    """uvicorn.Config settings for the proxy, from its own."""
    protocol = type("HeadDeadlineProtocol", (HeadDeadlineProtocol,), {"head_timeout": settings.client_header_timeout})
    # Whoever holds a kept-alive connection longer must be the one to close it: a
    # server that closes first can do so just as the client (or a load balancer,
    # which holds its backend connections 60 s) sends the next request on it, and
    # that request fails. uvicorn's own default is 5 s.
    return {**_OPTIONS, "http": protocol, "timeout_keep_alive": settings.keep_alive_timeout}


class HeadDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol, with a deadline on each request's head.

    uvicorn waits for ever on a connection whose request line and headers have
    not all come: a client that opens a connection and sends nothing, or half a
    head. Each such connection holds a file descriptor, and a client that
    vanished without a FIN (a killed pod, a partition) never sends the rest, so
    over weeks they exhaust the proxy's descriptors and every request fails.
    Here the head must be whole within ``head_timeout`` of the connection's
    opening, or of its first byte on a kept-alive connection (before that,
    uvicorn's own keep-alive timeout closes an idle one). A head cut short is
    answered 408 and closed; a connection that sent nothing is just closed, as
    uvicorn closes an idle kept-alive one, because a client may have just
    written a request on it.
    """

    head_timeout: float = 60.0  # client_header_timeout's default; uvicorn_options sets the configured one

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._head_started = False  # between a request's first byte and its last header

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # A whole head in one read (nearly every request) never arms a timer: the
        # deadline is set only once a read has left a head unfinished.
        if self._head_started and self._head_deadline is None:
            self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_started = True

    def on_headers_complete(self) -> None:
        self._head_started = False
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._head_deadline = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self.transport.is_closing():
            return
        if self._head_started:
            body = openai_error_bytes(408, f"the request's head did not arrive whole within {self.head_timeout:g} s")
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                                 b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
        self.transport.close()


class SignalAwareServer(uvicorn.Server):
    """uvicorn's server, which also tells the proxy when a signal starts its shutdown:
    uvicorn says so to no one before requests in flight have finished or been cut."""

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_signal = on_signal

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.on_signal()
        super().handle_exit(sig, frame)
