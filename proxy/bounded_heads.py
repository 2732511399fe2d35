"""uvicorn's HTTP/1.1 protocol, with a deadline and a size limit on each request's head.

uvicorn bounds neither. It waits for ever on a connection whose request line
and headers have not all come: one that sends nothing, or half a head. Each
holds a file descriptor, and a client that vanished without a FIN (a killed
pod, a partition) never sends the rest, so over weeks they exhaust the proxy's
descriptors. And it takes a head of any size: a 200 MB header was answered
200 after the proxy's memory had peaked at 465 MB, so one client could get the
proxy killed for memory, and every request in flight with it.

Here a head must be whole within ``head_timeout`` of the connection's opening,
or of its first byte on a kept-alive connection (before that, uvicorn's own
keep-alive timeout closes an idle one), and within ``max_head_bytes``: once
that many bytes have come without the head's end, it is refused. (A head that
ends in the read that crosses the limit passes: the bound is the limit plus one
read, 256 KiB, and counting only unfinished heads keeps every ordinary request
free of it.) A head cut short is answered 408, and one too large 431, each in
the OpenAI shape, and the connection is closed. A connection that sent nothing
is just closed, as uvicorn closes an idle kept-alive one, because a client may
have just written a request on it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from draftgate.proxy.errors import openai_error_bytes

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class BoundedHeadProtocol(HttpToolsProtocol):
    # the settings' defaults; proxy.serving.uvicorn_options makes a subclass with the configured ones
    head_timeout: float = 60.0
    max_head_bytes: int = 64 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._head_started = False  # between a request's first byte and its last header
        self._head_bytes = 0  # read since then: a little more than the head, never less

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # A whole head in one read (nearly every request) counts nothing and arms no
        # timer: both start only once a read has left a head unfinished.
        if not self._head_started:
            return
        self._head_bytes += len(data)
        if self._head_bytes > self.max_head_bytes:
            self._refuse(431, f"the request's line and headers exceed {self.max_head_bytes} bytes")
        elif self._head_deadline is None:
            self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_started = True
        self._head_bytes = 0

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
        if not self._head_started:
            self.transport.close()
        else:
            self._refuse(408, f"the request's head did not arrive whole within {self.head_timeout:g} s")

    def _refuse(self, status: int, message: str) -> None:
        self._disarm()
        if self.transport.is_closing():
            return
        body = openai_error_bytes(status, message)
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%s" % (status, _REASONS[status], len(body), body))
        self.transport.close()
