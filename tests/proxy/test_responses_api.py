"""The Responses API through the gate: routed as the chat completion it amounts to,
relayed unchanged, and measured from the response that ends it. Real servers:
the proxy under uvicorn, emulated pools serving /v1/responses; the official
openai client where a client is needed."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from draftgate.policy.structure import StructurePriors, chat_completion, chat_view, estimate, measure
from tests.proxy_harness import stack, wait_until

MODEL = "Qwen/Qwen3-32B"
WEATHER = {"type": "function", "name": "get_weather", "description": "the weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                           "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}
TOOL_CALL = {"model": MODEL, "input": "what is the weather in Paris?", "tools": [WEATHER], "tool_choice": "required",
             "temperature": 0}
PROSE = {"model": MODEL, "input": "write me a long story about the sea", "temperature": 0, "max_output_tokens": 120}


def without_ids(response: dict[str, Any]) -> dict[str, Any]:
    """A response with what differs between two runs of one request left out."""
    out = {k: v for k, v in response.items() if k not in ("id", "created_at")}
    out["output"] = [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in response["output"]]
    return out


def test_tool_calls_go_to_speculation_and_prose_to_the_plain_pool_each_answered_as_directly() -> None:
    with stack(5) as st_:
        call = httpx.post(f"{st_.proxy.url}/v1/responses", json=TOOL_CALL, timeout=60)
        prose = httpx.post(f"{st_.proxy.url}/v1/responses", json=PROSE, timeout=60)
        assert call.status_code == prose.status_code == 200, (call.text, prose.text)
        assert call.headers["x-draftgate-route"] == "spec-on", call.headers.get("x-draftgate-reasons")
        assert prose.headers["x-draftgate-route"] == "spec-off"
        direct = httpx.post(f"{st_.on.url}/v1/responses", json=TOOL_CALL, timeout=60).json()
        assert without_ids(call.json()) == without_ids(direct)
        assert [item["type"] for item in call.json()["output"]] == ["function_call"]
        # measured from the answer: the call's tokens are schema-bound, the story's prose
        assert wait_until(lambda: st_.metric("draftgate_output_tokens_total", pool="spec-on", token_class="s") > 0)
        assert wait_until(lambda: st_.metric("draftgate_output_tokens_total", pool="spec-off", token_class="f") > 0)
        assert st_.metric("draftgate_output_tokens_total", pool="spec-on", token_class="f") == 0


def test_a_stream_is_relayed_event_for_event_and_measured_from_its_last() -> None:
    with stack(6) as st_:
        body = {**TOOL_CALL, "stream": True}
        with httpx.stream("POST", f"{st_.proxy.url}/v1/responses", json=body, timeout=60) as through:
            assert through.headers["x-draftgate-route"] == "spec-on"
            relayed = through.read().decode()
        direct = httpx.post(f"{st_.on.url}/v1/responses", json=body, timeout=60).text
        kinds = [line for line in relayed.splitlines() if line.startswith("event: ")]
        assert kinds == [line for line in direct.splitlines() if line.startswith("event: ")]
        assert kinds[0] == "event: response.created" and kinds[-1] == "event: response.completed"
        assert wait_until(lambda: st_.metric("draftgate_output_tokens_total", pool="spec-on", token_class="s") > 0)
        # the official client reads the relayed stream as it would vLLM's
        events = list(st_.client.responses.create(**body))
        assert events[-1].type == "response.completed"
        assert events[-1].response.output[0].type == "function_call"
        assert json.loads(events[-1].response.output[0].arguments)["city"]


def test_json_output_is_gated_and_its_content_measured_as_schema_bound() -> None:
    schema = {"type": "object", "properties": {"ids": {"type": "array", "minItems": 8, "items": {"type": "integer"}}},
              "required": ["ids"]}
    with stack(7) as st_:
        answer = st_.client.responses.create(model=MODEL, input="list ids", temperature=0,
                                             text={"format": {"type": "json_schema", "name": "ids",
                                                              "schema": schema}})
        assert len(json.loads(answer.output_text)["ids"]) >= 8
        assert wait_until(lambda: st_.metric("draftgate_output_tokens_total", token_class="s") > 0)
        assert st_.metric("draftgate_output_tokens_total", token_class="f") == 0


def test_a_refused_response_fails_over_and_a_broken_stream_ends_with_the_apis_error_event() -> None:
    with stack(10) as st_:
        httpx.post(f"{st_.on.url}/debug/faults", json={"error_status": 503})
        answer = httpx.post(f"{st_.proxy.url}/v1/responses", json=TOOL_CALL, timeout=60)
        assert answer.status_code == 200 and answer.headers["x-draftgate-route"] == "spec-off"
        assert answer.json()["output"][0]["type"] == "function_call"
        httpx.post(f"{st_.off.url}/debug/faults", json={"die_after_tokens": 2})
        cut = httpx.post(f"{st_.proxy.url}/v1/responses", json={**PROSE, "stream": True}, timeout=60)
        assert cut.status_code == 200 and cut.headers["x-draftgate-route"] == "spec-off"
        events = [block.split("\n") for block in cut.text.strip().split("\n\n")]
        assert events[0][0] == "event: response.created" and events[-1][0] == "event: error"
        error = json.loads(events[-1][1].removeprefix("data: "))
        # numbered after the events relayed before it, as the stream's own would be
        assert error["type"] == "error" and error["code"] == "502" and error["sequence_number"] == len(events) - 1
        assert [json.loads(e[1][6:])["sequence_number"] for e in events[:-1]] == list(range(len(events) - 1))
        assert "[DONE]" not in cut.text
        # the official client hands it over as the API's error event
        last = list(st_.client.responses.create(**{**PROSE, "stream": True}))[-1]
        assert last.type == "error" and last.message.startswith("upstream failed mid-stream")


def test_explain_reads_a_responses_body_as_the_gate_does() -> None:
    with stack(9) as st_:
        explained = httpx.post(f"{st_.proxy.url}/draftgate/explain", json=TOOL_CALL).json()
        assert explained["route"] == "spec-on"
        assert explained["w_s"] == 1.0
        assert any(r.startswith("tool_choice=required") for r in explained["reasons"]), explained


def test_switched_off_responses_pass_through_to_the_plain_pool_and_are_counted_so() -> None:
    with stack(11, gate_responses=False) as st_:
        explained = httpx.post(f"{st_.proxy.url}/draftgate/explain", json=TOOL_CALL).json()
        assert explained["route"] == "spec-off" and explained["reasons"][0].startswith("gate_responses is off")
        answer = httpx.post(f"{st_.proxy.url}/v1/responses", json=TOOL_CALL, timeout=60)
        assert answer.status_code == 200 and answer.headers["x-draftgate-route"] == "spec-off"
        assert "x-draftgate-predicted-saving" not in answer.headers
        assert st_.metric("draftgate_output_tokens_total") == 0  # passed through, not observed
        assert st_.metric("draftgate_passed_through_total", endpoint="responses", reason="configuration") == 1
        # and what the pool says of a body it cannot read reaches the client as the pool said it
        bad = httpx.post(f"{st_.proxy.url}/v1/responses", json={"model": MODEL})
        assert bad.status_code == 400 and bad.json()["error"]["message"] == "input must be a string or a list of items"


@pytest.mark.parametrize(("body", "message"), [
    ({"model": MODEL}, "'input' must be a string or a list of input items"),
    ({"model": MODEL, "input": {"role": "user"}}, "'input' must be a string or a list of input items"),
    ({"model": 7, "input": "x"}, "'model' must be a string"),
])
def test_a_request_the_gate_cannot_read_gets_an_openai_error(body: dict[str, Any], message: str) -> None:
    with stack(8) as st_:
        answer = httpx.post(f"{st_.proxy.url}/v1/responses", json=body)
        assert answer.status_code == 400
        assert answer.json()["error"]["message"] == message
        assert httpx.post(f"{st_.proxy.url}/v1/responses", content=b"{", headers={
            "content-type": "application/json"}).status_code == 400


# what a client may send where a Responses request is read (1e400 is how JSON writes infinity; Python reads NaN)
ODD_VALUES = ["1e400", "-1e400", "NaN", "-1", "0", "1" + "0" * 400, '"x"', "null", "true", "[]", "{}", '[{"x": 1}]']
RESPONSES_FIELDS = ["input", "instructions", "tools", "tool_choice", "text", "reasoning", "max_output_tokens",
                    "temperature", "top_p", "top_logprobs", "include", "store", "background", "previous_response_id",
                    "stream", "model"]


def test_odd_values_in_any_field_the_gate_reads_never_break_the_proxy() -> None:
    """Every such request is answered, or its backend's 4xx passed on, in the OpenAI shape; explain
    answers in strict JSON; the gate never fails."""
    with stack(12) as st_, httpx.Client(timeout=30) as client:
        for field in RESPONSES_FIELDS:
            for value in ODD_VALUES:
                fields = {"model": f'"{MODEL}"', "input": '"hi"', "max_output_tokens": "5", field: value}
                raw = ("{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}").encode()
                for path in ("/v1/responses", "/draftgate/explain"):
                    answer = client.post(f"{st_.proxy.url}{path}", content=raw,
                                         headers={"content-type": "application/json"})
                    assert answer.status_code < 500, (raw, answer.text[:200])
                    if answer.headers["content-type"].startswith("application/json"):
                        parsed = json.loads(answer.text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
                        assert answer.status_code < 400 or set(parsed["error"]) >= {"message", "type", "param",
                                                                                     "code"}, raw
        assert st_.metric("draftgate_gate_errors_total") == 0


# ------------------------------------------------------------------ units


def test_a_responses_request_reads_as_the_chat_request_it_amounts_to() -> None:
    body = {"model": MODEL, "instructions": "be brief", "max_output_tokens": 50, "reasoning": {"effort": "high"},
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                      {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                      {"type": "reasoning", "summary": []}],
            "tools": [WEATHER, {"type": "web_search"}], "tool_choice": {"type": "function", "name": "get_weather"},
            "text": {"format": {"type": "json_object"}}}
    view = chat_view(body)
    assert [m["role"] for m in view["messages"]] == ["system", "user", "assistant", "tool"]
    assert view["messages"][1]["content"] == "hi" and view["messages"][3]["content"] == "sunny"
    assert view["tools"] == [{"type": "function", "function": {k: WEATHER[k] for k in
                                                               ("name", "description", "parameters")}}]
    assert view["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert view["response_format"] == {"type": "json_object"} and view["reasoning_effort"] == "high"
    assert view["max_tokens"] == 50
    forced = estimate(chat_view(TOOL_CALL), priors=StructurePriors(thinking_by_default=False))
    assert forced.constrained and forced.w_s == 1.0
    # what vLLM's Responses model shares with chat: hidden reasoning, the prefix cache's salt
    hidden = chat_view({**body, "include_reasoning": False, "cache_salt": "tenant-a"})
    assert estimate(hidden).reasoning_hidden and hidden["cache_salt"] == "tenant-a"
    # and what groups a client's requests, which the affinity table keys on
    grouped = chat_view({**body, "prompt_cache_key": "conv-7", "session_id": "s-3", "safety_identifier": "u-1"})
    assert (grouped["prompt_cache_key"], grouped["session_id"], grouped["safety_identifier"]) == ("conv-7", "s-3", "u-1")


def test_logprobs_are_requested_as_vllm_reads_a_responses_request() -> None:
    """Only ``include`` asks for them; ``top_logprobs`` says how many alternatives."""
    def blocked(**fields: Any) -> bool:
        return any("logprobs" in reason for reason in estimate(chat_view({**PROSE, **fields})).reasons)
    assert not blocked()
    assert not blocked(top_logprobs=5)
    assert blocked(include=["message.output_text.logprobs"])
    assert blocked(include=["message.output_text.logprobs"], top_logprobs=0)
    assert not blocked(include=["reasoning.encrypted_content"], top_logprobs=5)
    assert chat_view({**PROSE, "include": ["message.output_text.logprobs"], "top_logprobs": 3})["top_logprobs"] == 3


def test_a_finished_response_is_measured_as_a_chat_completion() -> None:
    response = {"id": "resp_1", "object": "response", "output": [
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "hmm" * 10}]},
        {"type": "message", "content": [{"type": "output_text", "text": "x" * 30}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"a": 1}' + " " * 20}],
        "usage": {"input_tokens": 5, "output_tokens": 40}}
    observed = measure({}, chat_completion(response))
    assert observed.total_tokens == 40 and observed.tool_calls == 1
    assert observed.chars.r == 30 and observed.chars.f == 30 and observed.chars.s == 29
    ended = chat_completion({"type": "response.completed", "response": response, "sequence_number": 9})
    assert ended == chat_completion(response)
    assert chat_completion({"type": "response.output_text.delta", "delta": "x"}) is None
    # the reasoning tokens a Responses usage counts are taken as counted
    counted = {**response, "usage": {**response["usage"], "output_tokens_details": {"reasoning_tokens": 25}}}
    assert measure({}, chat_completion(counted)).tokens.r == 25


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=4), max_leaves=30)
keys = st.sampled_from(["input", "instructions", "tools", "tool_choice", "text", "reasoning", "max_output_tokens",
                        "output", "usage", "object", "type", "response", "model"])


@given(st.dictionaries(keys, json_values, max_size=8))
def test_nothing_a_client_or_server_sends_makes_the_translation_raise(body: dict[str, Any]) -> None:
    estimate(chat_view(body))
    chat_completion(body)
    chat_completion({**body, "object": "response"})
    chat_completion({"type": "response.completed", "response": body})
