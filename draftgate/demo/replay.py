"""Replay the demo workload against one endpoint and meter what each request cost.

Cost is docs/model.md's: busy GPU-seconds per output token, prefill included. Against
emulated pools it is read from their ground truth (simulated H200 seconds,
exact per request because independent requests run one at a time); against
real pools it falls back to wall time per request, which at concurrency 1 is
the GPU's busy time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from draftgate.demo.workload import Step, extend_history, session_turn
from draftgate.policy.structure import measure
from draftgate.progress import draw


@dataclass
class Result:
    label: str
    cost: float  # GPU-seconds
    tokens: int
    w_s: float
    route: str = ""
    predicted_saving: float | None = None
    predicted_tau: float | None = None
    observed_tau: float | None = None
    latency: float = 0.0  # wall seconds, as the client saw it


class Meter:
    """Sum of busy seconds over the pools behind an endpoint."""

    def __init__(self, client: httpx.Client, pool_urls: list[str], emulated: bool) -> None:
        self.client, self.pool_urls, self.emulated = client, pool_urls, emulated

    def read(self) -> float:
        if not self.emulated:
            return time.perf_counter()
        return sum(self.client.get(f"{u}/debug/ground-truth").json()["busy_seconds"] for u in self.pool_urls)

    def reset_caches(self) -> None:
        for url in self.pool_urls:
            self.client.post(f"{url}/reset_prefix_cache")


def _spec_tau(body: dict[str, Any]) -> float | None:
    spec = (body.get("metrics") or {}).get("speculative_decoding")
    if isinstance(spec, dict) and spec.get("num_spec_steps"):
        return spec["num_accepted_draft_tokens"] / spec["num_spec_steps"]
    return None


def replay(name: str, base_url: str, steps: list[Step], meter: Meter, explain: bool = False,
           progress: Callable[[str, int, int], None] | None = None) -> list[Result]:
    """Send every step to ``base_url``; one Result per request, in order."""
    results: list[Result] = []
    client = meter.client
    meter.reset_caches()
    total = sum(s.turns if s.session is not None else (len(s.burst) or 1) for s in steps)

    def send(label: str, body: dict[str, Any]) -> tuple[Result, dict[str, Any]]:
        plan = client.post(f"{base_url}/draftgate/explain", json=body).json() if explain else {}
        before = meter.read()
        started = time.perf_counter()
        response = client.post(f"{base_url}/v1/chat/completions", json=body, timeout=300)
        latency = time.perf_counter() - started
        response.raise_for_status()
        payload = response.json()
        cost = meter.read() - before
        tokens = payload["usage"]["completion_tokens"]
        predicted_tau = None
        if plan.get("predicted_tau"):
            t, w = plan["predicted_tau"], plan
            rounds = sum(w[f"w_{c}"] / (t[c] + 1.0) for c in "srf")
            predicted_tau = 1.0 / rounds - 1.0 if rounds > 0 else None
        header = response.headers.get("x-draftgate-predicted-saving")
        return Result(label, cost, tokens, measure(body, payload).w_s, response.headers.get("x-draftgate-route", name),
                      float(header) if header is not None else None, predicted_tau, _spec_tau(payload), latency), payload

    for step in steps:
        if step.body is not None:
            results.append(send(step.label, step.body)[0])
        elif step.session is not None:
            history: list[dict[str, Any]] = []
            for turn in range(step.turns):
                result, payload = send(step.label, session_turn(step.session, turn, history))
                results.append(result)
                extend_history(history, payload, turn)
        else:
            results += _burst(step, base_url, meter, name)
        if progress:
            progress(name, len(results), total)
    return results


def _burst(step: Step, base_url: str, meter: Meter, name: str) -> list[Result]:
    """Concurrent requests: the burst's busy time is shared out by output tokens."""
    before = meter.read()

    async def timed(h: httpx.AsyncClient, body: dict[str, Any]) -> tuple[httpx.Response, float]:
        started = time.perf_counter()
        response = await h.post(f"{base_url}/v1/chat/completions", json=body)
        return response, time.perf_counter() - started

    async def run() -> list[tuple[httpx.Response, float]]:
        async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=len(step.burst) + 4)) as h:
            return await asyncio.gather(*(timed(h, b) for b in step.burst))

    timed_responses = asyncio.run(run())
    responses = [r for r, _ in timed_responses]
    cost = meter.read() - before
    tokens = [r.json()["usage"]["completion_tokens"] for r in responses]
    total = max(1, sum(tokens))
    return [Result(step.label, cost * t / total, t, measure(b, r.json()).w_s, r.headers.get("x-draftgate-route", name),
                   None, None, _spec_tau(r.json()), latency)
            for b, (r, latency), t in zip(step.burst, timed_responses, tokens)]


def progress_line(name: str, done: int, total: int) -> None:
    draw(f"  {name:<22} ", done, total, "requests")
