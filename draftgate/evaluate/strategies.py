"""The strategies a verdict compares, each a fleet of the same size: the configurations operators
deploy, one per fleet, and the gate in front of the fleet its plan recommends."""

from __future__ import annotations

from draftgate.emulator.lookup import SUFFIX_TREE_DEPTH as SUFFIX_DEPTH
from draftgate.evaluate.fleet import Fleet, PoolSpec
from draftgate.policy.plan import Candidate, Composition

GATE = "gate"
GATE_SPLIT = "gate, best split"  # the best fleet of two pools the plan finds, run to show what a split does
GATE_COST = "gate, objective cost"  # the fleet the plan recommends for a rate when cost is the objective
OFF = "always off"
SUFFIX = f"always suffix K={SUFFIX_DEPTH}"
DYNAMIC = "dynamic K"
NGRAM_LOOKUP = (2, 4)  # prompt_lookup_min and _max of the ngram pools
EAGLE_DEPTH = 3  # vLLM's EAGLE-3 examples speculate 2 or 3 tokens
# vLLM's dynamic K tables tried on the calibration split: [lo, hi, K], K 0 where speculation stops
DYNAMIC_TABLES: tuple[tuple[tuple[int, int, int], ...], ...] = (
    ((1, 4, 4), (5, 16, 2), (17, 1024, 0)),
    ((1, 8, 4), (9, 32, 2), (33, 1024, 0)),
    ((1, 16, 2), (17, 1024, 0)),
    ((1, 32, 2), (33, 1024, 0)),
    ((1, 8, 8), (9, 16, 4), (17, 64, 2), (65, 1024, 0)),
)

# every homogeneous fleet but dynamic K (whose table is chosen per seed): strategy -> its pool on one GPU
FIXED: dict[str, PoolSpec] = {
    OFF: PoolSpec("plain", 1),
    "always on K=2": PoolSpec("draft-k2", 1, "draft_model", 2),
    "always on K=4": PoolSpec("draft-k4", 1, "draft_model", 4),
    "always on K=8": PoolSpec("draft-k8", 1, "draft_model", 8),
    f"always EAGLE-3 K={EAGLE_DEPTH}": PoolSpec(f"eagle3-k{EAGLE_DEPTH}", 1, "eagle3", EAGLE_DEPTH),
    "always ngram K=4": PoolSpec("ngram-k4", 1, "ngram", 4, NGRAM_LOOKUP),
    # suffix decoding at vLLM's default depth, its tree's, which bounds the match and what is drafted together
    SUFFIX: PoolSpec(f"suffix-k{SUFFIX_DEPTH}", 1, "suffix", SUFFIX_DEPTH),
}


def dynamic_pool(table: tuple[tuple[int, int, int], ...], gpus: int = 1) -> PoolSpec:
    return PoolSpec("dynamic-k", gpus, "draft_model", max(k for _, _, k in table), dynamic=table)


def candidates(max_num_seqs: int, max_num_batched_tokens: int,
               dynamic_table: tuple[tuple[int, int, int], ...] = ()) -> tuple[Candidate, ...]:
    """What the gate's plan chooses among: every homogeneous fleet's configuration (``FIXED``, named as its
    pool), and vLLM's dynamic K with ``dynamic_table`` when given."""
    common = {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens}
    pools = [*FIXED.values(), *([dynamic_pool(dynamic_table)] if dynamic_table else [])]
    return tuple(Candidate(pool.name, pool.method, pool.depth, pool.lookup or (5, 5), pool.dynamic,
                           draft_prefill_ratio=0.15 if pool.method == "draft_model" else 0.0, **common)
                 for pool in pools)


def fleet_of(composition: Composition) -> tuple[Fleet, dict[str, str]]:
    """The fleet a composition describes, a pool per candidate named as the candidate (a second pool of the
    same configuration gets a suffix), and its routing: kind -> pool, as the proxy's configuration takes it."""
    pools: list[PoolSpec] = []
    routing: dict[str, str] = {}
    names: set[str] = set()
    for plan in composition.pools:
        c = plan.candidate
        name = c.name
        while name in names:
            name += "-b"
        names.add(name)
        lookup = c.lookup if c.method in ("ngram", "suffix") else None
        pools.append(PoolSpec(name, plan.gpus, c.method, c.gamma, lookup, c.dynamic))
        routing.update(dict.fromkeys(plan.kinds, name))
    return Fleet(tuple(pools)), routing
