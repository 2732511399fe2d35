"""Benchmark: a burst of concurrent streams through the proxy and directly, in one run.

    python -m bench.bench_burst [--streams 800] [--rounds 3]

Two emulated pools (speculation on and off) generate at 30 times an H200's
pace, so a burst of streams brings their events faster than one proxy process
relays them one by one: the proxy falls behind, as it would in front of many
replicas. Half the streams ask for a tool call, half for 200 tokens of prose.

Each round sends the burst directly (the tool calls to the speculation pool,
the prose to the plain one, where the gate sends them when neither is full)
and then through the proxy, and prints side by side: the time until the last
stream ended, the median stream's time, the events the client received and in
how many reads, and the proxy's CPU per thousand events. A proxy that writes
each event on its own costs a read per event at the client too; one that
writes what it has at once catches up with its backlog in a few.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import dataclass

from bench.bench_proxy import cpu_seconds
from draftgate.servers import NO_THINKING, ServerProcess

MODEL = "Qwen/Qwen3-32B"
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def request(i: int) -> dict[str, object]:
    body: dict[str, object] = {"model": MODEL, "messages": [{"role": "user", "content": f"Weather in city {i}?"}],
                               "stream": True, "max_tokens": 200}
    if i % 2:
        body.update(tools=[TOOL], tool_choice="required")
    return body


@dataclass(slots=True)
class Stream:
    seconds: float
    events: int
    reads: int
    ok: bool


async def one(port: int, body: dict[str, object]) -> Stream:
    """One stream over its own connection, read as raw bytes: a client that costs
    next to nothing per read, so the servers under test get the CPU."""
    raw = json.dumps(body).encode()
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
                 b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(raw), raw))
    events = reads = 0
    head = tail = b""
    while data := await reader.read(65536):
        reads += 1
        events += (tail + data).count(b"data: ")  # an event's opening may straddle two reads
        tail = data[-5:]
        if len(head) < 12:
            head += data
    writer.close()
    return Stream(time.perf_counter() - start, events, reads, head.startswith(b"HTTP/1.1 200"))


async def burst(ports: list[int], streams: int) -> tuple[float, list[Stream]]:
    """``streams`` at once, stream i to ``ports[i % len(ports)]``."""
    start = time.perf_counter()
    done = await asyncio.gather(*(one(ports[i % len(ports)], request(i)) for i in range(streams)))
    return time.perf_counter() - start, list(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=800)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    emulate = ["emulate", "--enable-force-include-usage", "--time-scale", "0.03", *NO_THINKING]
    speculative = ["--speculative-config", '{"method": "draft_model", "num_speculative_tokens": 8}',
                   "--per-request-spec-decode-metrics", "summary"]
    print(f"{'round':>5} {'path':>7} {'last ms':>8} {'p50 ms':>8} {'events':>7} {'reads':>7} {'ev/read':>8} "
          f"{'proxy CPU ms/1k ev':>19} {'failed':>7}")
    with ServerProcess(emulate + speculative) as on, ServerProcess(emulate) as off, \
            ServerProcess(["serve", "--spec-on", on.url, "--spec-off", off.url]) as proxy:
        asyncio.run(burst([proxy.port], 20))  # warm connections and code paths
        # prose (even i) to the plain pool, tool calls (odd i) to the speculation pool
        for n in range(1, args.rounds + 1):
            for name, ports in (("direct", [off.port, on.port]), ("proxy", [proxy.port])):
                before = cpu_seconds(proxy)
                last, done = asyncio.run(burst(ports, args.streams))
                cpu = cpu_seconds(proxy) - before
                events, reads = sum(s.events for s in done), sum(s.reads for s in done)
                per_event = f"{cpu / events * 1e6:>19.1f}" if name == "proxy" and events else f"{'':>19}"
                print(f"{n:>5} {name:>7} {last * 1000:>8.0f} {statistics.median(s.seconds for s in done) * 1000:>8.0f} "
                      f"{events:>7} {reads:>7} {events / max(reads, 1):>8.2f} {per_event} "
                      f"{sum(not s.ok for s in done):>7}")


if __name__ == "__main__":
    main()
