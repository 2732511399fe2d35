"""Stop working for a client that has gone.

A non-streamed answer can take a long time upstream (a long reasoning answer
sends no byte before the end), so can a stream's first event (the prefill of
a long prompt), and a client that gave up meanwhile must not keep a GPU busy:
vLLM aborts a request whose connection closes, so the proxy closes its
upstream connection as soon as it notices its own client left.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.types import Receive

# Most answers are back before this; only requests still waiting pay for a watcher.
WATCH_AFTER_SECONDS = 0.05


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


@asynccontextmanager
async def cancelled_if_client_leaves(receive: Receive, after: float = WATCH_AFTER_SECONDS) -> AsyncIterator[None]:
    """Run the body; if the client disconnects meanwhile, cancel it and raise ClientGone.

    The body sees an ordinary cancellation at whatever it was awaiting, so its
    own cleanup (closing the upstream connection, releasing the replica) runs as
    for any cancellation. Watching starts ``after`` seconds in: a watcher is a
    task, which costs more than the fast answers most requests get. The request
    body must have been read already.
    """
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    gone = False
    watcher: asyncio.Task[None] | None = None

    async def watch() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        task.cancel()

    def start_watching() -> None:
        nonlocal watcher
        watcher = loop.create_task(watch())

    # The watcher runs only while the body is suspended, and is cancelled before the
    # body's result is used: a cancellation it sends always lands inside the body.
    timer = loop.call_later(after, start_watching)
    try:
        yield
    except asyncio.CancelledError:
        if not gone:
            raise
        task.uncancel()
        raise ClientGone() from None
    finally:
        timer.cancel()
        if watcher is not None:
            watcher.cancel()
