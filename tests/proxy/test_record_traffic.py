"""The proxy writes what it serves as a traffic file: sessions kept together, every endpoint, text
redacted on request, and the file replays (``draftgate evaluate --traffic``)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from draftgate.workloads import mix, traffic_file
from tests.proxy_harness import stack

MODEL = "Qwen/Qwen3-32B"
SECRET = "the launch code is swordfish"


def _serve_some_traffic(url: str) -> None:
    for s in range(12):  # two-turn conversations: the second turn continues the first
        history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"{SECRET} {s}"}]
        first = httpx.post(f"{url}/v1/chat/completions", timeout=60,
                           json={"model": MODEL, "messages": history, "max_tokens": 8})
        answer = first.json()["choices"][0]["message"]["content"] or ""
        history += [{"role": "assistant", "content": answer}, {"role": "user", "content": "go on"}]
        assert httpx.post(f"{url}/v1/chat/completions", timeout=60,
                          json={"model": MODEL, "messages": history, "max_tokens": 8}).status_code == 200
    for i in range(3):
        assert httpx.post(f"{url}/v1/responses", timeout=60, json={
            "model": MODEL, "input": f"{SECRET} r{i}", "max_output_tokens": 8}).status_code == 200
        assert httpx.post(f"{url}/v1/messages", timeout=60, json={
            "model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": f"{SECRET} m{i}"}]}
        ).status_code == 200
        tool = httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": f"{SECRET} weather {i}"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}}}}}], "tool_choice": "required"})
        assert tool.status_code == 200
    # a bad request is not traffic anyone served
    assert httpx.post(f"{url}/v1/chat/completions", json={"model": MODEL, "messages": "x"}).status_code == 400


def test_what_the_proxy_serves_is_recorded_session_by_session_and_replays(tmp_path: Path) -> None:
    path = tmp_path / "traffic.jsonl"
    with stack(41, record_traffic={"path": str(path)}) as st:
        _serve_some_traffic(st.proxy.url)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 24 + 9
    assert {line["endpoint"] for line in lines} == {"/v1/chat/completions", "/v1/responses", "/v1/messages"}
    chats = [line for line in lines if line["endpoint"] == "/v1/chat/completions" and "tools" not in line["request"]]
    sessions = [line["session"] for line in chats]
    assert len(set(sessions)) == 12 and all(sessions.count(s) == 2 for s in sessions)  # each turn with its first
    assert SECRET in path.read_text()
    # the file is what evaluate --traffic replays: every line reads, sessions as items of their turns
    items = [item for split in ("calibration", "verdict")
             for found in traffic_file.items(str(path), split).values() for item in found]
    assert sum(len(item.requests) for item in items) == len(lines)
    assert {item.workload for item in items} == {"conversation", "chat", "tool_call"}
    assert all(turn["model"] == mix.MODEL for item in items for turn in item.requests)


def test_redacted_traffic_keeps_lengths_and_structure_and_nothing_said(tmp_path: Path) -> None:
    path = tmp_path / "redacted.jsonl"
    with stack(42, record_traffic={"path": str(path), "redact": True, "sample": 0.5}) as st:
        _serve_some_traffic(st.proxy.url)
    text = path.read_text()
    assert "swordfish" not in text and "launch" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert 0 < len(lines) < 33  # about half the sessions, each whole
    sessions = [line["session"] for line in lines if "session" in line and line["endpoint"] == "/v1/chat/completions"
                and "tools" not in line["request"]]
    assert all(sessions.count(s) == 2 for s in sessions)
    first = next(line["request"] for line in lines if line["endpoint"] == "/v1/chat/completions"
                 and "tools" not in line["request"])
    said = first["messages"][1]["content"]
    assert set(said) <= {"x", " "} and len(said) in {len(f"{SECRET} {s}") for s in range(12)}
    assert first["messages"][0]["role"] == "system" and first["max_tokens"] == 8
    tool = next((line["request"] for line in lines if "tools" in line["request"]), None)
    assert tool is None or tool["tools"][0]["function"]["name"] == "get_weather"
