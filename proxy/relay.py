"""Relay a vLLM SSE stream to the client event by event, as it arrives.

Each complete event is forwarded as soon as its terminating blank line is
seen; the only event ever removed is the usage-only chunk that
``--enable-force-include-usage`` adds for clients that did not ask for usage,
so the client sees exactly what a direct call would have returned.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from proxy.observe import Observation, parse_json


def client_wants_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def _is_usage_only(payload: Any) -> bool:
    return isinstance(payload, dict) and payload.get("choices") == [] and "usage" in payload


async def relay_events(chunks: AsyncIterator[bytes], observation: Observation, strip_usage: bool) -> AsyncIterator[bytes]:
    buffer = b""
    async for raw in chunks:
        buffer += raw
        while True:
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            event, buffer = buffer[: end + 2], buffer[end + 2 :]
            if event.startswith(b"data: {"):
                payload = parse_json(event[6:])
                observation.feed(payload)
                if strip_usage and _is_usage_only(payload):
                    continue
            elif event.startswith(b"data: [DONE]"):
                observation.complete = True
            yield event
    if buffer:
        yield buffer
