"""How uvicorn serves the proxy: one home for its server options, used by
``draftgate serve`` and by the tests that run the proxy in-process."""

from __future__ import annotations

from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

UVICORN_OPTIONS: dict[str, Any] = {
    "log_level": "warning",  # the proxy writes its own JSON lines
    "access_log": False,  # the request log line says more, once
    "server_header": False,
    # draftgate never reads the client's address, so X-Forwarded-* rewriting would
    # only cost time on every request
    "proxy_headers": False,
    # the shutdown grace is configuration (graceful_shutdown_seconds): draftgate serve adds it
}


class SignalAwareServer(uvicorn.Server):
    """uvicorn's server, which also tells the proxy when a signal starts its shutdown:
    uvicorn says so to no one before requests in flight have finished or been cut."""

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_signal = on_signal

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.on_signal()
        super().handle_exit(sig, frame)
