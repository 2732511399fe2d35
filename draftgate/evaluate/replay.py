"""Open-loop arrivals sent over HTTP in wall time: the verdict on real pools, and the check that the
simulation routes as the proxy does.

The arrivals are the simulation's (``traffic.OpenLoop``): the same seeded
Poisson times, items, think times and prefix-cache salts, scaled to wall time
by ``time_scale`` (1 against real pools). Each request is streamed and timed
at the client: time to first token from its first content chunk, time per
output token after it, its output tokens from the usage chunk, and the pool
that served it from ``x-draftgate-route`` when a proxy is in front.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx

from draftgate.evaluate.simulation import Served
from draftgate.evaluate.traffic import THINK_SECONDS, Schedule
from draftgate.workloads.mix import Item


class ReplayError(RuntimeError):
    """A request of the replay failed: the verdict stops rather than leave a gap in it."""


@dataclass
class Replayed:
    """What the replay saw, as the simulation reports it (in the replay's own seconds)."""

    served: list[Served]
    salts: dict[int, str]  # id(served) -> its cache salt


async def replay(url: str, items: list[Item], rate: float, per_item: float, schedule: Schedule, seed: int,
                 time_scale: float = 1.0) -> Replayed:
    """``items`` arriving at ``url`` as ``traffic.OpenLoop`` makes them arrive, ``time_scale`` wall seconds
    a second; times reported in the arrivals' own seconds."""
    arrivals = random.Random(seed)
    thinking = random.Random(seed + 1)
    item_rate = rate / per_item
    served: list[Served] = []
    salts: dict[int, str] = {}
    start = time.perf_counter()
    tasks: list[asyncio.Task[None]] = []

    def now() -> float:
        return (time.perf_counter() - start) / time_scale

    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    async with httpx.AsyncClient(timeout=httpx.Timeout(3600, connect=30), limits=limits) as client:
        async def chain(item: Item, salt: str) -> None:
            for turn, body in enumerate(item.requests):
                measured = schedule.measured[0] <= now() < schedule.measured[1]
                record = Served(f"{item.id}#{turn}", item.workload, now(), measured)
                served.append(record)
                salts[id(record)] = salt
                await _send(client, url, dict(body, cache_salt=salt), record, now)
                if turn + 1 < len(item.requests):
                    think = thinking.expovariate(1.0 / THINK_SECONDS.get(item.workload, 1.0))
                    await asyncio.sleep(think * time_scale)

        at, index = arrivals.expovariate(item_rate), 0
        while at <= schedule.arrivals_end:
            delay = at * time_scale - (time.perf_counter() - start)
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(chain(items[index % len(items)], f"arrival-{index}")))
            index += 1
            at += arrivals.expovariate(item_rate)
        await asyncio.gather(*tasks)
    return Replayed(served, salts)


async def _send(client: httpx.AsyncClient, url: str, body: dict[str, Any], record: Served,
                now: Any) -> None:
    body = dict(body, stream=True, stream_options={"include_usage": True})
    try:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                raise ReplayError(f"{url} answered {response.status_code} to request {record.key}")
            record.pool = response.headers.get("x-draftgate-route", "")
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                payload = json.loads(line[6:])
                if payload.get("choices"):
                    record.last_token = now()
                    if record.first_token is None:
                        record.first_token = record.last_token
                if isinstance(payload.get("usage"), dict):
                    record.tokens = int(payload["usage"].get("completion_tokens") or 0)
    except httpx.HTTPError as exc:
        raise ReplayError(f"{url} could not be reached: {type(exc).__name__} {exc}") from None
    record.finished = record.first_token is not None
