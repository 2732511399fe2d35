"""The same ladder against a real pool over HTTP, measured as ``vllm bench serve`` measures it.

Each request is a streamed Completions request of the scheduled prompt length
(common short words, one token each in the emulator's tokenizer and about one
in a real one: the prompt length the server reports is what is recorded) asking
for the scheduled answer length with ``ignore_eos``. The client times every
chunk: time to first token, the gaps between chunks, time per output token
after the first, end to end. The acceptance length comes from the pool's
speculation counters (``/metrics``) before and after the rung.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

import httpx

from draftgate.simulate.ladder import Ladder, Timing, schedule, summary

WORDS = ("the", "cat", "sat", "on", "a", "mat", "and", "ran", "far", "out", "now", "we", "go", "up", "to", "sea",
         "sun", "red", "big", "old", "new", "day", "way", "man", "car", "box", "dog", "hot", "ice", "map")


class PoolError(Exception):
    """A pool that cannot be measured: unreachable, or answering with an error."""


async def run(ladder: Ladder, url: str, model: str, time_scale: float = 1.0) -> dict[str, Any]:
    """Every rung against ``url``; ``time_scale`` wall seconds a second of the ladder (below 1 for an
    emulated pool paced faster than real time), so the figures are in the ladder's seconds."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600.0, connect=10.0), limits=limits) as client:
        try:
            models = (await client.get("/v1/models")).json()
        except (httpx.HTTPError, ValueError) as exc:
            raise PoolError(f"{url} is unreachable or not an OpenAI server ({type(exc).__name__})") from None
        ids = [m.get("id") for m in models.get("data", []) if isinstance(m, dict)]
        if model not in ids:
            raise PoolError(f"{url} serves {', '.join(map(str, ids)) or 'no model'}, not {model}")
        return {"rates": [await _rung(client, ladder, model, rate, index, time_scale)
                          for index, rate in enumerate(ladder.rates)]}


async def _rung(client: httpx.AsyncClient, ladder: Ladder, model: str, rate: float, index: int,
                time_scale: float) -> dict[str, Any]:
    before = await _counters(client)
    words = random.Random(f"{ladder.seed}:{index}:{rate}:words")
    started = time.perf_counter()

    def now() -> float:
        return (time.perf_counter() - started) / time_scale

    async def one(at: float, prompt: int, answer: int) -> Timing | None:
        await asyncio.sleep(max(0.0, at * time_scale - (time.perf_counter() - started)))
        body = {"model": model, "prompt": " ".join(words.choice(WORDS) for _ in range(prompt)),
                "max_tokens": answer, "ignore_eos": True, "temperature": ladder.temperature, "stream": True,
                "stream_options": {"include_usage": True}}
        timing = Timing(at)
        try:
            async with client.stream("POST", "/v1/completions", json=body) as response:
                if response.status_code != 200:
                    return None
                async for line in response.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if chunk.get("choices") and chunk["choices"][0].get("text"):
                        timing.emissions.append(now())
                    if chunk.get("usage"):
                        timing.tokens = int(chunk["usage"].get("completion_tokens") or 0)
        except (httpx.HTTPError, ValueError):
            return None
        if not timing.tokens:  # a server that sends no usage: a chunk a token
            timing.tokens = len(timing.emissions)
        return timing if timing.emissions else None

    jobs = schedule(ladder, rate, index)
    done = await asyncio.gather(*(one(*job) for job in jobs))
    ended = now()
    after = await _counters(client)
    drafts = after.get("num_drafts", 0.0) - before.get("num_drafts", 0.0)
    accepted = after.get("num_accepted_tokens", 0.0) - before.get("num_accepted_tokens", 0.0)
    served = [t for t in done if t is not None]
    return summary(rate, served, len(jobs), ended, 1.0 + accepted / drafts if drafts > 0 else None)


async def _counters(client: httpx.AsyncClient) -> dict[str, float]:
    """The pool's speculation counters, summed over its series; {} when it exposes none."""
    try:
        text = (await client.get("/metrics")).text
    except httpx.HTTPError:
        return {}
    names = {"vllm:spec_decode_num_drafts_total": "num_drafts",
             "vllm:spec_decode_num_accepted_tokens_total": "num_accepted_tokens"}
    values: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            try:
                values[names[name]] = values.get(names[name], 0.0) + float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    return values
