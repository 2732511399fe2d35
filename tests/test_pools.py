"""proxy.pools: which replica of a pool a request goes to."""

from __future__ import annotations

from proxy.config import PoolConfig
from proxy.pools import Pool

URLS = ["http://a:8000", "http://b:8000", "http://c:8000"]


def pool_with(**state: dict[str, float]) -> Pool:
    pool = Pool(PoolConfig(name="p", urls=URLS, max_num_seqs=8))
    for name, fields in state.items():
        for key, value in fields.items():
            setattr(pool.replicas[f"http://{name}:8000"], key, value)
    return pool


def test_the_least_loaded_replica_with_kv_room_serves() -> None:
    """The pool's view counts its replica with the most KV room, so a request must go
    there, not to a less loaded replica whose cache is full."""
    pool = pool_with(a={"running": 1, "kv_usage": 0.99}, b={"running": 3, "kv_usage": 0.5},
                     c={"running": 2, "kv_usage": 0.7})
    assert pool.pick_replica(kv_cache_full=0.95).url == "http://c:8000"
    assert pool.view().kv_usage == 0.5
    assert pool.pick_replica().url == "http://a:8000"  # no threshold: load alone decides
    everywhere_full = pool_with(a={"running": 1, "kv_usage": 0.99}, b={"running": 3, "kv_usage": 0.98},
                                c={"running": 2, "kv_usage": 0.97})
    assert everywhere_full.pick_replica(kv_cache_full=0.95).url == "http://a:8000"


def test_the_replica_holding_the_prefix_serves_unless_it_has_no_room() -> None:
    pool = pool_with(a={"running": 1}, b={"running": 4, "kv_usage": 0.9})
    assert pool.pick_replica("http://b:8000", kv_cache_full=0.95).url == "http://b:8000"
    for no_room in ({"waiting": 2}, {"kv_usage": 0.96}, {"inflight": 8}):
        busy = pool_with(a={"running": 1}, b={"running": 4, **no_room})
        assert busy.pick_replica("http://b:8000", kv_cache_full=0.95).url != "http://b:8000", no_room
