"""draftgate.proxy.relay: a backend's SSE stream reaches the client event for event, whatever its events hold."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from hypothesis import given, settings
from hypothesis import strategies as st

from draftgate.policy.structure import chat_completion
from draftgate.proxy.observe import Observation
from draftgate.proxy.relay import relay_events


def _event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


CHUNK = _event({"choices": [{"index": 0, "delta": {"content": "Hello"}}]})
USAGE_ONLY = _event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 1}})
DONE = b"data: [DONE]\n\n"
# Events a measurement cannot read: json.loads raises RecursionError, ValueError
# (an integer past the conversion limit) and UnicodeDecodeError on these.
UNREADABLE = [
    b"data: {\"x\": " + b"[" * 5000 + b"]" * 5000 + b"}\n\n",
    b"data: {\"x\": 1" + b"0" * 5000 + b"}\n\n",
    b"data: {\"x\": \"\xff\xfe\"}\n\n",
    b"data: {not json}\n\n",
]


async def _split(stream: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(stream), size):
        yield stream[start:start + size]


def _relay(stream: bytes, size: int, strip_usage: bool) -> tuple[list[bytes], Observation]:
    observation = Observation()

    async def collect() -> list[bytes]:
        return [event async for read in relay_events(_split(stream, size), observation, strip_usage) for event in read]

    return asyncio.run(collect()), observation


def test_events_pass_whole_and_in_order_however_the_bytes_are_cut() -> None:
    events = [CHUNK, *UNREADABLE, CHUNK, USAGE_ONLY, DONE]
    for size in (1, 7, 4096, 1 << 20):
        relayed, observation = _relay(b"".join(events), size, strip_usage=False)
        assert relayed == events, size
        assert observation.complete and observation.prompt_tokens == 7
        assert "".join(observation.parts.content) == "HelloHello"  # the unreadable ones were not measured


async def _cut(stream: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    edges = [0, *sorted({c % (len(stream) + 1) for c in cuts}), len(stream)]
    for start, end in zip(edges, edges[1:]):
        yield stream[start:end]


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 200_000), min_size=1, max_size=5), cuts=st.lists(st.integers(0, 10**6)))
def test_events_of_any_size_pass_whole_wherever_the_reads_end(sizes: list[int], cuts: list[int]) -> None:
    """Large events (a Responses stream's closing ones repeat every logprob) come out whole,
    with a read ending anywhere, between the two newlines that end one included."""
    events = [_named("response.output_text.done", {"text": "x" * size}) for size in sizes]
    stream = b"".join(events) + DONE

    async def collect() -> list[bytes]:
        return [event async for read in relay_events(_cut(stream, cuts), Observation(), False) for event in read]
    assert asyncio.run(collect()) == [*events, DONE]


def test_the_events_one_read_completes_go_out_together() -> None:
    """A proxy behind its upstream reads several events at once; it writes them at once,
    not one write each. A read that completes no event sends nothing."""
    reads = [CHUNK + CHUNK[:9], CHUNK[9:] + CHUNK + USAGE_ONLY, DONE[:4], DONE[4:]]

    async def collect() -> list[list[bytes]]:
        async def upstream() -> AsyncIterator[bytes]:
            for read in reads:
                yield read
        return [batch async for batch in relay_events(upstream(), Observation(), strip_usage=True)]

    assert asyncio.run(collect()) == [[CHUNK], [CHUNK, CHUNK], [DONE]]


def test_the_usage_only_chunk_is_removed_for_clients_that_did_not_ask() -> None:
    relayed, observation = _relay(CHUNK + USAGE_ONLY + DONE, 5, strip_usage=True)
    assert relayed == [CHUNK, DONE]
    assert observation.prompt_tokens == 7  # still measured


def _named(kind: str, payload: dict[str, object]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({**payload, 'type': kind})}\n\n".encode()


def test_a_responses_stream_is_relayed_whole_and_read_from_the_event_that_ends_it() -> None:
    response = {"id": "resp_1", "object": "response", "usage": {"input_tokens": 3, "output_tokens": 4},
                "output": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]}
    stream = (_named("response.created", {"response": {**response, "output": []}, "sequence_number": 0})
              + _named("response.completed", {"response": response, "sequence_number": 1}))
    for size in (1, 7, len(stream)):
        observation = Observation(reshape=chat_completion)

        async def collect(obs: Observation = observation) -> list[bytes]:
            relayed = [event async for read in relay_events(_split(stream, size), obs, True) for event in read]
            assert obs.complete and obs.response_id is None  # ended, and read only once the client has its end
            await obs.feed_unread_answer()
            return relayed

        assert b"".join(asyncio.run(collect())) == stream
        assert observation.response_id == "resp_1" and observation.unread_answer is None
        assert observation.measured({}).tool_calls == 1 and observation.measured({}).total_tokens == 4
    failed = _named("response.created", {"response": response}) + _named("response.failed", {"response": {}})
    observation = Observation(reshape=chat_completion)

    async def collect_failed() -> list[bytes]:
        relayed = [event async for read in relay_events(_split(failed, 5), observation, True) for event in read]
        await observation.feed_unread_answer()
        return relayed

    assert b"".join(asyncio.run(collect_failed())) == failed
    assert observation.complete  # ended as the server meant it to, with nothing to measure
    assert observation.measured({}).total_tokens == 0
