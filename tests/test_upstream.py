"""The hot-path HTTP client keeps connections alive, and only reuses ones that are clean."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from proxy.upstream import Origin, UpstreamAborted, UpstreamClient
from tests.conftest import emulator
from tests.proxy_harness import metric_value, wait_until

HEADERS = [(b"content-type", b"application/json")]


def body(**extra: object) -> bytes:
    return json.dumps({"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "ping"}],
                       "max_tokens": 4, "temperature": 0, **extra}).encode()


def test_sequential_requests_share_one_keep_alive_connection() -> None:
    async def run(url: str) -> set[int]:
        origin = Origin(url)
        used = set()
        for stream in (False, True, False, True):
            response = await origin.request("POST", "/v1/chat/completions", HEADERS, body(stream=stream), 5, 30)
            used.add(id(response._conn))
            assert response.status_code == 200
            assert await response.aread()
            await response.aclose()
        assert len(origin.idle) == 1
        origin.close()
        return used

    with emulator(1, False) as server:
        assert len(asyncio.run(run(server.url))) == 1


def test_a_response_abandoned_midway_closes_its_connection() -> None:
    async def run(url: str) -> None:
        origin = Origin(url)
        response = await origin.request("POST", "/v1/chat/completions", HEADERS,
                                        body(stream=True, max_tokens=200), 5, 30)
        async for _ in response.aiter_raw():
            break  # the rest of the stream is still coming: this connection cannot carry another request
        first = response._conn
        await response.aclose()
        assert first.closed and not origin.idle
        again = await origin.request("POST", "/v1/chat/completions", HEADERS, body(), 5, 30)
        assert again._conn is not first and again.status_code == 200
        await again.aread()
        await again.aclose()
        origin.close()

    with emulator(2, False, time_scale=0.2) as server:
        asyncio.run(run(server.url))


def test_abort_ends_every_exchange_under_way_without_a_retry() -> None:
    """Shutdown ends what still runs: a reader waiting for headers or mid-body gets
    UpstreamAborted (what arrived before it is kept), and no connection goes back to the pool."""
    async def run(url: str) -> None:
        client = UpstreamClient()
        origin = client.origin(url)
        streaming = await origin.request("POST", "/v1/chat/completions", HEADERS,
                                         body(stream=True, max_tokens=400), 5, 30)
        chunks = [await anext(aiter(streaming.aiter_raw()))]
        waiting = asyncio.ensure_future(origin.request("POST", "/v1/chat/completions", HEADERS,
                                                       body(max_tokens=400), 5, 30))
        while len(origin.busy) < 2:
            await asyncio.sleep(0.01)
        client.abort_all(UpstreamAborted("shutting down"))
        with pytest.raises(UpstreamAborted):
            await waiting
        with pytest.raises(UpstreamAborted):
            async for chunk in streaming.aiter_raw():
                chunks.append(chunk)
        assert chunks and chunks[0].startswith(b"data: ")
        await streaming.aclose()
        assert not origin.busy and not origin.idle
        client.close()

    with emulator(3, False, time_scale=0.2) as server:
        asyncio.run(run(server.url))
        # the emulator saw both requests go (vLLM aborts a request whose connection closes)
        assert wait_until(lambda: metric_value(httpx.get(f"{server.url}/metrics").text,
                                               "vllm:num_requests_running") == 0, 5)
