"""A fleet plan: how to split N GPUs between a speculation pool and a plain pool for given traffic.

Pure: traffic and calibration in, options out. Each option is a split (``k``
GPUs speculating, ``N - k`` plain) and the request classes sent to speculation;
its cost is the busy GPU-seconds per output token, in a steady state worked out
from the calibration: on a pool of ``n`` GPUs taking ``lambda`` requests a
second, each GPU runs ``b`` requests at once where, by Little's law,
``b = lambda / n x steps x R(b)`` (a request is in the batch for its steps, each
taking ``R(b)``); a GPU with ``b >= 1`` is busy all the time, one with less is
busy that share of it, and prefill adds its own time. Time per output token is
``R(b) x steps / tokens``. An option whose batch would pass ``max_num_seqs``
cannot carry the traffic; one whose time per token breaks the target is
reported as breaking it.

It is a model, and says what it assumes: arrivals spread evenly over a pool's
GPUs, no queueing beyond the batch, the calibration's curves at loads past
what it measured extrapolated.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from draftgate.policy import law
from draftgate.policy.calibration import Calibration


@dataclass(frozen=True, slots=True)
class ClassTraffic:
    """One request class as observed: its share of requests and what an answer is like."""

    name: str
    share: float
    output_tokens: float
    prompt_tokens: float
    mix: law.ClassMix
    tau: Mapping[str, float]  # accepted draft tokens per round on the speculation pool, by output class


@dataclass(frozen=True, slots=True)
class Traffic:
    requests_per_second: float
    classes: tuple[ClassTraffic, ...]


@dataclass(frozen=True, slots=True)
class PoolLoad:
    gpus: int
    batch: float  # requests running on each GPU
    gpu_seconds_per_second: float
    tokens_per_second: float
    tpot: float  # seconds per output token a request sees
    overloaded: bool


@dataclass(frozen=True, slots=True)
class Option:
    name: str
    spec_gpus: int
    plain_gpus: int
    speculated: tuple[str, ...]  # request classes sent to the speculation pool
    cost_per_token: float  # busy GPU-seconds per output token, both pools
    tpot: float  # the slower pool's time per output token
    feasible: bool  # carries the traffic within max_num_seqs
    meets_target: bool


def _step(calibration: Calibration, gamma: int, pool: str, batch: float) -> float:
    c_t = calibration.target_pass_seconds(batch)
    if gamma <= 0:
        return c_t
    cal = calibration.pool(pool, gamma)
    return c_t * law.round_cost(gamma, cal.delta(batch), cal.draft_cost)


def pool_load(traffic: Traffic, classes: Sequence[ClassTraffic], gpus: int, gamma: int, calibration: Calibration,
              max_num_seqs: int, pool: str = "spec-on") -> PoolLoad | None:
    """The steady state of ``gpus`` GPUs taking ``classes`` of ``traffic``; None with no traffic."""
    share = sum(c.share for c in classes)
    if share <= 0 or gpus <= 0:
        return None
    rate = traffic.requests_per_second * share / gpus  # requests a second on each GPU
    tokens = sum(c.share * c.output_tokens for c in classes) / share
    steps = sum(c.share * c.output_tokens * (law.rounds_per_token(c.mix, c.tau) if gamma > 0 else 1.0)
                for c in classes) / share
    prompt = sum(c.share * c.prompt_tokens for c in classes) / share
    batch = rate * steps * _step(calibration, gamma, pool, 1.0)
    for _ in range(100):  # b = rate x steps x R(b): R grows with b, so this climbs to the fixed point
        updated = rate * steps * _step(calibration, gamma, pool, max(1.0, batch))
        if abs(updated - batch) < 1e-6 * max(1.0, batch) or updated > 10 * max_num_seqs:
            batch = updated
            break
        batch = updated
    step = _step(calibration, gamma, pool, max(1.0, batch))
    prefill = rate * prompt * calibration.prefill_seconds_per_token
    busy = min(1.0, min(1.0, batch) + prefill)
    return PoolLoad(gpus, batch, busy * gpus, rate * gpus * tokens, step * steps / tokens, batch > max_num_seqs)


def plan(traffic: Traffic, calibration: Calibration, gpus: int, gamma: int, max_num_seqs: int,
         max_num_seqs_spec: int, tpot_target: float | None = None,
         dynamic_k: Sequence[tuple[int, int, int]] = ()) -> list[Option]:
    """Every split of ``gpus`` and every set of classes sent to speculation, with the
    alternatives (all speculating at ``gamma``, all with ``dynamic_k`` when given, all plain);
    cheapest feasible first."""
    names = [c.name for c in traffic.classes]
    options = []
    for spec_gpus in range(gpus + 1):
        for size in range(len(names) + 1):
            for chosen in itertools.combinations(names, size):
                if (spec_gpus == 0) != (size == 0) or (spec_gpus == gpus) != (size == len(names)):
                    continue  # a pool with GPUs and no traffic, or traffic and no GPUs
                options.append(_option(traffic, calibration, spec_gpus, gpus - spec_gpus, chosen, gamma,
                                       max_num_seqs, max_num_seqs_spec, tpot_target))
    if dynamic_k:
        options.append(_dynamic(traffic, calibration, gpus, gamma, dynamic_k, max_num_seqs_spec, tpot_target))
    return sorted(options, key=lambda o: (not (o.feasible and o.meets_target), o.cost_per_token))


def _option(traffic: Traffic, calibration: Calibration, spec_gpus: int, plain_gpus: int, chosen: tuple[str, ...],
            gamma: int, max_num_seqs: int, max_num_seqs_spec: int, tpot_target: float | None) -> Option:
    spec = pool_load(traffic, [c for c in traffic.classes if c.name in chosen], spec_gpus, gamma, calibration,
                     max_num_seqs_spec)
    plain = pool_load(traffic, [c for c in traffic.classes if c.name not in chosen], plain_gpus, 0, calibration,
                      max_num_seqs)
    name = ("all plain" if not spec_gpus else f"all speculating at depth {gamma}" if not plain_gpus
            else f"{spec_gpus} speculating, {plain_gpus} plain")
    return _combine(name, spec_gpus, plain_gpus, chosen, [x for x in (spec, plain) if x is not None], tpot_target)


def _dynamic(traffic: Traffic, calibration: Calibration, gpus: int, gamma: int,
             table: Sequence[tuple[int, int, int]], max_num_seqs: int, tpot_target: float | None) -> Option:
    """One pool of ``gpus`` running vLLM's dynamic K: the depth its table gives at the batch it settles at."""
    depth = gamma
    load = None
    for _ in range(10):  # the batch sets the depth, the depth the batch
        load = pool_load(traffic, traffic.classes, gpus, depth, calibration, max_num_seqs)
        assert load is not None  # the traffic has at least one class
        settled = next((k for lo, hi, k in table if lo <= max(1.0, load.batch) <= hi), gamma)
        if settled == depth:
            break
        depth = settled
    assert load is not None
    return _combine(f"all with dynamic K (settles at depth {depth})", gpus, 0,
                    tuple(c.name for c in traffic.classes), [load], tpot_target)


def _combine(name: str, spec_gpus: int, plain_gpus: int, chosen: tuple[str, ...], loads: list[PoolLoad],
             tpot_target: float | None) -> Option:
    tokens = sum(x.tokens_per_second for x in loads)
    tpot = max(x.tpot for x in loads)
    return Option(name, spec_gpus, plain_gpus, chosen, sum(x.gpu_seconds_per_second for x in loads) / tokens, tpot,
                  not any(x.overloaded for x in loads), tpot_target is None or tpot <= tpot_target)
