"""Errors in the API's own shape, with the right status. Never a traceback.

Every route speaks OpenAI's error shape but Anthropic's Messages API, whose
clients parse ``{"type": "error", "error": {"type", "message"}}``: each error
the proxy writes itself goes through an ``ErrorShape``, the route's.
"""

from __future__ import annotations

import json
from typing import Protocol

from starlette.responses import JSONResponse

_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    405: "invalid_request_error", 408: "invalid_request_error", 413: "invalid_request_error",
    415: "invalid_request_error", 429: "rate_limit_error", 431: "invalid_request_error", 499: "client_closed",
    500: "server_error", 502: "upstream_error", 503: "service_unavailable", 504: "upstream_timeout",
}


# Anthropic's error types by status; 503 is its "overloaded" (it sends 529, which clients retry alike)
_ANTHROPIC_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    405: "invalid_request_error", 408: "timeout_error", 413: "request_too_large", 415: "invalid_request_error",
    429: "rate_limit_error", 431: "request_too_large", 503: "overloaded_error", 504: "timeout_error",
}


class ErrorShape(Protocol):
    """How a route writes an error the proxy answers itself."""

    def __call__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> JSONResponse: ...


def openai_error(status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(_error(status, message, param, code), status_code=status, headers=headers)


def anthropic_error(status: int, message: str, *, param: str | None = None, code: str | None = None,
                    headers: dict[str, str] | None = None) -> JSONResponse:
    """An error as Anthropic's API (and vLLM's ``/v1/messages``) shapes it; it has no
    ``param`` or ``code``, so a parameter's name goes into the message."""
    if param is not None and param not in message:
        message = f"{param}: {message}"
    return JSONResponse(anthropic_error_body(status, message), status_code=status, headers=headers)


def anthropic_error_body(status: int, message: str) -> dict[str, object]:
    error_type = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": error_type, "message": message}}


def at_capacity_error(headers: dict[str, str] | None = None, shape: ErrorShape = openai_error) -> JSONResponse:
    """The answer when every pool that could serve a request is full and stayed full
    for the queue timeout: a 503 to retry shortly. ``headers``: the proxy's own."""
    return shape(503, "all pools are at capacity; retry shortly", code="overloaded",
                 headers={"retry-after": "1", **(headers or {})})


def openai_error_bytes(status: int, message: str) -> bytes:
    """The same error as JSON bytes, for an answer written below the ASGI app."""
    return json.dumps(_error(status, message, None, None)).encode()


def _error(status: int, message: str, param: str | None, code: str | None) -> dict[str, dict[str, str | None]]:
    return {"error": {"message": message, "type": _TYPES.get(status, "error"), "param": param, "code": code}}


def anthropic_stream_error_event(status: int, message: str) -> bytes:
    """An error inside a Messages stream: an ``error`` event, as vLLM's and Anthropic's streams end on one."""
    return b"event: error\ndata: " + json.dumps(anthropic_error_body(status, message)).encode() + b"\n\n"


def stream_error_event(status: int, message: str, sequence_number: int | None = None) -> bytes:
    """An error inside an SSE stream, as vLLM sends it (code is the integer status).

    ``sequence_number``: the stream is the Responses API's, whose events are named
    and numbered and which has no [DONE]; its error is an ``error`` event, the
    next in the sequence, which its clients know as they know the others.
    """
    if sequence_number is not None:
        event = {"type": "error", "code": str(status), "message": message, "param": None,
                 "sequence_number": sequence_number}
        return b"event: error\ndata: " + json.dumps(event).encode() + b"\n\n"
    payload = {"error": {"message": message, "type": _TYPES.get(status, "error"), "param": None, "code": status}}
    return b"data: " + json.dumps(payload).encode() + b"\n\ndata: [DONE]\n\n"
