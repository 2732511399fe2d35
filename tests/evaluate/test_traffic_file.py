"""An operator's own traffic file: read, classified, split and replayed as the verdict replays its data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from draftgate.emulator.profile import EngineProfile
from draftgate.evaluate.fleet import Fleet, PoolSpec
from draftgate.evaluate.requests import Bank
from draftgate.evaluate.simulation import Simulation, proxy_settings
from draftgate.evaluate.traffic import OpenLoop, Schedule
from draftgate.policy.calibration import Calibration
from draftgate.workloads import mix, traffic_file

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def write_traffic(path: Path, sessions: int = 30, singles: int = 60) -> Path:
    """A file of agent sessions (three turns each, the last over the Responses API), lone tool calls,
    chats and Messages requests, thought-through questions: every shape a line may take."""
    lines = []
    for s in range(sessions):
        history = [{"role": "user", "content": f"plan a trip {s}"}]
        for turn in range(3):
            body = {"model": "mine", "messages": list(history), "tools": TOOLS}
            if turn == 2:
                lines.append({"request": {"model": "mine", "input": history[-1]["content"], "tools": [
                    {"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}]},
                    "session": f"s{s}", "endpoint": "/v1/responses"})
            else:
                lines.append({"request": body, "session": f"s{s}"})
            history += [{"role": "assistant", "content": f"calling for turn {turn}"},
                        {"role": "user", "content": f"the tool said {turn}"}]
    for i in range(singles):
        if i % 3 == 0:
            lines.append({"model": "mine", "messages": [{"role": "user", "content": f"weather in city {i}"}],
                          "tools": TOOLS, "tool_choice": "required", "temperature": 0})
        elif i % 3 == 1:
            lines.append({"request": {"model": "mine", "max_tokens": 60, "messages": [
                {"role": "user", "content": f"tell me about {i}"}]}, "endpoint": "/v1/messages"})
        else:
            lines.append({"model": "mine", "max_tokens": 300, "messages": [{"role": "user", "content": f"why {i}?"}],
                          "chat_template_kwargs": {"enable_thinking": True}})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_a_file_is_read_as_items_of_the_verdicts_kinds_split_as_the_built_in_data(tmp_path: Path) -> None:
    path = str(write_traffic(tmp_path / "traffic.jsonl"))
    calibration, verdict = traffic_file.items(path, "calibration"), traffic_file.items(path, "verdict")
    every = [item for part in (calibration, verdict) for found in part.values() for item in found]
    assert len(every) == 30 + 60
    by_workload = {w: len(calibration[w]) + len(verdict[w]) for w in mix.WORKLOADS}
    assert by_workload == {"agent_session": 30, "tool_call": 20, "chat": 20, "reasoning": 20, "conversation": 0}
    session = next(item for item in every if item.id == "traffic:s4")
    assert [len(turn["messages"]) for turn in session.requests] == [1, 3, 1]  # in the file's order
    assert session.requests[2]["tools"][0]["function"]["name"] == "get_weather"  # Responses, as vLLM turns it
    assert all(turn["model"] == mix.MODEL for item in every for turn in item.requests)  # the emulated target
    assert all(mix.split_of(item.id) == "calibration" for found in calibration.values() for item in found)
    assert traffic_file.shares(path)["agent_session"] == pytest.approx(30 / 90)


def test_a_replayed_sessions_turns_are_sent_in_order_each_after_the_last_is_answered(tmp_path: Path) -> None:
    path = str(write_traffic(tmp_path / "traffic.jsonl"))
    bank = Bank(EngineProfile.random(4), 4)
    fleet = Fleet((PoolSpec("plain", 1),))
    sim = Simulation(fleet, bank, proxy_settings(fleet, 1024), Calibration(), 4, 1024)
    weights = mix.weights_for(None, path)
    schedule = Schedule(2.0, 40.0, 2.0)
    run = sim.run(OpenLoop(mix.stream("verdict", 4, weights, path), bank, 2.0,
                           mix.requests_per_item("verdict", weights, path), schedule, 4), schedule.measured, 1e9)
    turns: dict[str, list[tuple[int, float, float | None]]] = {}
    for served in run.served:
        item, turn = served.key.rsplit("#", 1)
        turns.setdefault(item, []).append((int(turn), served.arrived, served.last_token))
    sessions = [sorted(found) for name, found in turns.items() if name.startswith("traffic:s") and len(found) > 1]
    assert sessions  # sessions were replayed, turn after turn
    for found in sessions:
        for (turn, _, ended), (following, arrived, _) in zip(found, found[1:]):
            assert following == turn + 1 and ended is not None and arrived >= ended


@pytest.mark.parametrize(("content", "says"), [
    ("", "holds no request"),
    ('{"messages": [{"role": "user", "content": "hi"}]}\nnot json\n', "line 2 is not JSON"),
    ('[1, 2]\n', "line 1 is not a JSON object"),
    ('{"request": {"messages": []}}\n', "line 1: the request has no messages"),
    ('{"request": {"input": "hi"}, "endpoint": "/v1/embeddings"}\n', "endpoint '/v1/embeddings'"),
    ('{"request": {"messages": "hi"}, "endpoint": "/v1/messages"}\n', "line 1: not a Messages request"),
    ('{"messages": [{"role": "user", "content": "only one"}]}\n', "falls in the"),
])
def test_a_file_that_cannot_be_replayed_says_why_in_one_line(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(traffic_file.TrafficFileError) as raised:
        traffic_file.items(str(path), "verdict")
    assert says in str(raised.value) and "\n" not in str(raised.value)
