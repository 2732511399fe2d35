"""How much memory a piece of work leaves behind, for tests of bounded state."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable


def bytes_kept(work: Callable[[], object]) -> int:
    """The bytes Python still holds once ``work`` has run that it did not hold before."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
