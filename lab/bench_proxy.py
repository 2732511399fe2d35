"""Benchmark: the same load directly against an emulator and through the proxy, in one run.

    python -m lab.bench_proxy [--rate 200] [--seconds 10] [--stream-rate 20]

Starts an emulated speculation-off pool and a proxy in front of it (both as
processes, as an operator runs them), then drives an open-loop load at a fixed
rate, first directly, then through the proxy, and prints latency p50/p99 and
achieved throughput side by side: non-streamed (a one-token answer, so the
backend's own time is small) and streamed (256 tokens; total time per stream).

Targets on 2 cores: at 200 requests/s the proxy adds <= 1 ms at p50 and <= 5 ms
at p99; a streamed response through it takes <= 5% longer than direct.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import httpx

from lab.servers import ServerProcess

BODY = {"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1,
        "temperature": 0}
STREAM_BODY = {"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "think hard"}],
               "reasoning_effort": "high", "max_tokens": 256, "temperature": 0, "stream": True}


async def one(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> float:
    start = time.perf_counter()
    if body.get("stream"):
        async with client.stream("POST", url, json=body) as r:
            async for _ in r.aiter_raw():
                pass
            ok = r.status_code == 200
    else:
        r = await client.post(url, json=body)
        ok = r.status_code == 200
    if not ok:
        raise RuntimeError(f"request failed with {r.status_code}")
    return time.perf_counter() - start


async def load(url: str, body: dict[str, Any], rate: float, seconds: float) -> tuple[list[float], float]:
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        for _ in range(5):
            await one(client, url, body)  # warm connections and code paths
        tasks = []
        start = time.perf_counter()
        n = int(rate * seconds)
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(client, url, body)))
        latencies = await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    return list(latencies), len(latencies) / elapsed


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--stream-rate", type=float, default=20.0)
    parser.add_argument("--stream-seconds", type=float, default=10.0)
    args = parser.parse_args()
    emulate = ["emulate", "--enable-force-include-usage", "--time-scale", "0.002", "--max-num-seqs", "1024"]
    with ServerProcess(emulate) as backend:
        with ServerProcess(["serve", "--spec-off", backend.url, "--log-level", "warning"]) as proxy:
            rows = []
            for label, body, rate, seconds in (("non-streamed", BODY, args.rate, args.seconds),
                                               ("streamed 256 tok", STREAM_BODY, args.stream_rate, args.stream_seconds)):
                direct, direct_rps = asyncio.run(load(f"{backend.url}/v1/chat/completions", body, rate, seconds))
                via, via_rps = asyncio.run(load(f"{proxy.url}/v1/chat/completions", body, rate, seconds))
                rows.append((label, direct, direct_rps, via, via_rps))
    print(f"{'load':>18} {'path':>7} {'p50 ms':>9} {'p99 ms':>9} {'req/s':>8}")
    for label, direct, direct_rps, via, via_rps in rows:
        for path, lat, rps in (("direct", direct, direct_rps), ("proxy", via, via_rps)):
            print(f"{label:>18} {path:>7} {pct(lat, 50) * 1000:>9.2f} {pct(lat, 99) * 1000:>9.2f} {rps:>8.1f}")
        added50 = (pct(via, 50) - pct(direct, 50)) * 1000
        added99 = (pct(via, 99) - pct(direct, 99)) * 1000
        ratio = statistics.mean(via) / statistics.mean(direct) - 1
        print(f"{label:>18} {'added':>7} {added50:>9.2f} {added99:>9.2f}   (mean time {ratio:+.1%})")


if __name__ == "__main__":
    main()
