"""What arrives at the fleet, as operators see load: open-loop arrivals at a rate, and a burst.

Open loop: items of the mix arrive as a seeded Poisson process, whatever the
fleet's state, so a fleet past saturation queues as a real one would. An agent
session is a chain: its next turn arrives when the previous answer has ended
and its tool has run (an exponential think time, ``THINK_SECONDS``); a
ShareGPT conversation the same, a person's reply taking longer. The rate
counts every request, turns included.

Every request that arrives within the measurement window is measured. Arrivals
begin a warm-up before it, so that the window sees the fleet in its steady
state, and go on a while after it, so that the window's last requests are not
served by an emptying fleet; then the fleet drains.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from draftgate.evaluate.requests import Bank, Prepared
from draftgate.evaluate.simulation import Simulation
from draftgate.workloads.mix import Item

# Mean seconds between an answer and the turn it sets off: an agent's tool call runs, a person reads and replies.
THINK_SECONDS = {"agent_session": 1.0, "conversation": 5.0}


@dataclass(frozen=True)
class Schedule:
    """When a run measures: ``warmup`` seconds of arrivals before the window, ``window`` seconds
    measured, ``cooldown`` seconds of arrivals after it."""

    warmup: float
    window: float
    cooldown: float

    @property
    def measured(self) -> tuple[float, float]:
        return self.warmup, self.warmup + self.window

    @property
    def arrivals_end(self) -> float:
        return self.warmup + self.window + self.cooldown


class OpenLoop:
    """Items from ``items`` arriving at ``rate`` requests a second (``per_item`` requests an item)."""

    def __init__(self, items: Iterator[Item], bank: Bank, rate: float, per_item: float, schedule: Schedule,
                 seed: int) -> None:
        self.items = items
        self.bank = bank
        self.item_rate = rate / per_item
        self.schedule = schedule
        self.arrivals = random.Random(seed)
        self.thinking = random.Random(seed + 1)
        self.outstanding = 0  # measured requests not yet over
        self.arriving = True

    def start(self, sim: Simulation) -> None:
        sim.at(self.arrivals.expovariate(self.item_rate), self._arrive, sim)

    def done(self, sim: Simulation) -> bool:
        return not self.arriving and self.outstanding == 0

    def _arrive(self, sim: Simulation) -> None:
        if sim.now > self.schedule.arrivals_end:
            self.arriving = False
            return
        item = next(self.items)
        self._turn(sim, item, self.bank.requests_of(item), 0, sim.new_salt())
        sim.at(sim.now + self.arrivals.expovariate(self.item_rate), self._arrive, sim)

    def _turn(self, sim: Simulation, item: Item, requests: list[Prepared], turn: int, salt: str) -> None:
        start, end = self.schedule.measured
        measured = start <= sim.now < end
        self.outstanding += measured

        def then(ended: float) -> None:
            self.outstanding -= measured
            if turn + 1 < len(requests):
                think = self.thinking.expovariate(1.0 / THINK_SECONDS.get(item.workload, 1.0))
                sim.at(ended + think, lambda _: self._turn(sim, item, requests, turn + 1, salt))

        sim.send(requests[turn], measured, salt, then)


class Burst:
    """``items``' last requests all at once, at time 0: a burst beyond what the fleet holds."""

    def __init__(self, items: list[Item], bank: Bank) -> None:
        self.items = items
        self.bank = bank
        self.outstanding = 0

    def start(self, sim: Simulation) -> None:
        for item in self.items:
            self.outstanding += 1
            sim.send(self.bank.requests_of(item)[-1], True, then=self._over)

    def _over(self, ended: float) -> None:
        self.outstanding -= 1

    def done(self, sim: Simulation) -> bool:
        return self.outstanding == 0


class ClosedLoop:
    """``concurrency`` clients, each sending the next of ``requests`` when its last is answered."""

    def __init__(self, requests: list[Prepared], concurrency: int) -> None:
        self.pending = list(reversed(requests))
        self.concurrency = concurrency
        self.outstanding = 0

    def start(self, sim: Simulation) -> None:
        for _ in range(min(self.concurrency, len(self.pending))):
            self._next(sim)

    def done(self, sim: Simulation) -> bool:
        return not self.pending and self.outstanding == 0

    def _next(self, sim: Simulation) -> None:
        if self.pending:
            self.outstanding += 1
            sim.send(self.pending.pop(), True, then=lambda _: self._answered(sim))

    def _answered(self, sim: Simulation) -> None:
        self.outstanding -= 1
        self._next(sim)
