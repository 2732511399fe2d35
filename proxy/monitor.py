"""Background work: health checks with backoff, load scrapes, DNS re-resolution."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from draftgate.proxy.config import ProxySettings
from draftgate.proxy.pools import Pool, PoolSet, Replica
from draftgate.proxy.shared_state import SharedState
from draftgate.proxy.upstream import UpstreamClient, UpstreamError, UpstreamTimeout
from draftgate.vllm_metrics import parse_vllm_metrics

log = logging.getLogger("draftgate.monitor")

class Monitor:
    """The proxy's background tasks; ``settings`` is asked afresh each round, so a reload applies."""

    def __init__(self, pools: PoolSet, client: UpstreamClient, settings: Callable[[], ProxySettings],
                 on_scrape: Callable[[Pool, Replica, dict[str, float], bool], None] | None = None,
                 on_replicas_changed: Callable[[], None] | None = None,
                 shared: SharedState | None = None) -> None:
        self.pools = pools
        self.shared = shared
        self.client = client
        self.settings = settings
        self.on_scrape = on_scrape
        self.on_replicas_changed = on_replicas_changed
        self._tasks: list[asyncio.Task[None]] = []

    async def first_look(self) -> None:
        """Resolve, health-check and scrape every replica once, before the proxy takes a request.

        Until then the proxy knows neither which replicas answer, nor their load, nor
        how deep each pool drafts, and a request routed meanwhile is routed blind: on a
        busy machine a cold request could reach a pool its own estimate did not prefer.
        Bounded by the health timeout and the scrape's own; a replica silent that long
        is left to the loops.
        """
        for pool in self.pools:
            if pool.config.dns_refresh_seconds > 0:
                await self.resolve(pool)
        replicas = [(pool, r) for pool in self.pools for r in list(pool.replicas.values())]
        await asyncio.gather(*(self.check(r) for _, r in replicas), return_exceptions=True)
        await asyncio.gather(*(self.scrape(pool, r) for pool, r in replicas if r.healthy), return_exceptions=True)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._health_loop(), name="draftgate-health"),
                       loop.create_task(self._scrape_loop(), name="draftgate-scrape"),
                       loop.create_task(self._dns_loop(), name="draftgate-dns")]
        if self.shared is not None:
            self._tasks.append(loop.create_task(self._ejection_loop(self.shared), name="draftgate-ejections"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _health_loop(self) -> None:
        while True:
            checks = [self.check(r) for pool in self.pools for r in list(pool.replicas.values())
                      if time.monotonic() >= r.next_check]
            await asyncio.gather(*checks, return_exceptions=True)
            await asyncio.sleep(self.settings().health.interval)

    async def check(self, replica: Replica) -> None:
        """Take a replica out on a clear failure, or on repeated silence.

        A connection that fails (refused, or not made in time: the kernel
        accepts even for a busy server) or a non-200 answer acts at once, as in
        forwarding. An answer that does not come in time is ambiguous: a
        replica (or this proxy's event loop) busy for a moment looks the same
        as a hung one, and taking a healthy replica out moves its traffic, and
        its prefix cache, for nothing. So only ``health_timeouts_to_fail`` of
        those in a row count.
        """
        settings = self.settings()
        try:
            status, _ = await self.client.origin(replica.url).get("/health", (), settings.health.timeout)
            ok = status == 200
        except UpstreamTimeout:
            replica.mark_unanswered()
            if replica.healthy and replica.timeouts < settings.health.timeouts_to_fail:
                log.info("replica health check timed out", extra={"replica": replica.url})
                return
            ok = False
        except UpstreamError:
            ok = False
        if ok:
            if not replica.healthy:
                log.info("replica healthy again", extra={"replica": replica.url})
            replica.mark_ok()
        else:
            if replica.healthy:
                log.warning("replica failed its health check", extra={"replica": replica.url})
            replica.mark_failed()

    async def _ejection_loop(self, shared: SharedState) -> None:
        """Avoid the replicas another proxy ejected, for as long as it ejected them."""
        while True:
            replicas = {r.url: r for pool in self.pools for r in pool.replicas.values()}
            try:
                for url, seconds in (await shared.ejections(replicas)).items():
                    replica = replicas.get(url)
                    if replica is not None:
                        replica.ejected_until = max(replica.ejected_until, time.monotonic() + seconds)
            except Exception:  # a bug here must not end the sync for the proxy's lifetime
                log.exception("reading the shared ejections failed")
            await asyncio.sleep(self.settings().health.interval)

    async def _scrape_loop(self) -> None:
        while True:
            await asyncio.gather(*(self.scrape(pool, r) for pool in self.pools for r in list(pool.replicas.values())
                                   if r.healthy), return_exceptions=True)
            await asyncio.sleep(self.settings().health.scrape_interval)

    async def scrape(self, pool: Pool, replica: Replica) -> None:
        # Quiet: nothing of ours was in flight here from the moment the scrape left until it
        # came back, so the counters it read and the responses recorded so far line up.
        before = (replica.started, replica.inflight)
        finished_before = replica.finished_since_scrape
        try:
            status, body = await self.client.origin(replica.url).get("/metrics", (), 2.0)
            if status != 200:
                return
            values = parse_vllm_metrics(body.decode("utf-8", "replace"))
        except (UpstreamError, ValueError):
            return
        replica.took_scrape(values, finished_before, time.monotonic())
        if (news := pool.took_report(values)) is not None:
            log.warning(news, extra={"pool": pool.name})
        if self.on_scrape is not None:
            quiet = before == (replica.started, 0) and replica.inflight == 0
            self.on_scrape(pool, replica, values, quiet)

    async def _dns_loop(self) -> None:
        while True:
            intervals = [p.config.dns_refresh_seconds for p in self.pools if p.config.dns_refresh_seconds > 0]
            if not intervals:
                await asyncio.sleep(5.0)
                continue
            for pool in self.pools:
                if pool.config.dns_refresh_seconds > 0:
                    await self.resolve(pool)
            await asyncio.sleep(min(intervals))

    async def resolve(self, pool: Pool) -> None:
        """Expand each configured URL to one replica per address its name resolves to."""
        loop = asyncio.get_running_loop()
        urls: list[str] = []
        for configured in pool.config.urls:
            parts = urlsplit(configured)
            host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
            try:
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError:
                log.warning("DNS lookup failed", extra={"host": host})
                continue
            for address in sorted({info[4][0] for info in infos}):
                netloc = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
                urls.append(urlunsplit((parts.scheme, netloc, parts.path, "", "")))
        if not urls:
            return
        current = pool.replicas
        pool.replicas = {url: current.get(url) or Replica(url) for url in urls}
        if set(current) != set(urls) and self.on_replicas_changed is not None:
            self.on_replicas_changed()
