"""Relay upstream bodies to the client as they arrive.

A gated stream goes event by event (chat's data-only events, or the named ones
of the Responses and Messages APIs): each complete event is forwarded as soon
as its terminating blank line is seen; the only event ever removed is the
usage-only chunk that ``--enable-force-include-usage`` adds for clients that
did not ask for usage, so the client sees exactly what a direct call would
have returned. The events one upstream read completes go to the client in one
write: they arrived together, and a proxy that has fallen behind catches up
with one write for its backlog rather than one per event. A passed-through
body goes chunk by chunk, whatever it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Send

from draftgate.proxy.observe import Observation
from draftgate.proxy.upstream import UpstreamAborted, UpstreamError


def _is_usage_only(payload: Any) -> bool:
    return isinstance(payload, dict) and payload.get("choices") == [] and "usage" in payload


# The Responses API names its events; the one that ends a stream holds the whole
# response, so it alone is read (a failed one has nothing to measure, but has
# ended as the server meant it to, as a chat stream's error and [DONE] do).
_RESPONSE_ENDS = (b"event: response.completed\n", b"event: response.incomplete\n", b"event: response.failed\n")
# The Messages API names its events too, but none holds the whole answer: each is
# read as it passes (they are small), and ``message_stop`` ends the stream.
_MESSAGE_EVENTS = (b"event: message_", b"event: content_block_")
_MESSAGE_END = b"event: message_stop\n"


async def relay_events(chunks: AsyncIterator[bytes], observation: Observation,
                       strip_usage: bool) -> AsyncIterator[list[bytes]]:
    """The events each read of ``chunks`` completes, in order: one list per read that completes any.

    The event that ends a Responses stream is not read here but left in
    ``observation.unread_answer``: with logprobs it is 10 MB, 0.1-0.2 s of reading,
    which the client's stream would otherwise wait for before it ends.
    """
    # An event can be large: a Responses stream with logprobs repeats them all in each of
    # its four closing events, 10 MB apiece at 8k tokens. So the bytes gather in one
    # bytearray (appending is amortised, taking an event off the front is cheap) and only
    # the new bytes are searched for its end: joining and rescanning the whole buffer on
    # every read was quadratic, seconds of a stalled loop per such stream.
    pending = bytearray()
    async for raw in chunks:
        searched = max(0, len(pending) - 1)  # the blank line may straddle two reads
        pending += raw
        events: list[bytes] = []
        while True:
            end = pending.find(b"\n\n", searched)
            if end < 0:
                break
            event = bytes(pending[: end + 2])
            del pending[: end + 2]
            searched = 0
            if event.startswith(b"data: {"):
                payload = observation.feed_bytes(event[6:])
                if strip_usage and _is_usage_only(payload):
                    continue
            elif event.startswith(b"data: [DONE]"):
                observation.complete = True
            elif event.startswith(_RESPONSE_ENDS):
                observation.unread_answer = event.partition(b"\ndata: ")[2]
                observation.complete = True
            elif event.startswith(_MESSAGE_EVENTS):
                observation.feed_bytes(event.partition(b"\ndata: ")[2])
                if event.startswith(_MESSAGE_END):
                    observation.complete = True
            events.append(event)
        if events:
            yield events
    if pending:
        yield [bytes(pending)]


class RelayedBody(StreamingResponse):
    """A passed-through body, relayed as it arrives, whose end is the upstream's end.

    When the upstream breaks midway (or the proxy is shutting down), the body is
    left unfinished: uvicorn then drops the client's connection, so the client
    knows its answer is incomplete. Ending it cleanly instead would hand the
    client a truncated body as if it were whole.
    """

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (UpstreamError, UpstreamAborted):
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})
