"""Run a batch of requests against one pool and record what each one did.

Every request is streamed with usage (so per-request speculation metrics ride
the final chunk) and timed at the client: time to first token, decode time
from the first to the last chunk. The output is digested for the lossless
check (R4) and split into S/R/F by policy/structure. Entropy runs ask the
plain pool for ``top_logprobs`` and are never used for timing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from draftgate.policy.structure import TextParts, estimate, measure_parts
from draftgate.vllm_metrics import parse_vllm_metrics


@dataclass
class Record:
    arm: str
    pool: str
    gamma: int
    concurrency: int
    regime: str  # "greedy" (temperature 0) or "default" (the pool's own)
    kind: str  # "timing" or "entropy"
    index: int
    status: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft: float = 0.0
    decode_time: float = 0.0
    total: float = 0.0
    tau: float | None = None
    spec_steps: int = 0
    accepted: int = 0
    drafted: int = 0  # draft tokens proposed (what a lookup found to copy)
    # what the request held to copy (the estimator's reading): what a lookup pool's coefficients are fitted on
    copy_chars: int = 0
    copy_code: bool = False
    copy_calls: int = 0
    w: dict[str, float] = field(default_factory=lambda: {"s": 0.0, "r": 0.0, "f": 1.0})
    digest: str = ""
    entropy: float | None = None
    missing_mass: float | None = None

    @property
    def tpot(self) -> float | None:
        """Decode seconds per output token after the first."""
        if self.completion_tokens < 2 or self.decode_time <= 0:
            return None
        return self.decode_time / (self.completion_tokens - 1)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


class BackendError(Exception):
    """A backend that cannot be calibrated against: unreachable, or not the model named."""


async def check_backend(client: httpx.AsyncClient, url: str, model: str) -> None:
    try:
        response = await client.get(f"{url}/v1/models", timeout=10)
    except httpx.HTTPError as exc:
        raise BackendError(f"{url} is unreachable ({type(exc).__name__})") from None
    if response.status_code != 200:
        raise BackendError(f"{url}/v1/models answered {response.status_code}")
    ids = [m.get("id") for m in response.json().get("data", []) if isinstance(m, dict)]
    if model not in ids:
        raise BackendError(f"{url} serves {', '.join(map(str, ids)) or 'no model'}, not {model}")


async def counters(client: httpx.AsyncClient, url: str) -> dict[str, float]:
    try:
        return parse_vllm_metrics((await client.get(f"{url}/metrics", timeout=10)).text)
    except (httpx.HTTPError, ValueError):
        return {}


def prepare(body: dict[str, Any], model: str, regime: str, kind: str) -> dict[str, Any]:
    out = dict(body, model=model)
    if regime == "greedy":
        out["temperature"] = 0
    else:
        out.pop("temperature", None)  # the pool's generation defaults apply
    if kind == "entropy":
        out.update(stream=False, logprobs=True, top_logprobs=20, temperature=0)
    else:
        out.update(stream=True, stream_options={"include_usage": True})
    return out


async def run_one(client: httpx.AsyncClient, url: str, body: dict[str, Any], record: Record) -> Record:
    start = time.perf_counter()
    parts = TextParts()
    if body.get("stream"):
        first = last = None
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as response:
            record.status = response.status_code
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                now = time.perf_counter()
                payload = json.loads(line[6:])
                if _has_tokens(payload):
                    first = first or now
                    last = now
                parts.add_chunk(payload)
                _speculation(payload, record)
                usage = payload.get("usage")
                if isinstance(usage, dict):
                    record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        if first is not None and last is not None:
            record.ttft, record.decode_time = first - start, last - first
    else:
        response = await client.post(f"{url}/v1/chat/completions", json=body, timeout=600)
        record.status = response.status_code
        read_whole_answer(record, response.json(), parts)
    record.total = time.perf_counter() - start
    return settle(record, body, parts)


def read_whole_answer(record: Record, payload: dict[str, Any], parts: TextParts) -> None:
    """What a whole (non-streamed) answer says: its text, speculation, prompt and top logprobs."""
    parts.add_chunk(payload)
    _speculation(payload, record)
    record.prompt_tokens = int((payload.get("usage") or {}).get("prompt_tokens") or 0)
    _entropy(payload, record)


def settle(record: Record, body: dict[str, Any], parts: TextParts) -> Record:
    """The record's measures of the answer ``parts`` hold: tokens by class, and its digest."""
    observed = measure_parts(body, parts)
    sources = estimate(body).copyable
    record.copy_chars, record.copy_code, record.copy_calls = sources.text_chars, sources.code, sources.earlier_calls
    record.completion_tokens = int(observed.total_tokens)
    record.w = {"s": observed.w_s, "r": observed.w_r, "f": observed.w_f}
    text = "\x1e".join(["".join(parts.reasoning), "".join(parts.content), "".join(parts.names),
                        "".join(parts.arguments)])
    record.digest = hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
    return record


def _has_tokens(payload: dict[str, Any]) -> bool:
    for choice in payload.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning") or delta.get("reasoning_content") or delta.get("tool_calls"):
            return True
    return False


def _speculation(payload: dict[str, Any], record: Record) -> None:
    metrics = payload.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if isinstance(spec, dict) and spec.get("num_spec_steps"):
        record.spec_steps = int(spec["num_spec_steps"])
        record.accepted = int(spec.get("num_accepted_draft_tokens") or 0)
        record.drafted = int(spec.get("num_draft_tokens") or 0)
        record.tau = record.accepted / record.spec_steps


def _entropy(payload: dict[str, Any], record: Record) -> None:
    """Mean truncated entropy over positions from top_logprobs, and the mass it misses."""
    try:
        content = payload["choices"][0]["logprobs"]["content"]
    except (KeyError, IndexError, TypeError):
        return
    entropies, missing = [], []
    for entry in content or []:
        probs = [math.exp(t["logprob"]) for t in entry.get("top_logprobs") or []]
        if not probs:
            continue
        entropies.append(-sum(p * math.log(p) for p in probs if p > 0))
        missing.append(max(0.0, 1.0 - sum(probs)))
    if entropies:
        record.entropy = sum(entropies) / len(entropies)
        record.missing_mass = sum(missing) / len(missing)


async def run_batch(url: str, bodies: list[dict[str, Any]], template: Record,
                    model: str) -> tuple[list[Record], dict[str, float]]:
    """Run ``bodies`` at ``template.concurrency``; returns the records and the pool's
    counter deltas over the batch. tau falls back to those deltas when the pool
    gives no per-request metrics."""
    limits = httpx.Limits(max_connections=template.concurrency + 4)
    async with httpx.AsyncClient(limits=limits) as client:
        before = await counters(client, url)
        gate = asyncio.Semaphore(template.concurrency)

        async def one(i: int, body: dict[str, Any]) -> Record:
            async with gate:
                record = Record(**{**asdict(template), "index": i})
                return await run_one(client, url, prepare(body, model, template.regime, template.kind), record)

        records = await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies)))
        after = await counters(client, url)
    drafts = after.get("num_drafts", 0.0) - before.get("num_drafts", 0.0)
    if template.gamma and drafts > 0 and all(r.tau is None for r in records):
        tau = (after.get("num_accepted_tokens", 0.0) - before.get("num_accepted_tokens", 0.0)) / drafts
        for r in records:
            r.tau = tau  # batch-level: the pool gives no per-request metrics
    for r in records:
        if r.status != 200:
            raise BackendError(f"{url} answered {r.status} during calibration")
    deltas = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    return list(records), deltas
