"""The vLLM emulator, driven by the official openai client over real sockets."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from draftgate.emulator import truth
from draftgate.emulator.tokens import tokenize
from tests.conftest import emulator
from tests.proxy_harness import metric_value

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                  "required": ["lat", "lon"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
    },
    "required": ["city", "unit", "where", "tags"],
}}}
USER = [{"role": "user", "content": "What is the weather in Paris and in Rome?"}]


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=30)


def metric(url: str, name: str) -> float:
    return metric_value(httpx.get(f"{url}/metrics").text, name)


def test_tool_calls_validate_against_their_schema(pools, bfcl_rows) -> None:
    on, _ = pools
    c = client(on.url)
    r = c.chat.completions.create(model="Qwen/Qwen3-32B", messages=USER, tools=[WEATHER], tool_choice="required",
                                  temperature=0)
    calls = r.choices[0].message.tool_calls
    assert calls and r.choices[0].finish_reason == "tool_calls"
    for call in calls:
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    checked = 0
    for row in bfcl_rows[::9]:
        body = dict(row["request"], tool_choice="required", temperature=0)
        r = c.chat.completions.create(**body)
        tools = {t["function"]["name"]: t["function"]["parameters"] for t in body["tools"]}
        for call in r.choices[0].message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), tools[call.function.name])
            checked += 1
    assert checked >= 15


def test_streamed_tool_call_reassembles_to_valid_arguments(pools) -> None:
    on, _ = pools
    stream = client(on.url).chat.completions.create(
        model="Qwen/Qwen3-32B", messages=USER, tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, stream=True, temperature=0)
    args: dict[int, str] = {}
    names: dict[int, str] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                if tc.function.name:
                    names[tc.index] = tc.function.name
                args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
            finish = choice.finish_reason or finish
    assert names == {0: "get_weather"} and finish == "tool_calls"
    jsonschema.validate(json.loads(args[0]), WEATHER["function"]["parameters"])


def test_json_outputs_validate(pools) -> None:
    on, _ = pools
    c = client(on.url)
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                                               "emails": {"type": "array", "items": {"type": "string", "format": "email"}}},
              "required": ["name", "age", "emails"]}
    r = c.chat.completions.create(model="Qwen/Qwen3-32B", messages=USER, temperature=0,
                                  response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    r = c.chat.completions.create(model="Qwen/Qwen3-32B", messages=USER, response_format={"type": "json_object"})
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    r = c.chat.completions.create(model="Qwen/Qwen3-32B", messages=USER,
                                  extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
    assert r.choices[0].message.content in ("yes", "no")
    r = c.chat.completions.create(model="Qwen/Qwen3-32B", messages=USER,
                                  extra_body={"structured_outputs": {"regex": r"[A-Z]{2}-\d{4}"}})
    assert re.fullmatch(r"[A-Z]{2}-\d{4}", r.choices[0].message.content)
    r = c.chat.completions.create(model="Qwen/Qwen3-32B", messages=USER,
                                  extra_body={"structured_outputs": {"json": schema}})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    r = c.chat.completions.create(model="Qwen/Qwen3-32B", messages=USER,
                                  extra_body={"structured_outputs": {"json_object": True}})
    assert isinstance(json.loads(r.choices[0].message.content), dict)


@pytest.mark.parametrize("structured, error", [
    ({"disable_any_whitespace": True}, "none are specified"),
    ({"regex": "a+", "choice": ["a"]}, "multiple are specified"),
    ({"json": "{not json"}, "not a JSON schema"),
    ([{"json": {}}], "must be an object"),
])
def test_structured_outputs_are_refused_as_vllm_refuses_them(pools, structured: Any, error: str) -> None:
    """vLLM takes exactly one constraint: none, or two, is a 400 and not an unconstrained answer."""
    on, _ = pools
    r = httpx.post(f"{on.url}/v1/chat/completions", json={"messages": USER, "structured_outputs": structured})
    assert r.status_code == 400 and error in r.json()["error"]["message"]


def test_thinking_puts_reasoning_first(pools) -> None:
    on, _ = pools
    r = client(on.url).chat.completions.create(model="Qwen/Qwen3-32B", messages=USER, max_tokens=4000,
                                               extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    message = r.choices[0].message
    assert message.model_extra.get("reasoning") and message.content
    stream = client(on.url).chat.completions.create(model="Qwen/Qwen3-32B", messages=USER, stream=True,
                                                    reasoning_effort="low", max_tokens=4000)
    order = []
    for chunk in stream:
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            if extra.get("reasoning"):
                order.append("r")
            if choice.delta.content:
                order.append("c")
    assert order[0] == "r" and "c" in order and order.index("c") > max(i for i, k in enumerate(order) if k == "r")


def test_include_reasoning_false_hides_the_reasoning_not_its_tokens(pools) -> None:
    """As vLLM: the model thinks all the same, the answer leaves the reasoning out, and usage
    counts it; streamed, reasoning-only deltas are not sent at all."""
    on, _ = pools
    body = {"messages": USER, "max_tokens": 4000, "temperature": 0, "chat_template_kwargs": {"enable_thinking": True}}
    shown = httpx.post(f"{on.url}/v1/chat/completions", json=body).json()
    hidden = httpx.post(f"{on.url}/v1/chat/completions", json={**body, "include_reasoning": "false"}).json()
    assert shown["choices"][0]["message"]["reasoning"] and "reasoning" not in hidden["choices"][0]["message"]
    assert hidden["choices"][0]["message"]["content"] == shown["choices"][0]["message"]["content"]
    assert hidden["usage"]["completion_tokens"] == shown["usage"]["completion_tokens"]
    stream_body = {**body, "include_reasoning": False, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{on.url}/v1/chat/completions", json=stream_body) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    deltas = [c["delta"] for chunk in chunks for c in chunk["choices"]]
    assert not any("reasoning" in d for d in deltas)
    assert "".join(d.get("content") or "" for d in deltas) == shown["choices"][0]["message"]["content"]
    assert chunks[-1]["usage"]["completion_tokens"] == shown["usage"]["completion_tokens"]


def test_include_reasoning_false_hides_the_reasoning_of_a_response_too(pools) -> None:
    """vLLM's Responses model takes include_reasoning as chat does: no reasoning item, no
    reasoning events, and the usage still counts its tokens (read by the official client)."""
    on, _ = pools
    ask = {"model": "Qwen/Qwen3-32B", "input": "What is the weather in Paris?", "reasoning": {"effort": "low"},
           "max_output_tokens": 2000, "temperature": 0}
    shown = client(on.url).responses.create(**ask)
    hidden = client(on.url).responses.create(**ask, extra_body={"include_reasoning": False})
    assert [item.type for item in shown.output] == ["reasoning", "message"]
    assert [item.type for item in hidden.output] == ["message"]
    assert hidden.output[0].content[0].text == shown.output[1].content[0].text
    assert hidden.usage.output_tokens == shown.usage.output_tokens
    assert hidden.usage.output_tokens_details.reasoning_tokens == shown.usage.output_tokens_details.reasoning_tokens > 0
    events = list(client(on.url).responses.create(**ask, stream=True, extra_body={"include_reasoning": False}))
    assert not any("reasoning" in e.type for e in events)
    assert [e.output_index for e in events if e.type == "response.output_item.added"] == [0]
    assert [item.type for item in events[-1].response.output] == ["message"]
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert streamed == hidden.output[0].content[0].text


def test_a_named_function_is_answered_with_its_arguments_alone_generated(pools) -> None:
    """With a named function vLLM's grammar is that function's parameters: the model writes
    only the arguments, usage counts only them, and the server puts the name beside the
    first of them in a stream (read by the official client)."""
    on, _ = pools
    ask = {"model": "Qwen/Qwen3-32B", "messages": USER, "tools": [WEATHER], "temperature": 0,
           "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    answer = client(on.url).chat.completions.create(**ask)
    call = answer.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)
    assert answer.usage.completion_tokens == len(tokenize(call.function.arguments))
    chunks = list(client(on.url).chat.completions.create(**ask, stream=True))
    calls = [c for chunk in chunks for choice in chunk.choices for c in choice.delta.tool_calls or []]
    assert calls[0].function.name == "get_weather" and calls[0].id and calls[0].function.arguments
    assert all(c.function.name is None for c in calls[1:])
    assert "".join(c.function.arguments for c in calls) == call.function.arguments
    required = client(on.url).chat.completions.create(**{**ask, "tool_choice": "required"})
    written = required.choices[0].message.tool_calls
    # unnamed, the model writes each name too (as one token, here)
    assert required.usage.completion_tokens == sum(1 + len(tokenize(c.function.arguments)) for c in written)


def test_thinking_token_budget_ends_the_reasoning_as_vllm_does(pools) -> None:
    on, _ = pools
    url = f"{on.url}/v1/chat/completions"
    body = {"messages": USER, "max_tokens": 4000, "temperature": 0, "chat_template_kwargs": {"enable_thinking": True}}
    free = httpx.post(url, json=body).json()
    budgeted = httpx.post(url, json={**body, "thinking_token_budget": 20}).json()
    none = httpx.post(url, json={**body, "thinking_token_budget": 0}).json()
    content = free["choices"][0]["message"]["content"]
    assert budgeted["choices"][0]["message"]["content"] == content == none["choices"][0]["message"]["content"]
    assert "reasoning" not in none["choices"][0]["message"]
    assert budgeted["usage"]["completion_tokens"] == none["usage"]["completion_tokens"] + 20
    assert free["usage"]["completion_tokens"] > budgeted["usage"]["completion_tokens"]
    for refused in ("20", 20.5, True, -2):
        r = httpx.post(url, json={**body, "thinking_token_budget": refused})
        assert r.status_code == 400 and r.json()["error"]["param"] == "thinking_token_budget"


def test_max_tokens_and_finish_reason(pools) -> None:
    on, off = pools
    for url in (on.url, off.url):
        r = client(url).chat.completions.create(model="Qwen/Qwen3-32B", messages=USER, max_tokens=5)
        assert r.usage.completion_tokens == 5 and r.choices[0].finish_reason == "length"


def _texts(url: str, bodies: list[dict[str, Any]]) -> list[str]:
    out = []
    for body in bodies:
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()
        message = r["choices"][0]["message"]
        out.append(json.dumps([message.get("reasoning"), message.get("content"),
                               [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]]))
    return out


def test_speculation_is_lossless_at_temperature_zero(pools, bfcl_rows) -> None:
    on, off = pools
    bodies = [dict(r["request"], temperature=0) for r in bfcl_rows[::12]]
    bodies += [{"messages": USER, "temperature": 0, "max_tokens": 60},
               {"messages": USER, "temperature": 0, "chat_template_kwargs": {"enable_thinking": True}, "max_tokens": 80}]
    assert _texts(on.url, bodies) == _texts(off.url, bodies)


def test_injected_mismatch_breaks_losslessness() -> None:
    bodies = [{"messages": USER, "temperature": 0, "max_tokens": 20}]
    with emulator(5, True, faults=__import__("draftgate.emulator.faults", fromlist=["Faults"]).Faults(mismatch_rate=1.0)) as on, \
            emulator(5, False) as off:
        assert _texts(on.url, bodies) != _texts(off.url, bodies)


def test_per_request_metrics_reconcile_with_counters(pools, bfcl_rows) -> None:
    on, _ = pools
    before = {name: metric(on.url, f"vllm:spec_decode_num_{name}_total") for name in ("drafts", "draft_tokens", "accepted_tokens")}
    totals = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0}

    async def run() -> None:
        async with httpx.AsyncClient(timeout=60) as h:
            bodies = [dict(r["request"], temperature=0) for r in bfcl_rows[1::10]]
            bodies += [{"messages": USER, "max_tokens": 50, "stream": True}] * 3
            responses = await asyncio.gather(*(h.post(f"{on.url}/v1/chat/completions", json=b) for b in bodies))
            for body, resp in zip(bodies, responses):
                if body.get("stream"):
                    lines = [l for l in resp.text.splitlines() if l.startswith("data: {")]
                    final = json.loads(lines[-1][6:])
                    assert final["choices"] == [] and "usage" in final
                    spec = final["metrics"]["speculative_decoding"]
                else:
                    spec = resp.json()["metrics"]["speculative_decoding"]
                totals["drafts"] += spec["num_spec_steps"]
                totals["draft_tokens"] += spec["num_draft_tokens"]
                totals["accepted_tokens"] += spec["num_accepted_draft_tokens"]
                if spec["num_spec_steps"]:
                    assert spec["mean_acceptance_length"] == pytest.approx(
                        1 + spec["num_accepted_draft_tokens"] / spec["num_spec_steps"])
                    assert sum(spec["acceptance_histogram"]) == spec["num_spec_steps"]

    asyncio.run(run())
    for name, value in totals.items():
        assert metric(on.url, f"vllm:spec_decode_num_{name}_total") - before[name] == value
    assert totals["drafts"] > 0


def test_schema_bound_output_is_accepted_more_than_prose(pools) -> None:
    on, _ = pools
    c = client(on.url)
    schema_tau, prose_tau = [], []
    for i in range(6):
        messages = [{"role": "user", "content": f"Weather question number {i} for Paris and Rome"}]
        r = c.chat.completions.create(model="Qwen/Qwen3-32B", messages=messages, tools=[WEATHER],
                                      tool_choice="required", temperature=0)
        schema_tau.append(r.model_extra["metrics"]["speculative_decoding"]["mean_acceptance_length"])
        r = c.chat.completions.create(model="Qwen/Qwen3-32B", messages=messages, temperature=0, max_tokens=80)
        prose_tau.append(r.model_extra["metrics"]["speculative_decoding"]["mean_acceptance_length"])
    assert sum(schema_tau) / 6 > sum(prose_tau) / 6 + 1.0
    truth = httpx.get(f"{on.url}/debug/ground-truth").json()
    assert truth["acceptance_rate"]["s"] > truth["acceptance_rate"]["f"]


def test_sampling_settings_vllm_will_not_speculate(pools) -> None:
    on, _ = pools
    before = metric(on.url, "vllm:spec_decode_num_drafts_total")
    r = client(on.url).chat.completions.create(model="Qwen/Qwen3-32B", messages=USER, max_tokens=30,
                                               frequency_penalty=0.5)
    assert r.model_extra["metrics"]["speculative_decoding"]["num_spec_steps"] == 0
    assert metric(on.url, "vllm:spec_decode_num_drafts_total") == before


def test_logprobs_expose_the_targets_distribution(pools) -> None:
    _, off = pools
    r = client(off.url).chat.completions.create(model="Qwen/Qwen3-32B", messages=USER, max_tokens=20, temperature=0,
                                                logprobs=True, top_logprobs=5)
    content = r.choices[0].logprobs.content
    assert len(content) == 20
    for entry in content:
        probs = [2.718281828 ** t.logprob for t in entry.top_logprobs]
        assert len(probs) == 5 and probs == sorted(probs, reverse=True) and sum(probs) <= 1.0 + 1e-9


def test_responses_logprobs_come_as_vllm_attaches_them(pools) -> None:
    """On each output_text delta, for its own tokens, and whole on the finished text; only when ``include``
    asks (the official client reads them)."""
    _, off = pools
    ask = {"model": "Qwen/Qwen3-32B", "input": "tell me a story", "max_output_tokens": 30, "temperature": 0}
    plain = client(off.url).responses.create(**ask)
    assert plain.output[-1].content[0].logprobs is None
    events = list(client(off.url).responses.create(**ask, stream=True, top_logprobs=3,
                                                   include=["message.output_text.logprobs"]))
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert deltas and all("".join(lp.token for lp in d.logprobs) == d.delta for d in deltas)
    text = events[-1].response.output[-1].content[0]
    assert [lp.token for lp in text.logprobs] == [lp.token for d in deltas for lp in d.logprobs]
    assert all(len(lp.top_logprobs) == 3 for lp in text.logprobs)
    refused = httpx.post(f"{off.url}/v1/responses", json={**ask, "top_logprobs": 21})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "top_logprobs"


def test_a_responses_stream_opens_streams_and_closes_each_item_in_turn(pools) -> None:
    """Reasoning, then two function calls: each item's deltas come as its tokens do, and its .done
    events before the next item opens, as vLLM streams them (read by the official client)."""
    on, _ = pools
    weather = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    events = list(client(on.url).responses.create(
        model="Qwen/Qwen3-32B", input="What is the weather in Paris and in Rome?", tools=[weather],
        tool_choice="required", reasoning={"effort": "low"}, stream=True, max_output_tokens=2000))
    final = events[-1].response
    assert events[-1].type == "response.completed"
    assert [item.type for item in final.output][:2] == ["reasoning", "function_call"]
    streamed: dict[int, str] = {}
    opened: list[int] = []
    for e in events[2:-1]:
        if e.type == "response.output_item.added":
            assert not opened or e.output_index == opened[-1] + 1
            opened.append(e.output_index)
        elif e.type.endswith(".delta"):
            assert e.output_index == opened[-1]  # only the newest item streams
            streamed[e.output_index] = streamed.get(e.output_index, "") + e.delta
        elif e.type == "response.output_item.done":
            assert e.output_index == opened[-1] and e.item == final.output[e.output_index]
    assert opened == list(range(len(final.output)))
    assert streamed[0] == final.output[0].content[0].text
    for index, item in enumerate(final.output[1:], start=1):
        assert streamed[index] == item.arguments and json.loads(item.arguments)
    deltas = [e.type for e in events if e.type.endswith(".delta")]
    assert deltas.count("response.reasoning_text.delta") > 1 and deltas.count(
        "response.function_call_arguments.delta") >= len(final.output) - 1


def test_errors_in_vllms_shape(pools) -> None:
    on, _ = pools
    r = httpx.post(f"{on.url}/v1/chat/completions", json={"model": "nope", "messages": USER})
    assert r.status_code == 404 and r.json()["error"]["code"] == 404 and r.json()["error"]["param"] == "model"
    r = httpx.post(f"{on.url}/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError"
    r = httpx.post(f"{on.url}/v1/chat/completions", json={"messages": "hello"})
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
    # the content type as vLLM checks it: the media type in any case; no header is not JSON
    body = json.dumps({"messages": USER, "max_tokens": 2}).encode()
    for header, status in (("APPLICATION/JSON; charset=utf-8", 200), ("text/plain", 400), (None, 400)):
        r = httpx.post(f"{on.url}/v1/chat/completions", content=body,
                       headers={"content-type": header} if header else {})
        assert r.status_code == status, header
    r = httpx.post(f"{on.url}/v1/chat/completions", json={"messages": USER, "tool_choice": {"function": [1]}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    r = httpx.post(f"{on.url}/v1/chat/completions", json={"messages": USER, "max_tokens": 5, "surprise_field": {"x": 1}})
    assert r.status_code == 200
    with pytest.raises(openai.NotFoundError):
        client(on.url).chat.completions.create(model="other", messages=USER)
    # routing's own errors, as vLLM's FastAPI app gives them
    assert httpx.get(f"{on.url}/v1/nope").json() == {"detail": "Not Found"}
    wrong = httpx.get(f"{on.url}/v1/chat/completions")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert wrong.json() == {"detail": "Method Not Allowed"}
    # Python's JSON reads NaN: a cap is typed as an integer on every route, and the Responses answer
    # (which repeats it) never has a value JSON cannot write
    for path, cap in (("/v1/chat/completions", "max_tokens"), ("/v1/responses", "max_output_tokens")):
        for field in (cap, "top_p", "temperature"):
            raw = json.dumps({"messages": USER, "input": "hi", field: float("nan")}).encode()
            r = httpx.post(f"{on.url}{path}", content=raw, headers={"content-type": "application/json"})
            assert r.status_code == 400 and r.json()["error"]["param"] == field, (path, r.text)


def test_fields_are_typed_as_vllms_lax_request_models_type_them(pools) -> None:
    """vLLM reads "true" as true and "5" as 5 in a request, and refuses what reads as neither."""
    on, _ = pools
    url = f"{on.url}/v1/chat/completions"
    with httpx.stream("POST", url, json={"messages": USER, "stream": "true", "max_tokens": "5", "n": None,
                                         "stream_options": {}}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert events[-1]["usage"]["completion_tokens"] == 5  # stream_options {} asks for usage, as in vLLM
    answer = httpx.post(url, json={"messages": USER, "stream": "false", "max_tokens": 4.0, "temperature": "0"}).json()
    assert answer["usage"]["completion_tokens"] == 4
    for field, value in (("stream", "maybe"), ("max_tokens", "five"), ("temperature", "hot"), ("n", 2.5),
                         ("logprobs", "some"), ("stream_options", {"include_usage": "often"})):
        r = httpx.post(url, json={"messages": USER, "stream": True, field: value})
        assert r.status_code == 400 and r.json()["error"]["param"].startswith(field), (field, r.text)
    options = {"messages": USER, "max_tokens": 2, "stream_options": {"include_usage": True}}
    r = httpx.post(url, json=options)  # vLLM: stream options need a stream
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream_options"
    assert httpx.post(url, json={**options, "stream_options": {}}).status_code == 200  # {} is no options there
    # a field of another route's model is an extra here, passed over untyped as vLLM passes it
    r = httpx.post(url, json={"messages": USER, "max_tokens": 2, "max_output_tokens": "lots", "background": "x"})
    assert r.status_code == 200
    resp = httpx.post(f"{on.url}/v1/responses", json={"input": "hi", "max_output_tokens": "6", "store": "false"})
    assert resp.status_code == 200 and resp.json()["usage"]["output_tokens"] == 6
    assert httpx.get(f"{on.url}/v1/responses/{resp.json()['id']}").status_code == 404  # "false" did not store it


def test_a_batch_of_prompts_gets_n_choices_per_prompt_as_vllm_answers_it(pools) -> None:
    on, _ = pools
    url = f"{on.url}/v1/completions"
    single = {p: httpx.post(url, json={"prompt": p, "max_tokens": 4, "temperature": 0}).json() for p in ("one", "two")}
    batch = httpx.post(url, json={"prompt": ["one", "two"], "max_tokens": 4, "n": 2, "temperature": 0}).json()
    assert [c["index"] for c in batch["choices"]] == [0, 1, 2, 3]  # prompt by prompt, n each
    expected = [single[p]["choices"][0]["text"] for p in ("one", "one", "two", "two")]
    assert [c["text"] for c in batch["choices"]] == expected
    assert batch["usage"]["prompt_tokens"] == sum(a["usage"]["prompt_tokens"] for a in single.values())
    tokens = httpx.post(url, json={"prompt": [[11, 12, 13], [14, 15]], "max_tokens": 2}).json()
    assert len(tokens["choices"]) == 2 and tokens["usage"]["prompt_tokens"] == 5
    assert len(httpx.post(url, json={"prompt": [11, 12, 13], "max_tokens": 2}).json()["choices"]) == 1  # one prompt
    with httpx.stream("POST", url, json={"prompt": ["a", "b", "c"], "max_tokens": 3, "stream": True}) as r:
        indices = {c["index"] for line in r.iter_lines() if line.startswith("data: {")
                   for c in json.loads(line[6:])["choices"]}
    assert indices == {0, 1, 2}


def test_schemas_and_patterns_that_ask_for_the_impossible_are_answered_cut_at_max_tokens(pools) -> None:
    """vLLM constrains decoding and stops at max_tokens whatever a schema asks; the emulator
    builds an output first, so it must not build a million items (it hung) or fail on 1e400."""
    on, _ = pools
    greedy = {"type": "object", "required": ["a", "b", "c", "d"], "properties": {
        "a": {"type": "array", "minItems": 10**9, "maxItems": 1e308, "items": {"type": "string"}},
        "b": {"type": "string", "minLength": 10**12, "pattern": "x{100000000}"},
        "c": {"type": "integer", "minimum": 1e300, "maximum": "ten"},
        "d": {"type": "number", "minimum": float("inf")}}}
    tool = {"type": "function", "function": {"name": "greedy", "parameters": greedy}}
    bodies = [{"tools": [tool], "tool_choice": "required"},
              {"response_format": {"type": "json_schema", "json_schema": {"name": "g", "schema": greedy}}},
              {"structured_outputs": {"regex": "(a{100000}){100000}"}},
              {"structured_outputs": {"regex": "(\\b){100000000}(z ){40}"}}]
    for extra in bodies:
        raw = json.dumps({"messages": USER, "max_tokens": 30, **extra}).replace("Infinity", "1e400")
        r = httpx.post(f"{on.url}/v1/chat/completions", content=raw, headers={"content-type": "application/json"},
                       timeout=30)
        assert r.status_code == 200, (extra, r.text[:200])
        assert r.json()["usage"]["completion_tokens"] == 30


def test_the_prefix_cache_is_shared_under_one_cache_salt_only(pools) -> None:
    """As vLLM salts block hashes with cache_salt: the same prompt under another salt is a miss."""
    on, _ = pools
    url = f"{on.url}/v1/chat/completions"
    body = {"messages": [{"role": "user", "content": "salted " * 2000}], "max_tokens": 1}
    httpx.post(url, json={**body, "cache_salt": "tenant-a"}, timeout=60)
    for salt, hits in (("tenant-a", True), ("tenant-b", False)):
        before = metric(on.url, "vllm:prefix_cache_hits_total")
        httpx.post(url, json={**body, "cache_salt": salt}, timeout=60)
        assert (metric(on.url, "vllm:prefix_cache_hits_total") - before >= 1900) is hits, salt
    for refused in ("", 7):
        r = httpx.post(url, json={**body, "cache_salt": refused})
        assert r.status_code == 400 and r.json()["error"]["param"] == "cache_salt"
    # vLLM's Responses model takes it too, and bounds it at 1,024 characters
    ask = {"input": "hi", "max_output_tokens": 1}
    for salt, status in (("x" * 1024, 200), ("x" * 1025, 400), ("", 400), (7, 400)):
        r = httpx.post(f"{on.url}/v1/responses", json={**ask, "cache_salt": salt}, timeout=60)
        assert r.status_code == status, (len(str(salt)), r.text)
        assert status == 200 or r.json()["error"]["param"] == "cache_salt"


def test_models_and_health_say_emulated(pools) -> None:
    on, _ = pools
    models = httpx.get(f"{on.url}/v1/models").json()
    assert models["data"][0]["id"] == "Qwen/Qwen3-32B" and models["data"][0]["emulated"] is True
    assert httpx.get(f"{on.url}/health").status_code == 200


def test_completions_endpoint_streamed_and_not(pools) -> None:
    on, _ = pools
    c = client(on.url)
    r = c.completions.create(model="Qwen/Qwen3-32B", prompt="Once upon a time", max_tokens=16)
    assert r.choices[0].text and r.usage.completion_tokens == 16
    text = "".join(ch.choices[0].text for ch in c.completions.create(
        model="Qwen/Qwen3-32B", prompt="Once upon a time", max_tokens=16, stream=True) if ch.choices)
    assert text


def test_prefix_cache_makes_the_next_turn_cheap_here_only(pools) -> None:
    on, off = pools
    history = [{"role": "user", "content": "word " * 3000}]
    body = {"messages": history, "max_tokens": 3}
    httpx.post(f"{on.url}/v1/chat/completions", json=body, timeout=60)
    hits_before = metric(on.url, "vllm:prefix_cache_hits_total")
    turn2 = {"messages": history + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}],
             "max_tokens": 3}
    httpx.post(f"{on.url}/v1/chat/completions", json=turn2, timeout=60)
    assert metric(on.url, "vllm:prefix_cache_hits_total") - hits_before >= 2900
    off_before = metric(off.url, "vllm:prefix_cache_hits_total")
    httpx.post(f"{off.url}/v1/chat/completions", json=turn2, timeout=60)
    assert metric(off.url, "vllm:prefix_cache_hits_total") - off_before < 100


def test_queueing_beyond_max_num_seqs() -> None:
    with emulator(7, True, max_num_seqs=2, time_scale=0.05) as on:
        async def run() -> tuple[float, float]:
            async with httpx.AsyncClient(timeout=60) as h:
                async def gauge(name: str) -> float:
                    # asynchronous, so the six requests keep moving while it is read
                    return metric_value((await h.get(f"{on.url}/metrics")).text, name)

                tasks = [asyncio.ensure_future(h.post(f"{on.url}/v1/chat/completions",
                                                      json={"messages": USER, "max_tokens": 200, "temperature": 0}))
                         for _ in range(6)]
                waiting = running = 0.0
                # until the last request ends, not for a fixed time: a busy machine runs late
                while not all(t.done() for t in tasks):
                    waiting = max(waiting, await gauge("vllm:num_requests_waiting"))
                    running = max(running, await gauge("vllm:num_requests_running"))
                    await asyncio.sleep(0.01)
                await asyncio.gather(*tasks)
                return waiting, running
        waiting, running = asyncio.run(run())
        assert running == 2 and waiting >= 3


def _truth(response: httpx.Response) -> dict[str, float]:
    return truth.read(response.headers[truth.HEADER])


def test_the_clock_is_the_gpu_time_of_the_steps_and_every_second_is_charged_to_a_request() -> None:
    """Simulated seconds advance by the physics' step times; every busy second is charged
    to the request that caused it (the evaluation's ground truth); wall time follows the
    clock by the time scale, loosely, since a shared machine may run late but never early."""
    from draftgate.emulator.physics import Work, step_time
    from draftgate.emulator.profile import EngineProfile

    scale = 0.2
    for speculative in (False, True):
        with emulator(9, speculative, time_scale=scale, k=4) as pool:
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 120, "temperature": 0}
            httpx.post(f"{pool.url}/v1/chat/completions", json=body, timeout=60)  # warm: the prompt is cached now
            before = httpx.get(f"{pool.url}/debug/ground-truth").json()
            start = time.perf_counter()
            response = httpx.post(f"{pool.url}/v1/chat/completions", json=body, timeout=60)
            wall = time.perf_counter() - start
            after = httpx.get(f"{pool.url}/debug/ground-truth").json()
            known = _truth(response)
            busy = after["busy_seconds"] - before["busy_seconds"]
            assert known["gpu_seconds"] == pytest.approx(busy, rel=1e-5)
            assert known["ttft"] + known["tpot"] * (known["tokens"] - 1) == pytest.approx(busy, rel=1e-4)
            assert busy * scale * 0.95 < wall < busy * scale * 3.0 + 0.2, (wall, busy * scale)
            if not speculative:  # one sequence alone: each decode step is one target pass
                profile = EngineProfile()
                one = step_time(profile, [Work(20, 1)], None).seconds
                assert known["tpot"] == pytest.approx(one, rel=0.05)


def test_faults() -> None:
    from draftgate.emulator.faults import Faults

    with emulator(11, True) as on:
        httpx.post(f"{on.url}/debug/faults", json={"health_503": True})
        assert httpx.get(f"{on.url}/health").status_code == 503
        httpx.post(f"{on.url}/debug/faults", json={"health_503": False, "error_status": 503})
        assert httpx.post(f"{on.url}/v1/chat/completions", json={"messages": USER}).status_code == 503
        httpx.post(f"{on.url}/debug/faults", json={"error_status": None, "first_byte_delay": 0.3})
        start = time.perf_counter()
        httpx.post(f"{on.url}/v1/chat/completions", json={"messages": USER, "max_tokens": 2})
        assert time.perf_counter() - start >= 0.3
        httpx.post(f"{on.url}/debug/faults", json={"first_byte_delay": 0, "die_after_tokens": 5})
        with pytest.raises(httpx.RemoteProtocolError):
            with httpx.stream("POST", f"{on.url}/v1/chat/completions",
                              json={"messages": USER, "max_tokens": 100, "stream": True}) as r:
                for _ in r.iter_lines():
                    pass
        httpx.post(f"{on.url}/debug/faults", json={"die_after_tokens": None, "malformed_chunk_after_tokens": 1})
        text = httpx.post(f"{on.url}/v1/chat/completions", json={"messages": USER, "max_tokens": 10, "stream": True}).text
        broken = [l for l in text.splitlines() if l.startswith("data: {")]
        with pytest.raises(json.JSONDecodeError):
            for line in broken:
                json.loads(line[6:])
        r = httpx.post(f"{on.url}/debug/faults", json={"nonsense": 1})
        assert r.status_code == 400
    assert Faults().error_status is None


def test_disconnect_frees_the_sequence() -> None:
    with emulator(12, False, time_scale=0.2) as off:
        async def run() -> None:
            async with httpx.AsyncClient(timeout=30) as h:
                task = asyncio.ensure_future(h.post(f"{off.url}/v1/chat/completions",
                                                    json={"messages": USER, "reasoning_effort": "high"}))
                await asyncio.sleep(0.3)
                assert metric(off.url, "vllm:num_requests_running") == 1
                task.cancel()
                await asyncio.sleep(0.3)
                assert metric(off.url, "vllm:num_requests_running") == 0
        asyncio.run(run())


def test_emulate_cli_process() -> None:
    from draftgate.servers import NO_THINKING, ServerProcess

    with ServerProcess(["emulate", "--speculative-config",
                        '{"method": "draft_model", "model": "Qwen/Qwen3-4B", "num_speculative_tokens": 4,'
                        ' "num_speculative_tokens_per_batch_size": [[1, 4, 4], [5, 1024, 0]]}',
                        "--per-request-spec-decode-metrics", "detailed", "--time-scale", "0.02",
                        *NO_THINKING]) as server:
        r = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": USER, "max_tokens": 30}).json()
        spec = r["metrics"]["speculative_decoding"]
        assert len(spec["per_step_accepted"]) == spec["num_spec_steps"] > 0
        assert "emulator" in server.output()
        # the server's template arguments lie under the request's own, as vLLM merges them
        assert r["choices"][0]["message"]["content"] and not r["choices"][0]["message"].get("reasoning")
        asked = httpx.post(f"{server.url}/v1/chat/completions", json={
            "messages": USER, "max_tokens": 30, "chat_template_kwargs": {"enable_thinking": True}}).json()
        assert asked["choices"][0]["message"].get("reasoning")
    bad = subprocess.run([sys.executable, "-m", "draftgate.cli.main", "emulate", "--speculative-config", "{bad"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not valid JSON" in bad.stderr and "Traceback" not in bad.stderr


def test_refuse_connections_fault_stops_accepting() -> None:
    from draftgate.servers import ServerProcess

    with ServerProcess(["emulate", "--time-scale", "0.02"]) as server:
        assert httpx.get(f"{server.url}/health").status_code == 200
        # Qwen3's template thinks unless told not to, and so does the emulator
        said = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": USER, "max_tokens": 8}).json()
        assert said["choices"][0]["message"].get("reasoning")
        r = httpx.post(f"{server.url}/debug/faults", json={"refuse_connections": True})
        assert r.status_code == 200
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{server.url}/health", timeout=2)
