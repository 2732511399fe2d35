"""Benchmark: the same load directly against an emulator and through the proxy, in one run.

    python -m bench.bench_proxy [--rate 200] [--seconds 10] [--stream-rate 20] [--phases 5] [--api messages]

Starts two emulated pools, speculation on and off, and a proxy in front of
both, as deployed (every process separate, as an operator runs them). For each
load it asks the proxy once which pool the gate picks, then drives an open-loop
load at a fixed rate, directly against that pool, through ``bench.relay`` (a
process that only pipes bytes: the floor any proxy pays on this machine),
through ``bench.passthrough`` (draftgate's server and upstream client doing
nothing but forward: the floor under draftgate's own work) and through the
proxy, in turn, and prints latency p50/p99 and achieved throughput side by side:
non-streamed (a one-token answer, so the backend's own time is small) and
streamed (256 tokens; total time per stream). The proxy runs at its default
log level, writing its JSON line per request. ``--api messages`` sends the same
loads as Anthropic's Messages API, whose streams the proxy reads event by event.
``--redis`` adds a second proxy sharing its state through a redis-server (Debian's
package), and prints its added latency beside the proxy's own, in-process state.

Targets on 2 cores: at 200 requests/s the proxy adds <= 1 ms at p50 and <= 5 ms
at p99; a streamed response through it takes <= 5% longer than direct.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx

from draftgate.proxy.upstream import Origin
from draftgate.servers import NO_THINKING, ServerProcess, free_port

HEADERS = [(b"content-type", b"application/json")]

BODY = {"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1,
        "temperature": 0}
STREAM_BODY = {"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "think hard"}],
               "reasoning_effort": "high", "max_tokens": 256, "temperature": 0, "stream": True}
# the same loads in each API: (path, non-streamed body, streamed body)
APIS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", BODY, STREAM_BODY),
    "messages": ("/v1/messages", BODY, {**{k: v for k, v in STREAM_BODY.items() if k != "reasoning_effort"},
                                        "output_config": {"effort": "high"}}),
}


async def one(origin: Origin, path: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> float:
    start = time.perf_counter()
    response = await origin.request("POST", path, headers, body, 5.0, 60.0)
    async for _ in response.aiter_raw():
        pass
    await response.aclose()
    if response.status_code != 200:
        raise RuntimeError(f"request failed with {response.status_code}")
    return time.perf_counter() - start


async def load(url: str, path: str, body: dict[str, Any], rate: float, seconds: float,
               headers: list[tuple[bytes, bytes]]) -> tuple[list[float], float]:
    """Open-loop load at ``rate``; the client is draftgate's own lean one, so the
    load generator does not eat the CPU the servers under test need."""
    origin = Origin(url, max_idle=1000)
    raw = json.dumps(body).encode()
    for _ in range(5):
        await one(origin, path, raw, headers)  # warm connections and code paths
    tasks = []
    start = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(origin, path, raw, headers)))
    latencies = await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    origin.close()
    return list(latencies), len(latencies) / elapsed


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def route_of(url: str, body: dict[str, Any]) -> str:
    """The pool the gate picks for ``body`` (asked of /draftgate/explain: a forwarded
    request could be one of the few the gate explores with)."""
    return httpx.post(f"{url}/draftgate/explain", json=body, timeout=10).json()["route"]


def cpu_seconds(server: ServerProcess) -> float:
    """User plus system CPU time of a server process so far (Linux /proc; NaN elsewhere)."""
    try:
        assert server.process is not None
        with open(f"/proc/{server.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, AssertionError, IndexError, ValueError):
        return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--stream-rate", type=float, default=20.0)
    parser.add_argument("--stream-seconds", type=float, default=10.0)
    parser.add_argument("--phases", type=int, default=1,
                        help="alternate the paths this many times (each phase shorter)")
    parser.add_argument("--api", choices=sorted(APIS), default="chat", help="the API the loads are sent in")
    parser.add_argument("--redis", action="store_true",
                        help="also through a proxy that shares its state in a redis-server started here")
    args = parser.parse_args()
    api_path, body_whole, body_streamed = APIS[args.api]
    results = []
    # non-streamed: a fast backend, so the proxy's own cost is visible; streamed: tokens
    # at 10x an H200's real pace for one 32B stream (256 tokens in ~0.5 s)
    for label, body, rate, seconds, scale in (
            ("non-streamed", body_whole, args.rate, args.seconds, "0.002"),
            ("streamed 256 tok", body_streamed, args.stream_rate, args.stream_seconds, "0.1")):
        emulate = ["emulate", "--enable-force-include-usage", "--time-scale", scale, "--max-num-seqs", "1024",
                   *NO_THINKING]
        speculative = ["--speculative-config", '{"method": "draft_model", "num_speculative_tokens": 8}',
                       "--per-request-spec-decode-metrics", "summary"]
        with ServerProcess(emulate + speculative) as on, ServerProcess(emulate) as off, \
                contextlib.ExitStack() as optional:
            serve = ["serve", "--spec-on", on.url, "--spec-off", off.url]
            shared = optional.enter_context(shared_proxy(serve)) if args.redis else None
            with ServerProcess(serve) as proxy:
                route = route_of(proxy.url, body)
                backend = on if route == "spec-on" else off
                # Held on that pool: under load the gate may send some requests to the other pool,
                # whose time is not the proxy's. The gate still plans each one as it would.
                headers = [*HEADERS, (b"x-draftgate-mode", b"on" if route == "spec-on" else b"off")]
                with ServerProcess(["--to", backend.url], module="bench.relay") as relay, \
                        ServerProcess(["--to", backend.url], module="bench.passthrough") as passthrough:
                    paths = {"direct": LoadPath(backend.url), "relay": LoadPath(relay.url, relay),
                             "passthrough": LoadPath(passthrough.url, passthrough),
                             "proxy": LoadPath(proxy.url, proxy)}
                    if shared is not None:
                        paths["proxy+redis"] = LoadPath(shared.url, shared)
                    # --phases N alternates the paths, so a slow spell of a shared machine falls on
                    # all; one long phase each (the default) measures each in its steady state
                    for _ in range(args.phases):
                        for path in paths.values():
                            path.run(api_path, body, headers, rate, seconds / args.phases)
                results.append((f"{label} ({route})", paths))
    # CPU per request is the steadier figure on a shared machine: latency moves with the neighbours
    print(f"{'load':>27} {'path':>15} {'p50 ms':>9} {'p99 ms':>9} {'req/s':>8} {'CPU ms/req':>11}")
    for label, paths in results:
        for name, path in paths.items():
            cpu = f"{path.cpu_per_request * 1000:>11.2f}" if path.server is not None else ""
            print(f"{label:>27} {name:>15} {pct(path.latencies, 50) * 1000:>9.2f} "
                  f"{pct(path.latencies, 99) * 1000:>9.2f} {statistics.mean(path.rps):>8.1f} {cpu}")
        via = paths["proxy"].latencies
        comparisons = [("added", via, paths["direct"].latencies), ("beyond relay", via, paths["relay"].latencies),
                       ("beyond passthru", via, paths["passthrough"].latencies)]
        if "proxy+redis" in paths:
            comparisons += [("redis added", paths["proxy+redis"].latencies, paths["direct"].latencies),
                            ("redis beyond own", paths["proxy+redis"].latencies, via)]
        for name, via, base in comparisons:
            added50 = (pct(via, 50) - pct(base, 50)) * 1000
            added99 = (pct(via, 99) - pct(base, 99)) * 1000
            ratio = statistics.mean(via) / statistics.mean(base) - 1
            print(f"{label:>27} {name:>15} {added50:>9.2f} {added99:>9.2f}   (mean time {ratio:+.1%})")


@contextlib.contextmanager
def shared_proxy(serve: list[str]) -> Iterator[ServerProcess]:
    """The proxy ``serve`` starts, sharing its state through a redis-server of its own."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("--redis needs redis-server (Debian's redis-server package)")
    port = free_port()
    store = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        with ServerProcess(serve, env={"DRAFTGATE_STATE": f"redis://127.0.0.1:{port}/0"}) as proxy:
            yield proxy
    finally:
        store.kill()
        store.wait()


class LoadPath:
    """One way to the backend, with what its load measured."""

    def __init__(self, url: str, server: ServerProcess | None = None) -> None:
        self.url, self.server = url, server
        self.latencies: list[float] = []
        self.rps: list[float] = []
        self.cpu = 0.0

    def run(self, api_path: str, body: dict[str, Any], headers: list[tuple[bytes, bytes]], rate: float,
            seconds: float) -> None:
        before = cpu_seconds(self.server) if self.server else 0.0
        latencies, rps = asyncio.run(load(self.url, api_path, body, rate, seconds, headers))
        if self.server:
            self.cpu += cpu_seconds(self.server) - before
        self.latencies += latencies
        self.rps.append(rps)

    @property
    def cpu_per_request(self) -> float:
        return self.cpu / len(self.latencies) if self.latencies else float("nan")


if __name__ == "__main__":
    main()
