"""A soak under faults: agent traffic through the proxy while replicas fail in every
way the emulator can show, and are killed and restarted.

    python -m bench.soak [--seconds 60] [--rate 30] [--period 3]

Two pools (speculation on and off) of two replicas each, every replica its own
process, and the proxy in front as ``draftgate serve`` runs it. A mixed load
(tool calls, JSON, prose, thinking, text completions, multi-turn conversations,
the Responses API; streamed and not) runs the whole time. Every ``period`` seconds one replica
gets the next fault (a 503 or 502 for some answers, a connection cut halfway
through an answer, a stream dropped before its first event or after a few, a
first byte too slow, a failing health check, refused connections, a full KV
cache, SIGKILL and a restart on the same port, or a configuration reload
without it and then with it again), which is lifted when the next one starts.

Every answer is judged as a client would judge it: a 200 with a whole body or
a stream ending in ``[DONE]`` (the Responses API's: in ``response.completed``).
One exception is allowed, as the proxy cannot do better: a stream the replica
dropped after events had reached the client ends with an error event. Anything
else is a lost request: the other replica, or the other pool, could have served
it. At the end the proxy must have counted every request, hold none in flight,
and have written no error line.

It prints, per fault, what happened to the requests made while it was on, then
the proxy's memory. Exit status 1 if a request was lost or a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from draftgate.servers import NO_THINKING, ServerProcess, free_port, wait_healthy

MODEL = "Qwen/Qwen3-32B"
SPECULATIVE = ["--speculative-config", '{"method": "draft_model", "num_speculative_tokens": 8}',
               "--per-request-spec-decode-metrics", "summary"]
# (name, what): the emulator's fault settings, or KILL (SIGKILL, then a restart), or
# RELOAD (a configuration without the replica, loaded with SIGHUP, then the whole one again)
KILL, RELOAD = "kill", "reload"
FAULTS: list[tuple[str, dict[str, Any] | str]] = [
    ("none", {}),
    ("503 for half the answers", {"error_status": 503, "error_rate": 0.5}),
    ("502 for every answer", {"error_status": 502}),
    ("answer cut halfway", {"cut_answer_short": True}),
    ("stream dropped before its first event", {"die_before_first_event": True}),
    ("stream dropped after 3 tokens", {"die_after_tokens": 3}),
    ("first byte after 3 s", {"first_byte_delay": 3.0}),
    ("health check 503", {"health_503": True}),
    ("connections refused", {"refuse_connections": True}),  # for good: the replica restarts after
    ("KV cache full", {"kv_usage": 0.99}),
    ("SIGKILL, restarted", KILL),
    ("reloaded without it, then with it", RELOAD),
]
CLEAR = {"error_status": None, "error_rate": 1.0, "cut_answer_short": False, "die_before_first_event": False,
         "die_after_tokens": None, "first_byte_delay": 0.0, "health_503": False, "refuse_connections": False,
         "kv_usage": None}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}}
SCHEMA = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {
    "type": "object", "properties": {"answer": {"type": "string"}, "score": {"type": "integer"}}}}}


def request_mix(rng: random.Random, turn: int) -> tuple[str, dict[str, Any]]:
    """One request of the agent mix: (path, body)."""
    user = [{"role": "user", "content": f"Weather in city number {rng.randrange(1000)}?"}]
    kind = rng.randrange(8)
    stream = rng.random() < 0.5
    base: dict[str, Any] = {"model": MODEL, "max_tokens": 48, "stream": stream}
    if kind == 0:
        return "/v1/chat/completions", {**base, "messages": user, "tools": [TOOL], "tool_choice": "required"}
    if kind == 1:
        return "/v1/chat/completions", {**base, "messages": user, "tools": [TOOL]}
    if kind == 2:
        return "/v1/chat/completions", {**base, "messages": user, "response_format": SCHEMA}
    if kind == 3:
        return "/v1/chat/completions", {**base, "messages": user,
                                        "chat_template_kwargs": {"enable_thinking": True}}
    if kind == 4:
        return "/v1/completions", {**base, "prompt": "Once upon a time"}
    if kind == 6:  # the Responses API: a tool call or prose
        tools = {"tools": [{"type": "function", **TOOL["function"]}], "tool_choice": "required"} if turn % 2 else {}
        return "/v1/responses", {"model": MODEL, "input": user[0]["content"], "max_output_tokens": 48,
                                 "stream": stream, **tools}
    if kind == 7 and turn % 2:  # Anthropic's Messages API: a forced call or prose
        tools = {"tools": [{"name": "get_weather", "input_schema": TOOL["function"]["parameters"]}],
                 "tool_choice": {"type": "any"}} if turn % 4 == 1 else {}
        return "/v1/messages", {**base, "messages": user, **tools}
    if kind == 5:  # an agent's conversation, a turn further each time
        history: list[dict[str, Any]] = [{"role": "system", "content": "You are agent 7. " * 40}]
        for t in range(turn % 6):
            history += [{"role": "user", "content": f"step {t}"}, {"role": "assistant", "content": f"done {t}"}]
        return "/v1/chat/completions", {**base, "messages": history + user, "user": "agent-7", "tools": [TOOL]}
    return "/v1/chat/completions", {**base, "messages": user, "temperature": 0.8}


@dataclass
class Outcomes:
    by_fault: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    lost: list[str] = field(default_factory=list)
    cut_because: Counter[str] = field(default_factory=Counter)  # the error events' messages
    sent: int = 0


async def judge(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> tuple[str, str]:
    """("ok" | "cut after events" | "lost", detail)."""
    try:
        whole = {"/v1/responses": "output", "/v1/messages": "content"}.get(path, "choices")
        if not body["stream"]:
            response = await client.post(path, json=body)
            if response.status_code != 200:
                return "lost", f"{response.status_code} {response.text[:160]}"
            answer = response.json()
            return ("ok", "") if answer.get(whole) else ("lost", f"200 without {whole}: {response.text[:160]}")
        async with client.stream("POST", path, json=body) as response:
            if response.status_code != 200:
                return "lost", f"{response.status_code} {(await response.aread())[:160]!r}"
            events, error, done = 0, None, False
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    continue
                payload = json.loads(line[6:])
                if payload.get("type") == "error":  # the Responses or Messages API's error event
                    error = payload.get("message") or payload.get("error", {}).get("message", "")
                elif "error" in payload:
                    error = payload["error"].get("message", "")
                else:
                    events += 1
                    done = done or payload.get("type") in ("response.completed", "response.incomplete",
                                                           "message_stop")
        if error is not None:
            return ("cut after events", error) if events else ("lost", f"error before any event: {error}")
        return ("ok", "") if done else ("lost", f"stream ended without [DONE] after {events} events")
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        return "lost", f"{type(exc).__name__}: {exc}"


class Replica:
    """An emulated vLLM server process that can be killed and started again on its port."""

    def __init__(self, pool: str, seed: int, time_scale: float) -> None:
        self.pool = pool
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = ["emulate", "--enable-force-include-usage", "--seed", str(seed), "--time-scale", str(time_scale),
                     "--max-num-seqs", "64", *NO_THINKING, *(SPECULATIVE if pool == "spec-on" else [])]
        self.server: ServerProcess | None = None

    def start(self) -> None:
        self.server = ServerProcess(self.args, port=self.port).__enter__()

    def kill(self) -> None:
        if self.server is not None and self.server.process is not None:
            self.server.process.kill()
            self.server.process.wait()

    def stop(self) -> None:
        if self.server is not None:
            self.server.__exit__()

    async def set_faults(self, client: httpx.AsyncClient, faults: dict[str, Any]) -> None:
        await client.post(f"{self.url}/debug/faults", json={**CLEAR, **faults}, timeout=5)


async def inject(replicas: list[Replica], period: float, seconds: float, rng: random.Random,
                 current: list[str], reload_without: Callable[[Replica | None], None]) -> None:
    """Cycle through FAULTS, one replica at a time, until ``seconds`` of faults have passed: the
    time a killed replica takes to start again is not counted, so a busy machine runs the same
    faults as an idle one. ``reload_without(replica)`` makes the proxy reload its configuration without it."""
    if not replicas:
        return
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient() as client:
        step = 0
        while time.monotonic() < deadline:
            name, fault = FAULTS[step % len(FAULTS)]
            replica = rng.choice(replicas)
            current[0] = f"{name}" if name == "none" else f"{name} ({replica.pool})"
            if fault == KILL:
                replica.kill()
            elif fault == RELOAD:
                reload_without(replica)
            else:
                await replica.set_faults(client, fault)
            await asyncio.sleep(min(period, max(0.0, deadline - time.monotonic())))
            if fault == KILL or (isinstance(fault, dict) and fault.get("refuse_connections")):
                replica.kill()  # only a restart lifts a refusal
                restarting = time.monotonic()
                await asyncio.to_thread(replica.start)
                deadline += time.monotonic() - restarting
            elif fault == RELOAD:
                reload_without(None)
            else:
                await replica.set_faults(client, {})
            step += 1
        current[0] = "none (after)"


async def drive(proxy_url: str, rate: float, seconds: float, period: float, replicas: list[Replica],
                seed: int, reload_without: Callable[[Replica | None], None] = lambda _: None) -> Outcomes:
    rng = random.Random(seed)
    outcomes = Outcomes()
    current = ["none"]
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=128)
    async with httpx.AsyncClient(base_url=proxy_url, timeout=30, limits=limits) as client:
        injector = asyncio.create_task(inject(replicas, period, seconds, rng, current, reload_without))
        pending: set[asyncio.Task[None]] = set()

        async def one(path: str, body: dict[str, Any]) -> None:
            fault = current[0]
            verdict, detail = await judge(client, path, body)
            outcomes.by_fault[fault][verdict] += 1
            if verdict == "lost":
                outcomes.lost.append(f"[{fault}] {path} stream={body['stream']}: {detail}")
            elif verdict == "cut after events":
                outcomes.cut_because[detail] += 1

        start = time.monotonic()
        # traffic runs as long as the faults do (restarts lengthen them), and at least ``seconds``
        while time.monotonic() - start < seconds or not injector.done():
            path, body = request_mix(rng, outcomes.sent)
            task = asyncio.create_task(one(path, body))
            pending.add(task)
            task.add_done_callback(pending.discard)
            outcomes.sent += 1
            await asyncio.sleep(rng.expovariate(rate))
        await injector
        if pending:
            await asyncio.wait(pending)
    return outcomes


def metric_sum(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def proxy_config(replicas: list[Replica], without: Replica | None = None) -> dict[str, Any]:
    def urls(pool: str) -> list[str]:
        return [r.url for r in replicas if r.pool == pool and r is not without]
    return {
        "pools": [{"name": "spec-on", "urls": urls("spec-on"), "speculation": {"gamma": 8}, "max_num_seqs": 64},
                  {"name": "spec-off", "urls": urls("spec-off"), "max_num_seqs": 64}],
        # the rest as shipped, but a stream's first byte may take 1.5 s, not 300: the slow
        # replica's streams then fail over within a fault's period (its whole answers wait)
        "health": {"interval": 0.5, "scrape_interval": 1.0}, "timeouts": {"first_byte": 1.5},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=30.0, help="requests per second")
    parser.add_argument("--period", type=float, default=3.0, help="seconds each fault lasts")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sys.exit(run(args.seconds, args.rate, args.period, args.seed))


def run(seconds: float, rate: float, period: float, seed: int) -> int:
    """The soak; returns the exit status (0: nothing lost, every check passed)."""
    replicas = [Replica(pool, seed * 10 + i, 0.02) for i, pool in enumerate(["spec-on", "spec-on",
                                                                             "spec-off", "spec-off"])]
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "draftgate.yaml"
        config.write_text(yaml.safe_dump(proxy_config(replicas)))
        try:
            for replica in replicas:
                replica.start()
            with ServerProcess(["serve", "--config", str(config)]) as proxy:
                assert proxy.process is not None
                for replica in replicas:
                    wait_healthy(replica.url)
                warm_up = asyncio.run(drive(proxy.url, rate, min(5.0, seconds), period, [], seed + 1))  # no faults
                rss_before = rss_mib(proxy.process.pid)
                process = proxy.process

                def reload_without(replica: Replica | None) -> None:
                    config.write_text(yaml.safe_dump(proxy_config(replicas, without=replica)))
                    process.send_signal(signal.SIGHUP)

                outcomes = asyncio.run(drive(proxy.url, rate, seconds, period, replicas, seed, reload_without))
                time.sleep(1.0)  # the last recordings run after their answers
                metrics = httpx.get(f"{proxy.url}/metrics").text
                rss_after = rss_mib(proxy.process.pid)
                log = proxy.output()
        finally:
            for replica in replicas:
                replica.stop()
    report(outcomes)
    inflight = metric_sum(metrics, "draftgate_pool_inflight_requests")
    counted = metric_sum(metrics, "draftgate_requests_total")
    error_lines = [line for line in log.splitlines() if '"level": "error"' in line]
    print(f"\nfailovers {metric_sum(metrics, 'draftgate_failovers_total'):.0f}, retry budget refusals "
          f"{metric_sum(metrics, 'draftgate_retry_budget_exhausted_total'):.0f}, upstream errors "
          f"{metric_sum(metrics, 'draftgate_upstream_errors_total'):.0f}")
    print(f"proxy memory: {rss_before:.1f} MiB after warm-up, {rss_after:.1f} MiB at the end")
    if outcomes.lost:
        failures.append(f"{len(outcomes.lost)} request(s) lost")
    if inflight != 0:
        failures.append(f"the proxy still counts {inflight:.0f} request(s) in flight")
    if warm_up.lost:
        failures.append(f"{len(warm_up.lost)} request(s) lost before any fault, the first: {warm_up.lost[0]}")
    if counted != warm_up.sent + outcomes.sent:
        failures.append(f"the proxy counted {counted:.0f} requests; {warm_up.sent + outcomes.sent} were sent")
    if error_lines:
        failures.append(f"{len(error_lines)} error line(s) in the proxy's log, the first: {error_lines[0][:300]}")
    for line in outcomes.lost[:20]:
        print("lost:", line)
    for failure in failures:
        print("FAILED:", failure)
    if not failures:
        print(f"no request lost in {outcomes.sent}")
    return 1 if failures else 0


def report(outcomes: Outcomes) -> None:
    print(f"{'fault while the requests were made':>48} {'ok':>6} {'cut after events':>17} {'lost':>5}")
    for fault, counts in outcomes.by_fault.items():
        print(f"{fault:>48} {counts['ok']:>6} {counts['cut after events']:>17} {counts['lost']:>5}")
    for message, count in outcomes.cut_because.most_common():
        print(f"{count:>6} stream(s) cut after events: {message}")


if __name__ == "__main__":
    main()
