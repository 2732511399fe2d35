"""The C speedups give the Python's answers (policy/structure/speedups.py).

The Python walk, relevance test, conversation reading and shape text are the
definition; the C may hand any case back (None) but must never answer
differently, and whole estimates with and without it are the same. The C is
also required to be built here: CI has a compiler, and a silently missing
extension would leave the estimate three times slower with nothing failing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.structure import DEFAULT_PRIORS, QWEN3_DEFAULTS, StructurePriors, estimate, estimator, learner, relevance
from policy.structure.schema_length import NO_PARAMETERS, SchemaWalk, presized_tools, sizer_for
from policy.structure.speedups import native
from tests.test_structure import json_values, request_keys, schema_values

SAMPLE = Path(__file__).parents[1] / "lab" / "workloads" / "bfcl_sample.jsonl"
TIGHT = StructurePriors(max_schema_depth=3, max_schema_nodes=10, optional_property_share=0.0)


def python_size(params: Any, priors: StructurePriors) -> tuple[float, set[str]]:
    walk = SchemaWalk(priors, params)
    return walk.chars(params), walk.notes


def tool(params: Any, name: Any = "f") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": params}}


def assert_same_sizes(tools: list[Any], priors: StructurePriors = DEFAULT_PRIORS) -> list[Any]:
    sized = presized_tools(tools, priors)
    assert sized is not None and len(sized) == min(len(tools), priors.max_tools)
    for t, entry in zip(tools, sized):
        if entry is None:
            continue
        fn = t["function"]
        params = fn.get("parameters", NO_PARAMETERS)
        size, notes = python_size(params, priors)
        assert entry == (fn["name"], size), params  # exactly: the same arithmetic in the same order
        assert not notes, f"the C sized a schema the Python notes something about: {notes}"
    return sized


def test_the_speedups_are_built() -> None:
    assert native is not None, "policy.structure._speedups was not built: is a C compiler installed?"


def test_every_bfcl_tool_is_sized_in_c_as_in_python() -> None:
    rows = [json.loads(line) for line in SAMPLE.open()]
    tools = [t for r in rows for t in r["request"].get("tools", [])]
    sized = assert_same_sizes(tools)
    assert all(entry is not None for entry in sized)  # the common case never falls back


def test_what_the_python_notes_is_left_to_it() -> None:
    hostile = [
        {"$ref": "#"}, {"$ref": "#/$defs/missing"}, {"type": "object", "properties": [1]},
        {"type": "decimal"}, "not a schema", None, {"type": "object", "properties": {"a": 7}},
        {"$ref": "#/$defs/a~1b", "$defs": {"a/b": {"type": "string"}}},
    ]
    sized = assert_same_sizes([tool(h) for h in hostile] + [{"function": {}}, "x", tool({}, name="")])
    assert sized == [None] * len(sized)
    # and the estimate still names them, as it does without the speedups
    e = estimate({"tools": [tool({"$ref": "#/$defs/missing"})], "tool_choice": "required"})
    assert any("dangling $ref" in r for r in e.reasons)


def test_schemas_that_use_every_keyword_are_sized_alike() -> None:
    defs = {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                      "required": ["x", "y"]}}
    params = {
        "type": "object", "$defs": defs, "required": ["a", "c", "d", "e", "g", "h", "i"],
        "properties": {
            "a": {"$ref": "#/$defs/point"}, "b": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "c": {"allOf": [{"$ref": "#/$defs/point"}, {"type": "object", "properties": {"z": {"type": "int"}}}]},
            "d": {"enum": ["x", "yy", "zzz"]}, "e": {"enum": [1, 2.5, None, True, {"k": 1}]},
            "f": {"const": "fixed"}, "g": {"type": "array", "items": {"type": "string", "format": "date"},
                                           "minItems": 3, "maxItems": 10**400},
            "h": {"type": ["null", "string"], "maxLength": 4, "minLength": 2.5},
            "i": {"type": "array", "prefixItems": [{"type": "boolean"}, {"oneOf": [{"type": "number"}]}]},
            "j": {"type": "object", "additionalProperties": {"type": "string"}},
            "k": {"properties": {}, "additionalProperties": False}, "l": {}, "m": True,
        },
    }
    assert all(entry is not None for entry in assert_same_sizes([tool(params), {"function": {"name": "bare"}}]))


@settings(max_examples=400, deadline=None)
@given(schema_values | json_values, st.sampled_from([DEFAULT_PRIORS, TIGHT]))
def test_fuzz_c_and_python_size_alike(schema: Any, priors: StructurePriors) -> None:
    assert_same_sizes([tool(schema), tool({"type": "object", "properties": {"p": schema}, "required": ["p"]})],
                      priors)


words = st.text(alphabet=st.sampled_from("abcdeDISCOVERé_ 1"), max_size=40)
tool_texts = st.lists(st.fixed_dictionaries({}, optional={"name": words | st.integers(), "description": words}),
                      max_size=20)


@settings(max_examples=400, deadline=None)
@given(words.filter(bool), tool_texts)
def test_fuzz_the_relevance_test_answers_alike(question: str, functions: list[dict[str, Any]]) -> None:
    tools = [{"type": "function", "function": fn} for fn in functions]
    assert relevance._WORD_TEST.shares_no_word(question, tools) == python_unrelated(question, tools)


def python_unrelated(question: str, tools: list[Any]) -> bool:
    with patch.object(relevance, "_WORD_TEST", None):
        return relevance.unrelated_to_tools([{"role": "user", "content": question}], tools)


def test_long_texts_are_cut_where_the_python_cuts_them() -> None:
    # "neutron" is past the question's first 2,000 characters, "neutr" past the description's 200
    question = "x" * 2000 + " neutron"
    near = [{"type": "function", "function": {"name": "f", "description": "y" * 199 + " neutron"}}]
    for q, tools in ((question, near), ("neutron", near), ("Neutrons?", near)):
        assert relevance._WORD_TEST.shares_no_word(q, tools) == python_unrelated(q, tools)
    assert python_unrelated("neutron", near) is True
    assert python_unrelated("Neutrons?", [{"type": "function", "function": {"name": "get_neutrons"}}]) is False


def test_by_name_is_every_tool_sized_or_none() -> None:
    rows = [json.loads(line) for line in SAMPLE.open()]
    sizer = sizer_for(DEFAULT_PRIORS)
    for tools in [r["request"]["tools"] for r in rows if r["request"].get("tools")] + [[WEATHER_TWICE, WEATHER]]:
        arguments, call_chars = sizer.by_name(tools)
        assert arguments == dict(sizer.size(tools))  # the last of a repeated name wins, at the first's place
        assert call_chars == sum(len(name) + chars for name, chars in arguments.items())
    assert sizer.by_name([tool({"$ref": "#/x"}), WEATHER]) is None  # one for the Python: all for the Python
    assert sizer_for(StructurePriors(max_tools=1)).by_name([WEATHER, WEATHER]) is None  # the Python notes the cut


WEATHER = tool({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}, name="weather")
WEATHER_TWICE = tool({"type": "object", "properties": {"city": {"type": "string"}, "day": {"type": "string"}}},
                     name="weather")


def without_the_speedups(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, the estimate and the shape digest run as they do where no C was built."""
    monkeypatch.setattr(estimator, "_READER", None)
    monkeypatch.setattr(estimator, "sizer_for", lambda priors: None)
    monkeypatch.setattr(estimator, "_SETTINGS", {})
    monkeypatch.setattr(estimator, "_last_setting", None)
    monkeypatch.setattr(relevance, "_WORD_TEST", None)
    monkeypatch.setattr(learner, "_SHAPE_TEXT", None)


def python_read(conversation: Any) -> Any:
    with patch.object(estimator, "_READER", None):
        return estimator._read_conversation(conversation)


messages = st.lists(
    st.fixed_dictionaries({}, optional={
        "role": st.sampled_from(["user", "assistant", "tool", "function", "system"]) | json_values,
        "content": st.text(max_size=30) | st.lists(st.dictionaries(st.sampled_from(["type", "text"]), json_values,
                                                                    max_size=2), max_size=3) | json_values,
        "tool_calls": st.lists(json_values, max_size=3) | json_values,
    }) | json_values,
    max_size=70,
) | json_values


@settings(max_examples=300, deadline=None)
@given(messages)
def test_fuzz_the_conversation_is_read_alike(conversation: Any) -> None:
    read = estimator._READER.read(conversation)
    assert read is not None  # plain JSON never needs the Python
    assert read == python_read(conversation)


def test_the_last_64_messages_are_searched_for_tool_calls() -> None:
    called = {"role": "assistant", "tool_calls": [{"id": "a"}]}
    for padding, expected in ((63, True), (64, False)):
        conversation = [called] + [{"role": "user", "content": "more"}] * padding
        assert estimator._READER.read(conversation)[1] is expected
        assert python_read(conversation)[1] is expected


shape_bodies = st.dictionaries(
    request_keys | st.sampled_from(["model", "guided_regex", "guided_choice", "guided_grammar"]),
    json_values | st.lists(st.fixed_dictionaries({}, optional={"role": json_values}) | json_values, max_size=3),
    max_size=8)


@settings(max_examples=300, deadline=None)
@given(shape_bodies, st.none() | st.sampled_from(["", "m"]), st.none() | st.floats(allow_nan=True))
def test_fuzz_the_shape_text_is_written_alike(body: dict[str, Any], model: str | None,
                                              temperature: float | None) -> None:
    assert learner._SHAPE_TEXT.text(body, model, temperature) == learner.shape_text(body, model, temperature)


def estimates_and_shape_texts() -> list[tuple[Any, ...]]:
    rows = [json.loads(line) for line in SAMPLE.open()]
    bodies: list[Any] = [r["request"] for r in rows]
    bodies += [dict(b, tool_choice="required", max_tokens=20, temperature=0.3) for b in bodies[:40]]
    bodies += [dict(b, messages=b["messages"] * 40) for b in bodies[:10]]  # past the 64 turns searched
    answers: list[tuple[Any, ...]] = []
    for body in bodies:
        for options in ({}, {"defaults": QWEN3_DEFAULTS, "context_tokens": 4096.0},
                        {"priors": StructurePriors(thinking_by_default=True, max_tools=2)}):
            answers.append(tuple(estimate(body, **options)))
        text = None if learner._SHAPE_TEXT is None else learner._SHAPE_TEXT.text(body, None, None)
        answers.append((text or learner.shape_text(body),))
    return answers


def test_estimates_are_the_same_with_and_without_the_speedups(monkeypatch: pytest.MonkeyPatch) -> None:
    with_c = estimates_and_shape_texts()
    without_the_speedups(monkeypatch)
    assert estimates_and_shape_texts() == with_c  # exactly: reasons, floats and all
