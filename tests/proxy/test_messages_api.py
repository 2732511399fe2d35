"""Anthropic's Messages API through the gate: read as the chat request vLLM makes
of it, relayed unchanged, measured from its content blocks, and answered in
Anthropic's error shape. Real servers: the proxy under uvicorn and emulated pools
serving /v1/messages as vLLM does; the official anthropic client where a client
is needed."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from draftgate.policy.structure import (
    StructurePriors,
    estimate,
    measure,
    messages_chat_chunk,
    messages_chat_view,
)
from draftgate.policy.structure.measure import TextParts, measure_parts
from tests.proxy_harness import stack, wait_until

MODEL = "Qwen/Qwen3-32B"
WEATHER = {"name": "get_weather", "description": "the weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TOOL_CALL = {"model": MODEL, "max_tokens": 200, "messages": [{"role": "user", "content": "weather in Paris?"}],
             "tools": [WEATHER], "tool_choice": {"type": "any"}, "temperature": 0}
PROSE = {"model": MODEL, "max_tokens": 120, "messages": [{"role": "user", "content": "write a long story about the sea"}],
         "temperature": 0}


def client(url: str, **kwargs: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=kwargs.pop("api_key", "none"), max_retries=0, timeout=60,
                               **kwargs)


def sdk(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the SDK's arguments: it no longer takes sampling fields, so they go as extra body."""
    sampling = {k: body[k] for k in ("temperature", "top_p", "top_k") if k in body}
    return {**{k: v for k, v in body.items() if k not in sampling}, "extra_body": sampling}


def events_of(stream_text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in stream_text.strip().split("\n\n"):
        name, data = block.split("\n", 1)
        out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_forced_call_goes_to_speculation_and_prose_to_the_plain_pool_measured_either_way(streamed: bool) -> None:
    with stack(21) as s:
        answers = {}
        for name, body in (("call", TOOL_CALL), ("prose", PROSE)):
            answers[name] = httpx.post(f"{s.proxy.url}/v1/messages", json={**body, "stream": streamed}, timeout=60)
            assert answers[name].status_code == 200, answers[name].text
            for header in ("x-draftgate-schema-fraction", "x-draftgate-predicted-saving", "x-draftgate-confidence"):
                assert header in answers[name].headers
        assert answers["call"].headers["x-draftgate-route"] == "spec-on"
        assert float(answers["call"].headers["x-draftgate-schema-fraction"]) == 1.0
        assert answers["prose"].headers["x-draftgate-route"] == "spec-off"
        if streamed:
            kinds = [name for name, _ in events_of(answers["call"].text)]
            assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
            assert "content_block_start" in kinds and "content_block_delta" in kinds
        else:
            assert answers["call"].json()["content"][0]["type"] == "tool_use"
            assert answers["prose"].json()["content"][0]["type"] == "text"
        # predicted against observed, for each: the call's tokens schema-bound, the story's prose
        assert wait_until(lambda: s.metric("draftgate_observed_schema_fraction_count", pool="spec-on") == 1)
        assert wait_until(lambda: s.metric("draftgate_observed_schema_fraction_count", pool="spec-off") == 1)
        assert s.metric("draftgate_predicted_schema_fraction_count", pool="spec-on") == 1
        assert s.metric("draftgate_output_tokens_total", pool="spec-on", token_class="s") > 0
        assert s.metric("draftgate_output_tokens_total", pool="spec-on", token_class="f") == 0
        assert s.metric("draftgate_output_tokens_total", pool="spec-off", token_class="f") > 0
        assert s.metric("draftgate_requests_total", endpoint="messages", status="200") == 2


def test_a_stream_is_relayed_event_for_event_as_the_pool_sent_it() -> None:
    with stack(22) as s:
        body = {**TOOL_CALL, "stream": True}
        through = httpx.post(f"{s.proxy.url}/v1/messages", json=body, timeout=60)
        direct = httpx.post(f"{s.on.url}/v1/messages", json=body, timeout=60)
        strip = lambda events: [(n, {k: v for k, v in d.items() if k not in ("message", "content_block")})  # noqa: E731
                                for n, d in events]
        assert strip(events_of(through.text)) == strip(events_of(direct.text))
        # the official client's accumulator reads it as it reads Anthropic's
        with client(s.proxy.url).messages.stream(**sdk(TOOL_CALL)) as stream:
            final = stream.get_final_message()
        assert final.stop_reason == "tool_use" and final.content[0].type == "tool_use"
        assert isinstance(final.content[0].input["city"], str) and final.usage.output_tokens > 0


def test_errors_on_the_route_come_in_anthropics_shape() -> None:
    with stack(23, api_keys=["k-one"]) as s:
        keyed = client(s.proxy.url, api_key="k-one")  # sent as x-api-key, as the SDK sends it
        with pytest.raises(anthropic.BadRequestError) as bad:
            keyed.messages.create(model=MODEL, max_tokens=0, messages=[{"role": "user", "content": "hi"}])
        assert bad.value.body == {"type": "error", "error": {"type": "invalid_request_error",
                                                             "message": "'max_tokens' must be a positive integer"}}
        with pytest.raises(anthropic.AuthenticationError) as unauthorised:
            client(s.proxy.url, api_key="wrong").messages.create(**sdk(PROSE))
        assert unauthorised.value.body["error"]["type"] == "authentication_error"
        not_json = httpx.post(f"{s.proxy.url}/v1/messages", content=b"{", headers={"x-api-key": "k-one",
                                                                                   "content-type": "application/json"})
        assert not_json.status_code == 400 and not_json.json()["type"] == "error"
        # a Bearer token is as good as x-api-key (Claude Code sends ANTHROPIC_AUTH_TOKEN so)
        bearer = httpx.post(f"{s.proxy.url}/v1/messages", json=PROSE, headers={"authorization": "Bearer k-one"},
                            timeout=60)
        assert bearer.status_code == 200
        # the client's key is the proxy's: the pool never sees it
        sent = httpx.get(f"{s.off.url}/debug/requests").json()[-1]["headers"]
        assert "x-api-key" not in sent and "authorization" not in sent
        # count_tokens passes through, to a plain pool, behind the same key
        counted = keyed.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "how many?"}])
        assert counted.input_tokens > 0
        assert s.metric("draftgate_requests_total", endpoint="messages", route="none", status="400") == 2


def test_a_refused_answer_fails_over_and_a_broken_stream_ends_with_an_error_event() -> None:
    with stack(24) as s:
        httpx.post(f"{s.on.url}/debug/faults", json={"error_status": 503})
        moved = client(s.proxy.url).messages.with_raw_response.create(**sdk(TOOL_CALL))
        assert moved.headers["x-draftgate-route"] == "spec-off"
        assert moved.parse().content[0].type == "tool_use"
        httpx.post(f"{s.off.url}/debug/faults", json={"die_after_tokens": 2})
        cut = httpx.post(f"{s.proxy.url}/v1/messages", json={**PROSE, "stream": True}, timeout=60)
        name, error = events_of(cut.text)[-1]
        assert name == "error" and error["type"] == "error" and error["error"]["type"] == "api_error"
        assert error["error"]["message"].startswith("upstream failed mid-stream")
        with pytest.raises(anthropic.APIStatusError):  # the SDK raises the stream's error event
            with client(s.proxy.url).messages.stream(**sdk(PROSE)) as stream:
                stream.get_final_message()


def test_explain_reads_a_messages_body_as_the_gate_does() -> None:
    with stack(25) as s:
        explained = httpx.post(f"{s.proxy.url}/draftgate/explain", json=TOOL_CALL).json()
        assert explained["route"] == "spec-on" and explained["w_s"] == 1.0
        assert any(r.startswith("tool_choice=required") for r in explained["reasons"]), explained


def test_a_messages_request_reads_as_the_chat_request_vllm_makes_of_it() -> None:
    history = [
        {"role": "user", "content": [{"type": "text", "text": "weather in Paris?"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "look it up", "signature": "s"},
                                          {"type": "tool_use", "id": "t1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]},
    ]
    body = {"model": MODEL, "max_tokens": 300, "system": [{"type": "text", "text": "be brief"}], "messages": history,
            "tools": [WEATHER], "stop_sequences": ["END"], "thinking": {"type": "enabled", "budget_tokens": 2048},
            "top_k": 20, "stream": True}
    view = messages_chat_view(body)
    assert [m["role"] for m in view["messages"]] == ["system", "user", "assistant", "tool"]
    assert view["messages"][2]["tool_calls"][0]["function"] == {"name": "get_weather",
                                                                "arguments": '{"city": "Paris"}'}
    assert view["messages"][2]["reasoning"] == "look it up"
    assert view["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "sunny"}
    assert view["tool_choice"] == "auto" and view["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]
    assert view["stop"] == ["END"] and view["max_tokens"] == 300 and view["top_k"] == 20
    assert view["stream_options"] == {"include_usage": True}
    # vLLM does not read ``thinking``: whether the model thinks is the template's, as on chat
    assert "thinking" not in view and "reasoning_effort" not in view
    for choice, chat in (({"type": "any"}, "required"), ({"type": "none"}, "none"),
                         ({"type": "tool", "name": "get_weather"},
                          {"type": "function", "function": {"name": "get_weather"}})):
        assert messages_chat_view({**body, "tool_choice": choice})["tool_choice"] == chat
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    structured = messages_chat_view({"model": MODEL, "max_tokens": 50, "messages": [{"role": "user", "content": "x"}],
                                     "output_config": {"format": {"type": "json_schema", "schema": schema},
                                                       "effort": "low"}})
    assert structured["response_format"]["json_schema"]["schema"] == schema
    assert structured["reasoning_effort"] == "low"
    priors = StructurePriors(thinking_by_default=False)
    assert estimate(messages_chat_view({**body, "tool_choice": {"type": "any"}}), priors=priors).w_s == 1.0


def test_an_answer_is_measured_from_its_blocks_whole_or_streamed() -> None:
    whole = {"id": "chatcmpl-1", "type": "message", "role": "assistant", "model": MODEL, "stop_reason": "tool_use",
             "content": [{"type": "thinking", "thinking": "hmm, " * 10, "signature": "x"},
                         {"type": "text", "text": "Let me check."},
                         {"type": "tool_use", "id": "t", "name": "get_weather", "input": {"city": "Paris"}}],
             "usage": {"input_tokens": 40, "output_tokens": 30}}
    measured = measure({}, messages_chat_chunk(whole))
    assert measured.total_tokens == 30 and measured.tool_calls == 1
    assert measured.tokens.s > 0 and measured.tokens.r > measured.tokens.f > 0
    events = [
        {"type": "message_start", "message": {"id": "chatcmpl-1", "usage": {"input_tokens": 40, "output_tokens": 0}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm, " * 10}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "x"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Let me check."}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "t",
                                                                      "name": "get_weather", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '"Paris"}'}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"input_tokens": 40,
                                                                                 "output_tokens": 30}},
        {"type": "message_stop"},
    ]
    parts = TextParts()
    for event in events:
        parts.add_chunk(messages_chat_chunk(event))
    streamed = measure_parts({}, parts)
    assert streamed.tokens == measured.tokens and streamed.tool_calls == 1


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=12)
_BLOCK = st.fixed_dictionaries({"type": st.sampled_from(["text", "tool_use", "tool_result", "thinking", "image", 7])},
                               optional={"text": _JSON, "input": _JSON, "content": _JSON, "thinking": _JSON,
                                         "id": _JSON, "name": _JSON, "index": _JSON, "delta": _JSON,
                                         "content_block": _JSON, "message": _JSON, "usage": _JSON})


@given(st.fixed_dictionaries({}, optional={
    "messages": st.lists(st.fixed_dictionaries({"role": _JSON, "content": _JSON | st.lists(_BLOCK, max_size=3)}),
                         max_size=3),
    "system": _JSON | st.lists(_BLOCK, max_size=2), "tools": _JSON, "tool_choice": _JSON, "output_config": _JSON,
    "stop_sequences": _JSON, "max_tokens": _JSON, "stream": _JSON, "type": st.sampled_from(
        ["message", "message_start", "message_delta", "content_block_start", "content_block_delta"]),
    "content": st.lists(_BLOCK, max_size=3), "delta": _JSON, "usage": _JSON, "content_block": _JSON,
    "message": _JSON, "index": _JSON}))
def test_nothing_a_client_or_server_sends_makes_the_translation_raise(body: dict[str, Any]) -> None:
    view = messages_chat_view(body)
    estimate(view)
    measure(view, messages_chat_chunk(body))
