"""draftgate.proxy.pools: which replica of a pool a request goes to."""

from __future__ import annotations

from draftgate.proxy.config import PoolConfig
from draftgate.proxy.pools import Pool

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
    """A short queue for the prefill budget is cheaper to wait out than the prefix computed again
    elsewhere; a full batch or a full KV cache is not."""
    pool = pool_with(a={"running": 1}, b={"running": 4, "kv_usage": 0.9})
    assert pool.pick_replica("http://b:8000", kv_cache_full=0.95).url == "http://b:8000"
    queueing = pool_with(a={"running": 1}, b={"running": 4, "waiting": 2})
    assert queueing.pick_replica("http://b:8000", kv_cache_full=0.95).url == "http://b:8000"
    assert queueing.pick_replica(kv_cache_full=0.95).url != "http://b:8000"  # a new conversation goes by load
    for no_room in ({"kv_usage": 0.96}, {"inflight": 8}):
        busy = pool_with(a={"running": 1}, b={"running": 4, **no_room})
        assert busy.pick_replica("http://b:8000", kv_cache_full=0.95).url != "http://b:8000", no_room


def test_answers_failing_in_a_row_eject_a_replica_for_a_doubling_while() -> None:
    pool = pool_with()
    a = pool.replicas["http://a:8000"]
    for _ in range(4):
        assert a.answer_failed(limit=5, ejection_seconds=5.0) is None
    a.answered()  # a good answer between: the count starts again
    assert [a.answer_failed(limit=5, ejection_seconds=5.0) for _ in range(5)][-1] == 5.0
    assert not a.in_rotation and a.healthy  # its health checks pass; it is out all the same
    # answers already on their way when it left, failing too, do not eject it again
    assert all(a.answer_failed(limit=5, ejection_seconds=5.0) is None for _ in range(20))
    assert [r.url for r in pool.replicas_in_rotation()] == ["http://b:8000", "http://c:8000"]
    assert pool.pick_replica().url != "http://a:8000"
    a.ejected_until = 1.0  # the ejection over, without a good answer since: the next one is longer
    assert a.in_rotation
    assert [a.answer_failed(limit=5, ejection_seconds=5.0) for _ in range(5)][-1] == 10.0
    for _ in range(20):
        a.ejected_until = 1.0
        seconds = [a.answer_failed(limit=5, ejection_seconds=5.0) for _ in range(5)][-1]
    assert seconds == 60.0  # capped
    never = pool.replicas["http://b:8000"]
    assert all(never.answer_failed(limit=0, ejection_seconds=5.0) is None for _ in range(50)) and never.in_rotation
    # with every replica out, one is still tried rather than none
    for r in pool.replicas.values():
        r.ejected_until = 1e18
    assert pool.pick_replica() is not None


def test_a_replica_failing_a_large_share_of_its_answers_is_ejected_though_never_many_in_a_row() -> None:
    a = pool_with().replicas["http://a:8000"]
    ejected = []
    for _ in range(10):  # failing every other answer: never five in a row
        a.answered()
        ejected.append(a.answer_failed(limit=5, ejection_seconds=5.0, share=0.5, window=6))
    assert ejected[:2] == [None, None] and ejected[2] == 5.0 and not a.in_rotation
    b = pool_with().replicas["http://b:8000"]
    for _ in range(10):  # one failure in three stays under the share
        b.answered()
        b.answered()
        assert b.answer_failed(limit=5, ejection_seconds=5.0, share=0.5, window=6) is None
    assert b.in_rotation
    c = pool_with().replicas["http://c:8000"]
    for _ in range(10):  # share 0: the rule is off
        c.answered()
        assert c.answer_failed(limit=5, ejection_seconds=5.0, share=0.0, window=6) is None


def test_a_dynamic_k_pool_is_viewed_at_the_depth_it_runs_at_the_batch_a_request_joins() -> None:
    """vLLM's num_speculative_tokens_per_batch_size: K=8 up to 4 running, 4 up to 16, then none."""
    from draftgate.proxy.config import SpeculationConfig

    spec = SpeculationConfig(gamma=8, num_speculative_tokens_per_batch_size=[(1, 4, 8), (5, 16, 4), (17, 1024, 0)])
    pool = Pool(PoolConfig(name="dyn", urls=URLS, max_num_seqs=64, speculation=spec))
    depths = {}
    for running in (0, 3, 4, 10, 16, 40):
        for url in URLS:
            pool.replicas[url].running = 0
        pool.replicas[URLS[0]].running = running
        view = pool.view()
        depths[running] = (view.gamma, view.speculative)
    # the request makes it running + 1
    assert depths == {0: (8, True), 3: (8, True), 4: (4, True), 10: (4, True), 16: (0, False), 40: (0, False)}


def test_a_dynamic_k_table_is_checked() -> None:
    import pytest
    from pydantic import ValidationError

    from draftgate.proxy.config import SpeculationConfig

    with pytest.raises(ValidationError, match="lo <= hi"):
        SpeculationConfig(num_speculative_tokens_per_batch_size=[(8, 4, 2)])


def test_a_pools_depth_is_what_its_metrics_report_and_a_contradicting_config_is_shown() -> None:
    """vLLM's /metrics holds one acceptance counter per draft position from the start: the
    proxy prices each pool at the depth it reports, whatever was configured (or left out),
    and by the time it takes its first request it has read it; a pool configured to
    speculate that reports no speculation is priced as plain."""
    import httpx

    from draftgate.proxy.app import create_app
    from tests.conftest import emulator
    from tests.proxy_harness import proxy_server, proxy_settings

    with (emulator(45, True, k=4) as four, emulator(45, True, k=3) as three, emulator(45, False) as plain):
        settings = proxy_settings(four.url, plain.url, pools=[
            {"name": "unstated", "urls": [four.url], "speculation": {}},
            {"name": "misstated", "urls": [three.url], "speculation": {"gamma": 8}},
            {"name": "not-speculating", "urls": [plain.url], "speculation": {"gamma": 5}}])
        with proxy_server(create_app(settings)) as proxy:
            body = {"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "Weather?"}],
                    "response_format": {"type": "json_object"}, "temperature": 0}
            explained = httpx.post(f"{proxy.url}/draftgate/explain", json=body, timeout=30).json()
    depths = {d["pool"]: (d["configured"], d["reported"], d["priced_at"]) for d in explained["depths"]}
    assert depths == {"unstated": (None, 4, 4), "misstated": (8, 3, 3), "not-speculating": (5, 0, 0)}
    gammas = {p["pool"]: p["gamma"] for p in explained["pools"]}
    assert gammas == {"unstated": 4, "misstated": 3, "not-speculating": 0}
