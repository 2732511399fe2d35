"""One continuous-batching loop per emulated server, shared by all its requests.

Each step admits waiting sequences while ``max_num_seqs`` and the KV capacity
allow, prefills them (only the tokens the prefix cache does not hold, plus the
draft's own prefill on a speculation server), and runs one decode round for
the rest. A round costs ``c_T(b) * (1 + K*delta(b)) + K*d*c_T(b)`` simulated
seconds at ``b`` running sequences and depth ``K``; on a speculation server
each sequence emits its accepted draft prefix plus one token. Simulated time
is mapped to wall time by ``time_scale`` against an anchor, so sleep
inaccuracy does not accumulate.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from draftgate.emulator.metrics import EngineMetrics
from draftgate.emulator.profile import EngineProfile
from draftgate.emulator.speculation import PositionModel
from draftgate.emulator.textgen import OutputToken

_MAX_LAG_SECONDS = 0.25  # beyond this the loop re-anchors rather than bursting to catch up


@dataclass(frozen=True)
class SpecConfig:
    """The parts of vLLM's ``--speculative-config`` the emulator honours."""

    method: str
    num_speculative_tokens: int
    per_batch_size: tuple[tuple[int, int, int], ...] = ()
    draft_model: str | None = None

    def depth_at(self, batch: int) -> int:
        for lo, hi, k in self.per_batch_size:
            if lo <= batch <= hi:
                return k
        return self.num_speculative_tokens


@dataclass
class SpecStats:
    """Per-request speculation counts, the source of ``metrics.speculative_decoding``."""

    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    histogram: dict[int, list[int]] = field(default_factory=dict)  # draft length -> counts by accepted
    per_step_accepted: list[int] = field(default_factory=list)
    per_step_drafted: list[int] = field(default_factory=list)

    def record(self, draft_len: int, accepted: int) -> None:
        self.steps += 1
        self.drafted += draft_len
        self.accepted += accepted
        self.histogram.setdefault(draft_len, [0] * (draft_len + 1))[accepted] += 1
        self.per_step_accepted.append(accepted)
        self.per_step_drafted.append(draft_len)

    def as_json(self, detailed: bool) -> dict[str, Any]:
        longest = max(self.histogram, default=0)
        overall = [0] * (longest + 1)
        for counts in self.histogram.values():
            for i, c in enumerate(counts):
                overall[i] += c
        out: dict[str, Any] = {
            "mean_acceptance_length": 1.0 + self.accepted / self.steps if self.steps else 1.0,
            "draft_acceptance_rate": self.accepted / self.drafted if self.drafted else 0.0,
            "num_spec_steps": self.steps,
            "num_spec_tokens": self.drafted,
            "num_draft_tokens": self.drafted,
            "num_accepted_draft_tokens": self.accepted,
            "acceptance_histogram": overall,
            "acceptance_histogram_by_draft_length": {str(k): v for k, v in sorted(self.histogram.items())},
        }
        if detailed:
            out["per_step_accepted"] = list(self.per_step_accepted)
            out["per_step_drafted"] = list(self.per_step_drafted)
        return out


@dataclass(eq=False)
class Sequence:
    """One output sequence (a request with ``n`` choices has ``n``)."""

    prompt_len: int
    block_hashes: list[int]
    output: list[OutputToken]
    finish_reason: str
    temperature: float
    speculate: bool
    positions: PositionModel | None
    events: asyncio.Queue[tuple[str, int, int]] = field(default_factory=asyncio.Queue)
    emitted: int = 0
    cached_tokens: int = 0
    kv_tokens: int = 0
    arrival: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    last_token_at: float | None = None
    aborted: bool = False
    finished: bool = False
    spec: SpecStats = field(default_factory=SpecStats)


@dataclass
class GroundTruth:
    """What the emulator actually produced: the answer key for tests."""

    drafted: dict[str, int] = field(default_factory=lambda: {"s": 0, "r": 0, "f": 0})
    accepted: dict[str, int] = field(default_factory=lambda: {"s": 0, "r": 0, "f": 0})
    steps: dict[str, int] = field(default_factory=lambda: {"s": 0, "r": 0, "f": 0})

    def as_json(self) -> dict[str, Any]:
        return {
            "acceptance_rate": {c: self.accepted[c] / self.drafted[c] if self.drafted[c] else None for c in "srf"},
            "tau": {c: self.accepted[c] / self.steps[c] if self.steps[c] else None for c in "srf"},
            "drafted": dict(self.drafted),
            "accepted": dict(self.accepted),
            "steps": dict(self.steps),
        }


class Engine:
    def __init__(
        self,
        profile: EngineProfile,
        spec: SpecConfig | None,
        max_num_seqs: int,
        time_scale: float,
        metrics: EngineMetrics,
    ) -> None:
        self.profile = profile
        self.spec = spec
        self.max_num_seqs = max_num_seqs
        self.time_scale = time_scale
        self.metrics = metrics
        self.kv_capacity = profile.kv_capacity_tokens_spec if spec else profile.kv_capacity_tokens
        self.kv_used = 0
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.cache: OrderedDict[int, None] = OrderedDict()
        self.cache_blocks = self.kv_capacity // profile.block_size
        self.truth = GroundTruth()
        self.simulated_seconds = 0.0
        self.busy_seconds = 0.0
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def draft_cost(self) -> float:
        if self.spec is None:
            return 0.0
        return self.profile.draft_cost_ngram if self.spec.method in ("ngram", "suffix") else self.profile.draft_cost

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="emulator-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def submit(self, seq: Sequence) -> None:
        if seq.prompt_len + len(seq.output) > self.kv_capacity:
            raise ValueError(
                f"This model's maximum context length is {self.kv_capacity} tokens; the request needs "
                f"{seq.prompt_len + len(seq.output)}"
            )
        self.waiting.append(seq)
        self._update_gauges()
        self._wakeup.set()

    def abort(self, seq: Sequence) -> None:
        seq.aborted = True
        self._wakeup.set()

    def reset_prefix_cache(self) -> None:
        self.cache.clear()

    # ------------------------------------------------------------ the loop

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        anchor_wall, anchor_sim = loop.time(), self.simulated_seconds
        while True:
            self._drop_aborted()
            if not self.running and not self.waiting:
                self._wakeup.clear()
                await self._wakeup.wait()
                anchor_wall, anchor_sim = loop.time(), self.simulated_seconds
                continue
            admitted = self._admit()
            decoding = [s for s in self.running if s not in admitted]
            if not admitted and not decoding:
                # head of the queue does not fit and nothing runs: wait for an abort
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            batch = len(self.running)
            depth = self._depth(batch, decoding)
            seconds = self._prefill_seconds(admitted) + self._decode_seconds(batch, depth, bool(decoding))
            self.simulated_seconds += seconds
            self.busy_seconds += seconds
            deadline = anchor_wall + (self.simulated_seconds - anchor_sim) * self.time_scale
            delay = deadline - loop.time()
            if delay < -_MAX_LAG_SECONDS:
                anchor_wall, anchor_sim = loop.time(), self.simulated_seconds
                delay = 0.0
            await asyncio.sleep(max(0.0, delay))
            now = time.monotonic()
            for seq in admitted:
                if not seq.aborted:
                    self._emit(seq, 1, now)
            for seq in decoding:
                if not seq.aborted:
                    self._decode(seq, depth, now)
            self._retire()

    def _depth(self, batch: int, decoding: list[Sequence]) -> int:
        if self.spec is None or not any(s.speculate for s in decoding):
            return 0
        return max(0, self.spec.depth_at(batch))

    def _prefill_seconds(self, admitted: list[Sequence]) -> float:
        uncached = sum(s.prompt_len - s.cached_tokens for s in admitted)
        ratio = 1.0 + (self.profile.draft_prefill_ratio if self.spec and self.spec.method == "draft_model" else 0.0)
        return uncached * self.profile.prefill_seconds_per_token * ratio

    def _decode_seconds(self, batch: int, depth: int, any_decoding: bool) -> float:
        if not any_decoding:
            return 0.0
        c_t = self.profile.target_pass_seconds(batch)
        return c_t * (1.0 + depth * self.profile.delta(batch)) + depth * self.draft_cost * c_t

    def _admit(self) -> list[Sequence]:
        admitted = []
        block = self.profile.block_size
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            need = int(math.ceil((seq.prompt_len + len(seq.output)) / block)) * block
            if self.kv_used + need > self.kv_capacity:
                break
            self.waiting.popleft()
            seq.kv_tokens = need
            self.kv_used += need
            seq.cached_tokens = self._cached_prefix(seq)
            self.metrics.prefix_queries.inc(seq.prompt_len)
            self.metrics.prefix_hits.inc(seq.cached_tokens)
            self.metrics.prompt_tokens.inc(seq.prompt_len)
            self.running.append(seq)
            admitted.append(seq)
        self._update_gauges()
        return admitted

    def _cached_prefix(self, seq: Sequence) -> int:
        hits = 0
        for h in seq.block_hashes:
            if h not in self.cache:
                break
            self.cache.move_to_end(h)
            hits += 1
        # vLLM always recomputes the last prompt token to produce logits
        return min(hits * self.profile.block_size, max(0, seq.prompt_len - 1))

    def _decode(self, seq: Sequence, depth: int, now: float) -> None:
        remaining = len(seq.output) - seq.emitted
        draft_len = min(depth, remaining - 1) if seq.speculate else 0
        if draft_len <= 0 or seq.positions is None:
            self._emit(seq, 1, now)
            return
        accepted = 0
        while accepted < draft_len and seq.positions.accepts(seq.emitted + accepted, seq.temperature):
            accepted += 1
        cls = seq.output[seq.emitted].cls
        self.truth.steps[cls] += 1
        for j in range(draft_len):
            position_cls = seq.output[seq.emitted + j].cls
            self.truth.drafted[position_cls] += 1
            if j < accepted:
                self.truth.accepted[position_cls] += 1
        seq.spec.record(draft_len, accepted)
        self.metrics.record_spec_step(draft_len, accepted)
        self._emit(seq, accepted + 1, now)

    def _emit(self, seq: Sequence, count: int, now: float) -> None:
        start = seq.emitted
        end = min(len(seq.output), start + count)
        if end <= start:
            return
        seq.emitted = end
        if seq.first_token_at is None:
            seq.first_token_at = now
            self.metrics.ttft.observe(now - seq.arrival)
        else:
            # tokens of one burst arrive together; vLLM records the gap per token
            gap = (now - (seq.last_token_at or now)) / (end - start)
            for _ in range(end - start):
                self.metrics.itl.observe(gap)
        seq.last_token_at = now
        self.metrics.generation_tokens.inc(end - start)
        seq.events.put_nowait(("tokens", start, end))
        if seq.emitted >= len(seq.output):
            seq.finished = True

    def _retire(self) -> None:
        done = [s for s in self.running if s.finished or s.aborted]
        if not done:
            return
        self.running = [s for s in self.running if not (s.finished or s.aborted)]
        for seq in done:
            self.kv_used -= seq.kv_tokens
            seq.kv_tokens = 0
            self._insert_cache(seq.block_hashes)
            if seq.finished and not seq.aborted:
                self.metrics.e2e.observe(time.monotonic() - seq.arrival)
                self.metrics.success(seq.finish_reason)
                seq.events.put_nowait(("finish", 0, 0))
        self._update_gauges()

    def _drop_aborted(self) -> None:
        if any(s.aborted for s in self.waiting):
            self.waiting = deque(s for s in self.waiting if not s.aborted)
        if any(s.aborted for s in self.running):
            self._retire()
        self._update_gauges()

    def _insert_cache(self, hashes: list[int]) -> None:
        for h in hashes:
            self.cache[h] = None
            self.cache.move_to_end(h)
        while len(self.cache) > self.cache_blocks:
            self.cache.popitem(last=False)

    @property
    def kv_usage(self) -> float:
        """The share of the KV cache held by admitted sequences, as vLLM reports it."""
        return self.kv_used / self.kv_capacity

    def _update_gauges(self) -> None:
        self.metrics.running.set(len(self.running))
        self.metrics.waiting.set(len(self.waiting))
        self.metrics.kv_usage.set(self.kv_usage)
