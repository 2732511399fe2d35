"""A mixed agent workload: BFCL tool calls, JSON extraction, reasoning, prose answers,
and multi-turn sessions, replayed through an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from typing import Any

import httpx

from draftgate.workloads import BFCL_SAMPLE

SAMPLE = BFCL_SAMPLE
MODEL = "Qwen/Qwen3-32B"
EXTRACTION_SCHEMA = {"type": "object", "properties": {
    "people": {"type": "array", "minItems": 2, "maxItems": 6, "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "role": {"type": "string", "enum": ["buyer", "seller", "agent"]},
        "age": {"type": "integer", "minimum": 18, "maximum": 90}}, "required": ["name", "role", "age"]}},
    "date": {"type": "string", "format": "date"}}, "required": ["people", "date"]}


def bfcl_requests() -> list[dict[str, Any]]:
    return [json.loads(line)["request"] for line in SAMPLE.open()]


def mixed_requests(rng: random.Random) -> Iterator[tuple[str, dict[str, Any]]]:
    """An endless stream of (class, request body)."""
    bfcl = bfcl_requests()
    i = 0
    while True:
        i += 1
        kind = rng.choices(["tool", "json", "reasoning", "prose"], weights=[4, 2, 1, 3])[0]
        if kind == "tool":
            body = dict(rng.choice(bfcl), temperature=0)
        elif kind == "json":
            body = {"model": MODEL, "temperature": 0, "messages": [
                {"role": "user", "content": f"Extract the parties from contract {i}."}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "parties",
                                                                           "schema": EXTRACTION_SCHEMA}}}
        elif kind == "reasoning":
            body = {"model": MODEL, "messages": [{"role": "user", "content": f"Plan the migration {i}."}],
                    "reasoning_effort": "low", "max_tokens": 400}
        else:
            body = {"model": MODEL, "messages": [{"role": "user", "content": f"Summarise ticket {i} for a customer."}],
                    "temperature": 0.7, "max_tokens": 150}
        yield kind, body


def replay_for(base_url: str, seconds: float, seed: int = 7) -> int:
    """Send the mixed workload sequentially for ``seconds``; returns the request count."""
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    sent = 0
    with httpx.Client(timeout=120) as client:
        for _, body in mixed_requests(rng):
            if time.monotonic() >= deadline:
                break
            client.post(f"{base_url}/v1/chat/completions", json=dict(body, stream=rng.random() < 0.5))
            sent += 1
    return sent
