"""Reading request fields as vLLM does (policy/vllm_fields), checked against a
pydantic model declared as vLLM declares its request fields."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError

from draftgate.policy.vllm_fields import (
    as_bool,
    as_float,
    as_int,
    prompts_of,
    streams,
    wants_usage,
)


class VllmShaped(BaseModel):
    """Fields typed as vLLM's ChatCompletionRequest types them (extra fields allowed, lax mode)."""

    model_config = ConfigDict(extra="allow")
    stream: bool | None = False
    max_tokens: int | None = None
    temperature: float | None = None


def vllm_reads(field: str, value: Any) -> tuple[bool, Any]:
    """Whether a vLLM-shaped model takes ``value`` for ``field``, and as what."""
    try:
        return True, getattr(VllmShaped(**{field: value}), field)
    except ValidationError:
        return False, None


# what a JSON body can carry, with the strings lax mode reads specially
scalars = (st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats(allow_nan=True)
           | st.sampled_from([2**53 + 1, 2**64 + 1, 10**308, 10**309, 10**400, -(10**400)])
           | st.sampled_from(["true", "False", "yes", "no", "on", "off", "1", "0", "t", "n", " true", "2", "450",
                              " 450 ", "450.0", "4.5e2", "0.2", "nan", "-inf", "1_000", "0x10", ""])
           | st.text(max_size=8))
values = scalars | st.lists(scalars, max_size=2) | st.dictionaries(st.text(max_size=3), scalars, max_size=2)


@settings(max_examples=600, deadline=None)
@given(values)
def test_each_reader_agrees_with_vllms_model(value: Any) -> None:
    for field, reader in (("stream", as_bool), ("max_tokens", as_int), ("temperature", as_float)):
        accepted, typed = vllm_reads(field, value)
        got = reader(value)
        if accepted:
            assert got == typed or (got != got and typed != typed), (field, value)  # NaN is NaN
            assert type(got) is type(typed), (field, value)
        else:
            assert got is None, (field, value)


def test_the_usual_spellings() -> None:
    assert [as_bool(v) for v in (True, "true", "Yes", "on", 1, 1.0, False, "false", 0, "off", None, 2, "maybe")] == \
        [True] * 6 + [False] * 4 + [None] * 3
    assert [as_int(v) for v in (450, 450.0, "450", " 450 ", True, 450.5, "4.5e2", None)] == \
        [450, 450, 450, 450, 1, None, None, None]
    assert [as_float(v) for v in (0.2, "0.2", 1, "1e-1", None, "warm")] == [0.2, 0.2, 1.0, 0.1, None, None]


def test_what_streams_and_what_asks_for_usage() -> None:
    assert streams({"stream": "true"}) and streams({"stream": 1}) and streams({"stream": True})
    assert not any(streams(b) for b in ({"stream": "false"}, {"stream": None}, {}, {"stream": "2"}, [], None))
    # vLLM's StreamOptions defaults include_usage to true: {} asks for the usage chunk
    assert wants_usage({"stream_options": {}}) and wants_usage({"stream_options": {"include_usage": "yes"}})
    assert not any(wants_usage(b) for b in ({}, {"stream_options": None}, {"stream_options": {"include_usage": None}},
                                            {"stream_options": {"include_usage": "no"}}, {"stream_options": []}))


def test_a_completions_batch_is_split_as_vllm_splits_it() -> None:
    assert prompts_of({"prompt": ["a", "b"]}) == ["a", "b"]
    assert prompts_of({"prompt": [[1, 2], [3]]}) == [[1, 2], [3]]
    assert prompts_of({"prompt": [1, 2, 3]}) == [[1, 2, 3]]  # one tokenized prompt
    assert prompts_of({"prompt": "a"}) == ["a"] and prompts_of({"prompt": []}) == [[]]
