"""What the plan predicted for each running pool, beside what the pool did, and the correction that follows.

At each plan the model predicts, for every pool of the running fleet at the
traffic's rate, the median and the targets' percentile of time per output
token and of time to first token, and its share within the targets
(``within_targets``). Until the next plan the proxy times every streamed
answer of every pool. Then the two are set side by side (``settle``), and
the model is corrected where it was wrong: a pool whose median time per
token came out slower or faster than predicted has its step time scaled by
their ratio, moved ``SMOOTHING`` of the way at each plan so that one odd
window does not swing it. The medians, not the tails, set the correction: a
few hundred answers place a median well, and a tail hardly at all.

The plan's **observed error** is how far its last predictions were from what
the pools did (the largest relative miss of a median, over the pools timed
enough). The proxy moves a kind of request to another pool only for a
predicted gain larger than that: a plan that is 20% off has no business
moving traffic for 5%.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from draftgate.policy.plan.model import Targets, within_targets

SMOOTHING = 0.7  # of the way to the observed ratio, at each plan
LEAST_ANSWERS = 20  # a pool answered fewer since the last plan is not compared
KEPT = 5000  # answers kept per pool between plans, the latest
SCALE_BOUNDS = (0.25, 4.0)  # a model further off than this is wrong for another reason than its speed


@dataclass(frozen=True)
class Latencies:
    """A pool's latencies in seconds: the median and the targets' percentile of each, and its share
    within the targets (``within_targets``)."""

    tpot_median: float
    tpot_tail: float
    ttft_median: float
    ttft_tail: float
    within: float


class PlanFeedback:
    """Per pool: the last plan's prediction, the answers timed since, the step scale they set."""

    def __init__(self) -> None:
        self._answers: dict[str, deque[tuple[float, float, int]]] = {}
        self.predicted: dict[str, Latencies] = {}
        self.observed: dict[str, Latencies] = {}
        self.scales: dict[str, float] = {}
        self._predicted_with: dict[str, float] = {}  # the scale each prediction was made with
        self.error = 0.0  # the last settled plan's, relatively

    def answered(self, pool: str, ttft: float, tpot: float, tokens: int) -> None:
        """A streamed answer of ``pool``: its time to first token, its time per output token and its
        output tokens."""
        self._answers.setdefault(pool, deque(maxlen=KEPT)).append((ttft, tpot, tokens))

    def step_scale(self, pool: str) -> float:
        """``pool``'s correction; a pool not yet timed takes the timed pools' (their geometric mean): the
        pools share the hardware, and a calibration off for one is likely off for the rest alike, so an
        untimed pool must not look faster merely for not having been timed."""
        if pool in self.scales:
            return self.scales[pool]
        if not self.scales:
            return 1.0
        return math.exp(sum(math.log(s) for s in self.scales.values()) / len(self.scales))

    def settle(self, targets: Targets) -> dict[str, Latencies]:
        """What each pool did since the last plan, set beside what that plan predicted: the step scales
        and the observed error are corrected from it, and the answers cleared. Returns what was observed."""
        observed: dict[str, Latencies] = {}
        errors: list[float] = []
        for pool, answers in self._answers.items():
            if len(answers) < LEAST_ANSWERS:
                continue
            observed[pool] = seen = _latencies(list(answers), targets)
            predicted = self.predicted.get(pool)
            if predicted is None or not (0 < predicted.tpot_median < math.inf):
                continue
            ratio = seen.tpot_median / predicted.tpot_median
            errors.append(abs(ratio - 1.0))
            low, high = SCALE_BOUNDS
            scale = self._predicted_with.get(pool, 1.0) * ratio ** SMOOTHING
            self.scales[pool] = min(high, max(low, scale))
        if errors:
            self.error = max(errors)
        self.observed = observed
        self._answers = {}
        return observed

    def predict(self, predicted: dict[str, Latencies]) -> None:
        """The new plan's predictions (made with ``step_scale``), to be set beside the answers that come
        until the next."""
        self.predicted = dict(predicted)
        self._predicted_with = {pool: self.step_scale(pool) for pool in predicted}

    def keep_only(self, pools: set[str]) -> None:
        """Forget pools that are gone from the configuration."""
        for table in (self._answers, self.predicted, self.observed, self.scales, self._predicted_with):
            for pool in [p for p in table if p not in pools]:
                del table[pool]


def _latencies(answers: list[tuple[float, float, int]], targets: Targets) -> Latencies:
    """TTFT's quantiles over the answers; TPOT's over their output tokens after the first, as the model
    predicts them and ``within_targets`` counts them."""
    ttfts = [(t, 1) for t, _, _ in answers]
    tpots = [(p, max(1, n - 1)) for _, p, n in answers]
    return Latencies(_quantile(tpots, 0.5), _quantile(tpots, targets.attainment), _quantile(ttfts, 0.5),
                     _quantile(ttfts, targets.attainment), within_targets(answers, targets))


def _quantile(weighted: list[tuple[float, int]], q: float) -> float:
    """The nearest-rank quantile of the values, each counted ``weight`` times."""
    ordered = sorted(weighted)
    rank = max(1, math.ceil(q * sum(w for _, w in ordered)))
    seen = 0
    for value, weight in ordered:
        seen += weight
        if seen >= rank:
            return value
    return ordered[-1][0]
