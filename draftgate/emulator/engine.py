"""One continuous-batching loop per emulated server, shared by all its requests.

Each step admits waiting sequences while ``max_num_seqs`` and the KV capacity
allow, prefills them (only the tokens the prefix cache does not hold, plus the
draft model's own prefill on a speculation server), and runs one decode round
for the rest, all in one step as vLLM's chunked prefill schedules them. What
the step costs comes from ``physics.step_time``: the GPU's bytes and FLOPs for
the tokens in flight, the drafter's passes, fixed overheads. On a speculation
server each sequence emits its accepted draft prefix plus one token.

Time is simulated: a step advances the engine's clock by its GPU time, and
idle wall time advances it by ``1 / time_scale``. Simulated time is mapped to
wall time by ``time_scale`` against an anchor, so sleep inaccuracy does not
accumulate; when the host cannot keep up, the clock stays right and only the
wall pacing slips. Every sequence carries its own account in simulated seconds
(GPU time charged to it, first token, last token), which the evaluation reads
as ground truth.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from draftgate.emulator.metrics import EngineMetrics
from draftgate.emulator.physics import Work, step_time
from draftgate.emulator.profile import KINDS, EngineProfile
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
    # ngram's prompt_lookup_min and _max, as vLLM resolves them (5 and 5 when neither is given)
    lookup_min: int = 5
    lookup_max: int = 5

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
    # the ground truth, in simulated seconds
    gpu_seconds: float = 0.0
    arrived_at: float = 0.0
    first_token_sim: float | None = None
    last_token_sim: float | None = None
    draft_len: int = 0  # proposed for the step being run

    def truth(self) -> dict[str, float]:
        """GPU time charged to this sequence, time to first token and time per output token after it."""
        first = self.first_token_sim if self.first_token_sim is not None else self.arrived_at
        last = self.last_token_sim if self.last_token_sim is not None else first
        return {"gpu_seconds": self.gpu_seconds, "ttft": first - self.arrived_at,
                "tpot": (last - first) / max(1, self.emitted - 1), "tokens": self.emitted}


def _counts(keys: tuple[str, ...] | str) -> dict[str, int]:
    return dict.fromkeys(keys, 0)


@dataclass
class GroundTruth:
    """What the emulator actually produced, by output class and by token kind: the answer key for tests."""

    drafted: dict[str, int] = field(default_factory=lambda: _counts("srf"))
    accepted: dict[str, int] = field(default_factory=lambda: _counts("srf"))
    steps: dict[str, int] = field(default_factory=lambda: _counts("srf"))
    drafted_by_kind: dict[str, int] = field(default_factory=lambda: _counts(KINDS))
    accepted_by_kind: dict[str, int] = field(default_factory=lambda: _counts(KINDS))

    def record(self, output: list[OutputToken], start: int, draft_len: int, accepted: int) -> None:
        self.steps[output[start].cls] += 1
        for j in range(draft_len):
            token = output[start + j]
            self.drafted[token.cls] += 1
            self.drafted_by_kind[token.kind] = self.drafted_by_kind.get(token.kind, 0) + 1
            if j < accepted:
                self.accepted[token.cls] += 1
                self.accepted_by_kind[token.kind] = self.accepted_by_kind.get(token.kind, 0) + 1

    def as_json(self) -> dict[str, Any]:
        return {
            "acceptance_rate": {c: self.accepted[c] / self.drafted[c] if self.drafted[c] else None for c in "srf"},
            "tau": {c: self.accepted[c] / self.steps[c] if self.steps[c] else None for c in "srf"},
            "drafted": dict(self.drafted),
            "accepted": dict(self.accepted),
            "steps": dict(self.steps),
            "acceptance_rate_by_kind": {k: self.accepted_by_kind[k] / n if n else None
                                        for k, n in self.drafted_by_kind.items()},
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
        self.kv_capacity = profile.kv_capacity_tokens(spec.method if spec else None)
        self.method = spec.method if spec else None
        self.model_drafter = spec is not None and profile.drafter(spec.method).shape is not None
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
        self._idle_since: float | None = None  # wall time the engine went idle

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
        seq.arrived_at = self.clock()
        self.waiting.append(seq)
        self._update_gauges()
        self._wakeup.set()

    def clock(self) -> float:
        """Simulated seconds now: the GPU time of the steps run, and idle wall time scaled."""
        if self._idle_since is None:
            return self.simulated_seconds
        return self.simulated_seconds + (time.monotonic() - self._idle_since) / self.time_scale

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
                self._idle_since = time.monotonic()
                await self._wakeup.wait()
                # the GPU starts when the request arrived, not when this loop got to run
                self.simulated_seconds = max((seq.arrived_at for seq in self.waiting), default=self.clock())
                self._idle_since = None
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
            for seq in decoding:
                seq.draft_len = self._proposal(seq, depth)
            step = step_time(self.profile, [*map(self._prefill_work, admitted), *map(self._decode_work, decoding)],
                             self.method, depth)
            for seq, charge in zip([*admitted, *decoding], step.charges):
                seq.gpu_seconds += charge
            seconds = step.seconds
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
                    self._decode(seq, now)
            self._retire()

    def _depth(self, batch: int, decoding: list[Sequence]) -> int:
        if self.spec is None or not any(s.speculate for s in decoding):
            return 0
        return max(0, self.spec.depth_at(batch))

    def _prefill_work(self, seq: Sequence) -> Work:
        uncached = seq.prompt_len - seq.cached_tokens
        return Work(seq.cached_tokens, uncached, draft_prefill=uncached if self.model_drafter else 0)

    def _decode_work(self, seq: Sequence) -> Work:
        return Work(seq.prompt_len + seq.emitted, 1 + seq.draft_len, seq.draft_len)

    def _proposal(self, seq: Sequence, depth: int) -> int:
        """Draft tokens proposed for ``seq`` this step: ``depth`` from a model drafter; from a
        lookup, what it found to copy, up to ``depth``; never past the answer's end."""
        room = len(seq.output) - seq.emitted - 1
        if not seq.speculate or seq.positions is None or depth <= 0 or room <= 0:
            return 0
        if not self.model_drafter:
            return min(depth, room, int(seq.positions.proposed[seq.emitted]))
        return min(depth, room)

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

    def _decode(self, seq: Sequence, now: float) -> None:
        draft_len = seq.draft_len
        if draft_len <= 0 or seq.positions is None:
            self._emit(seq, 1, now)
            return
        positions, start = seq.positions, seq.emitted
        accepts = positions.accepts if self.model_drafter else positions.accepts_copy
        limit = draft_len if self.model_drafter else min(draft_len, int(positions.matching[start]))
        accepted = 0
        while accepted < limit and accepts(start + accepted, seq.temperature):
            accepted += 1
        self.truth.record(seq.output, seq.emitted, draft_len, accepted)
        seq.spec.record(draft_len, accepted)
        self.metrics.record_spec_step(draft_len, accepted)
        self._emit(seq, accepted + 1, now)

    def _emit(self, seq: Sequence, count: int, now: float) -> None:
        start = seq.emitted
        end = min(len(seq.output), start + count)
        if end <= start:
            return
        seq.emitted = end
        simulated = self.simulated_seconds
        if seq.first_token_sim is None:
            seq.first_token_sim = simulated
        seq.last_token_sim = simulated
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
