"""A large answer is measured from its parts alone, and measures as the whole would."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from draftgate.policy.structure import TextParts, chat_completion
from draftgate.proxy import large_answers
from draftgate.proxy.app import create_app
from draftgate.proxy.large_answers import (
    LARGE_ANSWER_BYTES,
    answer_skeleton,
    answer_skeleton_in_turns,
    responses_answer,
    responses_answer_in_turns,
)
from draftgate.proxy.observe import Observation
from draftgate.proxy.relay import relay_events
from draftgate.proxy.turns import at_once as run_at_once
from tests.conftest import emulator
from tests.proxy_harness import (
    hold_answer_readings,
    metric_value,
    proxy_server,
    proxy_settings,
    stack,
    wait_until,
)

MODEL = "Qwen/Qwen3-32B"


def parts_of(answer: Any) -> TextParts:
    parts = TextParts()
    parts.add_chunk(answer)
    return parts


def logprobs(tokens: list[str], top: int) -> dict[str, Any]:
    def entry(token: str) -> dict[str, Any]:
        return {"token": token, "logprob": -0.25, "bytes": list(token.encode())}
    return {"content": [{**entry(t), "top_logprobs": [entry(t + str(k)) for k in range(top)]} for t in tokens]}


def chat_answer(messages: list[dict[str, Any]], tokens: list[str], top: int = 3) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": MODEL,
        "choices": [{"index": i, "message": m, "logprobs": logprobs(tokens, top), "finish_reason": "stop",
                     "stop_reason": None} for i, m in enumerate(messages)],
        "usage": {"prompt_tokens": 12, "completion_tokens": 345, "total_tokens": 357,
                  "prompt_tokens_details": {"cached_tokens": 4}},
        "prompt_logprobs": None,
        "metrics": {"speculative_decoding": {"num_spec_steps": 10, "num_accepted_draft_tokens": 17}},
    }


def assert_reads_alike(answer: dict[str, Any], **dumps: Any) -> None:
    raw = json.dumps(answer, **dumps).encode()
    skeleton = answer_skeleton(raw)
    assert skeleton is not None
    assert parts_of(skeleton) == parts_of(answer)
    for key in ("id", "usage", "metrics"):
        assert skeleton.get(key) == answer.get(key), key


def test_a_chat_answer_with_tool_calls_reasoning_and_two_choices_reads_as_parsed_whole() -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "note": "\\"message\\": no"}'}}
    messages = [{"role": "assistant", "content": None, "reasoning": "the user wants weather", "tool_calls": [call]},
                {"role": "assistant", "content": 'a "message": inside, and "usage": too', "tool_calls": []}]
    assert_reads_alike(chat_answer(messages, [" tok"] * 200))
    assert_reads_alike(chat_answer(messages, [" tok"] * 200), separators=(",", ":"), ensure_ascii=False)


def test_a_message_longer_than_the_first_span_decoded_reads_whole() -> None:
    """A value is decoded from a span of 64 KiB, four times longer each time it does not
    end inside: two-byte characters put a span's end inside one, which it must not cut."""
    for content in ("é" * 100_000, "a" + "é" * 40_000 + "€" * 30_000):
        assert_reads_alike(chat_answer([{"role": "assistant", "content": content}], [" tok"] * 20),
                           ensure_ascii=False)


def test_a_completions_answer_reads_as_parsed_whole() -> None:
    answer = {"id": "cmpl-1", "object": "text_completion", "model": MODEL,
              "choices": [{"index": 0, "text": "once upon a time", "finish_reason": "length",
                           "logprobs": {"text_offset": [0, 4], "token_logprobs": [-0.1, -0.2],
                                        "tokens": ["once", " upon"], "top_logprobs": [{"once": -0.1}]}}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}
    assert_reads_alike(answer)


@settings(max_examples=150, deadline=None)
@given(contents=st.lists(st.text(max_size=40), min_size=1, max_size=3),
       tokens=st.lists(st.text(max_size=8), max_size=12), compact=st.booleans())
def test_any_texts_read_as_parsed_whole(contents: list[str], tokens: list[str], compact: bool) -> None:
    """Quotes, backslashes, key-like runs and any Unicode in the text or the logprobs."""
    messages = [{"role": "assistant", "content": c, "reasoning": c[::-1]} for c in contents]
    dumps = {"separators": (",", ":"), "ensure_ascii": False} if compact else {}
    assert_reads_alike(chat_answer(messages, tokens), **dumps)


def test_a_large_stream_chunk_reads_as_parsed_whole() -> None:
    """A chunk's delta is read as a message is: the relay reads a chunk over 64 KiB (a step's
    tokens, each with its logprobs) in part too, and measures it alike."""
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
             "choices": [{"index": 0, "delta": {"content": 'a "delta": here', "reasoning": "hmm"},
                          "logprobs": logprobs([" tok"] * 300, 20), "finish_reason": None}]}
    raw = json.dumps(chunk, separators=(",", ":")).encode()
    assert len(raw) > LARGE_ANSWER_BYTES
    skeleton = answer_skeleton(raw)
    assert skeleton is not None and parts_of(skeleton) == parts_of(chunk) and skeleton["id"] == "chatcmpl-1"
    event = b"data: " + raw + b"\n\n"

    async def relayed() -> list[bytes]:
        async def read() -> AsyncIterator[bytes]:
            yield event
        observation = Observation()
        events = [e async for batch in relay_events(read(), observation, strip_usage=True) for e in batch]
        assert observation.parts == parts_of(chunk)
        return events
    assert asyncio.run(relayed()) == [event]


def test_bytes_that_are_not_utf8_or_not_whole_give_nothing_or_what_is_there() -> None:
    assert answer_skeleton(b'{"id": "x\xff"}') is None
    cut = json.dumps(chat_answer([{"role": "assistant", "content": "hi"}], [" a"] * 50)).encode()[:400]
    skeleton = answer_skeleton(cut)
    assert skeleton is not None and skeleton["id"] == "chatcmpl-1" and "usage" not in skeleton


def test_a_large_answer_through_the_proxy_is_measured_in_full() -> None:
    """Logprobs make the answer large: it is read in part, and its tokens are all counted."""
    with stack(61) as s:
        answer = httpx.post(f"{s.proxy.url}/v1/chat/completions", timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": "tell me a long story"}],
            "max_tokens": 400, "logprobs": True, "top_logprobs": 20})
        assert answer.status_code == 200
        assert len(answer.content) > LARGE_ANSWER_BYTES  # else this tests the whole parse
        route = answer.headers["x-draftgate-route"]
        generated = answer.json()["usage"]["completion_tokens"]

        def counted() -> float:  # recorded once the answer has gone: a moment later
            text = httpx.get(f"{s.proxy.url}/metrics").text
            return sum(metric_value(text, "draftgate_output_tokens_total", pool=route, token_class=c) for c in "srf")
        assert wait_until(lambda: abs(counted() - generated) < 1e-6), (counted(), generated)


# ------------------------------------------------------------------ the Responses API


def responses_answer_body(texts: list[str], tokens: list[str], top: int = 3) -> dict[str, Any]:
    """A Responses answer as vLLM shapes one: reasoning, a message whose text carries its
    logprobs, a function call, and the request's tools repeated."""
    entries = logprobs(tokens, top)["content"]
    return {
        "id": "resp_1", "created_at": 1, "object": "response", "model": MODEL,
        "metadata": {"note": 'a "logprobs": [ key-like run'},
        "output": [
            {"id": "rs_1", "type": "reasoning", "summary": [],
             "content": [{"type": "reasoning_text", "text": t[::-1]} for t in texts]},
            {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": t, "annotations": [], "logprobs": entries} for t in texts]},
            {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "get_weather",
             "arguments": '{"city": "Paris", "logprobs": [1]}', "status": "completed"}],
        "tools": [{"type": "function", "name": "get_weather", "parameters": {
            "type": "object", "properties": {"logprobs": {"type": "array", "items": {"type": "number"}}}}}],
        "top_logprobs": top, "usage": {"input_tokens": 12, "output_tokens": 345}}


def assert_responses_read_alike(answer: dict[str, Any], **dumps: Any) -> None:
    for whole in (answer, {"response": answer, "sequence_number": 40, "type": "response.completed"}):
        read = responses_answer(json.dumps(whole, **dumps).encode())
        assert read is not None
        assert chat_completion(read) == chat_completion(whole)


def test_a_responses_answer_reads_as_parsed_whole_without_its_logprobs() -> None:
    answer = responses_answer_body(["the weather is fine", 'with "quotes" and [brackets]'], [" tok"] * 300)
    assert_responses_read_alike(answer)
    assert_responses_read_alike(answer, separators=(",", ":"), ensure_ascii=False)
    read = responses_answer(json.dumps(answer).encode())
    assert read is not None and read["output"][1]["content"][0]["logprobs"] is None
    assert read["tools"] == answer["tools"]  # a logprobs key whose value is no list is left as it is


@settings(max_examples=150, deadline=None)
@given(texts=st.lists(st.text(max_size=40), min_size=1, max_size=3),
       tokens=st.lists(st.text(max_size=8), max_size=12), compact=st.booleans())
def test_any_responses_texts_and_tokens_read_as_parsed_whole(texts: list[str], tokens: list[str],
                                                            compact: bool) -> None:
    """Tokens full of brackets, braces, quotes and backslashes end no logprobs list early."""
    dumps = {"separators": (",", ":"), "ensure_ascii": False} if compact else {}
    assert_responses_read_alike(responses_answer_body(texts, tokens), **dumps)


def test_a_responses_answer_that_cannot_be_skipped_so_gives_nothing() -> None:
    deep = responses_answer_body(["hi"], [])
    deep["output"][1]["content"][0]["logprobs"] = [[[[[[["deeper than logprobs nest"]]]]]]]
    assert responses_answer(json.dumps(deep).encode()) is None
    assert responses_answer(b'{"id": "resp_\xff"}') is None
    assert responses_answer(json.dumps(responses_answer_body(["hi"], [" a"])).encode()[:-40]) is None
    # a key in every few bytes would cost more to skip one by one than to parse
    many = responses_answer_body(["hi"] * 1023, [" a"])  # and one key in the tools: 1,024 in all
    assert responses_answer(json.dumps(many).encode()) is not None
    many["output"][1]["content"].append(many["output"][1]["content"][0])
    assert responses_answer(json.dumps(many).encode()) is None


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_large_answer_is_read_in_turns_that_let_other_streams_run(api: str) -> None:
    """Its keys are searched for, and a Responses answer's logprobs skipped, a bounded
    stretch at a step, never in one call: between the steps the event loop runs the
    other streams, which would otherwise wait 12 ms (chat) or 0.1-0.2 s (Responses)
    at 8k tokens with top_logprobs 20."""
    tokens = [f" w{i}" for i in range(2000)]
    if api == "chat":
        answer = chat_answer([{"role": "assistant", "content": "a long answer"}] * 2, tokens, top=20)
        at_once, in_turns = answer_skeleton, answer_skeleton_in_turns
    else:
        answer = responses_answer_body(["a long answer"], tokens, top=5)
        at_once, in_turns = responses_answer, responses_answer_in_turns
    raw = json.dumps(answer).encode()
    # the search for messages reads on through every choice's logprobs (the other keys are
    # near the ends); a Responses answer's logprobs are skipped 32 entries at a step
    steps = len(raw) // large_answers._SEARCH_STEP if api == "chat" else 2000 // 32
    assert steps >= 20

    async def read_beside_another_stream() -> tuple[dict[str, Any] | None, int]:
        turns = 0

        async def another_stream() -> None:
            nonlocal turns
            while True:
                await asyncio.sleep(0)
                turns += 1
        beside = asyncio.create_task(another_stream())
        await asyncio.sleep(0)
        turns = 0
        read = await in_turns(raw, turn=0.0)  # a turn after every step
        beside.cancel()
        return read, turns

    read, turns = asyncio.run(read_beside_another_stream())
    assert read is not None and read == at_once(raw)
    assert turns >= steps - 1, (turns, steps)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from([b"x", b'"', b"id", b'"id"', b'"usage"', b"a"]), max_size=30),
       needle=st.sampled_from([b'"id"', b"a", b'"usage"']), step=st.integers(7, 12), start=st.integers(0, 70))
def test_searching_a_step_at_a_time_finds_what_one_search_finds(parts: list[bytes], needle: bytes, step: int,
                                                              start: int) -> None:
    """A key that straddles two steps is found, and the first (or last) is found first.
    (Steps are longer than keys, as 256 KiB is.)"""
    haystack = b"".join(parts)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(large_answers, "_SEARCH_STEP", step)
        assert run_at_once(large_answers._searching(haystack, needle, start)) == haystack.find(needle, start)
        end = min(start, len(haystack))
        assert run_at_once(large_answers._searching_back(haystack, needle, end)) == haystack.rfind(needle, 0, end)


def test_a_responses_streams_end_reaches_the_client_before_its_answer_is_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The event that ends a Responses stream holds the whole response again: with
    logprobs 10 MB, read in 0.1-0.2 s. The stream ends for the client first; the
    reading, the recording and the replica's release follow."""
    client_has_the_end = hold_answer_readings(monkeypatch)
    with stack(63) as s:
        body = {"model": MODEL, "input": "tell me a story", "max_output_tokens": 40, "temperature": 0,
                "stream": True}
        with httpx.stream("POST", f"{s.proxy.url}/v1/responses", timeout=5, json=body) as events:
            assert events.headers["x-draftgate-route"] == "spec-off"
            last = events.read().decode().rstrip().rpartition("\ndata: ")[2]  # the body has ended
        assert proxy_inflight(s.proxy.url) == 1 and output_tokens_counted(s.proxy.url) == 0
        client_has_the_end.set()
        generated = json.loads(last)["response"]["usage"]["output_tokens"]
        assert wait_until(lambda: output_tokens_counted(s.proxy.url) == generated)
        assert wait_until(lambda: proxy_inflight(s.proxy.url) == 0)


def test_stopping_waits_for_answers_still_being_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream that has ended for its client may still be being read when the proxy
    is told to stop: stopping waits for that reading, so its tokens are counted."""
    reading = hold_answer_readings(monkeypatch)
    with emulator(63, True) as on, emulator(63, False) as off:
        app = create_app(proxy_settings(on.url, off.url))
        with proxy_server(app) as proxy:
            body = {"model": MODEL, "input": "tell me a story", "max_output_tokens": 40, "temperature": 0,
                    "stream": True}
            with httpx.stream("POST", f"{proxy.url}/v1/responses", timeout=5, json=body) as events:
                last = events.read().decode().rstrip().rpartition("\ndata: ")[2]
            threading.Timer(0.3, reading.set).start()  # once the proxy has been told to stop
    generated = json.loads(last)["response"]["usage"]["output_tokens"]
    counted = output_tokens_in(generate_latest(app.state.proxy.metrics.registry).decode())
    assert generated > 0 and counted == generated


def proxy_inflight(url: str) -> float:
    return metric_value(httpx.get(f"{url}/metrics").text, "draftgate_pool_inflight_requests", pool="spec-off")


def output_tokens_counted(url: str) -> float:
    """Recorded once an answer has gone to the client: a moment later."""
    return output_tokens_in(httpx.get(f"{url}/metrics").text)


def output_tokens_in(metrics: str) -> float:
    return sum(metric_value(metrics, "draftgate_output_tokens_total", pool="spec-off", token_class=c) for c in "srf")


def test_a_large_responses_answer_through_the_proxy_is_measured_in_full() -> None:
    """Logprobs make it large, streamed or not: it is read without them, and its tokens are all counted."""
    with stack(62) as s:
        body = {"model": MODEL, "input": "tell me a long story", "max_output_tokens": 400, "top_logprobs": 20,
                "include": ["message.output_text.logprobs"], "temperature": 0}

        def counted() -> float:
            return output_tokens_counted(s.proxy.url)
        answer = httpx.post(f"{s.proxy.url}/v1/responses", timeout=60, json=body)
        assert answer.status_code == 200 and answer.headers["x-draftgate-route"] == "spec-off"
        assert len(answer.content) > LARGE_ANSWER_BYTES  # else this tests the whole parse
        assert answer.json()["output"][0]["content"][0]["logprobs"][0]["top_logprobs"]
        generated = answer.json()["usage"]["output_tokens"]
        assert wait_until(lambda: abs(counted() - generated) < 1e-6), (counted(), generated)

        with httpx.stream("POST", f"{s.proxy.url}/v1/responses", timeout=60, json={**body, "stream": True}) as events:
            last = events.read().decode().rstrip().rpartition("\ndata: ")[2]
        assert len(last) > LARGE_ANSWER_BYTES
        streamed = json.loads(last)["response"]["usage"]["output_tokens"]
        assert wait_until(lambda: abs(counted() - generated - streamed) < 1e-6), (counted(), generated + streamed)
