"""The plan's search: every composition of N GPUs from the candidate configurations, in up to
``MAX_POOLS`` pools with each kind given to one, ranked by the model (``model``); and, for a fleet that
is what it is, the assignment of kinds to its pools.

Pure, like the model it ranks with.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from draftgate.policy.calibration import Calibration
from draftgate.policy.plan.assignment import PoolRates
from draftgate.policy.plan.model import Candidate, Composition, FleetModel, PoolPlan, Targets, Traffic

# a dynamic K table ([lo, hi, K] by batch size) for the default candidates: 4 tokens while batches are small,
# 2 to 32 running, none past; the verdict picks its own per seed among several
DYNAMIC_TABLE = ((1, 8, 4), (9, 32, 2), (33, 1024, 0))
MAX_POOLS = 3  # pools a recommended fleet is split into, at most: each more multiplies the compositions weighed


@dataclass(frozen=True)
class Recommendation:
    best: Composition
    best_homogeneous: Composition
    current: Composition | None  # the fleet running now, when given
    options: tuple[Composition, ...]  # every composition worked out, best first

    @property
    def gain(self) -> float | None:
        """How much more the best serves than the fleet running now (capacity), as a ratio less one."""
        if self.current is None or self.current.capacity <= 0:
            return None
        return self.best.capacity / self.current.capacity - 1.0


def _splits(gpus: int, parts: int) -> list[tuple[int, ...]]:
    """Every way to give ``parts`` pools at least one GPU each, ``gpus`` in all."""
    return [tuple(b - a for a, b in zip((0, *cut), (*cut, gpus)))
            for cut in itertools.combinations(range(1, gpus), parts - 1)]


def _assignments(kinds: Sequence[str], parts: int, every_pool: bool = True) -> list[tuple[tuple[str, ...], ...]]:
    """Every way to give each kind to one of ``parts`` pools; ``every_pool``: none left without a kind, and
    pools told apart only by their kinds (pool 0 takes the first kind: no relabelled repeats)."""
    out = []
    for labels in itertools.product(range(parts), repeat=len(kinds)):
        if every_pool and (len(set(labels)) != parts or labels[0] != 0):
            continue
        out.append(tuple(tuple(k for k, label in zip(kinds, labels) if label == p) for p in range(parts)))
    return out


def recommend(traffic: Traffic, calibration: Calibration, gpus: int, candidates: Sequence[Candidate],
              targets: Targets = Targets(), objective: str = "capacity", max_pools: int = MAX_POOLS,
              current: Sequence[PoolPlan] | None = None) -> Recommendation:
    """The best composition of ``gpus`` GPUs from ``candidates`` for ``traffic``, by ``objective``:
    ``capacity`` (most traffic within the targets; a fixed fleet) or ``cost`` (fewest busy GPU-seconds
    per token at the traffic's rate, among compositions that carry it within the targets; a fleet that
    scales with load). Beside it, the best homogeneous fleet and, when given, the ``current`` one."""
    if gpus < 1:
        raise ValueError("a fleet needs at least one GPU")
    if not candidates:
        raise ValueError("the plan needs at least one candidate pool configuration")
    model = FleetModel(traffic, calibration, targets)
    names = tuple(k.name for k in traffic.kinds)
    options: list[Composition] = []
    for parts in range(1, min(max_pools, gpus, len(names)) + 1):
        for chosen in itertools.combinations_with_replacement(candidates, parts):
            for assignment in _assignments(names, parts):
                for split in _splits(gpus, parts):
                    options.append(model.composition([PoolPlan(c, n, k) for c, n, k in zip(chosen, split, assignment)]))
    options = _ranked(options, model, objective)
    homogeneous = next(o for o in options if o.homogeneous)
    now = model.costed(model.composition(current)) if current else None
    return Recommendation(options[0], homogeneous, now, tuple(options))


def best_assignment(traffic: Traffic, calibration: Calibration, pools: Sequence[tuple[Candidate, int]],
                    targets: Targets = Targets(), objective: str = "capacity") -> tuple[Composition, list[PoolRates]]:
    """For a fleet that is what it is (each pool a candidate configuration on some GPUs): which pool each
    kind should go to, by ``objective``; and what each GPU of each pool, at the pool's size, takes of each kind
    alone (what the assignment spills by, ``assignment.spill``)."""
    if not pools:
        raise ValueError("the fleet has no pool")
    model = FleetModel(traffic, calibration, targets)
    names = tuple(k.name for k in traffic.kinds)
    options = [model.composition([PoolPlan(c, n, kinds) for (c, n), kinds in zip(pools, assignment)])
               for assignment in _assignments(names, len(pools), every_pool=False)]
    best = _ranked(options, model, objective)[0]
    capacities = [PoolRates(c.name, n, {k: model.per_gpu(c, (k,), n) for k in names}) for c, n in pools]
    return best, capacities


def _ranked(options: list[Composition], model: FleetModel, objective: str) -> list[Composition]:
    """Best first. ``capacity``: the most traffic within the targets, then the cheapest, then the fewest
    pools. ``cost``: among those that carry the traffic's rate, the cheapest; then the rest by capacity.
    Only the options in the running are costed."""
    rate = model.traffic.requests_per_second
    if objective == "capacity":
        options.sort(key=lambda o: -o.capacity)
        top = options[0].capacity
        leaders = [model.costed(o) for o in options if o.capacity >= top * (1 - 1e-6)]
        leaders.sort(key=lambda o: (o.cost_per_token, len(o.pools)))
        return leaders + [o for o in options if o.capacity < top * (1 - 1e-6)]
    if objective == "cost":
        carried = sorted((model.costed(o) for o in options if o.capacity >= rate),
                         key=lambda o: (o.cost_per_token, -o.capacity, len(o.pools)))
        rest = sorted((o for o in options if o.capacity < rate), key=lambda o: -o.capacity)
        return carried + rest
    raise ValueError(f"objective must be capacity or cost, got {objective!r}")


def default_candidates(max_num_seqs: int = 1024, max_num_batched_tokens: int = 8192) -> tuple[Candidate, ...]:
    """What the plan chooses among unless told otherwise: plain; a draft model at depth 2, 4 and 8, and at a
    depth that falls with the batch (vLLM's dynamic K, ``DYNAMIC_TABLE``); an EAGLE-3 head at depth 3; ngram
    at depth 4 with lookup 2-4; suffix decoding at vLLM's default tree depth, 24. Every configuration the
    verdict compares and plans with."""
    common = {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens}
    return (Candidate("plain", **common),
            *(Candidate(f"draft-k{k}", "draft_model", k, draft_prefill_ratio=0.15, **common) for k in (2, 4, 8)),
            Candidate("dynamic-k", "draft_model", max(k for _, _, k in DYNAMIC_TABLE), dynamic=DYNAMIC_TABLE,
                      draft_prefill_ratio=0.15, **common),
            Candidate("eagle3-k3", "eagle3", 3, **common),
            Candidate("ngram-k4", "ngram", 4, lookup=(2, 4), **common),
            Candidate("suffix-k24", "suffix", 24, **common))
