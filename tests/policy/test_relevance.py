"""The question/tool word-overlap test (policy/structure/relevance) against its definition."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from draftgate.policy.structure.relevance import _STOP_STEMS, unrelated_to_tools


def stems(text: str) -> set[str]:
    """The definition, the slow obvious way: runs of 4+ ASCII letters, folded, cut to 5.
    (The stop list is imported: it is data; the matching is what is checked.)"""
    return {w.lower()[:5] for w in re.findall(r"[A-Za-z]{4,}", text)}


def reference(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> bool:
    users = [m for m in messages if m.get("role") == "user"]
    if not users or not isinstance(users[-1].get("content"), str):
        return False
    asked = {s.encode() for s in stems(users[-1]["content"][:2000])} - _STOP_STEMS
    if not asked:
        return False
    offered: set[bytes] = set()
    for tool in tools[:512]:
        fn = tool["function"]
        offered |= {s.encode() for s in stems(fn["name"]) | stems(fn["description"][:200])}
    return asked.isdisjoint(offered)


# Few distinct words, with shared prefixes, so overlaps and near misses both occur.
WORDS = ["weather", "weathering", "wea", "city", "cities", "stock", "stocks", "Paris", "PARIS", "sonnet",
         "get_weather", "getWeather", "price", "prices", "what", "please", "café", "naïve", "4x4", "e-mail"]
SEPARATORS = [" ", "_", "-", ", ", "\n", "é", "1", "?", "\ud800"]
text = st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SEPARATORS)), max_size=12).map(
    lambda parts: "".join(w + s for w, s in parts))
tool = st.builds(lambda name, description: {"type": "function", "function": {"name": name, "description": description}},
                 text, text)


@settings(max_examples=400, deadline=None)
@given(question=text, tools=st.lists(tool, min_size=1, max_size=40))
def test_fast_overlap_test_agrees_with_its_definition(question: str, tools: list[dict[str, Any]]) -> None:
    messages = [{"role": "user", "content": question}]
    assert unrelated_to_tools(messages, tools) == reference(messages, tools)


def test_a_shared_stem_relates_and_none_does_not() -> None:
    weather = {"type": "function", "function": {"name": "get_weather", "description": "Current conditions"}}
    assert not unrelated_to_tools([{"role": "user", "content": "Is it WEATHERING well?"}], [weather])
    assert unrelated_to_tools([{"role": "user", "content": "Compose a sonnet about tulips"}], [weather])
    # a four-letter word matches only itself, not a longer word it begins
    city = {"type": "function", "function": {"name": "lookup", "description": "cityscape photos"}}
    assert unrelated_to_tools([{"role": "user", "content": "which city"}], [city])
    # a lone surrogate (valid in JSON, not in UTF-8) separates words rather than joining them
    assert unrelated_to_tools([{"role": "user", "content": "wea\ud800ther"}], [weather])


def test_the_last_user_turn_is_the_question() -> None:
    weather = {"type": "function", "function": {"name": "get_weather", "description": ""}}
    messages = [{"role": "user", "content": "weather in Paris"}, {"role": "assistant", "content": "Sunny."},
                {"role": "user", "content": "Thanks, compose a sonnet now"}]
    assert unrelated_to_tools(messages, [weather])
    assert not unrelated_to_tools(messages[:1], [weather])
