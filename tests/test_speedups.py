"""The C speedups give the Python's answers (policy/structure/speedups.py).

The Python walk and relevance test are the definition; the C may hand any
case back (None) but must never answer differently. The C is also required to
be built here: CI has a compiler, and a silently missing extension would leave
the estimate three times slower with nothing failing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policy.structure import DEFAULT_PRIORS, StructurePriors, estimate, relevance
from policy.structure.schema_length import NO_PARAMETERS, SchemaWalk, presized_tools
from policy.structure.speedups import native
from tests.test_structure import json_values, schema_values

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
    answer = native.shares_no_word(question, tools, (relevance._QUESTION_CHARS, relevance._DESCRIPTION_CHARS,
                                                     relevance._MAX_TOOLS), relevance._STOP_STEMS)
    assert answer == python_unrelated(question, tools)


def python_unrelated(question: str, tools: list[Any]) -> bool:
    saved = relevance.native
    relevance.native = None
    try:
        return relevance.unrelated_to_tools([{"role": "user", "content": question}], tools)
    finally:
        relevance.native = saved


def test_long_texts_are_cut_where_the_python_cuts_them() -> None:
    # "neutron" is past the question's first 2,000 characters, "neutr" past the description's 200
    question = "x" * 2000 + " neutron"
    near = [{"type": "function", "function": {"name": "f", "description": "y" * 199 + " neutron"}}]
    for q, tools in ((question, near), ("neutron", near), ("Neutrons?", near)):
        assert native.shares_no_word(q, tools, (2000, 200, 512), relevance._STOP_STEMS) == python_unrelated(q, tools)
    assert python_unrelated("neutron", near) is True
    assert python_unrelated("Neutrons?", [{"type": "function", "function": {"name": "get_neutrons"}}]) is False
