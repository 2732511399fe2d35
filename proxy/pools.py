"""Upstream pools and their replicas: health, load, capacity, replica choice.

Load is known two ways: the pool's own ``/metrics`` (scraped every few
seconds, and it includes traffic that bypasses this proxy) and the proxy's
in-flight count (fresh to the request). The larger of the two is used.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from draftgate.policy.gate import PoolView, depth_at
from draftgate.proxy.config import PoolConfig


@dataclass(slots=True)
class Replica:
    url: str
    healthy: bool = True  # optimistic until the first check says otherwise
    inflight: int = 0
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    scraped_at: float = 0.0
    failures: int = 0
    timeouts: int = 0  # health checks in a row that went unanswered
    next_check: float = 0.0
    checked_at: float = 0.0  # monotonic time of the last health check, 0 before the first
    counters: dict[str, float] = field(default_factory=dict)
    # requests this proxy saw finish since the last scrape: the scraped load is that much stale
    finished_since_scrape: int = 0
    started: int = 0  # requests ever sent here: a scrape taken while it moved straddled one
    # Passive checks: answers that failed in a row, and the ejection they led to. A
    # replica whose /health is fine can still fail every answer (a broken sidecar, a
    # wedged engine); health checks alone would keep it in rotation.
    failed_answers: int = 0
    ejected_until: float = 0.0  # monotonic; 0: never ejected
    ejections: int = 0  # in a row, without a good answer between: each doubles the next
    # A replica failing every other answer never fails five in a row, yet doubles the
    # load its requests cost: the share of failures is watched too, over a window
    # that opens at the first failure after the last one closed.
    window_answers: int = 0
    window_failures: int = 0

    @property
    def in_rotation(self) -> bool:
        """Healthy, and not ejected for failing its answers."""
        return self.healthy and (not self.ejected_until or self.ejected_until <= time.monotonic())

    def start(self) -> None:
        self.inflight += 1
        self.started += 1

    def took_scrape(self, values: dict[str, float], finished_before: int, now: float) -> None:
        """What a scrape of its ``/metrics`` read (``vllm_metrics.parse_vllm_metrics``), taken as its
        load; ``finished_before``: requests seen to finish here before the scrape left, the rest may
        still be in what it read."""
        self.finished_since_scrape = max(0, self.finished_since_scrape - finished_before)
        self.running = values.get("running", 0.0)
        self.waiting = values.get("waiting", 0.0)
        self.kv_usage = values.get("kv_usage", 0.0)
        self.scraped_at = now
        self.counters = values

    @property
    def load(self) -> float:
        """Running requests: the scrape corrected for what finished since, or our own count."""
        return max(float(self.inflight), self.running - self.finished_since_scrape)

    @property
    def queued(self) -> float:
        return max(0.0, self.waiting - max(0, self.finished_since_scrape - self.running))

    def answered(self) -> None:
        self.failed_answers = 0
        self.ejections = 0
        self.window_answers += 1

    def answer_failed(self, limit: int, ejection_seconds: float, cap: float = 60.0, share: float = 0.0,
                      window: int = 20) -> float | None:
        """Count an answer that failed; the seconds of ejection when this one makes ``limit``
        in a row (0: never), or ``share`` of at least the last ``window`` answers (0: never).
        Ejection ends by itself: no health check says otherwise.

        Failures while ejected do not count: they are answers that were already on their
        way, or requests a pool with no replica left in rotation tried here anyway, and
        counting them would double the ejection again and again within a second.
        """
        now = time.monotonic()
        if self.ejected_until > now:
            return None
        self.failed_answers += 1
        self.window_answers += 1
        self.window_failures += 1
        too_many = share > 0 and self.window_answers >= window and self.window_failures >= share * self.window_answers
        if self.window_answers >= window:
            self.window_answers = self.window_failures = 0
        if not too_many and (limit <= 0 or self.failed_answers < limit):
            return None
        self.failed_answers = self.window_answers = self.window_failures = 0
        seconds = min(cap, ejection_seconds * 2 ** min(self.ejections, 8))
        self.ejections += 1
        self.ejected_until = now + seconds
        return seconds

    def mark_failed(self, backoff_cap: float = 30.0) -> None:
        self.failures += 1
        self.healthy = False
        self.checked_at = now = time.monotonic()
        self.next_check = now + min(backoff_cap, 0.25 * 2 ** min(self.failures, 8))

    def mark_unanswered(self) -> None:
        """A health check went unanswered; the monitor decides whether that is enough to fail."""
        self.timeouts += 1
        self.checked_at = time.monotonic()

    def mark_ok(self) -> None:
        self.failures = 0
        self.timeouts = 0
        self.healthy = True
        self.next_check = 0.0
        self.checked_at = time.monotonic()


class Pool:
    def __init__(self, config: PoolConfig) -> None:
        self.config = config
        self.name = config.name
        self.replicas: dict[str, Replica] = {url: Replica(url) for url in config.urls}
        # num_speculative_tokens as the pool's /metrics shows it (0: it does not speculate);
        # None until a scrape has read it
        self.reported_depth: int | None = None

    @property
    def speculative(self) -> bool:
        return self.config.speculation is not None

    @property
    def depth(self) -> int:
        """The depth the pool drafts at: as it reports it, else as configured. 0 while
        neither is known, or when it reports that it does not speculate: it is priced
        as plain until it says otherwise."""
        if self.config.speculation is None:
            return 0
        if self.reported_depth is not None:
            return self.reported_depth
        return self.config.speculation.gamma or 0

    def depth_at(self, batch: float) -> int:
        """The depth it drafts at with ``batch`` requests running (dynamic K varies it)."""
        spec = self.config.speculation
        if spec is None or self.depth == 0:
            return 0
        return depth_at(spec.num_speculative_tokens_per_batch_size, batch, self.depth)

    def took_report(self, values: dict[str, float]) -> str | None:
        """Read the depth a scrape of one of its replicas shows (``speculative_tokens``);
        a sentence for the log when that is news that contradicts the configuration."""
        reported = int(values.get("speculative_tokens", 0)) if "num_drafts" in values else 0
        if reported == self.reported_depth:
            return None
        self.reported_depth = reported
        spec = self.config.speculation
        if spec is None:
            return (f"pool {self.name} speculates ({reported} tokens a round) but is configured as plain: it is "
                    "priced as plain; give it a speculation section") if reported else None
        if not reported:
            return f"pool {self.name} is configured to speculate but reports no speculation: priced as plain"
        if spec.gamma is not None and spec.gamma != reported:
            return (f"pool {self.name} drafts {reported} tokens a round, as its /metrics reports, not the "
                    f"configured gamma {spec.gamma}: priced at {reported}")
        return None

    def replicas_in_rotation(self) -> list[Replica]:
        """Those passing their health checks and not ejected for failing answers."""
        return [r for r in self.replicas.values() if r.in_rotation]

    @property
    def inflight(self) -> int:
        return sum(r.inflight for r in self.replicas.values())

    def capacity(self) -> int:
        """Requests this proxy may have in flight here before it queues or sheds."""
        replicas = max(1, len(self.replicas_in_rotation()))
        return replicas * self.config.max_num_seqs

    def view(self) -> PoolView:
        healthy = self.replicas_in_rotation()
        capacity = max(1, len(healthy)) * self.config.max_num_seqs
        running = sum(r.load for r in healthy) if healthy else float(self.inflight)
        scraped_waiting = sum(r.queued for r in healthy)
        spec = self.config.speculation
        return PoolView(
            name=self.name,
            method=spec.method if spec else None,
            # dynamic K: the depth the pool runs at once this request joins (0: it will not speculate)
            gamma=self.depth_at(min(running, float(capacity)) + 1.0),
            draft_cost=spec.draft_cost if spec else None,
            healthy=bool(healthy),
            running=min(running, float(capacity)),
            waiting=scraped_waiting + max(0.0, running - capacity),
            max_num_seqs=capacity,
            draft_prefill_ratio=spec.draft_prefill_ratio if spec and spec.method == "draft_model" else 0.0,
            lookup=spec.lookup if spec else (5, 5),
            # a new request can go to the replica with the most room
            kv_usage=min((r.kv_usage for r in healthy), default=0.0),
        )

    def pick_replica(self, prefer: str | None = None, exclude: set[str] | None = None,
                     kv_cache_full: float = 1.0, pinned: bool = False) -> Replica | None:
        """The replica holding the prefix unless its batch or its KV cache is full, else the least
        loaded of those with room in their KV cache (of all, if none has).

        A replica with requests waiting for its prefill budget keeps the prefix's requests: with room
        in its batch vLLM's queue is a step or two of prefill (one to three requests at capacity on
        agent traffic), and a long prefix computed again elsewhere costs more than that. Moving agent
        turns off such replicas loses a quarter of their cached prefixes on 8 emulated GPUs without
        speculation, and the fleet then misses the TPOT target for one output token in ten at 3.5
        requests a second a GPU, where holding them it misses for one in a hundred.

        ``pinned``: ``prefer`` holds state no other replica has (a stored
        response), so it is the one whatever its load or health says.
        """
        exclude = exclude or set()
        if pinned and prefer is not None and prefer not in exclude and prefer in self.replicas:
            return self.replicas[prefer]
        candidates = [r for r in self.replicas_in_rotation() if r.url not in exclude]
        if not candidates:
            candidates = [r for r in self.replicas.values() if r.url not in exclude]
        if len(candidates) <= 1:
            return candidates[0] if candidates else None
        if prefer is not None:
            preferred = self.replicas.get(prefer)
            if (preferred in candidates and preferred.inflight < self.config.max_num_seqs
                    and preferred.kv_usage < kv_cache_full):
                return preferred
        # the pool's view counts the replica with the most KV room; that is where a request should go
        with_room = [r for r in candidates if r.kv_usage < kv_cache_full] or candidates
        return min(with_room, key=lambda r: (r.load + r.queued, r.inflight))


class PoolSet:
    """All pools, plus the requests waiting for room when every pool is full."""

    def __init__(self, configs: list[PoolConfig], queue_depth_per_replica: int) -> None:
        self.pools = {c.name: Pool(c) for c in configs}
        self.queue_depth = queue_depth_per_replica
        self._room_waiters: list[asyncio.Future[None]] = []

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.pools.values())

    def views(self) -> list[PoolView]:
        return [p.view() for p in self.pools.values()]

    def plain_first(self, serving: set[str] | None = None) -> list[str]:
        """Pool names, plain pools first, among those ``serving`` the model (all if none do):
        the order for a request the gate does not weigh."""
        pools = [p for p in self if serving is None or p.name in serving] or list(self)
        return [p.name for p in sorted(pools, key=lambda p: p.speculative)]

    def has_room(self, pool: Pool) -> bool:
        replicas = max(1, len(pool.replicas_in_rotation()))
        return pool.inflight < pool.capacity() + self.queue_depth * replicas

    def first_with_room(self, order: list[Pool]) -> Pool | None:
        return next((pool for pool in order if self.has_room(pool)), None)

    async def wait_for_room(self, order: list[Pool], timeout: float) -> Pool | None:
        """The first pool in ``order`` with room, waiting up to ``timeout`` for one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for pool in order:
                if self.has_room(pool):
                    return pool
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            freed: asyncio.Future[None] = loop.create_future()
            self._room_waiters.append(freed)
            try:
                await asyncio.wait_for(freed, remaining)
            except asyncio.TimeoutError:
                return None

    def release(self, replica: Replica) -> None:
        """A request left ``replica``: wake whoever waits for room (synchronous, so it
        can run in any cleanup path, cancellation included)."""
        replica.inflight = max(0, replica.inflight - 1)
        replica.finished_since_scrape += 1
        if self._room_waiters:
            waiters, self._room_waiters = self._room_waiters, []
            for freed in waiters:
                if not freed.done():
                    freed.set_result(None)

    def adopt(self, configs: list[PoolConfig]) -> None:
        """Take a reloaded configuration, keeping the state of replicas that remain."""
        new: dict[str, Pool] = {}
        for config in configs:
            pool = Pool(config)
            old = self.pools.get(config.name)
            if old is not None:
                for url in pool.replicas:
                    if url in old.replicas:
                        pool.replicas[url] = old.replicas[url]
            new[config.name] = pool
        self.pools = new
