"""An engine paced in wall time, for the HTTP server: its loop, its metrics, its streams.

A step advances the simulated clock by its GPU time, and idle wall time
advances it by ``1 / time_scale``. Simulated time is mapped to wall time by
``time_scale`` against an anchor, so sleep inaccuracy does not accumulate;
when the host cannot keep up, the clock stays right and only the wall pacing
slips. Latency histograms are vLLM's, in wall seconds; each answer's ground
truth (``Sequence.truth``) is in simulated seconds.
"""

from __future__ import annotations

import asyncio
import time

from draftgate.emulator.engine import Engine, GroundTruth, Sequence, SpecConfig
from draftgate.emulator.metrics import EngineMetrics
from draftgate.emulator.profile import EngineProfile

_MAX_LAG_SECONDS = 0.25  # beyond this the loop re-anchors rather than bursting to catch up


class PacedEngine:
    """One ``Engine`` run by an asyncio task in wall time; what it does is told to the metrics and
    to each sequence's stream of events."""

    def __init__(self, profile: EngineProfile, spec: SpecConfig | None, max_num_seqs: int,
                 max_num_batched_tokens: int | None, time_scale: float, metrics: EngineMetrics) -> None:
        self.core = Engine(profile, spec, max_num_seqs, max_num_batched_tokens, observer=self)
        self.time_scale = time_scale
        self.metrics = metrics
        self.truth = GroundTruth()
        self.simulated_seconds = 0.0
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._idle_since: float | None = None  # wall time the engine went idle
        self._preemptions_counted = 0  # of the engine's, those the counter holds

    @property
    def kv_capacity(self) -> int:
        return self.core.kv_capacity

    @property
    def max_num_seqs(self) -> int:
        return self.core.max_num_seqs

    @property
    def kv_usage(self) -> float:
        return self.core.kv_usage

    @property
    def busy_seconds(self) -> float:
        return self.core.busy_seconds

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
        self.core.submit(seq, self.clock())
        seq.arrival = time.monotonic()
        seq.events = asyncio.Queue()
        self._update_gauges()
        self._wakeup.set()

    def clock(self) -> float:
        """Simulated seconds now: the GPU time of the steps run, and idle wall time scaled."""
        if self._idle_since is None:
            return self.simulated_seconds
        return self.simulated_seconds + (time.monotonic() - self._idle_since) / self.time_scale

    def abort(self, seq: Sequence) -> None:
        self.core.abort(seq)
        self._wakeup.set()

    def reset_prefix_cache(self) -> None:
        self.core.reset_prefix_cache()

    # ------------------------------------------------------------ the loop

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        anchor_wall, anchor_sim = loop.time(), self.simulated_seconds
        while True:
            step = self.core.step()
            self._update_gauges()
            if step is None:
                self._wakeup.clear()
                if not self.core.idle:  # the queue's head does not fit and nothing runs: wait for an abort
                    await self._wakeup.wait()
                    continue
                self._idle_since = time.monotonic()
                await self._wakeup.wait()
                # the GPU starts when the request arrived, not when this loop got to run
                self.simulated_seconds = max((seq.arrived_at for seq in self.core.waiting), default=self.clock())
                self._idle_since = None
                anchor_wall, anchor_sim = loop.time(), self.simulated_seconds
                continue
            self.simulated_seconds += step.seconds
            deadline = anchor_wall + (self.simulated_seconds - anchor_sim) * self.time_scale
            delay = deadline - loop.time()
            if delay < -_MAX_LAG_SECONDS:
                anchor_wall, anchor_sim = loop.time(), self.simulated_seconds
                delay = 0.0
            await asyncio.sleep(max(0.0, delay))
            self.core.finish(step, self.simulated_seconds)
            self._update_gauges()

    # ------------------------------------------------------------ what the engine tells

    def admitted(self, seq: Sequence) -> None:
        self.metrics.prefix_queries.inc(seq.prompt_len)
        self.metrics.prefix_hits.inc(seq.cached_tokens)
        self.metrics.prompt_tokens.inc(seq.prompt_len)

    def round(self, seq: Sequence, start: int, draft_len: int, accepted: int) -> None:
        self.truth.record(seq.output, start, draft_len, accepted)
        self.metrics.record_spec_step(draft_len, accepted)

    def tokens(self, seq: Sequence, start: int, end: int) -> None:
        now = time.monotonic()
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
        if seq.events is not None:
            seq.events.put_nowait(("tokens", start, end))

    def finished(self, seq: Sequence) -> None:
        self.metrics.e2e.observe(time.monotonic() - seq.arrival)
        self.metrics.success(seq.finish_reason)
        if seq.events is not None:
            seq.events.put_nowait(("finish", 0, 0))

    def _update_gauges(self) -> None:
        self.metrics.preemptions.inc(self.core.num_preemptions - self._preemptions_counted)
        self._preemptions_counted = self.core.num_preemptions
        self.metrics.running.set(len(self.core.running))
        self.metrics.waiting.set(len(self.core.waiting))
        self.metrics.kv_usage.set(self.core.kv_usage)


async def next_event(seq: Sequence) -> tuple[str, int, int]:
    """The next span of a sequence a ``PacedEngine`` runs: ``("tokens", start, end)``, or
    ``("finish", 0, 0)`` once it is done."""
    if seq.events is None:
        raise RuntimeError("the sequence was never submitted to a paced engine")
    return await seq.events.get()
