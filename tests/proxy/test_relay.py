"""bench.relay and bench.passthrough, the benchmark's floors: what goes through them arrives as sent, both ways."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from draftgate.servers import ServerProcess
from tests.conftest import emulator

BODY = {"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 40,
        "temperature": 0, "seed": 7}


@pytest.mark.parametrize("module", ["bench.relay", "bench.passthrough"])
def test_the_floor_returns_what_the_backend_returns(module: str) -> None:
    with emulator(1, False) as backend, ServerProcess(["--to", backend.url], module=module) as relay:
        direct = httpx.post(f"{backend.url}/v1/chat/completions", json=BODY, timeout=30).json()
        relayed = httpx.post(f"{relay.url}/v1/chat/completions", json=BODY, timeout=30).json()
        assert relayed["choices"] == direct["choices"] and relayed["usage"] == direct["usage"]
        with httpx.stream("POST", f"{relay.url}/v1/chat/completions", json={**BODY, "stream": True},
                          timeout=30) as stream:
            events = [line for line in stream.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        text = "".join(json.loads(e[6:])["choices"][0]["delta"].get("content") or ""
                       for e in events[:-1] if json.loads(e[6:])["choices"])
        assert text == direct["choices"][0]["message"]["content"]


@pytest.mark.parametrize("module", ["bench.relay", "bench.passthrough"])
def test_the_floor_keeps_concurrent_connections_apart(module: str) -> None:
    async def many(url: str) -> list[str]:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            # every request asks something else, so crossed replies would show
            replies = await asyncio.gather(*(client.post("/v1/chat/completions", json={
                **BODY, "messages": [{"role": "user", "content": f"topic {i}, please"}]}) for i in range(40)))
        return [r.json()["choices"][0]["message"]["content"] for r in replies]

    with emulator(1, False) as backend, ServerProcess(["--to", backend.url], module=module) as relay:
        direct = asyncio.run(many(backend.url))
        assert len(set(direct)) == len(direct)
        assert asyncio.run(many(relay.url)) == direct
