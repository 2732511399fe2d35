"""Prefix affinity (proxy/affinity): which pool holds a conversation's prefix."""

from __future__ import annotations

import copy
import gc
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from draftgate.proxy.affinity import AffinityTable, Conversation
from tests.memory import bytes_kept

SYSTEM = {"role": "system", "content": "You are a careful agent."}
ASK = {"role": "user", "content": "Find order 1234."}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"order": 1234}'}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "shipped"}'}
PARTS = {"role": "user", "content": [{"type": "text", "text": "And this one?"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}


def chat(*messages: Any, **fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **fields}


def answered(table: AffinityTable, body: dict[str, Any], pool: str = "spec-on") -> None:
    table.record(Conversation.of(body), pool, f"http://{pool}", 1000.0)


def test_the_next_turn_finds_the_pool_that_answered_this_one() -> None:
    table = AffinityTable()
    turn = chat(SYSTEM, ASK, CALL, RESULT)
    answered(table, turn)
    nxt = chat(SYSTEM, ASK, CALL, RESULT, {"role": "assistant", "content": "Shipped."}, PARTS)
    match = table.lookup(Conversation.of(nxt), 1200.0)
    assert match is not None and match.via == "prefix" and match.placement.pool == "spec-on"
    assert 0 < match.cached_tokens <= 1000.0


def test_a_conversation_that_differs_anywhere_before_the_new_turn_is_another() -> None:
    table = AffinityTable()
    answered(table, chat(SYSTEM, ASK, CALL, RESULT))
    changed_call = copy.deepcopy(CALL)
    changed_call["tool_calls"][0]["function"]["arguments"] = '{"order": 1235}'
    for other in (chat(SYSTEM, ASK, changed_call, RESULT, ASK),  # a nested field
                  chat(SYSTEM, {**ASK, "content": "Find order 1235."}, CALL, RESULT, ASK),  # a string field
                  chat(ASK, SYSTEM, CALL, RESULT, ASK),  # the order
                  chat(SYSTEM, ASK, CALL, RESULT, ASK, model="other"),  # the model
                  chat(SYSTEM, ASK, CALL, RESULT, ASK, tools=[{"function": {"name": "refund"}}]),  # the tools
                  chat(SYSTEM, ASK, CALL, RESULT, ASK, cache_salt="tenant-b")):  # vLLM's prefix-cache salt
        assert table.lookup(Conversation.of(other), 100.0) is None, other


def test_a_salted_conversation_finds_its_own_salt_only() -> None:
    table = AffinityTable()
    answered(table, chat(SYSTEM, ASK, cache_salt="tenant-a"))
    assert table.lookup(Conversation.of(chat(SYSTEM, ASK, CALL, cache_salt="tenant-a")), 100.0) is not None
    assert table.lookup(Conversation.of(chat(SYSTEM, ASK, CALL, cache_salt="tenant-b")), 100.0) is None
    assert table.lookup(Conversation.of(chat(SYSTEM, ASK, CALL)), 100.0) is None


def test_a_compacted_conversation_is_found_by_what_its_client_groups_it_by() -> None:
    """Agents trim and summarise their history, which breaks the prefix chain; the key
    the client sends with every turn still finds the pool."""
    compacted = chat(SYSTEM, {"role": "user", "content": "Summary: order 1234 shipped."}, ASK)
    for field in ("prompt_cache_key", "session_id", "user", "safety_identifier"):
        table = AffinityTable()
        answered(table, chat(SYSTEM, ASK, CALL, RESULT, **{field: "conv-7"}), pool="spec-off")
        assert table.lookup(Conversation.of(compacted), 100.0) is None
        match = table.lookup(Conversation.of({**compacted, field: "conv-7"}), 100.0)
        assert match is not None and match.via == "session" and match.placement.pool == "spec-off", field
        assert table.lookup(Conversation.of({**compacted, field: "conv-8"}), 100.0) is None


def test_the_most_specific_grouping_wins_and_holds_for_one_model_and_salt_only() -> None:
    table = AffinityTable()
    answered(table, chat(SYSTEM, ASK, prompt_cache_key="conv-7", user="alice"))
    again = {"role": "user", "content": "Start over."}
    assert table.lookup(Conversation.of(chat(again, prompt_cache_key="conv-7", user="bob")), 100.0) is not None
    # the same user in another conversation: the conversation's key decides, not the user
    assert table.lookup(Conversation.of(chat(again, prompt_cache_key="conv-8", user="alice")), 100.0) is None
    for other in (chat(again, prompt_cache_key="conv-7", model="other"),
                  chat(again, prompt_cache_key="conv-7", cache_salt="tenant-b")):
        assert table.lookup(Conversation.of(other), 100.0) is None, other


def test_a_client_key_of_any_size_is_kept_as_a_hash() -> None:
    """100,000 entries of a megabyte each would be 100 GB: the table keeps none of the text."""
    table = AffinityTable(capacity=1000)

    def answer_200_users() -> None:
        for i in range(200):
            answered(table, chat(ASK, user=f"{i}" + "u" * 1_000_000))

    kept = bytes_kept(answer_200_users)
    assert len(table) == 201  # the one prefix they share, and 200 sessions
    assert kept < 2_000_000, kept


def test_values_of_different_kinds_that_print_alike_stay_apart() -> None:
    as_list = Conversation.of(chat({"role": "user", "content": [1]}, ASK)).chain[0][0]
    as_text = Conversation.of(chat({"role": "user", "content": "[1]"}, ASK)).chain[0][0]
    assert as_list != as_text


def test_sizes_grow_with_each_message_as_its_text_does() -> None:
    chain = Conversation.of(chat(SYSTEM, ASK, CALL, RESULT, PARTS)).chain
    sizes = [chars for _, chars in chain]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    assert sizes[1] - sizes[0] == len(ASK["content"]) + len("user")


def test_odd_and_deep_messages_never_fail() -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    for body in (chat("just text", 3, None, ASK), chat({"role": "user", "content": deep}, ASK), {"messages": "no"},
                 [1, 2], chat({"role": "user", "content": {"nested": {"deeper": [True, 1, 1.5, None]}}}, ASK),
                 chat(ASK, model=deep, user=deep, cache_salt=deep)):
        conversation = Conversation.of(body)
        assert isinstance(conversation.chain, tuple)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                      max_size=3), max_leaves=12)
messages = st.lists(st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "name"]), json_values,
                                    max_size=4), min_size=1, max_size=6)


@settings(max_examples=100, deadline=None)
@given(messages, messages)
def test_the_chain_depends_on_the_messages_alone(first: list[Any], second: list[Any]) -> None:
    """Equal messages chain alike however they were built (a body parsed afresh, as each request
    brings, has fresh strings); and a chain extends its prefix's."""
    body = chat(*first, *second)
    assert Conversation.of(body) == Conversation.of(json.loads(json.dumps(body)))
    assert Conversation.of(body).chain[:len(first)] == Conversation.of(chat(*first)).chain


def test_the_benchmark_times_the_chain_against_its_baseline_on_the_same_bodies() -> None:
    from bench.bench_conversation import conversation, paired_medians_us, repr_chain

    raw = conversation(3)
    body = json.loads(raw)
    assert len(body["messages"]) == 10 and any("tool_calls" in m for m in body["messages"])
    assert len(repr_chain(body)) == len(Conversation.of(body).chain) == 10
    assert all(t > 0 for t in paired_medians_us(raw, [repr_chain, Conversation.of], rounds=3))


def test_a_full_table_gives_the_cycle_collector_nothing_to_walk() -> None:
    """A full collection stops the event loop for as long as it walks what it tracks;
    remembered conversations are stored so that it stops tracking them."""
    table = AffinityTable(capacity=20_000)
    gc.collect()
    before = len(gc.get_objects())
    for i in range(20_000):
        table.record(Conversation(((i, 100),), None), "spec-on", "http://spec-on", 1000.0 + i)
    gc.collect()
    assert len(table) == 20_000
    assert len(gc.get_objects()) - before < 1_000
    match = table.lookup(Conversation(((7, 100), (99_999, 200)), None), 2000.0)
    assert match is not None and match.placement.prompt_tokens == 1007.0
