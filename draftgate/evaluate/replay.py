"""Replay items against one endpoint at a held concurrency, or all at once, and say what each cost.

Against emulated pools each answer carries its ground truth (``x-emulator-truth``:
the busy GPU-seconds charged to it, its time to first token and per output
token, in simulated seconds), relayed unchanged by the proxy. Against real pools
there is no such header: a request's latency is timed at the client from its
stream, and the level's cost is the wall time the pools were busy, which the
caller works out from the run's duration.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from draftgate.emulator import truth
from draftgate.workloads.mix import Item


@dataclass(frozen=True)
class Measured:
    key: str  # the item's id and the request's turn: the same request under every strategy
    kind: str
    tokens: int
    gpu_seconds: float | None  # None against real pools
    ttft: float
    tpot: float
    route: str


class ReplayError(RuntimeError):
    """A request of the replay failed: the verdict stops rather than leave a gap in it."""


def _check(response: httpx.Response, url: str, key: str) -> None:
    if response.status_code != 200:
        raise ReplayError(f"{url} answered {response.status_code} to request {key}")


async def _send(client: httpx.AsyncClient, url: str, body: dict[str, Any], key: str, kind: str,
                streamed: bool) -> Measured:
    """One request; a failure raises, because a verdict with silent gaps would flatter someone."""
    if not streamed:
        response = await client.post(f"{url}/v1/chat/completions", json=body)
        _check(response, url, key)
        if truth.HEADER not in response.headers:
            raise ReplayError(f"{url} sent no {truth.HEADER} header: is it an emulated pool?")
        known = truth.read(response.headers[truth.HEADER])
        return Measured(key, kind, int(known["tokens"]), known["gpu_seconds"], known["ttft"], known["tpot"],
                        response.headers.get("x-draftgate-route", ""))
    started = time.perf_counter()
    first = last = None
    tokens = 0
    body = dict(body, stream=True, stream_options={"include_usage": True})
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        _check(response, url, key)
        route = response.headers.get("x-draftgate-route", "")
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            payload = json.loads(line[6:])
            if payload.get("choices"):
                last = time.perf_counter()
                first = first or last
            if isinstance(payload.get("usage"), dict):
                tokens = int(payload["usage"].get("completion_tokens") or 0)
    first = first or time.perf_counter()
    last = last or first
    return Measured(key, kind, tokens, None, first - started, (last - first) / max(1, tokens - 1), route)


async def closed_loop(url: str, items: list[Item], concurrency: int, streamed: bool) -> list[Measured]:
    """``concurrency`` clients, each taking the next item when its last one is done (a session's
    turns one after another), until every item has run."""
    queue: asyncio.Queue[Item] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)
    out: list[Measured] = []
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(3600, connect=30), limits=limits) as client:
        async def worker() -> None:
            while not queue.empty():
                item = queue.get_nowait()
                for turn, body in enumerate(item.requests):
                    out.append(await _send(client, url, body, f"{item.id}#{turn}", item.kind, streamed))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


async def burst(url: str, items: list[Item], streamed: bool) -> list[Measured]:
    """Every item's first request at once: the open-loop burst beyond a pool's ``max_num_seqs``."""
    limits = httpx.Limits(max_connections=len(items) + 4, max_keepalive_connections=len(items) + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(3600, connect=30), limits=limits) as client:
        return list(await asyncio.gather(*(_send(client, url, item.requests[-1], f"{item.id}#burst", item.kind,
                                                 streamed) for item in items)))
