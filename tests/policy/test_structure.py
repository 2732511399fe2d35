"""The request-structure estimator, measurement and learner (policy/structure)."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftgate.policy.calibration import Calibration
from draftgate.policy.gate import PoolView, decide
from draftgate.policy.structure import (
    DEFAULT_PRIORS,
    QWEN3_DEFAULTS,
    ClassTokens,
    ObservedStructure,
    SamplingDefaults,
    StructureLearner,
    StructurePriors,
    TextParts,
    estimate,
    families,
    measure,
    measure_parts,
    shape_key,
)
from draftgate.workloads import BFCL_SAMPLE

SAMPLE = BFCL_SAMPLE
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": USER, **fields}


def test_plain_prose() -> None:
    e = estimate(body())
    assert (e.w_s, e.w_r, e.w_f) == (0.0, 0.0, 1.0)
    assert any("prose" in r for r in e.reasons)


def test_tool_choice_required_is_all_schema() -> None:
    e = estimate(body(tools=[WEATHER], tool_choice="required"))
    assert e.w_s == 1.0 and e.constrained and e.p_tool_call == 1.0
    assert any("tool_choice=required" in r for r in e.reasons)


def test_named_tool_uses_that_tools_schema() -> None:
    big = {"type": "function", "function": {"name": "big", "parameters": {
        "type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(20)},
        "required": [f"k{i}" for i in range(20)]}}}
    small = estimate(body(tools=[WEATHER, big], tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    large = estimate(body(tools=[WEATHER, big], tool_choice={"type": "function", "function": {"name": "big"}}))
    assert small.w_s == large.w_s == 1.0
    assert large.expected_tokens.s > 5 * small.expected_tokens.s


def test_a_call_is_sized_as_it_is_written_forced_or_free() -> None:
    """Named, vLLM's grammar is the function's parameters: only the arguments are generated.
    Required, it writes [{"name": ..., "parameters": ...}]: bare JSON. Free (auto), the model
    writes its own format, the call's JSON inside its parser's tags."""
    serial = {"tools": [WEATHER], "parallel_tool_calls": False}
    named = estimate(body(**serial, tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    required = estimate(body(**serial, tool_choice="required"))
    free = estimate(body(**serial, tool_choice="auto"))
    native = free.expected_tokens.s / free.p_tool_call
    per_token = DEFAULT_PRIORS.json_chars_per_token
    array_and_keys = len('[{"name": "get_weather", "parameters": }, ]') / per_token
    assert required.expected_tokens.s - named.expected_tokens.s == pytest.approx(array_and_keys)
    tags = families.UNKNOWN.tool_call_wrapper_tokens  # the body's model is no known family
    assert native - required.expected_tokens.s == pytest.approx(tags - 6 / per_token)
    # Qwen3's tags are single tokens of its vocabulary
    qwen = estimate(body(**serial, tool_choice="auto", model="Qwen/Qwen3-32B",
                         chat_template_kwargs={"enable_thinking": False}))
    assert (free.if_call.s - qwen.if_call.s) == pytest.approx(tags - families.QWEN3.tool_call_wrapper_tokens)
    assert estimate(body(**serial), priors=StructurePriors(tool_call_wrapper_tokens=1.0)).if_call.s < qwen.if_call.s
    assert any("arguments alone" in r for r in named.reasons)


def test_auto_mixes_call_and_prose_and_reads_the_conversation() -> None:
    fresh = estimate(body(tools=[WEATHER]))
    after_tool = estimate(body(tools=[WEATHER], messages=[
        *USER,
        {"role": "assistant", "tool_calls": [{"id": "1", "type": "function",
                                              "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "sunny"},
    ]))
    assert 0 < fresh.w_s < 1 and 0 < fresh.w_f < 1
    assert after_tool.p_tool_call < fresh.p_tool_call + 0.1
    assert any("after a tool result" in r for r in after_tool.reasons)
    assert any("earlier turns called tools" in r for r in after_tool.reasons)


def test_unrelated_question_expects_no_call() -> None:
    e = estimate(body(tools=[WEATHER], messages=[{"role": "user", "content": "Compose a sonnet about tulips"}]))
    assert e.p_tool_call < 0.5


def test_tool_choice_none_is_prose() -> None:
    assert estimate(body(tools=[WEATHER], tool_choice="none")).w_s == 0.0


def test_parallel_calls_lengthen_the_expected_output() -> None:
    serial = estimate(body(tools=[WEATHER], tool_choice="required", parallel_tool_calls=False))
    parallel = estimate(body(tools=[WEATHER], tool_choice="required"))
    assert parallel.expected_tokens.s > serial.expected_tokens.s


def test_json_schema_uses_the_schema_shape() -> None:
    schema = {"type": "object", "properties": {"items": {"type": "array", "minItems": 10,
              "items": {"type": "object", "properties": {"name": {"type": "string"}, "price": {"type": "number"}},
                        "required": ["name", "price"]}}}, "required": ["items"]}
    e = estimate(body(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}))
    small = estimate(body(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}}))
    assert e.w_s == small.w_s == 1.0
    assert e.expected_tokens.s > 10 * small.expected_tokens.s


@pytest.mark.parametrize("kind", ["json", "regex", "choice", "grammar", "json_object", "structural_tag"])
def test_structured_outputs_are_schema_bound(kind: str) -> None:
    value = {"json": {"type": "object"}, "regex": "[a-z]+", "choice": ["yes", "no"], "grammar": "root ::= x",
             "json_object": "true", "structural_tag": '{"type": "structural_tag"}'}[kind]
    request = body(tools=[WEATHER], structured_outputs={kind: value, "disable_any_whitespace": True})
    e = estimate(request)
    assert e.w_s == 1.0 and e.constrained
    assert any(f"structured_outputs.{kind}" in r for r in e.reasons)
    # what is measured on the answer agrees: its content is schema-bound too
    answer = {"choices": [{"message": {"content": "yes"}}], "usage": {"completion_tokens": 1}}
    assert measure(request, answer).w_s == 1.0


@pytest.mark.parametrize("options", [{"disable_any_whitespace": True}, {"json_object": False}, {}])
def test_structured_outputs_without_a_constraint_constrain_nothing(options: dict[str, Any]) -> None:
    """Options alone set no grammar (vLLM refuses such a request): neither the estimate nor
    the measurement may count the answer as schema-bound."""
    request = body(structured_outputs=options)
    e = estimate(request)
    assert e.w_s == 0.0 and not e.constrained
    assert any("sets none of" in r for r in e.reasons)
    answer = {"choices": [{"message": {"content": "some prose"}}], "usage": {"completion_tokens": 2}}
    assert measure(request, answer).w_f == 1.0


def test_json_object() -> None:
    assert estimate(body(response_format={"type": "json_object"})).w_s == 1.0
    assert estimate(body(response_format={"type": "text"})).w_s == 0.0


@pytest.mark.parametrize("field", ["guided_json", "guided_regex", "guided_choice", "guided_grammar"])
def test_legacy_guided_fields_are_dead_on_current_vllm(field: str) -> None:
    e = estimate(body(**{field: {"type": "object"} if field == "guided_json" else ["a", "b"]}))
    assert e.w_s == 0.0
    assert any(field in r and "silently ignored" in r for r in e.reasons)
    honoured = estimate(body(**{field: ["a", "b"]}), priors=StructurePriors(legacy_guided_fields_honoured=True))
    assert honoured.w_s == 1.0
    # the answer is measured on the same terms: prose on a current server, schema-bound on an old one
    answer = {"choices": [{"message": {"content": "a"}}], "usage": {"completion_tokens": 1}}
    assert measure(body(**{field: ["a", "b"]}), answer).w_f == 1.0
    assert measure(body(**{field: ["a", "b"]}), answer, legacy_guided_honoured=True).w_s == 1.0
    assert shape_key(body(**{field: ["a", "b"]})) != shape_key(body())


def test_thinking_switches() -> None:
    on = estimate(body(chat_template_kwargs={"enable_thinking": True}))
    off = estimate(body(chat_template_kwargs={"enable_thinking": False}),
                   priors=StructurePriors(thinking_by_default=True))
    default_on = estimate(body(), priors=StructurePriors(thinking_by_default=True))
    high = estimate(body(reasoning_effort="high"))
    low = estimate(body(reasoning_effort="low"))
    assert on.w_r > 0.5 and on.thinking
    assert off.w_r == 0.0 and not off.thinking
    assert default_on.w_r > 0.5
    assert high.expected_tokens.r > low.expected_tokens.r > 0
    assert estimate(body(reasoning_effort="none"), priors=StructurePriors(thinking_by_default=True)).w_r == 0
    hidden = estimate(body(chat_template_kwargs={"enable_thinking": True}, include_reasoning=False))
    assert hidden.w_r > 0 and any("include_reasoning" in r for r in hidden.reasons)


def test_thinking_token_budget_ends_the_reasoning_there() -> None:
    thinking = {"chat_template_kwargs": {"enable_thinking": True}, "tools": [WEATHER], "tool_choice": "required"}
    free = estimate(body(**thinking))
    budgeted = estimate(body(**thinking, thinking_token_budget=64))
    assert free.expected_tokens.r > 64 and budgeted.expected_tokens.r == 64
    assert budgeted.expected_tokens.s == free.expected_tokens.s  # the answer after it is whole
    assert any("thinking_token_budget=64" in r for r in budgeted.reasons)
    assert estimate(body(**thinking, thinking_token_budget=0)).w_s == 1.0
    assert estimate(body(**thinking, thinking_token_budget=-1)).expected_tokens == free.expected_tokens
    assert estimate(body(**thinking, thinking_token_budget=4, n=3)).expected_tokens.r == 12  # each output's own
    for refused in ("64", 64.0, True, -2):  # vLLM reads it strictly, and refuses these
        e = estimate(body(**thinking, thinking_token_budget=refused))
        assert e.expected_tokens == free.expected_tokens and any("vLLM refuses it" in r for r in e.reasons)
    # what a shape has learned is held within the budget of the request at hand
    learner = StructureLearner()
    key = shape_key(body(**thinking))
    learner.observe(key, ObservedStructure(tokens=ClassTokens(30.0, 2000.0, 0.0), chars=ClassTokens(90, 8000, 0),
                                           total_tokens=2030.0, tool_calls=1, source="usage"))
    request = body(**thinking, thinking_token_budget=100)
    assert learner.blend(key, estimate(request), request).expected_tokens.r == 100


def test_cap_truncates_reasoning_first() -> None:
    e = estimate(body(chat_template_kwargs={"enable_thinking": True}, tools=[WEATHER], tool_choice="required",
                      max_tokens=100))
    assert e.expected_tokens.total == pytest.approx(100)
    assert e.w_r == 1.0
    assert any("capped" in r for r in e.reasons)


def test_temperature_defaults_and_blockers() -> None:
    e = estimate(body(), defaults=QWEN3_DEFAULTS)
    assert e.temperature == 0.6 and e.temperature_from_default
    assert estimate(body(temperature=0)).temperature == 0.0
    for extra in ({"frequency_penalty": 0.5}, {"presence_penalty": 1}, {"repetition_penalty": 1.1},
                  {"min_p": 0.1}, {"logprobs": True}):
        assert estimate(body(**extra)).speculation_unsupported, extra
    assert not estimate(body(top_p=0.9)).speculation_unsupported
    assert estimate(body(n=3)).n == 3


def test_completions_requests() -> None:
    e = estimate({"model": "m", "prompt": "Once upon a time"}, endpoint="completions")
    assert e.w_f == 1.0 and e.prompt_tokens > 0
    e = estimate({"model": "m", "prompt": "x", "structured_outputs": {"choice": ["a", "b"]}}, endpoint="completions")
    assert e.w_s == 1.0
    assert estimate({"model": "m", "prompt": "x", "logprobs": 2}, endpoint="completions").speculation_unsupported


# ---------------------------------------------------------------- bad input

HOSTILE: list[Any] = [
    None, [], "string", 42,
    {"tools": "not a list"},
    {"tools": [{"function": {}}]},
    {"tools": [{"function": {"name": "x", "parameters": "not a schema"}}], "tool_choice": "required"},
    {"tools": [{"function": {"name": "x", "parameters": {"$ref": "#"}}}], "tool_choice": "required"},
    {"tools": [{"function": {"name": "x", "parameters": {"$ref": "#/$defs/missing"}}}], "tool_choice": "required"},
    {"tools": [{"function": {"name": "x", "parameters": {"type": "object", "properties": {"a": {"$ref": "#/properties/a"}}}}}]},
    {"messages": "not a list", "temperature": "hot", "max_tokens": "many", "n": "two"},
    {"response_format": {"type": "json_schema", "json_schema": "nope"}},
    {"structured_outputs": {"json": 7}},
    {"chat_template_kwargs": [1, 2], "reasoning_effort": 3},
    {"tools": [{"function": {"name": "x", "parameters": {"type": "array", "minItems": 1e308, "items": {}}}}],
     "tool_choice": "required"},
    {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string", "maxLength": 10**400}}}},
]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_bodies_get_an_estimate(hostile: Any) -> None:
    e = estimate(hostile)
    assert abs(e.w_s + e.w_r + e.w_f - 1.0) < 1e-9
    assert e.expected_tokens.total < 1e7


def test_ignored_things_are_named() -> None:
    e = estimate({"tools": [{"function": {"name": "x", "parameters": {"$ref": "#/nope"}}}], "tool_choice": "required"})
    assert any("dangling $ref" in r for r in e.reasons)
    e = estimate({"tools": [{"function": {}}, WEATHER]})
    assert any("without function.name" in r for r in e.reasons)


def test_huge_and_deep_requests_are_bounded() -> None:
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": {"type": "object", "properties": {
        "a": {"type": "string"}}}}} for i in range(5000)]
    start = time.perf_counter()
    e = estimate(body(tools=tools, tool_choice="required"))
    assert any("only the first" in r for r in e.reasons)
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(1000):
        deep = {"type": "object", "properties": {"a": deep}, "required": ["a"]}
    e2 = estimate(body(tools=[{"type": "function", "function": {"name": "deep", "parameters": deep}}],
                       tool_choice="required"))
    assert any("nested deeper" in r for r in e2.reasons)
    assert time.perf_counter() - start < 10  # generous: bounded, not fast


# integers past float range too: JSON bounds neither, and json.loads reads them
numbers = st.floats(allow_nan=True) | st.integers() | st.sampled_from([10**400, -(10**400)])
json_values = st.recursive(
    st.none() | st.booleans() | numbers | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=6),
    max_leaves=40,
)
request_keys = st.sampled_from(["tools", "tool_choice", "response_format", "structured_outputs", "messages",
                                "chat_template_kwargs", "reasoning_effort", "temperature", "max_tokens", "n",
                                "guided_json", "logprobs", "parallel_tool_calls", "prompt", "min_p"])


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 10**400, -(10**400), "hot", [0.2]],
                         ids=["inf", "-inf", "nan", "huge-int", "huge-negative-int", "word", "list"])
def test_numbers_no_server_runs_with_are_read_as_absent(value: Any) -> None:
    e = estimate(body(temperature=value, max_tokens=10**400, frequency_penalty=value),
                 defaults=SamplingDefaults(temperature=0.6))
    assert e.temperature == 0.6 and e.temperature_from_default and not e.speculation_blockers
    assert any("not a finite number: pool default 0.6 assumed" in r for r in e.reasons)
    assert e.expected_tokens.total > 0 and math.isfinite(e.expected_tokens.total)


def test_fields_are_read_as_vllms_lax_request_models_read_them() -> None:
    """"0.2", "450" and "true" are what vLLM runs with, so they are what the estimate assumes."""
    as_sent = estimate(body(temperature="0.2", max_tokens="40", n="2", ignore_eos="yes", logprobs="true",
                            frequency_penalty=" 0.5 "), defaults=SamplingDefaults(temperature=0.6))
    typed = estimate(body(temperature=0.2, max_tokens=40, n=2, ignore_eos=True, logprobs=True,
                          frequency_penalty=0.5), defaults=SamplingDefaults(temperature=0.6))
    assert as_sent.temperature == 0.2 and not as_sent.temperature_from_default
    assert as_sent.expected_tokens == typed.expected_tokens and as_sent.expected_tokens.total == 2 * 40  # n=2
    assert as_sent.n == 2 and as_sent.speculation_blockers == typed.speculation_blockers
    assert as_sent.speculation_blockers == ("frequency_penalty=0.5", "logprobs requested")
    serial = {"tools": [WEATHER], "tool_choice": "required"}
    assert estimate(body(**serial, parallel_tool_calls="false")).expected_tokens == \
        estimate(body(**serial, parallel_tool_calls=False)).expected_tokens != estimate(body(**serial)).expected_tokens
    completions = estimate({"prompt": "x", "logprobs": "2"}, endpoint="completions")
    assert completions.speculation_blockers == ("logprobs requested",)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(request_keys, json_values, max_size=8))
def test_fuzz_request_shaped_json(raw: dict[str, Any]) -> None:
    for endpoint in ("chat", "completions"):
        e = estimate(raw, endpoint=endpoint)
        assert abs(e.w_s + e.w_r + e.w_f - 1.0) < 1e-9
        assert min(e.w_s, e.w_r, e.w_f) >= 0
        # what the explain endpoint and the log line print must be strict JSON: no NaN, no infinity
        json.dumps(e.as_dict(), allow_nan=False)
    shape_key(raw)


# JSON whose keys are mostly JSON Schema keywords, so the fuzzer reaches the walk's
# branches (a "type" that is a list or an object, "properties" that is a list, ...)
schema_keys = st.sampled_from(["type", "properties", "items", "enum", "$ref", "anyOf", "oneOf", "allOf", "required",
                               "description", "const", "additionalProperties", "prefixItems", "minItems",
                               "maxItems", "maxLength", "format", "$defs"]) | st.text(max_size=8)
schema_values = st.recursive(
    st.none() | st.booleans() | numbers | st.sampled_from(
        ["object", "array", "string", "number", "integer", "boolean", "null", "#/$defs/x", "#"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(schema_keys, children, max_size=6),
    max_leaves=40,
)


def test_type_lists_and_odd_type_values_are_sized() -> None:
    nullable = {"type": "object", "properties": {"a": {"type": ["string", "null"]}, "b": {"type": {"x": 1}},
                                                  "c": {"type": ["integer"], "description": "n"}},
                "required": ["a", "b", "c"]}
    e = estimate(body(tools=[{"type": "function", "function": {"name": "f", "parameters": nullable}}],
                      tool_choice="required"))
    plain = estimate(body(tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "integer"}},
        "required": ["a", "b", "c"]}}}], tool_choice="required"))
    assert e.expected_tokens.s == pytest.approx(plain.expected_tokens.s, rel=0.2)


@settings(max_examples=500, deadline=None)
@given(schema_values | json_values)
def test_fuzz_schema_shaped_and_arbitrary_json_as_tool_schema(schema: Any) -> None:
    e = estimate(body(tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}],
                      tool_choice="required"))
    assert e.w_s == 1.0 and e.expected_tokens.s > 0


# ---------------------------------------------------------------- measure


def test_measure_non_streamed_tool_call_and_reasoning() -> None:
    response = {"choices": [{"message": {"role": "assistant", "reasoning": "r" * 300, "content": None,
                                         "tool_calls": [{"id": "1", "type": "function", "function": {
                                             "name": "get_weather", "arguments": '{"city":"Paris"}' + " " * 73}}]}}],
                "usage": {"completion_tokens": 100}}
    obs = measure(body(tools=[WEATHER]), response)
    assert obs.source == "usage" and obs.tool_calls == 1
    assert obs.total_tokens == 100
    assert obs.tokens.r == pytest.approx(75) and obs.tokens.s == pytest.approx(25)


def test_measure_leaves_out_the_name_the_server_adds_to_a_named_function() -> None:
    """With tool_choice naming the function, vLLM's grammar writes its arguments alone and
    the server adds the name; unforced, the model writes the name too."""
    arguments = '{"city":"Paris"}' + " " * 84
    response = {"choices": [{"message": {"role": "assistant", "reasoning": "r" * 300, "content": None,
                                         "tool_calls": [{"id": "1", "type": "function", "function": {
                                             "name": "get_weather", "arguments": arguments}}]}}],
                "usage": {"completion_tokens": 100}}
    named = measure(body(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}}),
                    response)
    assert named.chars.s == len(arguments) and named.tokens.s == pytest.approx(25)
    written = measure(body(tools=[WEATHER], tool_choice="required"), response)
    assert written.chars.s == len(arguments) + len("get_weather") and written.tokens.s > named.tokens.s


def test_measure_json_content_is_schema_and_plain_content_prose() -> None:
    response = {"choices": [{"message": {"content": '{"a": 1}'}}], "usage": {"completion_tokens": 5}}
    assert measure(body(response_format={"type": "json_object"}), response).w_s == 1.0
    assert measure(body(), response).w_f == 1.0


def test_measure_stream_accumulation_matches_whole_body() -> None:
    parts = TextParts()
    chunks = [
        {"choices": [{"delta": {"reasoning_content": "think "}}]},
        {"choices": [{"delta": {"reasoning": "more"}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "get_weather", "arguments": ""}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}}]},
        {"choices": [], "usage": {"completion_tokens": 12}},
    ]
    for chunk in chunks:
        parts.add_chunk(chunk)
    obs = measure_parts(body(tools=[WEATHER]), parts)
    assert obs.tool_calls == 1 and obs.total_tokens == 12
    assert obs.chars.s == len("get_weather") + len('{"city":"Paris"}')
    assert obs.chars.r == len("think more")


def test_measure_counts_the_calls_of_every_choice() -> None:
    """Each of n choices numbers its calls from 0, streamed or not."""
    call = {"index": 0, "id": "c", "function": {"name": "get_weather", "arguments": "{}"}}
    parts = TextParts()
    for index in (0, 1):
        parts.add_chunk({"choices": [{"index": index, "delta": {"tool_calls": [call]}}]})
        parts.add_chunk({"choices": [{"index": index, "delta": {"tool_calls": [{"index": 0, "function": {
            "arguments": "{}"}}]}}]})
    assert measure_parts(body(tools=[WEATHER]), parts).tool_calls == 2
    whole = {"choices": [{"index": i, "message": {"tool_calls": [{"id": "c", "function": {"name": "f"}}]}}
                         for i in range(3)]}
    assert measure(body(tools=[WEATHER]), whole).tool_calls == 3
    odd = {"choices": [{"index": [0], "message": {"tool_calls": [{"index": {"a": 1}, "function": {"name": "f"}}]}}]}
    assert measure(body(tools=[WEATHER]), odd).tool_calls == 1


def test_measure_takes_the_reasoning_tokens_usage_counts() -> None:
    """Where usage counts the reasoning tokens, R is that count and only the rest is split
    by characters; a count of 0 beside reasoning text is a parser that does not count."""
    message = {"reasoning": "r" * 100, "content": "c" * 100}
    counted = {"choices": [{"message": message}],
               "usage": {"completion_tokens": 100, "completion_tokens_details": {"reasoning_tokens": 80}}}
    obs = measure(body(), counted)
    assert obs.tokens.r == 80 and obs.tokens.f == 20
    uncounted = {**counted, "usage": {"completion_tokens": 100, "completion_tokens_details": {"reasoning_tokens": 0}}}
    assert measure(body(), uncounted).tokens.r == 50
    impossible = {**counted, "usage": {"completion_tokens": 100,
                                       "completion_tokens_details": {"reasoning_tokens": 900}}}
    assert measure(body(), impossible).tokens.r == 50
    # hidden reasoning (include_reasoning false): the count alone says how much there was
    hidden = {"choices": [{"message": {"content": "c" * 100}}], "usage": counted["usage"]}
    assert measure(body(), hidden).tokens.r == 80


def test_measure_puts_what_hidden_reasoning_leaves_over_in_r() -> None:
    """include_reasoning false on a thinking request: usage counts reasoning the answer does
    not show. What the visible text does not account for is reasoning, not more answer."""
    call = {"id": "1", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}}
    answer = {"choices": [{"message": {"content": None, "tool_calls": [call]}}], "usage": {"completion_tokens": 500}}
    request = body(tools=[WEATHER], tool_choice="required", include_reasoning=False,
                   chat_template_kwargs={"enable_thinking": True})
    assert estimate(request).reasoning_hidden
    obs = measure(request, answer, reasoning_hidden=True)
    visible = len("get_weather") + len(call["function"]["arguments"])
    assert obs.tokens.s == pytest.approx(visible / 3.0) and obs.tokens.r == pytest.approx(500 - visible / 3.0)
    assert measure(request, answer).w_s == 1.0  # not told: the visible text takes it all

    class Words:
        def count(self, text: str) -> int:
            return len(text.split())

    counted = measure(request, answer, counter=Words(), reasoning_hidden=True)
    assert counted.tokens.r == 500 - counted.tokens.s and counted.total_tokens == 500


def test_measure_with_a_token_counter() -> None:
    class Words:
        def count(self, text: str) -> int:
            return len(text.split())

    obs = measure(body(), {"choices": [{"message": {"content": "one two three"}}]}, counter=Words())
    assert obs.source == "tokenizer" and obs.tokens.f == 3


def test_measure_completions() -> None:
    obs = measure({"prompt": "x"}, {"choices": [{"text": "hello world"}], "usage": {"completion_tokens": 2}})
    assert obs.tokens.f == 2


# ---------------------------------------------------------------- learner


def _observed(ws: float, total: float = 100.0):
    tokens = {"s": ws * total, "r": 0.0, "f": (1 - ws) * total}
    response = {"choices": [{"message": {"content": "p" * int(tokens["f"]), "tool_calls": [
        {"id": "1", "function": {"name": "", "arguments": "s" * int(tokens["s"])}}]}}],
        "usage": {"completion_tokens": int(total)}}
    return measure(body(tools=[WEATHER]), response)


def test_learner_converges_on_what_the_agent_does() -> None:
    learner = StructureLearner(capacity=16, prior_strength=1.0)
    request = body(tools=[WEATHER])
    prior = estimate(request)
    key = shape_key(request)
    assert learner.blend(key, prior) == prior
    for _ in range(5):
        learner.observe(key, _observed(0.95))
    blended = learner.blend(key, prior)
    assert abs(blended.w_s - 0.95) < abs(prior.w_s - 0.95) / 4
    assert any("learned from 5" in r for r in blended.reasons)


def test_what_a_shape_has_produced_is_held_within_this_requests_bounds() -> None:
    """A shape that ran to 100 tokens under no cap is expected to stop at 30 under max_tokens 30,
    and a cap that cuts reasoning short leaves nothing after it: its w_S is 0."""
    learner = StructureLearner(prior_strength=1.0)
    request = body(tools=[WEATHER], tool_choice="required", chat_template_kwargs={"enable_thinking": True})
    key = shape_key(request)
    for _ in range(10):  # 80 reasoning tokens, then a 20-token call
        learner.observe(key, ObservedStructure(tokens=ClassTokens(20.0, 80.0, 0.0), chars=ClassTokens(60, 320, 0),
                                               total_tokens=100.0, tool_calls=1, source="usage"))
    free = learner.blend(key, estimate(request), request)
    assert free.w_s > 0.1 and free.expected_tokens.total > 100
    capped = {**request, "max_tokens": 30}
    assert shape_key(capped) == key
    cut = learner.blend(key, estimate(capped), capped)
    assert cut.expected_tokens.total == pytest.approx(30) and cut.w_s == 0.0 and cut.w_r == 1.0
    room = learner.blend(key, estimate(request, context_tokens=150), request, context_tokens=150)
    assert room.expected_tokens.total == pytest.approx(150 - room.prompt_tokens)  # a prompt of about 85
    assert any("the context's room" in r for r in room.reasons)


def test_expected_tokens_count_every_output_a_request_makes_as_usage_does() -> None:
    """n outputs for each prompt of a batch, each bounded by max_tokens alike; and what a shape
    has produced (usage's total over all outputs) is held within those bounds too."""
    one = estimate(body(max_tokens=100, ignore_eos=True))
    three = estimate(body(max_tokens=100, ignore_eos=True, n=3))
    assert one.expected_tokens.total == 100 and three.expected_tokens.total == 300 and three.sequences == 3
    assert any("output capped" in r or "ignore_eos" in r for r in three.reasons)
    batch = estimate({"prompt": ["one", "two"], "n": 2, "max_tokens": 50, "ignore_eos": True}, endpoint="completions")
    assert batch.sequences == 4 and batch.expected_tokens.total == 200
    assert any("a batch of 2 prompts: 4 outputs" in r for r in batch.reasons)
    for single in ("one", [1, 2, 3]):  # a string, or one list of token ids, is one prompt
        assert estimate({"prompt": single}, endpoint="completions").sequences == 1
    # token ids are counted as they are, whatever the text ratio
    for ratio in (4.0, 2.5):
        priors = StructurePriors(text_chars_per_token=ratio)
        assert estimate({"prompt": [1, 2, 3]}, endpoint="completions", priors=priors).prompt_tokens == 3
        assert estimate({"prompt": [[1, 2, 3], [4, 5]]}, endpoint="completions", priors=priors).prompt_tokens == 5
    # each output's own prompt fills its context: two prompts of ~100 tokens leave ~900 each of 1000
    wide = estimate({"prompt": ["x" * 400, "y" * 400], "ignore_eos": True}, endpoint="completions",
                    context_tokens=1000)
    assert wide.expected_tokens.total == pytest.approx(2 * (1000 - wide.prompt_tokens / 2))
    learner = StructureLearner()
    request = body(n=2, max_tokens=60)
    key = shape_key(request)
    for _ in range(10):  # two outputs of 50 tokens each, as usage counts them
        learner.observe(key, ObservedStructure(tokens=ClassTokens(0.0, 0.0, 100.0), chars=ClassTokens(0, 0, 400),
                                               total_tokens=100.0, tool_calls=0, source="usage"))
    blended = learner.blend(key, estimate(request), request)
    assert 90 < blended.expected_tokens.total <= 120 and blended.sequences == 2


def test_learner_is_bounded_and_evicts_least_recent() -> None:
    learner = StructureLearner(capacity=3)
    for i in range(5):
        learner.observe(f"k{i}", _observed(0.5))
    assert len(learner) == 3
    assert learner.observations("k0") == 0 and learner.observations("k4") == 1


def test_learner_follows_drift() -> None:
    learner = StructureLearner(window=10)
    prior = estimate(body())
    for _ in range(50):
        learner.observe("k", _observed(0.1))
    for _ in range(40):
        learner.observe("k", _observed(0.9))
    assert learner.blend("k", prior).w_s > 0.85


def test_shape_key_separates_steps_and_ignores_the_question() -> None:
    a = shape_key(body(tools=[WEATHER]))
    b = shape_key(body(tools=[WEATHER], messages=[{"role": "user", "content": "And in Rome?"}]))
    c = shape_key(body(tools=[WEATHER], tool_choice="required"))
    d = shape_key(body(tools=[WEATHER], temperature=0))
    assert a == b and len({a, c, d}) == 3


def test_bfcl_sample_estimates_are_schema_heavy_for_relevant_calls() -> None:
    rows = [json.loads(line) for line in SAMPLE.open()]
    assert {r["category"] for r in rows} >= {"simple", "multiple", "parallel", "multi_turn", "irrelevance"}
    relevant = [estimate(r["request"]).p_tool_call for r in rows if r["ground_truth"]]
    irrelevant = [estimate(r["request"]).p_tool_call for r in rows if not r["ground_truth"]]
    assert sum(p >= 0.5 for p in relevant) / len(relevant) > 0.9
    assert sum(p < 0.5 for p in irrelevant) / len(irrelevant) > 0.5


def test_which_settings_block_speculation_follows_the_pinned_vllm() -> None:
    modern = StructurePriors(speculation_blocked_by=())
    for extra in ({"frequency_penalty": 0.5}, {"min_p": 0.1}, {"logprobs": True}):
        assert estimate(body(**extra)).speculation_unsupported, extra
        assert not estimate(body(**extra), priors=modern).speculation_unsupported, extra
    only_min_p = StructurePriors(speculation_blocked_by=("min_p",))
    assert estimate(body(min_p=0.2), priors=only_min_p).speculation_unsupported
    assert not estimate(body(presence_penalty=1.0), priors=only_min_p).speculation_unsupported


def test_min_tokens_and_ignore_eos_extend_the_output_as_prose() -> None:
    """vLLM holds the end off until min_tokens (or, with ignore_eos, the cap): what
    the model writes past its answer is bound by no schema."""
    call = {"tools": [WEATHER], "tool_choice": "required", "temperature": 0}
    plain = estimate(body(**call))
    longer = estimate(body(**call, min_tokens=400))
    assert longer.expected_tokens.total == pytest.approx(400)
    assert longer.expected_tokens.s == plain.expected_tokens.s and longer.w_s < plain.w_s
    assert any(r.startswith("min_tokens=400:") for r in longer.reasons)
    to_cap = estimate(body(**call, ignore_eos=True, max_tokens=1000))
    assert to_cap.expected_tokens.total == pytest.approx(1000) and any("ignore_eos" in r for r in to_cap.reasons)
    # never past the cap, and a floor below the answer's length changes nothing
    assert estimate(body(**call, min_tokens=900, max_tokens=500)).expected_tokens.total == pytest.approx(500)
    assert estimate(body(**call, min_tokens=1)).expected_tokens == plain.expected_tokens
    unbounded = estimate(body(**call, ignore_eos=True))
    assert unbounded.expected_tokens == plain.expected_tokens and any("ignore_eos" in r for r in unbounded.reasons)
    for same in (400.0, "400", " 400 "):  # as vLLM's lax request model reads them
        assert estimate(body(**call, min_tokens=same)).expected_tokens == longer.expected_tokens, same
    for odd in ("four hundred", 400.5, "400.5", -3, None, float("nan"), float("inf")):
        assert estimate(body(**call, min_tokens=odd)).expected_tokens == plain.expected_tokens, odd


ROWS = {"type": "json_schema", "json_schema": {"name": "rows", "schema": {
    "type": "array", "minItems": 100_000, "items": {"type": "string", "minLength": 200}}}}


def test_the_context_bounds_the_output_as_vllm_does() -> None:
    """With no cap, vLLM stops a request at max_model_len less its prompt; so does the estimate,
    and the lower of that and max_tokens is the cap."""
    unbounded = estimate(body(response_format=ROWS))
    assert unbounded.expected_tokens.total > 500_000
    bounded = estimate(body(response_format=ROWS), context_tokens=32_768)
    assert bounded.expected_tokens.total == pytest.approx(32_768 - bounded.prompt_tokens)
    assert any("the context's room after the prompt" in r for r in bounded.reasons)
    assert estimate(body(response_format=ROWS, max_tokens=900), context_tokens=32_768).expected_tokens.total == 900
    assert estimate(body(response_format=ROWS, max_tokens=10**6), context_tokens=32_768).expected_tokens == \
        bounded.expected_tokens
    to_the_end = estimate(body(ignore_eos=True), context_tokens=4096)  # runs to the context's end, as prose
    assert to_the_end.expected_tokens.f == pytest.approx(4096 - to_the_end.prompt_tokens)
    # a short answer is untouched, and a prompt that fills the context leaves a token, not a negative length
    assert estimate(body(tools=[WEATHER]), context_tokens=32_768).expected_tokens == \
        estimate(body(tools=[WEATHER])).expected_tokens
    full = estimate(body(messages=[{"role": "user", "content": "x" * 40_000}]), context_tokens=4096)
    assert full.expected_tokens.total == pytest.approx(1.0) and full.w_f == 1.0


@settings(max_examples=200, deadline=None)
@given(context=st.integers(1, 200_000), cap=st.none() | st.integers(1, 10**7), floor=st.none() | st.integers(1, 10**7),
       ignore_eos=st.booleans(), thinking=st.booleans(), prompt_chars=st.integers(0, 400_000))
def test_no_estimate_runs_past_the_context(context: int, cap: int | None, floor: int | None, ignore_eos: bool,
                                           thinking: bool, prompt_chars: int) -> None:
    fields: dict[str, Any] = {"response_format": ROWS, "ignore_eos": ignore_eos,
                              "messages": [{"role": "user", "content": "x" * prompt_chars}],
                              "chat_template_kwargs": {"enable_thinking": thinking}}
    if cap is not None:
        fields["max_tokens"] = cap
    if floor is not None:
        fields["min_tokens"] = floor
    e = estimate(body(**fields), context_tokens=context)
    assert 0 < e.expected_tokens.total <= max(1.0, context - e.prompt_tokens) * (1 + 1e-9)
    assert e.expected_tokens.total <= (cap or math.inf) * (1 + 1e-9)
    assert abs(e.w_s + e.w_r + e.w_f - 1.0) < 1e-9


def test_a_known_family_brings_its_sampling_and_thinking_defaults() -> None:
    """Qwen3's generation config (temperature 0.6) and its template, which thinks unless told
    not to; the 2507 Instruct models never think; an unknown model gets vLLM's bare defaults.
    Configuration overrides both."""
    qwen = estimate(body(model="Qwen/Qwen3-32B"))
    assert qwen.thinking and qwen.w_r > 0.5 and qwen.temperature == 0.6
    assert any("thinks by default" in r for r in qwen.reasons)
    assert not estimate(body(model="Qwen/Qwen3-32B", chat_template_kwargs={"enable_thinking": False})).thinking
    assert not estimate(body(model="Qwen/Qwen3-32B"), priors=StructurePriors(thinking_by_default=False)).thinking
    instruct = estimate(body(model="Qwen/Qwen3-235B-A22B-Instruct-2507"))
    assert not instruct.thinking and instruct.temperature == 0.7
    assert estimate(body(model="qwen3-30b-a3b-thinking-2507-fp8")).thinking
    unknown = estimate(body(model="meta-llama/Llama-3.1-8B-Instruct"))
    assert not unknown.thinking and unknown.temperature == 1.0
    assert estimate(body(model="Qwen/Qwen3-32B"), defaults=SamplingDefaults(temperature=0.2)).temperature == 0.2


def test_an_answer_that_may_be_a_call_or_prose_carries_both_outcomes() -> None:
    e = estimate(body(tools=[WEATHER]))
    assert e.uncertain and 0 < e.p_tool_call < 1
    assert e.if_call.s > 0 and e.if_call.f == 0 and e.if_answer.s == 0 and e.if_answer.f > 0
    mixed = e.p_tool_call * e.if_call.s + (1 - e.p_tool_call) * e.if_answer.s
    assert e.expected_tokens.s == pytest.approx(mixed)
    assert not estimate(body(tools=[WEATHER], tool_choice="required")).uncertain
    assert not estimate(body()).uncertain


def _call(tokens: float = 17.0) -> ObservedStructure:
    return ObservedStructure(tokens=ClassTokens(tokens, 0.0, 0.0), chars=ClassTokens(3 * tokens, 0, 0),
                             total_tokens=tokens, tool_calls=1, source="usage")


def _prose(tokens: float = 180.0) -> ObservedStructure:
    return ObservedStructure(tokens=ClassTokens(0.0, 0.0, tokens), chars=ClassTokens(0, 0, 4 * tokens),
                             total_tokens=tokens, tool_calls=0, source="usage")


@pytest.mark.parametrize("answers", [["call"] * 4 + ["prose"], ["prose"] * 5, ["call", "prose"] * 3],
                         ids=["4 calls, then prose", "prose only", "alternating"])
def test_a_repeated_shape_is_learned_within_five_responses(answers: list[str]) -> None:
    """The prior counts for two responses: after at most five, the estimate's schema fraction
    (token-weighted, as the gate weighs it) is within 0.1 of what the shape produced."""
    request = body(tools=[WEATHER])
    key = shape_key(request)
    learner = StructureLearner()
    produced = ClassTokens()
    for n, kind in enumerate(answers[:5], start=1):
        observed = _call() if kind == "call" else _prose()
        learner.observe(key, observed)
        produced = ClassTokens(produced.s + observed.tokens.s, 0.0, produced.f + observed.tokens.f)
    blended = learner.blend(key, estimate(request), request)
    assert abs(blended.w_s - produced.s / produced.total) <= 0.1
    assert blended.observations == 5 and blended.confidence == pytest.approx(5 / 7)


def test_a_shape_that_always_calls_is_priced_with_the_chance_it_does_not() -> None:
    """Five calls in a row make a call likely (p 0.93), not certain: the expected cost still
    holds the 7% chance of a 180-token answer, which outweighs a 17-token call in tokens. The
    gate prices that expectation, and it sends the shape to speculation."""
    request = body(tools=[WEATHER])
    key = shape_key(request)
    learner = StructureLearner()
    for _ in range(5):
        learner.observe(key, _call())
    prior = estimate(request)
    blended = learner.blend(key, prior, request)
    assert blended.p_tool_call == pytest.approx((2 * prior.p_tool_call + 5) / 7)
    call = (prior.if_call.s + 5 * 17.0) / 6  # the call's length: the prior counts for one call
    assert blended.expected_tokens.s == pytest.approx(blended.p_tool_call * call)
    pools = [PoolView("spec-on", "draft_model", 8), PoolView("spec-off", None)]
    assert decide(blended, pools, Calibration()).route == "spec-on"
