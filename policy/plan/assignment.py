"""Which pool serves each kind of request: the fleet's assignment, and how it spills under load.

Pure. An assignment gives, for each kind of request, the share of its requests
each pool takes. Its base comes from a plan (each kind whole to the pool the
plan gives it, ``fleet.best_assignment``, or from the configuration); between
plans it is adjusted only when a pool nears its limit. The load a pool
carries is worked out from the kinds' observed rates and what one of its GPUs
takes of each kind within the targets (``PoolRates.per_gpu``): ``u = sum over
kinds of rate x share / (gpus x capacity)``. While one pool would pass
``near_limit`` of what it takes, a share of the kind whose move costs least
(the most the other pool takes of it, for what this one gives up) moves to
the pool with the most room, until the two carry alike. Nothing moves while
every pool is within ``near_limit``.

A request of a kind goes to a pool of the kind's shares in turn (smooth
weighted round robin: spread evenly, the same sequence every time), among the
pools that can take it now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

NEAR_LIMIT = 0.9
_SPILL_ROUNDS = 32


@dataclass(frozen=True)
class PoolRates:
    """One pool of the fleet: its GPUs, and the rate one of them takes of each kind alone within the targets."""

    pool: str
    gpus: int
    per_gpu: Mapping[str, float]


@dataclass(frozen=True)
class Assignment:
    shares: Mapping[str, Mapping[str, float]]  # kind -> pool -> share of the kind's requests (they sum to 1)

    def of(self, kind: str) -> Mapping[str, float]:
        return self.shares.get(kind, {})

    @classmethod
    def whole(cls, pools_by_kind: Mapping[str, str]) -> Assignment:
        return cls({kind: {pool: 1.0} for kind, pool in pools_by_kind.items()})


def load(shares: Mapping[str, Mapping[str, float]], rates: Mapping[str, float],
         capacities: Sequence[PoolRates]) -> dict[str, float]:
    """Each pool's share of what it can take within the targets (1: at its limit)."""
    out = {}
    for c in capacities:
        used = 0.0
        for kind, by_pool in shares.items():
            share = by_pool.get(c.pool, 0.0)
            if share > 0 and rates.get(kind, 0.0) > 0:
                per_gpu = c.per_gpu.get(kind, 0.0)
                used += float("inf") if per_gpu <= 0 else rates[kind] * share / (c.gpus * per_gpu)
        out[c.pool] = used
    return out


def spill(base: Assignment, rates: Mapping[str, float], capacities: Sequence[PoolRates],
          near_limit: float = NEAR_LIMIT) -> Assignment:
    """``base`` as the kinds' ``rates`` need it: shares moved off any pool past ``near_limit`` of its limit."""
    shares = {kind: dict(by_pool) for kind, by_pool in base.shares.items()}
    by_name = {c.pool: c for c in capacities}
    for _ in range(_SPILL_ROUNDS):
        used = load(shares, rates, capacities)
        if not used:
            break
        busiest = max(used, key=lambda p: (used[p], p))
        if used[busiest] <= near_limit:
            break
        move = _cheapest_move(shares, rates, by_name, used, busiest)
        if move is None:
            break
        kind, to, amount = move
        shares[kind][busiest] -= amount
        shares[kind][to] = shares[kind].get(to, 0.0) + amount
        if shares[kind][busiest] <= 1e-9:
            del shares[kind][busiest]
    return Assignment(shares)


def _cheapest_move(shares: dict[str, dict[str, float]], rates: Mapping[str, float], pools: Mapping[str, PoolRates],
                   used: Mapping[str, float], busiest: str) -> tuple[str, str, float] | None:
    """(kind, pool, share) moving load off ``busiest`` where the other pool takes most of it for what this
    one gives up, as much as evens the two out."""
    source = pools[busiest]
    best: tuple[float, str, str, float] | None = None
    for kind, by_pool in sorted(shares.items()):
        share, rate = by_pool.get(busiest, 0.0), rates.get(kind, 0.0)
        here = source.per_gpu.get(kind, 0.0)
        if share <= 0 or rate <= 0 or here <= 0:
            continue
        for name, target in sorted(pools.items()):
            there = target.per_gpu.get(kind, 0.0)
            if name == busiest or there <= 0 or used[name] >= used[busiest]:
                continue
            # load per request a second: off the source, onto the target
            off, on = 1.0 / (source.gpus * here), 1.0 / (target.gpus * there)
            moved = min(share * rate, (used[busiest] - used[name]) / (off + on))
            if moved <= 1e-9:
                continue
            value = off / on
            if best is None or value > best[0]:
                best = (value, kind, name, moved / rate)
    return None if best is None else (best[1], best[2], best[3])


@dataclass
class Turns:
    """Whose turn it is, per kind: smooth weighted round robin over the kind's shares."""

    credit: dict[str, dict[str, float]] = field(default_factory=dict)

    def next(self, kind: str, shares: Mapping[str, float], open_pools: set[str]) -> str | None:
        """The pool of ``shares`` (among ``open_pools``) next in turn for ``kind``; None when none is open."""
        weights = {p: w for p, w in shares.items() if w > 0 and p in open_pools}
        if not weights:
            return None
        credit = self.credit.setdefault(kind, {})
        total = sum(weights.values())
        for pool, weight in weights.items():
            credit[pool] = credit.get(pool, 0.0) + weight
        chosen = max(sorted(weights), key=lambda p: credit[p])
        credit[chosen] -= total
        return chosen
