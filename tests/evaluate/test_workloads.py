"""The verdict's built-in traffic: BFCL's multi-turn entries as agent sessions, ShareGPT's first turns as chat and
reasoning, each split by id alone."""

from __future__ import annotations

import json

from draftgate.workloads import BFCL_SAMPLE, BFCL_SESSION_TOOLS, BFCL_SESSIONS, SHAREGPT_SAMPLE, mix

TOOLS_BY_CLASS = {row["class"]: row["tools"] for row in map(json.loads, BFCL_SESSION_TOOLS.read_text().splitlines())}


def test_every_bfcl_multi_turn_entry_is_an_agent_session_in_one_split_only() -> None:
    calibration = {item.id for item in mix.items("calibration")["agent_session"]}
    verdict = {item.id for item in mix.items("verdict")["agent_session"]}
    assert not calibration & verdict
    ids = {item_id for part in (calibration, verdict) for item_id in part}
    assert len(ids) == 200  # BFCL v4's multi-turn base category, the sample's 30 and the 170 others
    assert all(mix.split_of(i) == "calibration" for i in calibration)
    # a calibration part a few sessions long is a few sessions replayed over and over: the trial's p99 is theirs
    assert len(calibration) >= 50


def test_every_sharegpt_first_turn_is_chat_or_reasoning_in_one_split_only() -> None:
    rows = [json.loads(line) for line in SHAREGPT_SAMPLE.read_text().splitlines()]
    parts = {split: {item.id for kind in ("chat", "reasoning") for item in mix.items(split)[kind]}
             for split in ("calibration", "verdict")}
    assert not parts["calibration"] & parts["verdict"]
    assert parts["calibration"] | parts["verdict"] == {row["id"] for row in rows}
    # as with the sessions: the trial replays the calibration part, whose rare long answers decide a p99
    assert len(mix.items("calibration")["chat"]) >= 200


def test_each_turn_of_a_session_from_the_sessions_file_carries_its_classes_tools() -> None:
    sample = [json.loads(line) for line in BFCL_SAMPLE.read_text().splitlines()]
    # the tools file holds each class's tools as the sample's sessions carry them inline, class after class
    assert all(_classes_of(row["request"]["tools"]) for row in sample if row["category"] == "multi_turn")
    rows = {row["id"]: row for row in map(json.loads, BFCL_SESSIONS.read_text().splitlines())}
    found = {item.id: item for split in ("calibration", "verdict") for item in mix.items(split)["agent_session"]}
    assert len(rows) == 170
    for session_id, row in rows.items():
        turns = found[session_id].requests
        assert all(turn["tools"] == [t for c in row["tool_classes"] for t in TOOLS_BY_CLASS[c]] for turn in turns)
        # turn by turn: each turn the conversation up to one more user message, the last the entry's own
        assert [sum(m["role"] == "user" for m in turn["messages"]) for turn in turns] == list(range(1, len(turns) + 1))
        assert turns[-1]["messages"] == row["request"]["messages"]


def _classes_of(tools: list[dict]) -> list[str]:
    """The classes whose tools, one after another, make up ``tools`` ([] when they do not)."""
    found, rest = [], tools
    while rest:
        cls = next((c for c, its in TOOLS_BY_CLASS.items() if rest[:len(its)] == its), None)
        if cls is None:
            return []
        found.append(cls)
        rest = rest[len(TOOLS_BY_CLASS[cls]):]
    return found
