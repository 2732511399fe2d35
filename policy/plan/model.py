"""The plan's model: what a fleet of pools carries within the latency targets, and at what cost.

Pure: traffic, calibration and a composition in, its capacity and cost out. A composition
is a set of pools, each a candidate configuration (plain, a draft model at a
depth, an EAGLE-3 head, ngram at its lookup bounds, a dynamic-K table ...) on
some GPUs, and an assignment of every kind of request to one pool. Its
**capacity** is the highest arrival rate at which the targets hold at the
percentile they are meant at; its **cost** is the busy GPU-seconds per output
token at the traffic's rate.

Each pool's GPUs share its traffic evenly, so a pool is worked out on one of
its GPUs (``gpu_load``) taking the rate its share of the traffic brings it.
Each kind keeps a sample of its requests (output tokens, prompt tokens to
prefill): a stall hurts short answers, and long prompts make the stalls, so
means are not enough. On one GPU, at ``lambda`` requests a second:

- **Prefill** takes ``rho = lambda x E[uncached prompt] x seconds per token`` of
  its time, in chunks of ``max_num_batched_tokens``. A chunk holds every
  decoding request on the GPU for its step, and the prefills that come
  meanwhile queue behind it: stalls come in episodes (an M/G/1 busy period,
  ``1 / (1 - rho)`` times the chunk that starts it).
- **Decode**: a request runs ``steps = tokens x rounds per token`` steps (fewer,
  dearer ones when speculating: ``law.rounds_per_token`` at the taus the gate
  predicts for the candidate). By Little's law the batch is ``b = lambda x
  E[steps] x R(b) / (1 - rho)``, ``R(b)`` the step time the calibration gives
  at ``b`` (``c_T(b)``, times the round cost when speculating).
- **Time per output token** of a request is its own steps, slowed by the
  episodes no longer than the time it has to spare; it misses its target when
  a longer one falls within its decode, or within its wait and prefill (those
  arriving meanwhile queue behind it and run during its first steps): a
  Poisson event. Its percentile over the traffic is solved from the sampled
  requests' mixture. Arrivals reach a GPU a request runs on less often the
  more GPUs its pool has (``_joins``): the balancer sends each to the least
  loaded, and that GPU holds the request besides its share.
- **Time to first token** is the wait behind the prefills queued before it
  (M/G/1: none with probability ``1 - rho``, else exponential with the queue's
  mean), its own prefill with a step for each chunk, and a step.

Pools are independent, so a composition's capacity is the lowest, over its
pools, of the rate at which the pool's share of the traffic reaches its own
capacity: ``gpus x capacity of one of its GPUs / share``.

It is a model, and says what it assumes: arrivals Poisson and spread over a
pool's GPUs by load alone (conversations kept on their replica are not); the
queue for prefill that of one GPU; every GPU's batch no more than
``max_num_seqs`` (past it a pool cannot carry the traffic); the calibration's
curves at loads past what it measured extrapolated.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from draftgate.policy import copying, law
from draftgate.policy.calibration import Calibration
from draftgate.policy.gate import PoolView, depth_at, drafted_per_round, predicted_taus, step_seconds


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of request as observed: its share of requests and what its requests ask of a pool.

    ``requests``: (output tokens, uncached prompt tokens) of requests of the kind seen, a sample of
    them: a stall hurts short answers, and long prompts make the stalls, so means are not enough."""

    name: str
    share: float
    requests: tuple[tuple[float, float], ...]
    mix: law.ClassMix
    temperature: float = 0.0
    copyable: copying.CopySources = copying.CopySources()

    @property
    def output_tokens(self) -> float:
        return sum(o for o, _ in self.requests) / len(self.requests)

    @property
    def prefill_tokens(self) -> float:
        return sum(p for _, p in self.requests) / len(self.requests)


@dataclass(frozen=True, slots=True)
class Traffic:
    requests_per_second: float
    kinds: tuple[Kind, ...]

    def kind(self, name: str) -> Kind:
        return next(k for k in self.kinds if k.name == name)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A pool configuration the plan may use, as the pool's vLLM would be started."""

    name: str
    method: str | None = None  # None: speculation off
    gamma: int = 0
    lookup: tuple[int, int] = copying.DEFAULT_LOOKUP
    dynamic: tuple[tuple[int, int, int], ...] = ()  # num_speculative_tokens_per_batch_size
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    draft_prefill_ratio: float = 0.0  # a draft model prefills the prompt too
    draft_cost: float | None = None  # the drafter's cost d as the pool is configured (None: calibration's)
    # the running pool's steps, observed over what the calibration predicts (``feedback``): 1 until the
    # proxy has timed the pool against a plan
    step_scale: float = 1.0

    @property
    def speculative(self) -> bool:
        return self.method is not None and self.gamma > 0

    def depth_at(self, batch: float) -> int:
        return depth_at(self.dynamic, batch, self.gamma)

    def view(self, running: float) -> PoolView:
        """The gate's view of one of its GPUs with ``running`` requests."""
        depth = self.depth_at(running) if self.method is not None else 0
        return PoolView(self.name, self.method if depth > 0 else None, gamma=depth, draft_cost=self.draft_cost,
                        running=running, max_num_seqs=self.max_num_seqs, lookup=self.lookup,
                        draft_prefill_ratio=self.draft_prefill_ratio)


@dataclass(frozen=True, slots=True)
class Targets:
    """Latency targets in seconds, held at ``attainment`` (the percentile they are meant at): of requests
    for time to first token, of output tokens for time per output token (``within_targets``)."""

    ttft: float | None = 2.0
    tpot: float | None = 0.050
    attainment: float = 0.99


def within_targets(answers: Sequence[tuple[float, float, int]], targets: Targets) -> float:
    """How much of a set of answers, each (time to first token, time per output token, output tokens;
    ``inf`` for what never came), kept the targets: of the answers, the share whose first token came
    within the TTFT target; of their output tokens after each first, the share streamed by an answer
    whose time per output token kept the TPOT target; the smaller of the two.

    TPOT is a pace, and an answer's is the mean of its gaps between tokens. Counted per answer, a
    three-token tool call whose two gaps straddle one long chunked prefill misses it as a whole, as a
    thousand-token answer slowed throughout does: agent traffic, long prompts and short answers, then
    misses about 1% of its answers at any load, and whether a run reaches 99% is a matter of a few such
    coincidences. Counted per token, a stall weighs what it delays."""
    if not answers:
        return 0.0
    answered = sum(targets.ttft is None or ttft <= targets.ttft for ttft, _, _ in answers) / len(answers)
    if targets.tpot is None:
        return answered
    weights = [max(1, tokens - 1) for _, _, tokens in answers]
    paced = sum(w for w, (_, tpot, _) in zip(weights, answers) if tpot <= targets.tpot)
    return min(answered, paced / sum(weights))


@dataclass(frozen=True, slots=True)
class GpuLoad:
    """The predicted steady state of one GPU of a pool."""

    rate: float  # requests a second
    batch: float  # requests decoding at once
    prefill_share: float  # of its time, spent prefilling
    step_seconds: float  # a decode step at that batch
    tpot: float  # time per output token at the targets' percentile
    ttft: float  # time to first token at the targets' percentile
    busy: float  # share of the time a step runs
    tokens_per_second: float
    feasible: bool  # holds the traffic at all (prefill below the GPU's time, the batch within max_num_seqs)
    tpot_median: float = math.inf  # the median request's time per output token
    within: float = 0.0  # its share within the targets, as ``within_targets`` counts it (``gpu_load`` sets it)

    def meets(self, targets: Targets) -> bool:
        return self.feasible and (targets.tpot is None or self.tpot <= targets.tpot) and (
            targets.ttft is None or self.ttft <= targets.ttft)


@dataclass(frozen=True, slots=True)
class PoolPlan:
    candidate: Candidate
    gpus: int
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class Composition:
    pools: tuple[PoolPlan, ...]
    capacity: float  # requests a second over the fleet within the targets
    cost_per_token: float  # busy GPU-seconds per output token at the traffic's rate (inf: not carried there)
    loads: tuple[GpuLoad | None, ...] = field(default=(), compare=False)  # each pool's GPU at the traffic's rate

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    @property
    def homogeneous(self) -> bool:
        return len(self.pools) == 1

    @property
    def name(self) -> str:
        if self.homogeneous:
            return f"all {self.pools[0].candidate.name}"
        return " + ".join(f"{p.gpus} {p.candidate.name} ({', '.join(p.kinds)})" for p in self.pools)

    def assignment(self) -> dict[str, str]:
        """Kind -> the pool (candidate name) that serves it."""
        return {kind: p.candidate.name for p in self.pools for kind in p.kinds}


# ---------------------------------------------------------------- one GPU

@dataclass(frozen=True)
class _Pool:
    """A GPU's traffic as arrays over the kinds' sampled requests, each weighted by its share."""

    weight: np.ndarray  # of each sampled request among the pool's requests
    output: np.ndarray
    prefill: np.ndarray
    kind: np.ndarray  # index into ``kinds``
    kinds: tuple[Kind, ...]

    @classmethod
    def of(cls, kinds: Sequence[Kind]) -> _Pool:
        total = sum(k.share for k in kinds)
        weight, output, prefill, index = [], [], [], []
        for i, kind in enumerate(kinds):
            for out, pre in kind.requests:
                weight.append(kind.share / total / len(kind.requests))
                output.append(out)
                prefill.append(pre)
                index.append(i)
        return cls(np.array(weight), np.array(output, dtype=float), np.array(prefill, dtype=float),
                   np.array(index), tuple(kinds))


def _rounds(pool: _Pool, candidate: Candidate, calibration: Calibration, depth: int) -> tuple[np.ndarray, float]:
    """Steps per output token of each sampled request at ``depth``, and the draft tokens a round verifies
    on average over the pool's rounds (0 when plain)."""
    if depth <= 0 or candidate.method is None:
        return np.ones(len(pool.weight)), 0.0
    view = PoolView(candidate.name, candidate.method, gamma=depth, lookup=candidate.lookup)
    per_kind, drafted_per_kind = [], []
    for kind in pool.kinds:
        taus = predicted_taus(calibration, view, kind.temperature, kind.copyable)
        per_kind.append(law.rounds_per_token(kind.mix, taus))
        drafted_per_kind.append(drafted_per_round(calibration, view, taus, kind.mix))
    rounds = np.array(per_kind)[pool.kind]
    steps = pool.weight * pool.output * rounds
    drafted = float((steps * np.array(drafted_per_kind)[pool.kind]).sum() / steps.sum()) if steps.sum() > 0 else 0.0
    return rounds, drafted


def _step(calibration: Calibration, candidate: Candidate, depth: int, batch: float, drafted: float) -> float:
    """A step of ``batch`` sequences at ``depth``, priced as the gate prices it (``gate.step_seconds``),
    scaled by what the running pool's answers showed (``step_scale``)."""
    view = PoolView(candidate.name, candidate.method if depth > 0 else None, gamma=depth,
                    draft_cost=candidate.draft_cost)
    return step_seconds(calibration, view, batch, drafted if depth > 0 else None) * candidate.step_scale


def gpu_load(kinds: Sequence[Kind], candidate: Candidate, calibration: Calibration, rate: float,
             targets: Targets, pool: _Pool | None = None, gpus: int = 1) -> GpuLoad:
    """One of ``gpus`` GPUs of ``candidate`` taking ``rate`` requests a second of ``kinds`` (in their shares)."""
    load, tails = _steady(pool or _Pool.of(kinds), candidate, calibration, rate, gpus)
    if tails is None:
        return load
    miss = 1.0 - targets.attainment
    missed = max(tails.tpot(targets.tpot) if targets.tpot is not None else 0.0,
                 tails.ttft(targets.ttft) if targets.ttft is not None else 0.0)  # as ``within_targets`` counts
    return dataclasses.replace(load, tpot=_solve_quantile(tails.tpot, miss, 5.0),
                               ttft=_solve_quantile(tails.ttft, miss, 120.0),
                               tpot_median=_solve_quantile(tails.tpot, 0.5, 5.0), within=max(0.0, 1.0 - missed))


@dataclass(frozen=True)
class _Tails:
    """The share of a GPU's requests whose time per output token, and time to first token, pass ``t``."""

    tpot: Callable[[float], float]
    ttft: Callable[[float], float]

    def meet(self, targets: Targets) -> bool:
        miss = 1.0 - targets.attainment
        return (targets.tpot is None or self.tpot(targets.tpot) <= miss) and (
            targets.ttft is None or self.ttft(targets.ttft) <= miss)


def _steady(pool: _Pool, candidate: Candidate, calibration: Calibration, rate: float,
            gpus: int) -> tuple[GpuLoad, _Tails | None]:
    """One GPU's steady state, its latencies left as tails (None where it cannot hold the traffic)."""
    per_token = calibration.prefill_seconds_per_token * (1.0 + candidate.draft_prefill_ratio)
    chunk = float(candidate.max_num_batched_tokens)
    chunks = np.maximum(1.0, np.ceil(pool.prefill / chunk))
    prefill_share = rate * float((pool.weight * pool.prefill).sum()) * per_token
    if prefill_share >= 1.0:
        return GpuLoad(rate, math.inf, prefill_share, math.inf, math.inf, math.inf, 1.0, 0.0, False), None
    depth = candidate.gamma if candidate.method is not None else 0
    batch, step = 0.0, 0.0
    rounds = np.ones(len(pool.weight))
    for _ in range(8):  # the batch sets a dynamic table's depth, the depth the batch
        rounds, drafted = _rounds(pool, candidate, calibration, depth)
        steps = float((pool.weight * pool.output * rounds).sum())
        batch = rate * steps * _step(calibration, candidate, depth, 1.0, drafted) / (1.0 - prefill_share)
        for _ in range(60):  # b = rate x steps x R(b) / (1 - rho): R grows with b, so this climbs to the fixed point
            updated = rate * steps * _step(calibration, candidate, depth, max(1.0, batch), drafted) / (
                1.0 - prefill_share)
            if abs(updated - batch) < 1e-4 * max(1.0, batch) or updated > 4 * candidate.max_num_seqs:
                batch = updated
                break
            batch = updated
        step = _step(calibration, candidate, depth, max(1.0, batch), drafted)
        settled = candidate.depth_at(max(1.0, batch)) if candidate.method is not None else 0
        if settled == depth:
            break
        depth = settled
    feasible = batch <= candidate.max_num_seqs
    tokens = float((pool.weight * pool.output).sum())
    busy = min(1.0, prefill_share + (1.0 - prefill_share) * (1.0 - math.exp(-batch)))
    if not feasible:
        return GpuLoad(rate, batch, prefill_share, step, math.inf, math.inf, busy, rate * tokens, False), None
    service = pool.prefill * per_token + chunks * step  # a prefill: its chunks' compute, a step each
    # every prefill chunk holds the step it runs in; the prefills that come meanwhile queue behind it, so
    # stalls come in episodes: an M/G/1 busy period, 1 / (1 - rho) times the chunk that starts it, as
    # often as one starts on the GPU a request runs on
    stalls = _Stalls(pool.prefill / chunks * per_token / (1.0 - prefill_share),
                     rate * _joins(gpus, batch) * pool.weight * chunks * (1.0 - prefill_share))
    wait = _Wait(pool, pool.prefill * per_token, rate, prefill_share)
    exposed = service + wait.mean  # before its decode: what comes meanwhile runs during its first steps
    tails = _Tails(_tpot_tail(pool, pool.output * rounds * step, exposed, stalls),
                   _ttft_tail(pool, service, wait, step))
    return GpuLoad(rate, batch, prefill_share, step, math.nan, math.nan, busy, rate * tokens, True), tails


def _joins(gpus: int, batch: float) -> float:
    """The rate at which a pool's arrivals join the GPU a request runs on, over the rate per GPU.

    The balancer sends each arrival to the least loaded of ``gpus`` (ties alike). The request's own GPU
    holds it besides a load like every other GPU's (Poisson with mean ``batch``), so arrivals pass it over
    more often the more GPUs there are: ``gpus x P(it is chosen)``, 1 on one GPU."""
    if gpus <= 1:
        return 1.0
    mean = max(batch, 1e-9)
    loads = np.arange(int(mean + 12.0 * math.sqrt(mean) + 12.0) + 2)
    pmf = np.exp(-mean + np.concatenate([[0.0], np.cumsum(np.log(mean / loads[1:]))]))
    above = np.concatenate([np.cumsum(pmf[::-1])[::-1][1:], [0.0]])  # P(another GPU holds more than m)
    level, beyond = pmf[1:], above[1:]  # other GPUs at the request's GPU's load (its others + 1), above it
    # chosen when every other GPU holds more, or among those holding as much, one in as many
    with np.errstate(divide="ignore", invalid="ignore"):
        chosen = np.where(level > 1e-300, ((level + beyond) ** gpus - beyond ** gpus) / (gpus * level),
                          beyond ** (gpus - 1))
    return float(gpus * (pmf[:-1] * chosen).sum())


class _Stalls:
    """The prefill chunks a GPU runs, as stalls of the steps they share: their sizes and rates."""

    def __init__(self, seconds: np.ndarray, rates: np.ndarray) -> None:
        order = np.argsort(seconds)
        self.seconds = seconds[order]
        self.rate_above = np.concatenate([np.cumsum(rates[order][::-1])[::-1], [0.0]])  # of stalls from index i up
        self.share_below = np.concatenate([[0.0], np.cumsum((rates * seconds)[order])])  # time in those below i

    def beyond(self, room: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each room: the rate of stalls longer than it, and the share of time in stalls no longer."""
        index = np.searchsorted(self.seconds, room, side="right")
        return self.rate_above[index], self.share_below[index]


def _solve_quantile(tail: Callable[[float], float], miss: float, high: float) -> float:
    """The smallest ``t`` at which ``tail(t)`` (decreasing) falls to ``miss``, by bisection up to ``high``."""
    if tail(high) > miss:
        return math.inf
    low = 0.0
    for _ in range(30):
        middle = (low + high) / 2
        if tail(middle) > miss:
            low = middle
        else:
            high = middle
    return high


def _tpot_tail(pool: _Pool, own: np.ndarray, exposed: np.ndarray, stalls: _Stalls) -> Callable[[float], float]:
    """The share of output tokens (after each first) whose request's time per output token passes ``t``,
    as ``within_targets`` counts the pace. A request's own steps are
    slowed by the stalls no longer than the time it has to spare (they share its steps); it misses when
    one longer than that comes while it decodes or in the ``exposed`` time before (its wait and prefill:
    what comes then runs during its first steps), a Poisson event."""
    tokens = np.maximum(1.0, pool.output - 1.0)

    def tail(t: float) -> float:
        spare = t * tokens - own
        _, slowed = stalls.beyond(np.maximum(spare, 0.0))
        decode = own / np.maximum(1e-9, 1.0 - slowed)
        spare = t * tokens - decode
        longer, _ = stalls.beyond(np.maximum(spare, 0.0))
        missed = np.where(spare < 0, 1.0, -np.expm1(-longer * (decode + exposed)))
        return float((pool.weight * tokens * missed).sum() / (pool.weight * tokens).sum())

    return tail


class _Wait:
    """The wait behind the prefills queued on a GPU: M/G/1, none with probability ``1 - rho``, else
    exponential with the queue's mean wait (Pollaczek-Khinchine) over ``rho``."""

    def __init__(self, pool: _Pool, service: np.ndarray, rate: float, prefill_share: float) -> None:
        self.mean = rate * float((pool.weight * service ** 2).sum()) / (2.0 * (1.0 - prefill_share))
        self._share = prefill_share
        self._scale = self.mean / prefill_share if prefill_share > 0 else 0.0

    def beyond(self, x: np.ndarray) -> np.ndarray:
        """P(the wait exceeds x)."""
        if self._scale <= 0:
            return np.where(x < 0, 1.0, 0.0)
        return np.where(x < 0, 1.0, self._share * np.exp(-np.maximum(x, 0.0) / self._scale))


def _ttft_tail(pool: _Pool, service: np.ndarray, wait: _Wait, step: float) -> Callable[[float], float]:
    """The share of requests whose time to first token passes ``t``: the wait behind queued prefills, its
    own prefill with a step for each chunk, and a step."""
    own = service + step
    return lambda t: float((pool.weight * wait.beyond(t - own)).sum())


def capacity_of_gpu(kinds: Sequence[Kind], candidate: Candidate, calibration: Calibration,
                    targets: Targets, gpus: int = 1) -> float:
    """The highest rate each GPU of a pool of ``gpus`` GPUs of ``candidate`` takes ``kinds`` at within
    ``targets`` (to 1%)."""
    if not kinds or sum(k.share for k in kinds) <= 0:
        return math.inf
    pool = _Pool.of(kinds)

    def meets(rate: float) -> bool:  # the tails at the targets: no latency need be solved for
        _, tails = _steady(pool, candidate, calibration, rate, gpus)
        return tails is not None and tails.meet(targets)

    if not meets(1e-6):
        return 0.0
    low, high = 0.0, 0.25
    while meets(high) and high < 1e4:
        low, high = high, high * 2
    while high - low > 0.01 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if meets(middle) else (low, middle)
    return low


# ---------------------------------------------------------------- compositions


class FleetModel:
    """The plan's model of one traffic, worked out once per candidate and set of kinds (and rate)."""

    def __init__(self, traffic: Traffic, calibration: Calibration, targets: Targets) -> None:
        if not traffic.kinds:
            raise ValueError("the plan needs traffic: no kind of request was seen")
        self.traffic = traffic
        self.calibration = calibration
        self.targets = targets

    @functools.cache  # noqa: B019 - one instance per plan
    def per_gpu(self, candidate: Candidate, kinds: tuple[str, ...], gpus: int) -> float:
        """The rate each of ``gpus`` GPUs of ``candidate`` takes of ``kinds`` (in their shares) within the targets."""
        return capacity_of_gpu([self.traffic.kind(k) for k in kinds], candidate, self.calibration, self.targets,
                               gpus)

    @functools.cache  # noqa: B019 - one instance per plan
    def load(self, candidate: Candidate, kinds: tuple[str, ...], rate: float, gpus: int) -> GpuLoad:
        return gpu_load([self.traffic.kind(k) for k in kinds], candidate, self.calibration, rate, self.targets,
                        gpus=gpus)

    def composition(self, pools: Sequence[PoolPlan]) -> Composition:
        """A composition's capacity: the lowest over its pools of what their GPUs take, over their share."""
        capacity = math.inf
        for pool in pools:
            share = sum(self.traffic.kind(k).share for k in pool.kinds)
            if share > 0:
                capacity = min(capacity, pool.gpus * self.per_gpu(pool.candidate, pool.kinds, pool.gpus) / share)
        return Composition(tuple(pools), 0.0 if math.isinf(capacity) else capacity, math.nan)

    def costed(self, composition: Composition) -> Composition:
        """``composition`` with its busy GPU-seconds per token, and each pool's load, at the traffic's rate."""
        busy = tokens = 0.0
        loads: list[GpuLoad | None] = []
        carried = True
        for pool in composition.pools:
            share = sum(self.traffic.kind(k).share for k in pool.kinds)
            if share <= 0:
                loads.append(None)
                continue
            load = self.load(pool.candidate, pool.kinds, round(self.traffic.requests_per_second * share / pool.gpus, 6),
                             pool.gpus)
            loads.append(load)
            carried = carried and load.feasible
            busy += load.busy * pool.gpus
            tokens += load.tokens_per_second * pool.gpus
        cost = busy / tokens if carried and tokens > 0 else math.inf
        return Composition(composition.pools, composition.capacity, cost, tuple(loads))


def evaluate(pools: Sequence[PoolPlan], traffic: Traffic, calibration: Calibration, targets: Targets) -> Composition:
    """A composition's capacity, and its cost and loads at the traffic's rate."""
    model = FleetModel(traffic, calibration, targets)
    return model.costed(model.composition(pools))
