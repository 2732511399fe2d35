"""The plan's most promising fleets tried in simulation before the gate commits to one.

The plan's queueing model (``policy/fleet.py``) weighs every composition in
milliseconds, but it is a model: where batches grow past what calibration
measured it extrapolates, and it ranks fleets that differ by a few percent
no better than it predicts them. So, as Vidur-Search does, the verdict's gate
takes a shortlist from it (the best fleet of each configuration that comes
near the best, and the best splits) and runs each in the same simulation the
verdict uses: the calibration split of the traffic, on the engine profile
calibration fitted (``calibrate.hardware_fit``). The plan knows the pools only
from what calibration measured; the seed's own profile is never read.

The trial has its own error: the calibration split is a sample, and where a
few of its requests decide a p99 every configuration can come out alike. So
the model's best single fleet stands unless another single fleet served more
than it in the trial by more than ``MARGIN``, or by more than the model's own
lead over it where that is smaller: a model that puts two fleets within a
percent of each other has not ranked them, and the trial's ranking is the
better one. On the verdict's agent traffic the model puts plain, ngram and
EAGLE-3 everywhere at the same capacity, all three held by its TTFT tail
(the queue for prefilling long prompts, which speculation does not shorten),
where the trial measures EAGLE-3 30% ahead (8 GPUs, seed 2: 4.92 a GPU
against 3.81 and 3.35); a tie broken the other way by a rounding must not
need 10% more to be undone. A split, which puts some kinds of request on a
few GPUs and so hangs more on those few requests, must do more: the model
must put it above its best single fleet, and the trial must find it ahead
of the best single fleet by more than ``MARGIN``. Where the two disagree the
single fleet stands: at 4 GPUs, two seeds' trials found a split 22% and 47%
ahead that the model ranked below EAGLE-3 everywhere, and the verdict
measured it 5% and 28% behind.

A fleet that displaces the model's best single fleet has won one noisy
comparison, so it must win it again on ``CONFIRM_SHARE`` times the requests,
against the fleet it displaces; otherwise the model's stands. On 4 GPUs under
interactive targets with chat-heavy traffic, one seed's trial measured EAGLE-3
everywhere at 7.1 requests a second and a draft model at dynamic K at 8.4; on
four times the requests they measured 12.7 and 7.9, and the verdict found the
draft model serving half what EAGLE-3 served. The plan's prediction for the
fleet it recommends is what its last trial measured.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from draftgate.evaluate.capacity import Point, search
from draftgate.policy.plan import Composition, Recommendation

NEAR_BEST = 0.6  # a configuration's best fleet is tried when the model puts it within this of the best
SINGLES_TRIED = 6  # at most, the model's best first
SPLITS_TRIED = 2  # the model's best splits tried beside the single configurations
SEARCH_FACTORS = (0.5, 0.7, 0.85, 1.0, 1.2)  # the trial's rate grid, in multiples of the model's capacity
WIDEN, WIDENINGS = 1.4, 6  # the grid grows by this factor where it did not bracket the capacity, so often at most
# a fleet must serve this much more than the model's best single fleet in its trial to replace it. It is
# about the trial's error against the verdict at 8 GPUs under interactive targets, where splits pay;
# elsewhere the error is larger (docs/plan.md), and a margin that large would rule out those splits too
MARGIN = 0.10
CONFIRM_SHARE = 4  # a displacement is tried again on this many times the trial's requests


@dataclass(frozen=True)
class Tried:
    composition: Composition  # its capacity the model's
    capacity: float  # requests a second over the fleet, as the trial measured


@dataclass(frozen=True)
class Choice:
    """The fleet the gate runs, with the trial's measurement of it as its ``capacity``."""

    best: Composition
    best_split: Composition | None  # likewise, the best split tried (None: none was)
    tried: tuple[Tried, ...]


def shortlist(recommendation: Recommendation) -> list[Composition]:
    """The compositions worth a trial: for each configuration its best single fleet, when the model puts
    it within ``NEAR_BEST`` of the best single fleet (``SINGLES_TRIED`` at most); and the
    ``SPLITS_TRIED`` best splits."""
    homogeneous: dict[str, Composition] = {}
    splits: list[Composition] = []
    for option in recommendation.options:  # best first
        if option.homogeneous:
            homogeneous.setdefault(option.pools[0].candidate.name, option)
        elif len(splits) < SPLITS_TRIED:
            splits.append(option)
    top = max((c.capacity for c in homogeneous.values()), default=0.0)
    singles = [c for c in homogeneous.values() if c.capacity >= NEAR_BEST * top][:SINGLES_TRIED]
    return singles + splits


def choose(recommendation: Recommendation, capacity_of: Callable[[Composition], float],
           margin: float = MARGIN, confirm_of: Callable[[Composition], float] | None = None) -> Choice:
    """The shortlist tried with ``capacity_of`` (requests a second over the fleet). The best single
    fleet is the model's, unless another single fleet served more than it by more than the lead
    needed (``_lead_needed``: ``margin``, less where the model barely ranked the two). A split
    replaces it where the model puts the split above its own best single fleet and the split served
    more than the best single fleet by more than ``margin``: the one that served the most. Whatever
    replaces the model's best single fleet must then beat it by as much again in ``confirm_of`` (the
    same trial on more requests), or the model's stands."""
    tried = tuple(Tried(c, capacity_of(c)) for c in shortlist(recommendation))
    incumbent = tried[0]  # the shortlist puts the model's best single fleet first
    singles = [t for t in tried[1:] if t.composition.homogeneous
               and t.capacity > incumbent.capacity * (1.0 + _lead_needed(t.composition, incumbent, margin))]
    single = max(singles, key=lambda t: t.capacity, default=incumbent)
    splits = [t for t in tried if not t.composition.homogeneous]
    agreed = [t for t in splits if t.composition.capacity > incumbent.composition.capacity
              and t.capacity > single.capacity * (1.0 + margin)]
    chosen = max(agreed, key=lambda t: t.capacity, default=single)
    if chosen is not incumbent and confirm_of is not None:
        held = Tried(incumbent.composition, confirm_of(incumbent.composition))
        again = Tried(chosen.composition, confirm_of(chosen.composition))
        needed = _lead_needed(chosen.composition, incumbent, margin)
        chosen = again if again.capacity > held.capacity * (1.0 + needed) else held
    split = max(splits, key=lambda t: t.capacity, default=None)
    return Choice(_measured(chosen), None if split is None else _measured(split), tried)


def _lead_needed(challenger: Composition, incumbent: Tried, margin: float) -> float:
    """How much more than the model's best single fleet ``challenger`` must serve in a trial to replace
    it: ``margin``, or for a single fleet the model's own lead over it where that is smaller."""
    if not challenger.homogeneous or challenger.capacity <= 0:
        return margin
    return min(margin, max(0.0, incumbent.composition.capacity / challenger.capacity - 1.0))


def _measured(tried: Tried) -> Composition:
    return dataclasses.replace(tried.composition, capacity=tried.capacity)


def search_around(measure: Callable[[float], Point], modelled: float, steps: int = 1) -> float:
    """The capacity (requests a second over the fleet) by ``capacity.search`` on a grid around the
    model's ``modelled`` capacity, widened by ``WIDEN`` where the grid's heaviest rate still met the
    targets or its lightest did not (the model is off by more than the grid spans)."""
    if modelled <= 0 or not math.isfinite(modelled):
        return 0.0
    seen: dict[float, Point] = {}

    def once(rate: float) -> Point:
        if rate not in seen:
            seen[rate] = measure(rate)
        return seen[rate]

    grid = [modelled * f for f in SEARCH_FACTORS]
    for _ in range(WIDENINGS):
        found = search(once, grid, steps)
        if not found.bounded:
            grid.append(grid[-1] * WIDEN)
        elif found.rate <= 0:
            grid.insert(0, grid[0] / WIDEN)
        else:
            break
    return found.rate
