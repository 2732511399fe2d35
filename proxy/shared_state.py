"""What proxy replicas share through Redis, so that the more the proxy scales, the
better it routes rather than the worse.

Three things, each also kept in this proxy's memory, where it is read from:

- **conversation placements**: which pool and replica hold a conversation's
  prefix, under the same keys as ``proxy/affinity.py`` (hashed alike in every
  process), each lasting ``state_ttl_seconds`` past its last use;
- **what each request shape produced**: the learner's statistics, updated in
  Redis by one script with the learner's own rule, so that every replica's
  observations count once, in the order Redis runs them;
- **ejections**: a replica one proxy saw fail its answers is avoided by all,
  for as long as that proxy ejected it.

A request costs one pipelined round trip before it is planned (its shape and
its conversation's prefixes, read together) and one after it is answered (its
shape's update and its placement), which no client waits for. Redis down or
slow never fails or holds a request: past ``state_timeout`` the proxy plans from
its own memory, counts the fallback (``draftgate_state_fallbacks_total``), and
leaves Redis alone for a second before it tries again; what it learned
meanwhile is kept (up to ``_BACKLOG`` writes) and written once Redis answers.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import redis.asyncio as redis
from redis.exceptions import RedisError

from draftgate.policy.structure.learner import WINDOW, OutcomeMeans, ShapeStats, StructureLearner
from draftgate.policy.structure.measure import ObservedStructure
from draftgate.proxy.affinity import AffinityTable, Conversation
from draftgate.proxy.config import ProxySettings
from draftgate.proxy.metrics import ProxyMetrics

log = logging.getLogger("draftgate.state")

_PREFIX = "draftgate:"
_RETRY_SECONDS = 1.0  # after a failure, how long requests plan without asking Redis
_BACKLOG = 10_000  # writes kept while Redis is away

# The learner's update (ShapeStats.update) run where the statistics live, so that
# replicas updating one shape at once neither lose an observation nor count one twice.
# KEYS[1]: the shape; ARGV: window, called (0/1), s, r, f, ttl in ms.
_OBSERVE = """
local key, window = KEYS[1], tonumber(ARGV[1])
local function step(field, value, n)
  local old = tonumber(redis.call('HGET', key, field) or '0')
  redis.call('HSET', key, field, tostring(old + (value - old) / math.min(n, window)))
end
local function means(prefix)
  local n = redis.call('HINCRBY', key, prefix .. 'n', 1)
  step(prefix .. 's', tonumber(ARGV[3]), n)
  step(prefix .. 'r', tonumber(ARGV[4]), n)
  step(prefix .. 'f', tonumber(ARGV[5]), n)
end
local n = redis.call('HINCRBY', key, 'n', 1)
step('rate', tonumber(ARGV[2]), n)
means('e')
if ARGV[2] == '1' then means('c') else means('a') end
redis.call('PEXPIRE', key, ARGV[6])
return n
"""


class SharedState:
    """This proxy's connection to the store it shares with its replicas, and what it
    does while that store is away."""

    def __init__(self, settings: ProxySettings, metrics: ProxyMetrics, window: int = WINDOW) -> None:
        store = settings.shared_state
        assert store.address is not None
        password = store.password.get_secret_value() if store.password else None
        self.timeout = store.timeout
        self.ttl_ms = int(store.ttl_seconds * 1000)
        self.window = window
        self.metrics = metrics
        self.client = redis.Redis.from_url(store.address, password=password, socket_timeout=self.timeout,
                                           socket_connect_timeout=self.timeout, retry_on_timeout=False,
                                           health_check_interval=0)
        self._away_until = 0.0
        self._backlog: deque[Callable[[Any], None]] = deque(maxlen=_BACKLOG)
        self._writes: set[asyncio.Task[None]] = set()
        metrics.state_up.set(1)

    # ------------------------------------------------------------ before planning

    async def pull(self, shape: str, conversation: Conversation, learner: StructureLearner,
                   affinity: AffinityTable) -> None:
        """What the replicas know of ``shape`` and ``conversation``, put into this proxy's
        ``learner`` and ``affinity`` table for the plan to read; nothing when Redis is away."""
        keys = conversation.looked_up_keys()
        found = await self._run("read", lambda pipe: (pipe.hgetall(_shape_key(shape)),
                                                      pipe.mget([_placement_key(k) for k in keys]) if keys else None))
        if found is None:
            return
        fields = found[0]
        if fields:
            learner.adopt(shape, _stats(fields))
        for key, value in zip(keys, (found[1] if keys else None) or ()):
            placement = _placement(value)
            if placement is not None:
                affinity.adopt(key, placement)

    # ------------------------------------------------------------ after answering

    def push(self, shape: str | None, observed: ObservedStructure | None, conversation: Conversation,
             placement: tuple[str, str, float]) -> None:
        """Tell the replicas what an answer taught: its shape's output and where its
        conversation now sits. Written in the background; no client waits for it."""
        value = "\n".join((placement[0], placement[1], repr(placement[2])))

        def write(pipe: Any) -> None:
            if shape and observed is not None and observed.total_tokens > 0:
                t = observed.tokens
                pipe.eval(_OBSERVE, 1, _shape_key(shape), self.window, int(observed.tool_calls > 0), t.s, t.r, t.f,
                          self.ttl_ms)
            for key in conversation.recorded_keys():
                pipe.set(_placement_key(key), value, px=self.ttl_ms)

        self._write(write)

    def eject(self, replica: str, seconds: float) -> None:
        """One proxy ejected ``replica`` for ``seconds``: so do the others, at their next sync."""
        until = repr(time.time() + seconds)
        self._write(lambda pipe: pipe.set(_PREFIX + "ejected:" + replica, until, px=max(1, int(seconds * 1000))))

    async def ejections(self, replicas: Iterable[str]) -> dict[str, float]:
        """Seconds of ejection left for each of ``replicas`` that a proxy ejected (the
        monitor's periodic sync, off the requests' path)."""
        urls = list(replicas)
        if not urls:
            return {}
        found = await self._run("sync", lambda pipe: (pipe.mget([_PREFIX + "ejected:" + u for u in urls]),))
        if found is None:
            return {}
        if self._backlog:  # Redis is back, and no request has come since to write what was kept
            self._write(None)
        now = time.time()
        until = {url: _number(v) for url, v in zip(urls, found[0] or ())}
        return {url: t - now for url, t in until.items() if t is not None and t > now}

    async def settled(self, timeout: float = 1.0) -> None:
        """Wait, up to ``timeout``, for the writes in flight."""
        if self._writes:
            await asyncio.wait(set(self._writes), timeout=timeout)

    async def close(self) -> None:
        await self.settled()
        await self.client.aclose()

    # ------------------------------------------------------------ the round trips

    def _write(self, write: Callable[[Any], None] | None) -> None:
        """Send ``write`` (None: only what was kept) in the background, or keep it while Redis is away."""
        if self._away():
            if write is not None:
                self._backlog.append(write)
            return
        task = asyncio.get_running_loop().create_task(self._flush(write))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _flush(self, write: Callable[[Any], None] | None) -> None:
        """``write``, with whatever was kept while Redis was away before it."""
        writes = [self._backlog.popleft() for _ in range(len(self._backlog))]
        kept = len(writes)
        if write is not None:
            writes.append(write)
        if not writes:
            return
        if await self._run("write", lambda pipe: [w(pipe) for w in writes]) is None:
            self._backlog.extendleft(reversed(writes))
        elif kept:
            log.info("shared state is back: wrote %d updates kept while it was away", kept)

    async def _run(self, operation: str, fill: Callable[[Any], object]) -> list[Any] | None:
        """One pipelined round trip; None (and a counted fallback) when Redis is away or slow."""
        if self._away():
            self.metrics.state_fallbacks.labels(operation=operation).inc()
            return None
        pipe = self.client.pipeline(transaction=False)
        fill(pipe)
        try:
            result: list[Any] = await asyncio.wait_for(pipe.execute(raise_on_error=False), self.timeout)
        except (RedisError, OSError, asyncio.TimeoutError) as exc:
            self._went_away(operation, exc)
            return None
        for i, answer in enumerate(result):
            # a command Redis refused (a key of another type, a script error) is its own loss:
            # Redis answers, and what else the round trip held stands
            if isinstance(answer, Exception):
                log.warning("shared state refused a command: %s", answer)
                result[i] = None
        if self._away_until:
            self._away_until = 0.0
            self.metrics.state_up.set(1)
            log.info("shared state answers again")
        return result

    def _away(self) -> bool:
        return self._away_until > time.monotonic()

    def _went_away(self, operation: str, exc: BaseException) -> None:
        self.metrics.state_fallbacks.labels(operation=operation).inc()
        if not self._away_until:
            log.warning("shared state unreachable (%s); planning from this proxy's own state",
                        type(exc).__name__)
        self._away_until = time.monotonic() + _RETRY_SECONDS
        self.metrics.state_up.set(0)


def _shape_key(shape: str) -> str:
    return _PREFIX + "shape:" + shape


def _placement_key(key: int) -> str:
    return f"{_PREFIX}placement:{key:x}"


def _number(value: bytes | None) -> float | None:
    """A number the store holds; None for none, or for what is not one (a key something
    else wrote must not break a request)."""
    try:
        number = float(value) if value is not None else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None


def _placement(value: bytes | None) -> tuple[str, str, float] | None:
    """A conversation placement as ``push`` writes it: pool, replica and prompt tokens, a line each."""
    parts = value.decode("utf-8", "replace").rsplit("\n", 2) if value is not None else []
    tokens = _number(parts[2].encode()) if len(parts) == 3 else None
    return (parts[0], parts[1], tokens) if tokens is not None else None


def _stats(fields: dict[bytes, bytes]) -> ShapeStats:
    """A shape's statistics as ``_OBSERVE`` keeps them."""
    get = lambda name: _number(fields.get(name.encode())) or 0.0  # noqa: E731

    def means(prefix: str) -> OutcomeMeans:
        return OutcomeMeans(int(get(prefix + "n")), get(prefix + "s"), get(prefix + "r"), get(prefix + "f"))

    return ShapeStats(int(get("n")), get("rate"), means("e"), means("c"), means("a"))
