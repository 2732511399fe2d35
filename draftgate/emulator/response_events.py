"""The named SSE events of a Responses stream, as vLLM sends them.

Each output item (reasoning, the message, each function call) opens with its
first token, streams its own deltas (``response.reasoning_text.delta``,
``response.output_text.delta`` with its logprobs,
``response.function_call_arguments.delta``), and closes with its ``.done``
events when the next item opens or the response ends; the event that ends the
stream holds the whole response. A stored response is replayed as the same
events, each item's text in one delta.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from draftgate.emulator.responses import _Run


class Numbered:
    """Writes one stream's SSE events, numbered as vLLM numbers them; those at or
    before ``after`` (a resumed stream's ``starting_after``) are left out, as empty bytes."""

    def __init__(self, after: int = -1) -> None:
        self.number = 0
        self.after = after

    def __call__(self, kind: str, **fields: Any) -> bytes:
        number, self.number = self.number, self.number + 1
        if number <= self.after:
            return b""
        payload = {**fields, "sequence_number": number, "type": kind}
        return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


class LiveItems:
    """One running response's output items, turned into events as its tokens come."""

    def __init__(self, run: _Run, event: Numbered) -> None:
        self.run = run
        self.event = event
        self.opened: list[str] = []  # the ids of the items opened so far, in output order
        self.closed = 0  # how many of those have had their .done events

    def span(self, start: int, end: int) -> Iterator[bytes]:
        """The events for output tokens ``start:end``: a delta for each run of one item's tokens."""
        tokens = self.run.gen.tokens
        position = start
        while position < end:
            first = tokens[position]
            stop = position + 1
            if first.channel != "tool_name":  # a name is one token, and opens its call
                while stop < end and (tokens[stop].channel, tokens[stop].call) == (first.channel, first.call):
                    stop += 1
            if first.channel == "reasoning" and not self.run.include_reasoning:
                position = stop  # generated, and left out of the stream
                continue
            item = self.run.live_item(first.channel, first.call)
            if item["id"] not in self.opened:
                yield from self._close_open(position)
                self.opened.append(item["id"])
                yield from opening(self.event, len(self.opened) - 1, item)
            if first.channel != "tool_name":
                text = "".join(t.text for t in tokens[position:stop])
                yield delta(self.event, len(self.opened) - 1, item, text, self.run.logprobs(position, stop))
            position = stop

    def finish(self, response: dict[str, Any]) -> Iterator[bytes]:
        """The events that close what is still open, then the response's own."""
        for index, item in enumerate(response["output"]):
            if index >= len(self.opened):  # no token of it came (an empty message)
                yield from opening(self.event, index, item)
            if index >= self.closed:
                yield from closing(self.event, index, item)
        yield ending(self.event, response)

    def _close_open(self, position: int) -> Iterator[bytes]:
        if self.closed < len(self.opened):
            yield from closing(self.event, self.closed, self.run.items_at(position)[self.closed])
            self.closed += 1


def opened(event: Numbered, response: dict[str, Any]) -> Iterator[bytes]:
    """The events that open a stream: the response as it stands before any output."""
    opening_response = {**response, "status": "in_progress", "output": [], "usage": None}
    yield event("response.created", response=opening_response)
    yield event("response.in_progress", response=opening_response)


def replayed(response: dict[str, Any], after: int) -> Iterator[bytes]:
    """A finished response's events again (``GET ?stream=true``), those numbered past ``after``."""
    event = Numbered(after)
    yield from opened(event, response)
    for index, item in enumerate(response["output"]):
        yield from opening(event, index, item)
        if item["type"] == "function_call":
            yield delta(event, index, item, item["arguments"], [])
        else:
            part = item["content"][0]
            yield delta(event, index, item, part["text"], part.get("logprobs") or [])
        yield from closing(event, index, item)
    yield ending(event, response)


def opening(event: Numbered, index: int, item: dict[str, Any]) -> Iterator[bytes]:
    """The events that open an output item, before its first delta."""
    if item["type"] == "function_call":
        yield event("response.output_item.added", output_index=index,
                    item={**item, "arguments": "", "status": "in_progress"})
        return
    yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress",
                                                                        "content": []})
    part = ({"type": "output_text", "text": "", "annotations": []} if item["type"] == "message"
            else {"type": "reasoning_text", "text": ""})
    yield event("response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part)


def delta(event: Numbered, index: int, item: dict[str, Any], text: str, logprobs: list[dict[str, Any]]) -> bytes:
    if item["type"] == "function_call":
        return event("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=text)
    if item["type"] == "reasoning":
        return event("response.reasoning_text.delta", item_id=item["id"], output_index=index, content_index=0,
                     delta=text)
    return event("response.output_text.delta", item_id=item["id"], output_index=index, content_index=0,
                 delta=text, logprobs=logprobs)


def closing(event: Numbered, index: int, item: dict[str, Any]) -> Iterator[bytes]:
    """The events that close a finished output item."""
    if item["type"] == "function_call":
        yield event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                    arguments=item["arguments"])
    else:
        part = item["content"][0]
        if item["type"] == "message":
            yield event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                        text=part["text"], logprobs=part["logprobs"] or [])
        else:
            yield event("response.reasoning_text.done", item_id=item["id"], output_index=index, content_index=0,
                        text=part["text"])
        yield event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                    part=part)
    yield event("response.output_item.done", output_index=index, item=item)


def ending(event: Numbered, response: dict[str, Any]) -> bytes:
    kind = {"completed": "response.completed", "failed": "response.failed"}.get(response["status"])
    return event(kind or "response.incomplete", response=response)
