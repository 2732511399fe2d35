"""The proxy under uvicorn in front of emulated pools, driven by the openai client."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from draftgate.proxy.app import create_app
from draftgate.proxy.passthrough import has_dot_segment
from draftgate.servers import ServerThread
from tests.proxy_harness import (
    Stack,
    metric_value,
    no_collector_pauses,
    proxy_server,
    proxy_settings,
    stack,
    wait_until,
)

MODEL = "Qwen/Qwen3-32B"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city", "unit"]}}}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module", params=[1, 2], ids=lambda s: f"seed{s}")
def s(request: pytest.FixtureRequest) -> Iterator[Stack]:
    with stack(request.param) as st:
        yield st


def _strip_volatile(body: dict[str, Any]) -> dict[str, Any]:
    body = dict(body)
    body.pop("id", None)
    body.pop("created", None)
    for choice in body.get("choices", []):
        for call in (choice.get("message") or {}).get("tool_calls") or []:
            call.pop("id", None)
    return body


def test_routes_schema_to_speculation_and_prose_to_plain(s: Stack) -> None:
    r = s.client.chat.completions.with_raw_response.create(model=MODEL, messages=USER, tools=[WEATHER],
                                                           tool_choice="required", temperature=0)
    assert r.headers["x-draftgate-route"] == "spec-on"
    assert float(r.headers["x-draftgate-schema-fraction"]) == 1.0
    assert float(r.headers["x-draftgate-predicted-saving"]) > 0.2
    assert r.parse().choices[0].message.tool_calls
    r = s.client.chat.completions.with_raw_response.create(model=MODEL, messages=USER, temperature=0.7,
                                                           max_tokens=50)
    assert r.headers["x-draftgate-route"] == "spec-off"


def test_json_schema_and_thinking_streamed_and_not(s: Stack) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    r = s.client.chat.completions.create(model=MODEL, messages=USER, temperature=0,
                                         response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert isinstance(json.loads(r.choices[0].message.content)["a"], int)
    stream = s.client.chat.completions.create(model=MODEL, messages=USER, stream=True, max_tokens=300,
                                              extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    kinds = set()
    for chunk in stream:
        assert chunk.usage is None  # the client did not ask for usage: the forced chunk is removed
        for c in chunk.choices:
            if (c.delta.model_extra or {}).get("reasoning"):
                kinds.add("reasoning")
    assert kinds == {"reasoning"}
    stream = s.client.chat.completions.create(model=MODEL, messages=USER, stream=True, max_tokens=20,
                                              stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 20


def test_hidden_reasoning_is_learned_as_reasoning_not_as_the_visible_answer(s: Stack) -> None:
    """With include_reasoning false, vLLM leaves the reasoning out of the answer but counts
    its tokens in usage. Split by the visible text, a thinking tool call would be learned as
    all schema-bound, and its shape routed as if it were."""
    tool = {"type": "function", "function": {**WEATHER["function"], "name": "hidden_reasoning_weather"}}
    body = {"model": MODEL, "messages": USER, "tools": [tool], "tool_choice": "required", "temperature": 0,
            "max_tokens": 4000, "chat_template_kwargs": {"enable_thinking": True}, "include_reasoning": False}
    first = httpx.post(f"{s.proxy.url}/v1/chat/completions", json=body, timeout=60)
    message = first.json()["choices"][0]["message"]
    assert message["tool_calls"] and "reasoning" not in message  # hidden, as vLLM hides it
    visible = len(message["tool_calls"][0]["function"]["arguments"]) + len("hidden_reasoning_weather")
    assert first.json()["usage"]["completion_tokens"] > 3 * visible  # the reasoning was generated all the same
    for _ in range(4):
        httpx.post(f"{s.proxy.url}/v1/chat/completions", json=body, timeout=60)
    time.sleep(0.3)  # recording follows the response
    learned = httpx.post(f"{s.proxy.url}/v1/chat/completions", json=body, timeout=60)
    assert float(learned.headers["x-draftgate-schema-fraction"]) < 0.3


def test_transparent_against_a_direct_call(s: Stack) -> None:
    bodies = [
        {"model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0},
        {"model": MODEL, "messages": USER, "temperature": 0, "max_tokens": 40, "unknown_field": [1, 2]},
        {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 10, "temperature": 0},
        # a batch of prompts: one choice per prompt, as vLLM answers it
        {"model": MODEL, "prompt": ["Once upon a time", "In a galaxy"], "max_tokens": 10, "temperature": 0},
    ]
    for body in bodies:
        path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
        via = httpx.post(s.proxy.url + path, json=body, timeout=60)
        route = via.headers["x-draftgate-route"]
        direct = httpx.post((s.on.url if route == "spec-on" else s.off.url) + path, json=body, timeout=60)
        a, b = _strip_volatile(via.json()), _strip_volatile(direct.json())
        a.get("metrics", {}).pop("speculative_decoding", None) if route == "spec-on" else None
        b.get("metrics", {}).pop("speculative_decoding", None) if route == "spec-on" else None
        assert a == b


def test_streams_match_a_direct_call_event_for_event(s: Stack) -> None:
    body = {"model": MODEL, "messages": USER, "temperature": 0, "max_tokens": 30, "stream": True}

    def events(url: str) -> list[Any]:
        out = []
        for line in httpx.post(url + "/v1/chat/completions", json=body, timeout=60).text.split("\n\n"):
            if line.startswith("data: {"):
                payload = json.loads(line[6:])
                payload.pop("id"), payload.pop("created")
                out.append(payload)
            elif line:
                out.append(line)
        return out

    via = events(s.proxy.url)
    direct = [e for e in events(s.off.url) if not (isinstance(e, dict) and e.get("choices") == [])]
    assert via == direct  # the direct call carries the forced usage chunk; the proxy removes it


def test_fields_vllm_reads_laxly_are_relayed_as_vllm_answers_them(s: Stack) -> None:
    """vLLM streams "stream": "true" (its request models are lax), so the proxy relays that as a
    stream, event by event, and measures it as one; and stream_options {} asks for usage there."""
    streamed_before = s.metric("draftgate_decode_seconds_per_token_count")
    body = {"model": MODEL, "messages": USER, "temperature": 0, "max_tokens": "200", "stream": "true"}
    with no_collector_pauses(), httpx.stream("POST", f"{s.proxy.url}/v1/chat/completions", json=body,
                                             timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        pieces = list(r.iter_raw())
    text = b"".join(pieces).decode()
    assert text.rstrip().endswith("data: [DONE]") and text.count("data: {") > 3
    assert len(pieces) > 3  # relayed as the events came (over some 70 ms), not gathered into one answer
    assert "usage" not in text  # the pool's forced usage chunk is the proxy's, not the client's
    assert wait_until(lambda: s.metric("draftgate_decode_seconds_per_token_count") > streamed_before)
    asked = httpx.post(f"{s.proxy.url}/v1/chat/completions", timeout=60,
                       json={**body, "stream": True, "stream_options": {}}).text
    usage = [json.loads(line[6:]) for line in asked.split("\n\n") if line.startswith("data: {") and '"usage"' in line]
    assert usage and usage[-1]["usage"]["completion_tokens"] > 3


def test_request_body_reaches_the_backend_byte_for_byte(s: Stack) -> None:
    raw = b'{"model":"Qwen/Qwen3-32B",  "messages":[{"role":"user","content":"hi \\u00e9"}],"max_tokens":3,"z":1}'
    r = httpx.post(s.proxy.url + "/v1/chat/completions", content=raw,
                   headers={"content-type": "application/json", "x-custom": "kept", "authorization": "Bearer sk-c"})
    assert r.status_code == 200
    backend = s.on.url if r.headers["x-draftgate-route"] == "spec-on" else s.off.url
    seen = httpx.get(f"{backend}/debug/requests").json()[-1]
    assert seen["body"].encode() == raw
    assert seen["headers"]["x-custom"] == "kept" and seen["headers"]["authorization"] == "Bearer sk-c"
    assert "connection" not in seen["headers"]  # hop-by-hop: the client's keep-alive stays with the client


def test_a_client_expecting_100_continue_gets_its_own_answers(s: Stack) -> None:
    """curl sends ``Expect: 100-continue`` with a large body, as do .NET and some Java
    clients. The proxy's server answers it; passed on, the pool answered it again,
    and its 100 was taken for the answer. The real answer then waited on the pooled
    connection, to be read as the answer to the next request sent over it."""
    expect = {"expect": "100-continue"}
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 3000}], "max_tokens": 3}
    with httpx.Client(base_url=s.proxy.url, timeout=30) as client:
        for _ in range(3):  # over the same pooled upstream connections
            answer = client.post("/v1/chat/completions", json=chat, headers=expect)
            assert answer.status_code == 200 and answer.json()["object"] == "chat.completion", answer.text
            tokens = client.post("/tokenize", json={"model": MODEL, "prompt": "y" * 3000}, headers=expect)
            assert tokens.status_code == 200 and "tokens" in tokens.json(), tokens.text
    for backend in (s.on, s.off):
        assert all("expect" not in seen["headers"] for seen in httpx.get(f"{backend.url}/debug/requests").json())


def test_agent_conversation_stays_on_one_pool(s: Stack) -> None:
    # a long agent context (~16k tokens): re-prefilling it costs more than prose speculation loses
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent. " * 3600},
                                      {"role": "user", "content": "Plan my trip to Paris and check the weather"}]
    routes = []
    for turn in range(6):
        if turn % 2 == 0:
            r = s.client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, tools=[WEATHER],
                                                                   tool_choice="required", temperature=0,
                                                                   prompt_cache_key="trip-1")
            message = r.parse().choices[0].message
            call = message.tool_calls[0]
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.function.name,
                                                                 "arguments": call.function.arguments}}]})
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"})
        else:
            # agents send their tools every turn: they are part of the cached prompt prefix
            r = s.client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, tools=[WEATHER],
                                                                   tool_choice="none", temperature=0.7,
                                                                   max_tokens=60, prompt_cache_key="trip-1")
            messages.append({"role": "assistant", "content": r.parse().choices[0].message.content})
            messages.append({"role": "user", "content": f"Next step {turn}"})
        routes.append(r.headers["x-draftgate-route"])
    assert len(set(routes[1:])) == 1, routes
    explain = httpx.post(f"{s.proxy.url}/draftgate/explain",
                         json={"model": MODEL, "messages": messages, "tools": [WEATHER]}).json()
    assert explain["affinity"] is not None and explain["affinity"]["cached_tokens"] > 500
    # the client compacts its history: the prefix is new, the key it sends each turn is not
    compacted = {"model": MODEL, "tools": [WEATHER], "messages": [
        messages[0], {"role": "user", "content": "So far: weather checked. Book the hotel."}]}
    assert httpx.post(f"{s.proxy.url}/draftgate/explain", json=compacted).json()["affinity"] is None
    keyed = httpx.post(f"{s.proxy.url}/draftgate/explain", json={**compacted, "prompt_cache_key": "trip-1"}).json()
    assert keyed["affinity"] is not None and keyed["affinity"]["via"] == "session"
    assert keyed["affinity"]["pool"] == routes[-1]


def test_explain_endpoint(s: Stack) -> None:
    out = httpx.post(f"{s.proxy.url}/draftgate/explain",
                     json={"model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required"}).json()
    assert out["route"] == "spec-on" and out["w_s"] == 1.0
    assert out["predicted_saving"] > 0 and set(out["predicted_tau"]) == {"s", "r", "f"}
    assert "break_even_ws" in out and out["reasons"]


def test_the_commonest_agent_request_speculates_out_of_the_box_and_its_shape_is_learned_in_five(s: Stack) -> None:
    """One user question and one tool under tool_choice auto, default calibration, nothing learned:
    the speculation pool. After five responses of the shape, the estimate rests on them (confidence
    5/7) and its call probability is the prior's, worth two responses, moved by the five."""
    tool = {"type": "function", "function": {**WEATHER["function"], "name": "get_weather_out_of_the_box"}}
    body = {"model": MODEL, "messages": USER, "tools": [tool], "tool_choice": "auto"}
    prior = httpx.post(f"{s.proxy.url}/draftgate/explain", json=body).json()
    first = httpx.post(f"{s.proxy.url}/v1/chat/completions", json=body, timeout=60)
    assert first.headers["x-draftgate-route"] == "spec-on" and first.headers["x-draftgate-confidence"] == "0.00"
    calls = bool(first.json()["choices"][0]["message"].get("tool_calls"))
    for _ in range(4):
        answer = httpx.post(f"{s.proxy.url}/v1/chat/completions", json=body, timeout=60).json()
        calls += bool(answer["choices"][0]["message"].get("tool_calls"))

    def explained() -> dict[str, Any]:
        return httpx.post(f"{s.proxy.url}/draftgate/explain", json=body).json()  # type: ignore[no-any-return]

    assert wait_until(lambda: explained()["observations"] == 5)  # recording follows each response
    learned = explained()
    assert learned["confidence"] == pytest.approx(5 / 7)
    assert learned["p_tool_call"] == pytest.approx((2 * prior["p_tool_call"] + calls) / 7)
    assert any("learned from 5" in r for r in learned["reasons"])


def test_the_models_context_bounds_the_expected_output(s: Stack) -> None:
    """A schema asking for 100,000 long items, with no max_tokens, is expected to run only as far as
    the shorter of the pools' contexts lets it (as vLLM stops it there), not for millions of tokens."""
    contexts = [httpx.get(f"{pool.url}/v1/models").json()["data"][0]["max_model_len"] for pool in (s.on, s.off)]
    rows = {"type": "array", "minItems": 100_000, "items": {"type": "string", "minLength": 200}}
    request = {"model": MODEL, "messages": USER, "response_format": {
        "type": "json_schema", "json_schema": {"name": "rows", "schema": rows}}}
    out = httpx.post(f"{s.proxy.url}/draftgate/explain", json=request).json()
    expected = sum(out["expected_tokens"].values())
    assert expected <= min(contexts) - out["prompt_tokens"] + 1e-6
    assert expected > min(contexts) / 2  # capped there, not shrunk
    assert any("the context's room after the prompt" in r for r in out["reasons"])
    capped = httpx.post(f"{s.proxy.url}/draftgate/explain", json={**request, "max_tokens": 500}).json()
    assert sum(capped["expected_tokens"].values()) == pytest.approx(500)


def test_unsupported_sampling_and_n_go_plain(s: Stack) -> None:
    for extra in ({"frequency_penalty": 0.3}, {"n": 2}, {"logprobs": True}):
        r = httpx.post(f"{s.proxy.url}/v1/chat/completions", json={
            "model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0, **extra})
        assert r.status_code == 200 and r.headers["x-draftgate-route"] == "spec-off", extra


@pytest.mark.parametrize(("raw", "headers", "status", "needle"), [
    (b"{not json", {"content-type": "application/json"}, 400, "not valid JSON"),
    (b'{"messages": "hi"}', {"content-type": "application/json"}, 400, "messages"),
    (b'[1, 2]', {"content-type": "application/json"}, 400, "JSON object"),
    (b'{"model": "Qwen/Qwen3-32B", "messages": []}', {"content-type": "application/json"}, 400, "empty"),
    (b'{"messages": [{"role": "user", "content": "x"}]}', {"content-type": "text/plain"}, 415, "content type"),
    (b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', {"content-type": "application/json"},
     404, "does not exist"),
    # json.loads raises RecursionError and ValueError here, not JSONDecodeError
    (b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", {"content-type": "application/json"}, 400, "too deeply"),
    (b'{"messages": [], "max_tokens": 1' + b"0" * 5000 + b"}", {"content-type": "application/json"}, 400,
     "integer too long"),
])
def test_bad_input_gets_openai_errors(s: Stack, raw: bytes, headers: dict[str, str], status: int, needle: str) -> None:
    r = httpx.post(f"{s.proxy.url}/v1/chat/completions", content=raw, headers=headers)
    assert r.status_code == status
    error = r.json()["error"]
    assert needle in error["message"] and set(error) == {"message", "type", "param", "code"}
    assert s.client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2).choices


# Values no client should send, in every field the gate reads; 1e400 is how JSON
# writes infinity (json.loads reads it as inf), 10**400 overflows a float.
# "true" and "0.5" are what vLLM's lax request models read as true and 0.5.
ODD_VALUES = [1e400, -1e400, -1, 0, 10**30, 10**400, 1e-320, "x", None, True, [], {}, "true", "0.5"]
READ_FIELDS = ["stream", "ignore_eos", "min_tokens", "temperature", "max_tokens", "max_completion_tokens", "n",
               "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "logprobs",
               "top_logprobs", "reasoning_effort", "parallel_tool_calls", "tool_choice", "response_format",
               "structured_outputs", "chat_template_kwargs", "stream_options", "messages", "tools", "model", "prompt",
               "guided_json", "guided_choice"]


def _strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_odd_values_in_any_field_never_break_the_proxy() -> None:
    """The gate assesses every such request without failing; explain answers in strict
    JSON; the chat route answers, or passes the backend's 4xx on, in the OpenAI shape."""
    tools = [WEATHER]
    with stack(3) as st, httpx.Client(timeout=30) as client:
        for field in READ_FIELDS:
            for value in ODD_VALUES:
                raw = json.dumps({"model": MODEL, "messages": USER, "tools": tools, field: value}).encode()
                raw = raw.replace(b"Infinity", b"1e400")
                case = f"{field}={str(value)[:20]}"
                explained = client.post(f"{st.proxy.url}/draftgate/explain", content=raw,
                                        headers={"content-type": "application/json"})
                assert explained.status_code in (200, 400), case
                assert "error" in _strict_json(explained.text) or explained.status_code == 200, case
                served = client.post(f"{st.proxy.url}/v1/chat/completions", content=raw,
                                     headers={"content-type": "application/json"})
                assert served.status_code < 500, (case, served.text[:200])
                if served.status_code >= 400:
                    assert set(served.json()["error"]) >= {"message", "type", "param", "code"}, case
        assert st.metric("draftgate_gate_errors_total") == 0


def test_a_client_gone_mid_upload_is_counted_as_499_not_logged_as_an_error(
        s: Stack, caplog: pytest.LogCaptureFixture) -> None:
    for path in ("/v1/chat/completions", "/v1/embeddings"):
        with socket.create_connection(("127.0.0.1", s.proxy.port)) as sock:
            sock.sendall(f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                         f"content-length: 1000\r\n\r\n{{\"model\": ".encode())
            time.sleep(0.1)
    assert wait_until(lambda: s.metric("draftgate_requests_total", route="none", status="499") >= 1)
    assert httpx.get(f"{s.proxy.url}/health").status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_an_empty_model_name_is_served_as_vllm_serves_it(s: Stack) -> None:
    """vLLM answers a request naming no model, or "", with its own model: so must the proxy."""
    s.client.models.list()  # the catalog knows the pools' models, so unknown names get a 404
    for extra in ({"model": ""}, {}):
        body = {"messages": USER, "max_tokens": 2, **extra}
        via = httpx.post(f"{s.proxy.url}/v1/chat/completions", json=body)
        direct = httpx.post(f"{s.off.url}/v1/chat/completions", json=body)
        assert via.status_code == direct.status_code == 200, via.text
        assert via.json()["model"] == direct.json()["model"] == MODEL


def test_unknown_paths_and_methods_get_openai_errors(s: Stack) -> None:
    missing = httpx.get(f"{s.proxy.url}/nope")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    wrong = httpx.get(f"{s.proxy.url}/draftgate/explain")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert set(wrong.json()["error"]) == {"message", "type", "param", "code"}


def test_oversized_body_is_413_on_every_route_it_buffers() -> None:
    big = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 10_000}]}).encode()

    def chunked() -> Iterator[bytes]:  # no content-length: the limit must hold as the bytes arrive
        yield from (big[i:i + 1000] for i in range(0, len(big), 1000))

    with stack(3, max_body_bytes=4096) as st:
        for path in ("/v1/chat/completions", "/v1/embeddings", "/tokenize"):
            for content in (big, chunked()):
                r = httpx.post(f"{st.proxy.url}{path}", content=content, headers={"content-type": "application/json"})
                assert r.status_code == 413 and "exceeds 4096 bytes" in r.json()["error"]["message"], path
        for pool in (st.on, st.off):
            assert not any("x" * 1000 in seen["body"] for seen in httpx.get(f"{pool.url}/debug/requests").json())
        small = httpx.post(f"{st.proxy.url}/tokenize", json={"model": MODEL, "prompt": "under the limit"})
        assert small.status_code == 200, "the limit must not refuse what fits"


def test_a_path_with_dot_segments_is_answered_by_the_proxy_and_never_sent_on(s: Stack) -> None:
    """vLLM does not resolve "..", so it answers 404; a hop that did would lead the path out
    of /v1 to routes the proxy does not pass on, /invocations (which skips the gate) among them."""
    for path in ("/v1/../invocations", "/v1/%2e%2e/invocations", "/v1/./chat/completions", "/v1/models/.."):
        # sent as written: httpx would resolve the segments itself
        with httpx.Client() as client:
            request = client.build_request("POST", f"{s.proxy.url}/", json={"model": MODEL, "messages": USER},
                                           extensions={"target": path.encode()})
            r = client.send(request)
        assert r.status_code == 404 and "segments names no route" in r.json()["error"]["message"], path
        assert "x-draftgate-route" not in r.headers, path  # no pool saw it
    assert httpx.get(f"{s.proxy.url}/v1/models").status_code == 200
    # dots inside a segment are a name's, not a step up or aside
    assert not any(map(has_dot_segment, ("/v1/files/.env", "/v1/responses/resp_1..2", "/v1/a./b", "/v1/...")))


def test_backend_4xx_passes_through_unchanged(s: Stack) -> None:
    body = {"model": MODEL, "messages": USER, "n": 99}
    via = httpx.post(f"{s.proxy.url}/v1/chat/completions", json=body)
    direct = httpx.post(f"{s.off.url}/v1/chat/completions", json=body)
    assert via.status_code == direct.status_code == 400 and via.json() == direct.json()


def test_models_health_ready_metrics(s: Stack) -> None:
    models = s.client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert httpx.get(f"{s.proxy.url}/health").json() == {"status": "ok"}
    assert httpx.get(f"{s.proxy.url}/ready").status_code == 200
    for path in ("/health", "/ready"):  # some load balancers' checks send HEAD
        head = httpx.head(f"{s.proxy.url}{path}")
        assert head.status_code == 200 and head.content == b""
    s.client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2)
    text = httpx.get(f"{s.proxy.url}/metrics").text
    assert metric_value(text, "draftgate_requests_total", status="200") >= 1
    assert metric_value(text, "draftgate_proxy_overhead_seconds_count") >= 1


def test_passthrough_of_other_v1_routes(s: Stack) -> None:
    r = httpx.get(f"{s.proxy.url}/v1/unknown-route")
    assert r.status_code == 404 and r.headers["x-draftgate-route"] == "spec-off"
    assert r.json() == httpx.get(f"{s.off.url}/v1/unknown-route").json() == {"detail": "Not Found"}  # vLLM's, as is


def test_a_passed_through_path_keeps_its_percent_encoding() -> None:
    """/v1/responses/a%2Fb and /v1/responses/a/b are different paths: decoded on the
    way through, the first became the second."""
    seen: list[bytes] = []

    async def pool(request: Request) -> JSONResponse:
        if request.url.path not in ("/health", "/metrics"):  # the proxy's checks and scrapes come at any moment
            seen.append(request.scope["raw_path"])
        return JSONResponse({"object": "list", "data": [{"id": MODEL}]} if request.url.path == "/v1/models" else {})

    recording = Starlette(routes=[Route("/{path:path}", pool, methods=["GET", "POST"])])
    with ServerThread(recording) as upstream, proxy_server(create_app(proxy_settings(upstream.url, upstream.url))) as proxy:
        for path in ("/v1/responses/resp%2F1", "/v1/files/a%20b/content", "/v1/responses/resp_2?x=%2F"):
            assert httpx.get(f"{proxy.url}{path}").status_code == 200
            assert seen[-1] == path.split("?")[0].encode(), (path, seen[-1])


def test_vllm_routes_outside_v1_pass_through(s: Stack) -> None:
    """Clients count tokens with /tokenize before they send; through the proxy it
    answers as the plain pool does directly."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "How many tokens is this question?"}]}
    via = httpx.post(f"{s.proxy.url}/tokenize", json=body)
    direct = httpx.post(f"{s.off.url}/tokenize", json=body)
    assert via.status_code == 200 and via.json() == direct.json()
    assert via.headers["x-draftgate-route"] == "spec-off"
    chat = s.client.chat.completions.create(model=MODEL, messages=body["messages"], max_tokens=2)
    assert via.json()["count"] == chat.usage.prompt_tokens
    version = httpx.get(f"{s.proxy.url}/version")
    assert version.status_code == 200 and version.json() == httpx.get(f"{s.off.url}/version").json()
    refused = httpx.post(f"{s.proxy.url}/tokenize", json={"model": MODEL})
    assert refused.status_code == 400 and refused.json() == httpx.post(f"{s.off.url}/tokenize",
                                                                       json={"model": MODEL}).json()
