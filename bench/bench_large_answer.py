"""Benchmark: measuring a large answer read in part against parsing it whole.

    python -m bench.bench_large_answer [--rounds 5]

A non-streamed answer is measured on the event loop after it has gone, and
while that runs, every stream through the proxy waits. Answers with logprobs
are large; ``proxy/large_answers.py`` reads only the messages, usage and
metrics of one over 64 KiB, and parses a Responses answer without its
logprobs. This prints, for vLLM-shaped chat and Responses answers with
logprobs, the median time of ``json.loads`` of the whole body beside that of
the reading the proxy does (``answer_skeleton``, ``responses_answer``), in the
same run. Then it relays a Responses stream whose four closing events each
repeat the logprobs, cut into 64 KiB reads as a socket delivers it, through
``relay_events`` and through a copy of what it did before (join and rescan
its whole buffer on every read, parse the event that ends the stream whole),
and prints both times: each includes measuring the stream. Last, it reads
chat and Responses answers beside another task on the event loop, in one call
and in turns as the proxy does (``proxy/turns.py``), and prints how long that
task waited for its turn at most: the stall a stream through the proxy would
see.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import time
from typing import Any

from draftgate.policy.structure import chat_completion
from draftgate.proxy.large_answers import (
    LARGE_ANSWER_BYTES,
    answer_skeleton,
    answer_skeleton_in_turns,
    responses_answer,
    responses_answer_in_turns,
)
from draftgate.proxy.observe import Observation
from draftgate.proxy.relay import relay_events


def token_logprobs(tokens: int, top: int) -> list[dict[str, Any]]:
    def entry(token: str) -> dict[str, Any]:
        return {"token": token, "logprob": -0.123456, "bytes": list(token.encode())}
    return [{**entry(f" w{i}"), "top_logprobs": [entry(f" a{k}") for k in range(top)]} for i in range(tokens)]


def chat_answer(tokens: int, top: int) -> bytes:
    content = token_logprobs(tokens, top)
    answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "Qwen/Qwen3-32B",
              "choices": [{"index": 0, "logprobs": {"content": content}, "finish_reason": "length",
                           "message": {"role": "assistant", "content": "".join(e["token"] for e in content)}}],
              "usage": {"prompt_tokens": 20, "completion_tokens": tokens, "total_tokens": tokens + 20}}
    return json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode()


def responses_body(tokens: int, top: int) -> bytes:
    content = token_logprobs(tokens, top)
    text = {"type": "output_text", "text": "".join(e["token"] for e in content), "annotations": [], "logprobs": content}
    answer = {"id": "resp_1", "created_at": 1, "object": "response", "model": "Qwen/Qwen3-32B", "output": [
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "incomplete", "content": [text]}],
        "tools": [], "top_logprobs": top, "usage": {"input_tokens": 20, "output_tokens": tokens}}
    return json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode()


def median_ms(work: Any, raw: bytes, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work(raw)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def responses_stream(tokens: int, top: int) -> bytes:
    """The closing events of a Responses stream with logprobs, as vLLM sends them."""
    body = json.loads(responses_body(tokens, top))
    item = body["output"][0]
    text = item["content"][0]
    events = [("response.output_text.done", {"item_id": "msg_1", "output_index": 0, "content_index": 0,
                                              "text": text["text"], "logprobs": text["logprobs"]}),
              ("response.content_part.done", {"item_id": "msg_1", "output_index": 0, "content_index": 0,
                                               "part": text}),
              ("response.output_item.done", {"output_index": 0, "item": item}),
              ("response.completed", {"response": body})]
    return b"".join(f"event: {kind}\ndata: {json.dumps({**fields, 'type': kind}, separators=(',', ':'))}\n\n"
                    .encode() for kind, fields in events)


async def previous_relay(chunks: Any) -> Any:
    """How ``relay_events`` relayed such a stream before, for comparison: its buffer joined
    and searched whole on every read, and the event that ends the stream parsed whole."""
    observation = Observation(reshape=chat_completion)
    buffer = b""
    async for raw in chunks:
        buffer += raw
        while (end := buffer.find(b"\n\n")) >= 0:
            event, buffer = buffer[: end + 2], buffer[end + 2:]
            if event.startswith(b"event: response.completed\n"):
                observation.feed(json.loads(event.partition(b"\ndata: ")[2]))
            yield event


async def relay_and_read(chunks: Any) -> Any:
    """``relay_events``, then the reading of the event that ended the stream, as the proxy does
    once the stream's end has gone to the client."""
    observation = Observation(reshape=chat_completion)
    async for events in relay_events(chunks, observation, False):
        yield events
    await observation.feed_unread_answer()


def relay_ms(stream: bytes, splitter: Any) -> float:
    async def reads() -> Any:
        for start in range(0, len(stream), 65536):
            yield stream[start:start + 65536]

    async def drain() -> None:
        async for _ in splitter(reads()):
            pass
    start = time.perf_counter()
    asyncio.run(drain())
    return (time.perf_counter() - start) * 1e3


async def read_beside_a_stream(raw: bytes, at_once: Any, in_turns: Any) -> tuple[float, float]:
    """How long reading ``raw`` takes (``in_turns`` or, when it is None, ``at_once``), and
    the longest another task on the loop waits for its turn meanwhile (as a stream's next
    event would), both in ms."""
    reading = True
    longest = 0.0

    async def another_stream() -> None:
        nonlocal longest
        while reading:
            waiting = time.perf_counter()
            await asyncio.sleep(0)
            longest = max(longest, time.perf_counter() - waiting)

    beside = asyncio.create_task(another_stream())
    gc.collect()  # a collection owed for building the answer's millions of objects is not the reading's
    await asyncio.sleep(0)
    start = time.perf_counter()
    if in_turns is None:
        at_once(raw)
    else:
        await in_turns(raw)
    took = time.perf_counter() - start
    reading = False
    await beside
    return took * 1e3, longest * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'answer':>38} {'size':>8} {'json.loads':>11} {'read in part':>13} {'ratio':>6}  the proxy")
    responses_answer(b'{"logprobs": []}')  # the pattern it skips logprobs with compiles on first use: not timed
    for api, shape, reader in (("chat", chat_answer, answer_skeleton), ("responses", responses_body, responses_answer)):
        for tokens, top in ((512, 0), (1024, 5), (4096, 5), (8192, 20)):
            raw = shape(tokens, top)
            whole, part = median_ms(json.loads, raw, args.rounds), median_ms(reader, raw, args.rounds)
            label = f"{api}: {tokens} tokens, top_logprobs {top}"
            used = "reads it in part" if len(raw) > LARGE_ANSWER_BYTES else "parses it whole"
            print(f"{label:>38} {len(raw) / 1e6:>6.2f}MB {whole:>9.1f}ms {part:>11.2f}ms {whole / part:>6.1f}x  {used}")
    print(f"\n{'Responses stream, closing events':>38} {'size':>8} {'before':>11} {'the proxy':>13} {'ratio':>6}")
    for tokens, top in ((1024, 5), (4096, 5), (8192, 20)):
        stream = responses_stream(tokens, top)
        old = relay_ms(stream, previous_relay)
        new = relay_ms(stream, relay_and_read)
        label = f"{tokens} tokens, top_logprobs {top}"
        print(f"{label:>38} {len(stream) / 1e6:>6.2f}MB {old:>9.1f}ms {new:>11.1f}ms {old / new:>6.1f}x")
    print(f"\n{'answer read beside a stream':>38} {'size':>8} {'in one call':>11} {'longest wait':>13}"
          f" {'in turns':>9} {'longest wait':>13}")
    readers = (("chat", chat_answer, answer_skeleton, answer_skeleton_in_turns),
               ("responses", responses_body, responses_answer, responses_answer_in_turns))
    for api, shape, at_once, in_turns in readers:
        for tokens, top in ((1024, 5), (4096, 5), (8192, 20)):
            raw = shape(tokens, top)
            took, waited = asyncio.run(read_beside_a_stream(raw, at_once, None))
            took_in_turns, waited_in_turns = asyncio.run(read_beside_a_stream(raw, at_once, in_turns))
            label = f"{api}: {tokens} tokens, top_logprobs {top}"
            print(f"{label:>38} {len(raw) / 1e6:>6.2f}MB {took:>9.1f}ms {waited:>11.1f}ms"
                  f" {took_in_turns:>7.1f}ms {waited_in_turns:>11.1f}ms")


if __name__ == "__main__":
    main()
