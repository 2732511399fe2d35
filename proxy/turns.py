"""Long work on the event loop, written as steps, run at once or in turns.

The proxy measures what it relays on the event loop that relays everything
else, so one long call there (a regular expression over 10 MB, a search
through it) holds every stream until it returns. A thread would not help: such
a call holds the interpreter lock for as long as it runs. So long readings are
written as generators that yield between steps of bounded size, and the
caller decides: ``at_once`` runs them through (tests, benchmarks, the sync
path); ``in_turns`` gives the loop a turn after the first step that ends
``turn`` seconds or more after the last turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")
Steps = Generator[None, None, T]  # yields between steps, returns the result


def at_once(steps: Steps[T]) -> T:
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


async def in_turns(steps: Steps[T], turn: float = 0.001) -> T:
    paused = time.perf_counter()
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        if time.perf_counter() - paused >= turn:
            await asyncio.sleep(0)
            paused = time.perf_counter()
