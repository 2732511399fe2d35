"""What a fleet gets at an arrival rate, and its capacity: the highest rate at which the run keeps the
latency targets (``attainment``), found by search over the rate (as Vidur-Search finds it).

A rate's figures come from one simulated run of the fleet from empty: seeded
Poisson arrivals of the mix, a warm-up as long as a long answer takes at the
targets, a measurement window sized to hold ``requests`` arrivals, as long a
cool-down, then the drain (``traffic.Schedule``).
Every strategy of a seed replays the same arrivals at a rate. The search
measures a grid of rates first (the figures every strategy reports), then,
for a fleet still within the targets at the grid's heaviest rate, that rate
doubled (``BEYOND_GRID`` times at most), then halves the bracket where
attainment crosses the threshold, and interpolates within the last bracket.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from draftgate.evaluate.simulation import Run, Served
from draftgate.evaluate.traffic import Schedule
from draftgate.policy.plan import Targets, within_targets

ATTAINMENT = 0.99  # share of requests (TTFT) and of output tokens (TPOT) that must keep the targets at capacity
LONGEST_WINDOW_SECONDS = 150.0  # at light load a window holds fewer requests: nearly all meet the targets
# a long answer's output tokens (about the built-in mix's 90th percentile): how long the runs' margins are
STEADY_TOKENS = 400
MARGIN_LIMIT_SECONDS = 150.0
# attainment below which the heavier rates of a search's grid are not run: a heavier load does not climb back
# from it to ``ATTAINMENT``, and runs far past saturation cost the most (their batches are the largest)
FAR_PAST = 0.9
# doublings of the heaviest rate a search tries while a fleet still meets the targets there
BEYOND_GRID = 2
DRAIN_LIMIT_SECONDS = 120.0  # a fleet far past saturation is cut off; what it has not answered missed the targets


def schedule_for(rate: float, requests: int, targets: Targets, longest: float = LONGEST_WINDOW_SECONDS) -> Schedule:
    """A run of ``requests`` measured arrivals at ``rate`` (its window at most ``longest`` seconds), with a
    warm-up before the window and as long a cool-down after it (``margin_for``)."""
    margin = margin_for(rate, targets)
    return Schedule(margin, min(requests / rate, longest), margin)


def margin_for(rate: float, targets: Targets) -> float:
    """Seconds of arrivals before the window and after it, so that the window sees the fleet in its
    steady state and its requests finish under the same load.

    A fleet with room in its batch (vLLM's max_num_seqs is 1,024) answers too much traffic by
    batching more, not by queueing: the batch grows as requests arrive faster than they finish, and
    each step slows. It settles only once the requests in flight are as old as a request lasts, and a
    long answer lasts ``STEADY_TOKENS`` times the step time the targets allow: 20 s under a 50 ms TPOT
    target, 120 s under 300 ms. A shorter run measures the batch still growing, and passes a rate the
    fleet cannot keep up with. At light load a few hundred arrivals are the floor."""
    return min(MARGIN_LIMIT_SECONDS, max(8.0, min(15.0, 300.0 / rate), STEADY_TOKENS * targets.tpot))


@dataclass(frozen=True)
class Point:
    """What a fleet gets at one arrival rate (``rps``, over the fleet)."""

    rps: float
    requests: int
    attainment: float  # the window's share within the targets (``attainment``)
    ttft_p50: float
    ttft_p99: float
    tpot_p50: float
    tpot_p99: float
    e2e_p99: float
    busy_gpu_seconds_per_token: float
    provisioned_gpu_seconds_per_token: float


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (``inf`` for a request never answered)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def attainment(measured: list[Served], targets: Targets) -> float:
    """The run's share within the targets (``within_targets``); a request not answered missed both."""
    inf = math.inf
    return within_targets([(s.ttft, s.tpot, s.tokens) if s.finished else (inf, inf, s.tokens) for s in measured],
                          targets)


def point(run: Run, rps: float, targets: Targets) -> Point:
    measured = [s for s in run.served if s.measured]
    window = run.window
    tokens = max(1, window.tokens)
    return Point(
        rps=rps,
        requests=len(measured),
        attainment=attainment(measured, targets),
        ttft_p50=percentile([s.ttft for s in measured], 0.5),
        ttft_p99=percentile([s.ttft for s in measured], 0.99),
        tpot_p50=percentile([_tpot(s) for s in measured], 0.5),
        tpot_p99=percentile([_tpot(s) for s in measured], 0.99),
        e2e_p99=percentile([s.e2e for s in measured], 0.99),
        busy_gpu_seconds_per_token=window.busy_seconds / tokens,
        provisioned_gpu_seconds_per_token=run.gpus * (window.end - window.start) / tokens,
    )


def not_run(rps: float) -> Point:
    """A rate not run, past one the fleet was far from carrying: it counts as missing the targets, with
    no latencies and no cost."""
    nothing = math.nan
    return Point(rps, 0, 0.0, nothing, nothing, nothing, nothing, nothing, nothing, nothing)


def _tpot(served: Served) -> float:
    return served.tpot if served.finished else math.inf


@dataclass(frozen=True)
class Capacity:
    rate: float  # in the units of the grid searched; 0 when even the lightest rate misses
    points: tuple[Point, ...]  # every rate measured, in rate order
    bounded: bool  # False: the heaviest rate tried still met the targets

    def at(self, rps: float) -> Point:
        """The point measured at ``rps`` (over the fleet)."""
        return next(p for p in self.points if math.isclose(p.rps, rps))


def search(measure: Callable[[float], Point], grid: list[float], steps: int = 3,
           threshold: float = ATTAINMENT, beyond: int = 0) -> Capacity:
    """The highest rate whose attainment reaches ``threshold``: ``measure`` at every rate of ``grid``
    (ascending), then at up to ``beyond`` doublings of its heaviest rate while that still reaches it,
    then ``steps`` halvings of the bracket where attainment falls below it, then linear interpolation
    within the last bracket. A fleet that meets the targets at every rate tried gets the heaviest as a
    floor (``bounded`` False); the doublings make that rarer, where a capacity is a figure worth having
    (relaxed targets, light traffic), at the cost of a run or two at loads no other fleet reaches.

    A rate of the grid heavier than one whose attainment fell below ``FAR_PAST`` is not run
    (``not_run``): past saturation every fleet misses, and its runs cost the most.

    Attainment falls with the rate, but a run's is a sample, and a dip at one rate below a pass at the
    next is noise: the grid's bracket and the last interpolation are taken on the measurements made
    monotone (``_falling``), so one unlucky run does not set the capacity."""
    points: dict[float, Point] = {}
    for rate in sorted(grid):
        last = max(points, default=None)
        if last is not None and points[last].attainment < FAR_PAST:
            points[rate] = not_run(rate * points[last].rps / last)  # in the units ``measure`` reports rates in
        else:
            points[rate] = measure(rate)
    for _ in range(beyond):
        if _bracket(points, threshold)[1] is not None:
            break
        heavier = 2 * max(points)
        points[heavier] = measure(heavier)
    low, high = _bracket(points, threshold)
    if high is None:
        return Capacity(max(points), tuple(points[r] for r in sorted(points)), False)
    if low is None:
        return Capacity(0.0, tuple(points[r] for r in sorted(points)), True)
    for _ in range(steps):
        middle = (low + high) / 2
        points[middle] = measure(middle)
        low, high = (middle, high) if points[middle].attainment >= threshold else (low, middle)
    fitted = _falling(points)
    a_low, a_high = fitted[low], fitted[high]
    share = (a_low - threshold) / (a_low - a_high) if a_low > a_high else 0.0
    return Capacity(low + (high - low) * min(1.0, max(0.0, share)), tuple(points[r] for r in sorted(points)), True)


def _falling(points: dict[float, Point]) -> dict[float, float]:
    """Attainment by rate made non-increasing (pool adjacent violators, weighted by requests)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    rates = sorted(points)
    for rate in rates:
        blocks.append([points[rate].attainment, float(max(1, points[rate].requests)), 1.0])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            (m1, w1, n1), (m2, w2, n2) = blocks[-2], blocks[-1]
            blocks[-2:] = [[(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2]]
    fitted: list[float] = []
    for mean, _, count in blocks:
        fitted += [mean] * int(count)
    return dict(zip(rates, fitted))


def _bracket(points: dict[float, Point], threshold: float) -> tuple[float | None, float | None]:
    """(the highest rate whose fitted attainment reaches ``threshold``, the next rate above it); None
    for a side where there is none."""
    fitted = _falling(points)
    rates = sorted(fitted)
    passing = [r for r in rates if fitted[r] >= threshold]
    low = passing[-1] if passing else None
    high = next((r for r in rates if fitted[r] < threshold and (low is None or r > low)), None)
    return low, high
