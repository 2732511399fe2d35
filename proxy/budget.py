"""A retry budget, so a dead pool cannot double the load on the live one.

Each request deposits ``ratio`` of a retry; a steady floor of retries per
second is always allowed. A failover spends one. Over any stretch, retries stay
below ``ratio`` of requests plus the floor.
"""

from __future__ import annotations

import time


class RetryBudget:
    def __init__(self, ratio: float, floor_per_second: float, clock=time.monotonic) -> None:
        self.ratio = ratio
        self.floor = floor_per_second
        self.clock = clock
        self.cap = max(10.0, ratio * 100.0)
        self.balance = min(self.cap, floor_per_second)
        self.last = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.balance = min(self.cap, self.balance + (now - self.last) * self.floor)
        self.last = now

    def deposit(self) -> None:
        self._refill()
        self.balance = min(self.cap, self.balance + self.ratio)

    def withdraw(self) -> bool:
        self._refill()
        if self.balance >= 1.0:
            self.balance -= 1.0
            return True
        return False
