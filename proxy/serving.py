"""How uvicorn serves the proxy: one home for its server options, used by
``draftgate serve`` and by the tests that run the proxy in-process."""

from __future__ import annotations

import gc
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn

from draftgate.proxy.bounded_heads import BoundedHeadProtocol

if TYPE_CHECKING:
    from draftgate.proxy.config import ProxySettings

_OPTIONS: dict[str, Any] = {
    "log_level": "warning",  # the proxy writes its own JSON lines
    "access_log": False,  # the request log line says more, once
    "server_header": False,
    # draftgate never reads the client's address, so X-Forwarded-* rewriting would
    # only cost time on every request
    "proxy_headers": False,
    # the shutdown grace is configuration (graceful_shutdown_seconds): draftgate serve adds it
}


def uvicorn_options(settings: ProxySettings) -> dict[str, Any]:
    """uvicorn.Config settings for the proxy, from its own."""
    protocol = type("BoundedHeadProtocol", (BoundedHeadProtocol,),
                    {"head_timeout": settings.timeouts.client_header, "max_head_bytes": settings.max_head_bytes})
    # Whoever holds a kept-alive connection longer must be the one to close it: a
    # server that closes first can do so just as the client (or a load balancer,
    # which holds its backend connections 60 s) sends the next request on it, and
    # that request fails. uvicorn's own default is 5 s.
    return {**_OPTIONS, "http": protocol, "timeout_keep_alive": settings.timeouts.keep_alive}


class SignalAwareServer(uvicorn.Server):
    """uvicorn's server, which also tells the proxy when a signal starts its shutdown:
    uvicorn says so to no one before requests in flight have finished or been cut."""

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_signal = on_signal

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.on_signal()
        super().handle_exit(sig, frame)


def settle_startup_heap() -> None:
    """Take everything built before serving out of the cycle collector's sight.

    A full collection walks every object the collector tracks, with the event
    loop stopped, and the modules, routes and models imported at startup are some
    60,000 of them: 20-35 ms on the reference machine, about once a minute under
    load, for objects that live as long as the process (``bench.bench_gc``). Frozen,
    they are never walked again; reference counting still frees them. vLLM's
    server does the same once it has started.
    """
    gc.collect()
    gc.freeze()
