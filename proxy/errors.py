"""Errors in the OpenAI shape, with the right status. Never a traceback."""

from __future__ import annotations

import json

from starlette.responses import JSONResponse

_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    405: "invalid_request_error", 408: "invalid_request_error", 413: "invalid_request_error",
    415: "invalid_request_error", 429: "rate_limit_error", 431: "invalid_request_error", 499: "client_closed",
    500: "server_error", 502: "upstream_error", 503: "service_unavailable", 504: "upstream_timeout",
}


def openai_error(status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(_error(status, message, param, code), status_code=status, headers=headers)


def at_capacity_error(headers: dict[str, str] | None = None) -> JSONResponse:
    """The answer when every pool that could serve a request is full and stayed full
    for the queue timeout: a 503 to retry shortly. ``headers``: the proxy's own."""
    return openai_error(503, "all pools are at capacity; retry shortly", code="overloaded",
                        headers={"retry-after": "1", **(headers or {})})


def openai_error_bytes(status: int, message: str) -> bytes:
    """The same error as JSON bytes, for an answer written below the ASGI app."""
    return json.dumps(_error(status, message, None, None)).encode()


def _error(status: int, message: str, param: str | None, code: str | None) -> dict[str, dict[str, str | None]]:
    return {"error": {"message": message, "type": _TYPES.get(status, "error"), "param": param, "code": code}}


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
