"""Reading a client's request body, and the checks the proxy makes before it plans.

The proxy reads only what it must to route a request; vLLM validates the rest
and its answer passes through. What is refused here is what the proxy itself
cannot work with: another content type, a body over the limit, bytes that are
not a JSON object, a chat without messages. Every body the proxy buffers, the
passed-through ones included, is read under the same size limit: a client must
not be able to grow the proxy's memory without bound.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from draftgate.proxy.errors import ErrorShape, openai_error


class BadRequest(Exception):
    """A request the proxy answers itself, with an error of this status in the route's shape."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 closes: bool = False) -> None:
        """``closes``: the connection cannot carry another request (a body left half read)."""
        super().__init__(message)
        self.status, self.param, self.code, self.closes = status, param, code, closes

    def response(self, shape: ErrorShape = openai_error) -> JSONResponse:
        headers = {"connection": "close"} if self.closes else None
        return shape(self.status, str(self), param=self.param, code=self.code, headers=headers)


async def read_body(request: Request, limit: int, patience: float) -> bytes:
    """The body as sent, refused with 413 once it passes ``limit`` bytes, and with
    408 when it pauses ``patience`` seconds between two reads.

    A declared length over the limit is refused before anything is read; a
    chunked body is counted as it arrives, so neither form is buffered past it.
    The pause is measured between reads, as nginx's client_body_timeout is, so a
    large body on a slow but live link still arrives; a client that vanished
    mid-upload without closing (a killed pod, a partition) no longer holds the
    request, and its connection, for ever.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body exceeds {limit} bytes")
    chunks, size = [], 0
    pause = _PauseDeadline(patience)
    try:
        async for chunk in request.stream():
            pause.read()
            size += len(chunk)
            if size > limit:
                raise BadRequest(413, f"request body exceeds {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        # a client gone mid-upload (a timeout, a dropped link) is no fault of the proxy's:
        # counted as 499, as nginx names it, never logged as an error
        raise BadRequest(499, "the client disconnected while sending the request") from None
    except asyncio.CancelledError:
        if not pause.expired():
            raise
        raise BadRequest(408, f"the request body paused for over {patience:g} s", closes=True) from None
    finally:
        pause.close()
    return b"".join(chunks)


class _PauseDeadline:
    """Cancels the reading task once ``patience`` seconds pass without a read.

    One timer per body, moved only when it fires early: a body nearly always
    comes in one read, and ``asyncio.timeout`` with a reschedule per read cost
    twice as much on every request.
    """

    __slots__ = ("loop", "task", "patience", "last_read", "_expired", "_cancelling", "timer")

    def __init__(self, patience: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.patience = patience
        self.last_read = self.loop.time()
        self._expired = False
        self._cancelling = self.task.cancelling() if self.task is not None else 0
        self.timer = self.loop.call_at(self.last_read + patience, self._check)

    def read(self) -> None:
        self.last_read = self.loop.time()

    def expired(self) -> bool:
        """Whether the task was cancelled by this deadline alone (as ``asyncio.timeout`` tells:
        a cancellation from elsewhere as well must go on); if so, the cancellation is taken back."""
        return self._expired and self.task is not None and self.task.uncancel() <= self._cancelling

    def close(self) -> None:
        self.timer.cancel()

    def _check(self) -> None:
        due = self.last_read + self.patience
        if self.loop.time() < due:  # a read came meanwhile: wait out the rest
            self.timer = self.loop.call_at(due, self._check)
        elif self.task is not None:
            self._expired = True
            self.task.cancel()


async def read_json(request: Request, limit: int, patience: float) -> tuple[bytes, Any]:
    """The body as sent (it is forwarded byte for byte) and as parsed."""
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise BadRequest(415, f"content type must be application/json, got {ctype!r}")
    raw = await read_body(request, limit, patience)
    try:
        return raw, json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(400, f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest(400, "request body is nested too deeply to parse") from None
    except ValueError:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise BadRequest(400, "request body has an integer too long to parse") from None
