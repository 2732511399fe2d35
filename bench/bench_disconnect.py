"""Benchmark: how soon the backend stops a request whose client has gone, directly and through the proxy.

    python -m bench.bench_disconnect [--trials 20]

Starts two emulated pools (speculation on and off) and the proxy in front of
both, each its own process. For each trial a client sends a request that would
run for seconds, waits until a backend is running it (and, when streamed,
until the first event has arrived), then closes its connection. The time from
the close until no backend is running the request is found by polling the
backends' ``vllm:num_requests_running`` every few milliseconds. The same
trials run directly against a pool and through the proxy, in turn, so the
poll's own resolution shows in both columns alike.

Target: through the proxy, the backend sees the request go within 200 ms.
The client here leaves a few milliseconds in, the worst case for a
non-streamed request: the proxy starts watching for its client's departure 50
ms in (``proxy/disconnect.py``), since most answers are back by then.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

from bench.bench_proxy import pct, route_of
from draftgate.servers import NO_THINKING, ServerProcess
from draftgate.vllm_metrics import parse_vllm_metrics

TARGET_MS = 200.0
POLL_SECONDS = 0.005
# an answer of some thousand reasoning tokens: many seconds at this pace
BODY = {"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "think it through"}],
        "reasoning_effort": "high", "temperature": 0.7}


async def running(client: httpx.AsyncClient, backends: list[str]) -> float:
    total = 0.0
    for url in backends:
        total += parse_vllm_metrics((await client.get(f"{url}/metrics")).text).get("running", 0.0)
    return total


async def wait_for(client: httpx.AsyncClient, backends: list[str], done: Callable[[float], bool], seconds: float = 30.0) -> None:
    deadline = time.perf_counter() + seconds
    while not done(await running(client, backends)):
        if time.perf_counter() > deadline:
            raise RuntimeError("the backends never reached the awaited state")
        await asyncio.sleep(POLL_SECONDS)


async def trial(url: str, backends: list[str], stream: bool, client: httpx.AsyncClient) -> float:
    """Seconds from the client's close until the backend stops running its request."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    raw = json.dumps({**BODY, "stream": stream}).encode()
    # a raw socket, so the close happens exactly when this code says, not when a client library decides
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
                 b"content-length: %d\r\n\r\n" % len(raw) + raw)
    await writer.drain()
    if stream:
        received = b""
        while b"data: " not in received:
            chunk = await asyncio.wait_for(reader.read(65536), 30)
            if not chunk:
                raise RuntimeError("the stream ended before its first event")
            received += chunk
    await wait_for(client, backends, lambda n: n >= 1)
    start = time.perf_counter()
    writer.close()
    await wait_for(client, backends, lambda n: n == 0)
    return time.perf_counter() - start


async def measure(paths: dict[str, str], backends: list[str], trials: int) -> dict[tuple[str, str], list[float]]:
    results: dict[tuple[str, str], list[float]] = {}
    async with httpx.AsyncClient(timeout=10) as client:
        for _ in range(trials):  # paths in turn, so a slow spell of a shared machine falls on all
            for mode, stream in (("streamed", True), ("non-streamed", False)):
                for name, url in paths.items():
                    results.setdefault((mode, name), []).append(await trial(url, backends, stream, client))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    emulate = ["emulate", "--enable-force-include-usage", "--time-scale", "0.2", *NO_THINKING]
    speculative = ["--speculative-config", '{"method": "draft_model", "num_speculative_tokens": 8}',
                   "--per-request-spec-decode-metrics", "summary"]
    with ServerProcess(emulate + speculative) as on, ServerProcess(emulate) as off:
        with ServerProcess(["serve", "--spec-on", on.url, "--spec-off", off.url]) as proxy:
            direct = on.url if route_of(proxy.url, BODY) == "spec-on" else off.url
            results = asyncio.run(measure({"direct": direct, "proxy": proxy.url}, [on.url, off.url], args.trials))
    print(f"{args.trials} disconnects per row; the time until the backend stops the request "
          f"(polled every {POLL_SECONDS * 1000:.0f} ms)")
    print(f"{'request':>13} {'path':>7} {'p50 ms':>8} {'p90 ms':>8} {'max ms':>8} {'target':>8}")
    for (mode, name), seconds in results.items():
        ms = sorted(s * 1000 for s in seconds)
        target = f"<= {TARGET_MS:.0f}" if name == "proxy" else ""
        print(f"{mode:>13} {name:>7} {pct(ms, 50):>8.1f} {pct(ms, 90):>8.1f} {ms[-1]:>8.1f} {target:>8}")


if __name__ == "__main__":
    main()
