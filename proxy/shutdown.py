"""Stopping without dropping what clients are owed.

On SIGTERM uvicorn accepts nothing more and lets requests in flight finish for
the grace (``graceful_shutdown_seconds``), then cancels them: a client would
see its connection drop mid-answer, and the log a traceback. Just before the
grace runs out, the proxy ends what still runs itself, in forms clients
understand: a 503 to retry elsewhere for an answer not yet begun, vLLM's error
event for a stream under way. Closing those upstream connections also frees
their GPU slots, since vLLM aborts a request whose connection closes.

What an answer taught the proxy is owed too: an answer read after it has gone
(a Responses stream's closing event) is read in a task of its own, and the
server's stopping waits for those tasks a moment before the process ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from starlette.responses import Response

from draftgate.proxy.errors import ErrorShape, openai_error
from draftgate.proxy.upstream import UpstreamAborted, UpstreamClient

log = logging.getLogger("draftgate.proxy")

# how long before the grace runs out the proxy ends what still runs, so the ending reaches clients
CUT_AHEAD_SECONDS = 1.0
SHUTTING_DOWN = "draftgate is shutting down"
# how long stopping waits for the readings of answers already sent (0.1-0.3 s each at 10 MB);
# within the 5 s the chart and compose file allow beyond graceful_shutdown_seconds
SETTLING_GRACE_SECONDS = 2.0


class Shutdown:
    def __init__(self, upstream: UpstreamClient) -> None:
        self.upstream = upstream
        self.loop: asyncio.AbstractEventLoop | None = None  # set when serving starts
        self.started = False
        # held so the loop does not drop a reading midway (it keeps only weak references to tasks)
        self._settling: set[asyncio.Task[None]] = set()

    def begin(self, grace: float) -> None:
        """The server got SIGTERM. Called from the signal handler, so it only schedules."""
        if self.started or self.loop is None:
            return
        self.started = True
        self.loop.call_soon_threadsafe(self._schedule_cut, max(0.0, grace - min(CUT_AHEAD_SECONDS, grace / 5)))

    def _schedule_cut(self, delay: float) -> None:
        log.info("shutting down: requests in flight have %.1f s to finish", delay)
        asyncio.get_running_loop().call_later(delay, self.upstream.abort_all, UpstreamAborted(SHUTTING_DOWN))

    def settle_later(self, settling: Coroutine[Any, Any, None]) -> None:
        """Run the reading and recording of an answer already sent, in a task that stopping waits for."""
        task = asyncio.get_running_loop().create_task(settling)
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def wait_for_settling(self) -> None:
        """The server is stopping: let the answers still being read be recorded, for a moment."""
        if self._settling:
            await asyncio.wait(set(self._settling), timeout=SETTLING_GRACE_SECONDS)


def shutting_down_error(shape: ErrorShape = openai_error) -> Response:
    """The answer to a request the shutdown ended before its answer began."""
    return shape(503, f"{SHUTTING_DOWN}; retry the request", code="shutting_down",
                        headers={"retry-after": "1"})


def shutting_down_message() -> str:
    """What the event that ends a stream the shutdown cut short says."""
    return f"{SHUTTING_DOWN}: the stream was cut before its end"
