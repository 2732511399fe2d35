"""The demo's replay: what an agent platform sends, in a fixed, seeded order.

Steps are independent requests (BFCL tool calls, JSON extraction, reasoning,
prose answers, requests near the break-even point), agent sessions whose turns
depend on the previous answers, and one concurrent burst that saturates the
speculation pool. Temperature 0 throughout, so every replay of the same step
produces the same text on any pool (speculation is lossless) and the
counterfactual replays are comparable request by request.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from draftgate.workloads.agent import EXTRACTION_SCHEMA, MODEL, bfcl_requests

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                            "unit": {"type": "string", "enum": ["c", "f"]}},
                          "required": ["city", "unit"]}}}
SEARCH = {"type": "function", "function": {"name": "search_flights", "description": "Search flights",
          "parameters": {"type": "object", "properties": {
              "origin": {"type": "string"}, "destination": {"type": "string"},
              "date": {"type": "string", "format": "date"}, "passengers": {"type": "integer", "minimum": 1}},
              "required": ["origin", "destination", "date", "passengers"]}}}


@dataclass
class Step:
    label: str  # request class shown in the report
    body: dict[str, Any] | None = None  # an independent request
    session: int | None = None  # turns of one agent session, built from earlier answers
    turns: int = 0
    burst: list[dict[str, Any]] = field(default_factory=list)  # concurrent requests


def build(seed: int = 0, scale: float = 1.0) -> list[Step]:
    rng = random.Random(seed)
    bfcl = [r for r in bfcl_requests() if len(json.dumps(r)) < 12_000]
    n = lambda k: max(2, int(k * scale))  # noqa: E731
    steps: list[Step] = []
    for _ in range(n(24)):
        steps.append(Step("tool call (BFCL)", dict(rng.choice(bfcl), tool_choice="required", temperature=0)))
    for i in range(n(10)):
        steps.append(Step("JSON extraction", {"model": MODEL, "temperature": 0, "messages": [
            {"role": "user", "content": f"Extract the parties from contract {i}."}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "parties", "schema": EXTRACTION_SCHEMA}}}))
    for i in range(n(6)):
        steps.append(Step("reasoning", {"model": MODEL, "temperature": 0, "reasoning_effort": "low",
                                        "max_tokens": 400,
                                        "messages": [{"role": "user", "content": f"Plan the migration of service {i}."}]}))
    for i in range(n(12)):
        steps.append(Step("prose answer", {"model": MODEL, "temperature": 0, "max_tokens": 160, "messages": [
            {"role": "user", "content": f"Summarise support ticket {i} for the customer."}]}))
    for i in range(n(8)):
        # auto tool choice on a question that may or may not need the tool: near break-even
        steps.append(Step("near break-even", {"model": MODEL, "temperature": 0, "max_tokens": 200,
                                              "tools": [WEATHER], "tool_choice": "auto", "messages": [
                                                  {"role": "user", "content": f"Is it a good day {i} for a walk in Oslo?"}]}))
    for i in range(n(6)):
        # one response, two classes: the agent thinks, then calls
        steps.append(Step("think, then call", dict(rng.choice(bfcl), tool_choice="required", temperature=0,
                                                  reasoning_effort="low", max_tokens=600)))
    for s in range(n(4)):
        steps.append(Step("agent session", session=s, turns=6))
    rng.shuffle(steps)
    burst = [dict(rng.choice(bfcl), tool_choice="required", temperature=0) for _ in range(n(40))]
    steps.insert(len(steps) // 2, Step("burst (tool calls)", burst=burst))
    return steps


def session_turn(session: int, turn: int, history: list[dict[str, Any]]) -> dict[str, Any]:
    """The request for one agent turn: even turns call tools, odd turns answer in prose."""
    if not history:
        history.extend([
            {"role": "system", "content": "You are a travel agent with tools. Policies follow. " + "Rule. " * 2500},
            {"role": "user", "content": f"Session {session}: plan my trip from Oslo to Rome next week."}])
    body: dict[str, Any] = {"model": MODEL, "temperature": 0, "messages": [dict(m) for m in history],
                            "tools": [WEATHER, SEARCH], "max_tokens": 160}
    body["tool_choice"] = "required" if turn % 2 == 0 else "none"
    return body


def extend_history(history: list[dict[str, Any]], response: dict[str, Any], turn: int) -> None:
    message = response["choices"][0]["message"]
    if message.get("tool_calls"):
        calls = [{"id": c["id"], "type": "function", "function": c["function"]} for c in message["tool_calls"]]
        history.append({"role": "assistant", "content": None, "tool_calls": calls})
        history += [{"role": "tool", "tool_call_id": c["id"], "content": "{\"ok\": true, \"price\": 142}"}
                    for c in calls]
    else:
        history.append({"role": "assistant", "content": message.get("content") or ""})
        history.append({"role": "user", "content": f"Thanks. Next, step {turn + 1}?"})
