"""The proxy under uvicorn in front of emulated pools, driven by the openai client."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from tests.conftest import emulator
from tests.proxy_harness import Stack, metric_value, proxy_server, proxy_settings, stack, wait_until

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


def test_transparent_against_a_direct_call(s: Stack) -> None:
    bodies = [
        {"model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0},
        {"model": MODEL, "messages": USER, "temperature": 0, "max_tokens": 40, "unknown_field": [1, 2]},
        {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 10, "temperature": 0},
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


def test_agent_conversation_stays_on_one_pool(s: Stack) -> None:
    # a long agent context (~16k tokens): re-prefilling it costs more than prose speculation loses
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent. " * 3600},
                                      {"role": "user", "content": "Plan my trip to Paris and check the weather"}]
    routes = []
    for turn in range(6):
        if turn % 2 == 0:
            r = s.client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, tools=[WEATHER],
                                                                   tool_choice="required", temperature=0)
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
                                                                   max_tokens=60)
            messages.append({"role": "assistant", "content": r.parse().choices[0].message.content})
            messages.append({"role": "user", "content": f"Next step {turn}"})
        routes.append(r.headers["x-draftgate-route"])
    assert len(set(routes[1:])) == 1, routes
    explain = httpx.post(f"{s.proxy.url}/draftgate/explain",
                         json={"model": MODEL, "messages": messages, "tools": [WEATHER]}).json()
    assert explain["affinity"] is not None and explain["affinity"]["cached_tokens"] > 500


def test_explain_endpoint(s: Stack) -> None:
    out = httpx.post(f"{s.proxy.url}/draftgate/explain",
                     json={"model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required"}).json()
    assert out["route"] == "spec-on" and out["w_s"] == 1.0
    assert out["predicted_saving"] > 0 and set(out["predicted_tau"]) == {"s", "r", "f"}
    assert "break_even_ws" in out and out["reasons"]


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
ODD_VALUES = [1e400, -1e400, -1, 0, 10**30, 10**400, 1e-320, "x", None, True, [], {}]
READ_FIELDS = ["temperature", "max_tokens", "max_completion_tokens", "n", "top_p", "top_k", "min_p",
               "frequency_penalty", "presence_penalty", "repetition_penalty", "logprobs", "top_logprobs",
               "reasoning_effort", "parallel_tool_calls", "tool_choice", "response_format", "structured_outputs",
               "chat_template_kwargs", "stream_options", "messages", "tools", "model", "prompt", "guided_json",
               "guided_choice"]


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


def test_failover_when_a_pool_is_down() -> None:
    # health checks slow enough that requests, not the checker, find the dead pool first
    with stack(4, health_interval=30.0) as st:
        # the first check runs at start-up: let it pass first, or it may be what finds the pool dead
        pools = st.proxy.server.config.app.state.proxy.gk.pools
        assert wait_until(lambda: all(r.checked_at > 0 for pool in pools for r in pool.replicas.values()))
        st.on.server.should_exit = True
        st.on.thread.join(timeout=10)
        for _ in range(5):
            r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json={
                "model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0},
                timeout=30)
            assert r.status_code == 200 and r.headers["x-draftgate-route"] == "spec-off"
        assert st.metric("draftgate_failovers_total") == 1  # then the dead replica is marked down
        ready = httpx.get(f"{st.proxy.url}/ready").json()
        assert ready["healthy_replicas"] == {"spec-on": 0, "spec-off": 1}


def test_failover_on_503_and_stream_dying_midway() -> None:
    with stack(5) as st:
        httpx.post(f"{st.on.url}/debug/faults", json={"error_status": 503})
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json={
            "model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0})
        assert r.status_code == 200 and r.headers["x-draftgate-route"] == "spec-off"
        assert st.metric("draftgate_failovers_total", reason="upstream answered 503") == 1
        httpx.post(f"{st.on.url}/debug/faults", json={"error_status": None})
        httpx.post(f"{st.off.url}/debug/faults", json={"die_after_tokens": 3})
        text = httpx.post(f"{st.proxy.url}/v1/chat/completions", json={
            "model": MODEL, "messages": USER, "temperature": 0.7, "stream": True, "max_tokens": 50}).text
        events = [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {")]
        assert "error" in events[-1] and events[-1]["error"]["code"] == 502
        assert text.rstrip().endswith("data: [DONE]")


def test_a_replica_failing_every_answer_leaves_rotation_though_its_health_checks_pass() -> None:
    """Its /health says 200, so only its answers tell. Without ejection every request
    sent its way fails over, spending the retry budget that real failovers need."""
    tool_call = {"model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0}
    with stack(39, eject_after_failed_answers=3, ejection_seconds=1.0) as st:
        assert httpx.post(f"{st.proxy.url}/v1/chat/completions", json=tool_call).headers[
            "x-draftgate-route"] == "spec-on"
        httpx.post(f"{st.on.url}/debug/faults", json={"error_status": 503})
        answers = [httpx.post(f"{st.proxy.url}/v1/chat/completions", json=tool_call) for _ in range(8)]
        assert [a.status_code for a in answers] == [200] * 8
        assert {a.headers["x-draftgate-route"] for a in answers} == {"spec-off"}
        assert st.metric("draftgate_failovers_total") == 3  # then the gate saw the pool out of rotation
        assert st.metric("draftgate_replica_ejections_total", pool="spec-on") == 1
        assert httpx.get(f"{st.proxy.url}/ready").json()["healthy_replicas"]["spec-on"] == 0
        assert httpx.get(f"{st.on.url}/health").status_code == 200
        httpx.post(f"{st.on.url}/debug/faults", json={"error_status": None})
        # the ejection ends by itself; the replica is back and serves its share again
        assert wait_until(lambda: httpx.post(f"{st.proxy.url}/v1/chat/completions", json=tool_call).headers[
            "x-draftgate-route"] == "spec-on", seconds=10)
        assert st.metric("draftgate_failovers_total") == 3


def test_a_stream_that_breaks_before_its_first_event_goes_to_another_pool() -> None:
    """A replica that fails during prefill has sent headers and nothing else: the
    client has nothing yet, so the request is failed over, not answered with an error."""
    with stack(8) as st:
        body = {"model": MODEL, "messages": USER, "temperature": 0.7, "stream": True, "max_tokens": 20}
        chosen = httpx.post(f"{st.proxy.url}/draftgate/explain", json=body).json()["route"]
        dying, other = (st.off, "spec-on") if chosen == "spec-off" else (st.on, "spec-off")
        httpx.post(f"{dying.url}/debug/faults", json={"die_before_first_event": True})
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200 and r.headers["x-draftgate-route"] == other
        events = [json.loads(line[6:]) for line in r.text.split("\n\n") if line.startswith("data: {")]
        assert not any("error" in e for e in events) and events[-1]["choices"][0]["finish_reason"] == "length"
        assert st.metric("draftgate_failovers_total", from_pool=chosen, to_pool=other) == 1
        assert wait_until(lambda: all(p.inflight == 0 for p in st.proxy.server.config.app.state.proxy.gk.pools))


def test_an_answer_cut_short_goes_to_another_pool() -> None:
    """A non-streamed answer goes to the client whole, so until its last byte the
    client has nothing: a pool that dies while writing it is failed over."""
    with stack(9) as st:
        body = {"model": MODEL, "messages": USER, "temperature": 0.7, "max_tokens": 20}
        chosen = httpx.post(f"{st.proxy.url}/draftgate/explain", json=body).json()["route"]
        dying, other = (st.off, "spec-on") if chosen == "spec-off" else (st.on, "spec-off")
        httpx.post(f"{dying.url}/debug/faults", json={"cut_answer_short": True})
        with pytest.raises(httpx.RemoteProtocolError):  # what a direct client would get
            httpx.post(f"{dying.url}/v1/chat/completions", json=body, timeout=30)
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200 and r.headers["x-draftgate-route"] == other
        assert r.json()["choices"][0]["finish_reason"] == "length"
        assert st.metric("draftgate_failovers_total", from_pool=chosen, to_pool=other) == 1
        assert wait_until(lambda: all(p.inflight == 0 for p in st.proxy.server.config.app.state.proxy.gk.pools))


def test_a_model_one_pool_lacks_goes_only_to_pools_that_serve_it() -> None:
    """Pools may differ in what they serve (a LoRA adapter, a second model): whatever
    the gate would prefer, a request goes only to a pool that lists its model."""
    small = "Qwen/Qwen3-8B"
    with emulator(41, True) as on, emulator(41, False, model=small) as off:
        app = create_app(proxy_settings(on.url, off.url))
        with proxy_server(app) as proxy:
            tool_call = {"messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0}
            prose = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 20}
            for model, body, only in ((small, tool_call, "spec-off"), (MODEL, prose, "spec-on")):
                r = httpx.post(f"{proxy.url}/v1/chat/completions", json={"model": model, **body}, timeout=30)
                assert r.status_code == 200 and r.headers["x-draftgate-route"] == only, (model, r.text[:200])
                explained = httpx.post(f"{proxy.url}/draftgate/explain", json={"model": model, **body}).json()
                assert explained["route"] == only and f"{model} is served only by {only}" in explained["reasons"]
            # passed-through requests too: the plain pool is tried first, unless it lacks the model
            tokens = httpx.post(f"{proxy.url}/tokenize", json={"model": MODEL, "prompt": "count these"})
            assert tokens.status_code == 200 and tokens.headers["x-draftgate-route"] == "spec-on"


def test_saturated_speculation_pool_sheds_marginal_traffic() -> None:
    with stack(6, spec_max_num_seqs=2, on_kwargs={"max_num_seqs": 2, "time_scale": 0.1}) as st:
        async def run() -> list[str]:
            async with httpx.AsyncClient(timeout=60) as h:
                schema = {"type": "object", "properties": {"rows": {"type": "array", "minItems": 40, "maxItems": 40,
                          "items": {"type": "object", "properties": {"city": {"type": "string"}},
                                    "required": ["city"]}}}, "required": ["rows"]}
                bodies = [{"model": MODEL, "messages": [{"role": "user", "content": f"List {i}"}], "temperature": 0,
                           "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}}
                          for i in range(8)]
                rs = await asyncio.gather(*(h.post(f"{st.proxy.url}/v1/chat/completions", json=b) for b in bodies))
                assert all(r.status_code == 200 for r in rs)
                return [r.headers["x-draftgate-route"] for r in rs]
        routes = asyncio.run(run())
        assert "spec-off" in routes and "spec-on" in routes
        assert st.metric("draftgate_decisions_total", reason="capacity") >= 1


def test_a_pool_whose_kv_cache_is_full_takes_no_marginal_traffic() -> None:
    """vllm:kv_cache_usage_perc, scraped: a request sent to a pool whose cache is
    nearly full would wait for blocks or cause a preemption there."""
    body = {"model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0}
    with stack(10) as st:
        def route() -> str:
            return httpx.post(f"{st.proxy.url}/draftgate/explain", json=body).json()["route"]

        assert route() == "spec-on"
        httpx.post(f"{st.on.url}/debug/faults", json={"kv_usage": 0.99})
        assert wait_until(lambda: route() == "spec-off"), "the next scrape should have read the full cache"
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body)
        assert r.status_code == 200 and r.headers["x-draftgate-route"] == "spec-off"
        assert st.metric("draftgate_decisions_total", route="spec-off", reason="capacity") == 1
        httpx.post(f"{st.on.url}/debug/faults", json={"kv_usage": None})
        assert wait_until(lambda: route() == "spec-on"), "room again: back to speculation"


def test_sheds_with_503_when_every_pool_is_full() -> None:
    slow = {"max_num_seqs": 1, "time_scale": 0.2}
    with stack(7, spec_max_num_seqs=1, off_max_num_seqs=1, queue_depth_per_replica=0, queue_timeout=0.1,
               on_kwargs=slow, off_kwargs=slow) as st:
        async def run() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=60) as h:
                body = {"model": MODEL, "messages": USER, "reasoning_effort": "low", "temperature": 0}
                return await asyncio.gather(*(h.post(f"{st.proxy.url}/v1/chat/completions", json=body)
                                              for _ in range(4)))
        responses = asyncio.run(run())
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [200, 200, 503, 503], statuses
        shed = next(r for r in responses if r.status_code == 503)
        assert shed.headers["retry-after"] == "1" and shed.json()["error"]["code"] == "overloaded"
        assert st.metric("draftgate_shed_total") == 2


def test_client_disconnect_cancels_a_non_streamed_request_quickly() -> None:
    with stack(8, on_kwargs={"time_scale": 0.2}, off_kwargs={"time_scale": 0.2}) as st:
        async def run() -> float:
            body = {"model": MODEL, "messages": USER, "reasoning_effort": "high", "temperature": 0.7}
            async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=0.5)) as h:
                try:
                    await h.post(f"{st.proxy.url}/v1/chat/completions", json=body)
                    return 98.0  # answered within the read timeout: the test proves nothing
                except httpx.ReadTimeout:
                    pass  # the client gives up and closes its connection
                start = time.perf_counter()
                while time.perf_counter() - start < 5:
                    running = 0.0
                    for backend in (st.on, st.off):
                        text = (await h.get(f"{backend.url}/metrics")).text
                        running += metric_value(text, "vllm:num_requests_running")
                    if running == 0:
                        return time.perf_counter() - start
                    await asyncio.sleep(0.01)
                return 99.0
        # the answer would take seconds more; the bound is loose for a busy CI machine
        assert asyncio.run(run()) < 1.0
        assert st.metric("draftgate_requests_total", status="499") == 1


def test_client_disconnect_cancels_upstream_quickly() -> None:
    with stack(8, on_kwargs={"time_scale": 0.2}, off_kwargs={"time_scale": 0.2}) as st:
        async def run() -> float:
            async with httpx.AsyncClient(timeout=30) as h:
                body = {"model": MODEL, "messages": USER, "stream": True, "reasoning_effort": "high", "temperature": 0.7}
                async with h.stream("POST", f"{st.proxy.url}/v1/chat/completions", json=body) as r:
                    route = r.headers["x-draftgate-route"]
                    async for _ in r.aiter_lines():
                        break
                backend = st.on.url if route == "spec-on" else st.off.url
                start = time.perf_counter()
                while time.perf_counter() - start < 5:
                    running = metric_value((await h.get(f"{backend}/metrics")).text, "vllm:num_requests_running")
                    if running == 0:
                        return time.perf_counter() - start
                    await asyncio.sleep(0.01)
                return 99.0
        assert asyncio.run(run()) < 1.0
