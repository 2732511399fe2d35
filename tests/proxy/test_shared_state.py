"""Several proxy replicas that agree, through a real redis-server (Debian's; .ci/run
installs it): three proxies in front of the same emulated pools, the plain pool of
two replicas, each proxy's copy of them listed in another order, so that a proxy
that did not know where a conversation lives would send it elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis

from draftgate.policy.structure import ClassTokens, ObservedStructure, StructureLearner
from draftgate.policy.structure.learner import ShapeStats
from draftgate.proxy.affinity import AffinityTable, Conversation
from draftgate.proxy.app import create_app
from draftgate.proxy.config import ConfigError, load_settings
from draftgate.proxy.metrics import ProxyMetrics
from draftgate.proxy.shared_state import SharedState
from draftgate.servers import ServerThread, free_port
from tests.conftest import emulator
from tests.proxy_harness import metric_value, proxy_server, wait_until

MODEL = "Qwen/Qwen3-32B"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


class RedisServer:
    """A redis-server on loopback, that a test can stop and start again on its port."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is needed (Debian's redis-server package; .ci/run installs it)"
        self.binary, self.port = binary, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                         "--appendonly", "no", "--enable-debug-command", "local"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        assert wait_until(lambda: _pings(client), 10), "redis-server did not start"

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


@dataclass
class Fleet:
    proxies: list[ServerThread]
    on: ServerThread
    plain: list[ServerThread]
    store: RedisServer

    def metric(self, proxy: int, name: str, **labels: str) -> float:
        return metric_value(httpx.get(f"{self.proxies[proxy].url}/metrics").text, name, **labels)


def _merged(base: dict[str, dict[str, Any]], overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` over ``base``, a group given merged into the group there."""
    merged: dict[str, Any] = dict(base)
    for key, value in overrides.items():
        merged[key] = {**base[key], **value} if key in base and isinstance(value, dict) else value
    return merged


@contextlib.contextmanager
def fleet(**overrides: Any) -> Iterator[Fleet]:
    store = RedisServer()
    store.start()
    try:
        # a busy test machine must not pass for a store that is away: a second to answer
        base = {"health": {"interval": 0.2, "scrape_interval": 0.3},
                "shared_state": {"address": store.url, "timeout": 1.0}}
        with emulator(3, True) as on, emulator(3, False) as a, emulator(3, False) as b, contextlib.ExitStack() as stack:
            proxies = []
            for i in range(3):
                plain = [a.url, b.url] if i == 0 else [b.url, a.url]  # each lists the replicas in its own order
                settings = load_settings(None, pools=[{"name": "spec-on", "urls": [on.url], "speculation": {"gamma": 8}},
                                                      {"name": "spec-off", "urls": plain}],
                                         log_requests=False,
                                         exploration_share=0.0, structure_priors={"thinking_by_default": False},
                                         **_merged(base, overrides))
                proxies.append(stack.enter_context(proxy_server(create_app(settings))))
            yield Fleet(proxies, on, [a, b], store)
    finally:
        store.stop()


def received_by(server: ServerThread, marker: str) -> int:
    """How many of the requests ``server`` last received carry ``marker``."""
    return sum(marker in r["body"] for r in httpx.get(f"{server.url}/debug/requests").json())


def test_a_conversation_sent_round_robin_stays_on_the_replica_that_holds_its_prefix() -> None:
    with fleet() as f:
        messages = [{"role": "system", "content": "You are agent 12. " * 50}]
        for turn in range(6):
            messages.append({"role": "user", "content": f"story part {turn} (conversation 12)"})
            answer = httpx.post(f"{f.proxies[turn % 3].url}/v1/chat/completions", timeout=60,
                                json={"model": MODEL, "messages": messages, "max_tokens": 20})
            assert answer.status_code == 200 and answer.headers["x-draftgate-route"] == "spec-off"
            messages.append({"role": "assistant", "content": answer.json()["choices"][0]["message"]["content"]})
        # every turn on the replica the first proxy placed it on (the others list it second)
        assert received_by(f.plain[0], "conversation 12") == 6
        assert received_by(f.plain[1], "conversation 12") == 0
        assert f.metric(1, "draftgate_decisions_total", reason="affinity") + \
            f.metric(1, "draftgate_decisions_total", reason="content") >= 1
        assert f.metric(1, "draftgate_state_fallbacks_total") == 0


def test_a_shape_learned_through_one_proxy_is_known_to_the_others() -> None:
    with fleet() as f:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "weather in Rome?"}], "tools": [WEATHER],
                "tool_choice": "auto", "max_tokens": 60}
        for _ in range(4):
            assert httpx.post(f"{f.proxies[0].url}/v1/chat/completions", json=body, timeout=60).status_code == 200
        for other in (1, 2):
            explained = httpx.post(f"{f.proxies[other].url}/draftgate/explain", json=body).json()
            assert wait_until(lambda: httpx.post(f"{f.proxies[other].url}/draftgate/explain",
                                                 json=body).json()["observations"] == 4), explained
        # counted once each, however many replicas read them
        assert int(f.store.client().hget(next(iter(f.store.client().scan_iter("draftgate:shape:*"))), "n")) == 4


def test_a_replica_one_proxy_ejects_is_avoided_by_all() -> None:
    with fleet(health={"eject_after_failed_answers": 1, "ejection_seconds": 30}) as f:
        httpx.post(f"{f.plain[0].url}/debug/faults", json={"error_status": 503})
        prose = {"model": MODEL, "messages": [{"role": "user", "content": "a story"}], "max_tokens": 10}
        assert httpx.post(f"{f.proxies[0].url}/v1/chat/completions", json=prose, timeout=60).status_code == 200
        for other in (1, 2):
            assert wait_until(lambda: httpx.get(f"{f.proxies[other].url}/ready").json()[
                "ejected_replicas"]["spec-off"] == 1, 5)


def test_redis_stopped_under_load_loses_no_request_and_is_caught_up_with() -> None:
    with fleet(shared_state={"timeout": 0.05}) as f:
        def one(i: int) -> int:
            body = {"model": MODEL, "messages": [{"role": "user", "content": f"item {i}"}], "max_tokens": 8,
                    "tools": [WEATHER], "tool_choice": "auto", "stream": i % 2 == 0}
            return httpx.post(f"{f.proxies[i % 3].url}/v1/chat/completions", json=body, timeout=60).status_code

        with ThreadPoolExecutor(8) as pool:
            before = list(pool.map(one, range(30)))
            f.store.stop()
            during = list(pool.map(one, range(30, 90)))
            f.store.start()
            time.sleep(1.2)  # each proxy leaves the store alone for a second after a failure
            after = list(pool.map(one, range(90, 120)))
        assert before + during + after == [200] * 120
        assert sum(f.metric(i, "draftgate_state_fallbacks_total") for i in range(3)) > 0
        assert all(wait_until(lambda i=i: f.metric(i, "draftgate_state_up") == 1) for i in range(3))
        # What was learned while the store was away reached it once it was back. What it held
        # went with it (this one keeps nothing on disk), but for the updates still on their way
        # when it stopped: those are written again (at least once: one that timed out may have
        # been written as well).
        shape = next(iter(f.store.client().scan_iter("draftgate:shape:*")))
        assert wait_until(lambda: int(f.store.client().hget(shape, "n")) >= 90), f.store.client().hget(shape, "n")


def test_a_slow_store_holds_no_request() -> None:
    """Redis busy for a second (DEBUG SLEEP): requests meanwhile plan from the proxy's own state."""
    with fleet(shared_state={"timeout": 0.05}) as f:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "a story"}], "max_tokens": 8}
        assert httpx.post(f"{f.proxies[0].url}/v1/chat/completions", json=body, timeout=60).status_code == 200
        with ThreadPoolExecutor(1) as sleeper:
            busy = sleeper.submit(lambda: redis.Redis(port=f.store.port).execute_command("DEBUG", "SLEEP", "1"))
            time.sleep(0.1)
            answer = httpx.post(f"{f.proxies[0].url}/v1/chat/completions", json=body, timeout=60)
            assert answer.status_code == 200 and not busy.done()  # answered while Redis still slept
            busy.result()
        assert f.metric(0, "draftgate_state_fallbacks_total", operation="read") >= 1


def test_the_store_updates_a_shape_by_the_learners_own_rule() -> None:
    """Every observation through Redis's script leaves the statistics the in-process learner keeps."""
    rng = random.Random(5)
    observations = [ObservedStructure(ClassTokens(rng.uniform(0, 40), rng.uniform(0, 90), rng.uniform(0, 60)),
                                      ClassTokens(0, 0, 0), 1.0, rng.choice([0, 0, 1]), "usage") for _ in range(70)]
    store = RedisServer()
    store.start()
    try:
        async def through_redis() -> ShapeStats:
            settings = load_settings(None, pools=[{"name": "p", "urls": ["http://127.0.0.1:1"]}],
                                     shared_state={"address": store.url, "timeout": 2.0})
            shared = SharedState(settings, ProxyMetrics())
            for observed in observations:  # one at a time: the means after 50 depend on the order
                shared.push("shape-a", observed, Conversation((), None), ("p", "r", 1.0))
                await shared.settled(timeout=10.0)
            learner = StructureLearner()
            await shared.pull("shape-a", Conversation((), None), learner, AffinityTable())
            await shared.close()
            stats = learner.stats("shape-a")
            assert stats is not None
            return stats

        shared_stats = asyncio.run(through_redis())
    finally:
        store.stop()
    local = StructureLearner()
    for observed in observations:
        local.observe("shape-a", observed)
    own = local.stats("shape-a")
    assert own is not None and shared_stats.count == own.count == 70
    for name in ("every", "calls", "answers"):
        mine, theirs = getattr(own, name), getattr(shared_stats, name)
        assert theirs.count == mine.count
        assert (theirs.s, theirs.r, theirs.f) == pytest.approx((mine.s, mine.r, mine.f), rel=1e-9)
    assert shared_stats.call_rate == pytest.approx(own.call_rate, rel=1e-9)


@pytest.mark.parametrize("address", ["http://cache:6379", "redis://", "redis://cache:port", "redis://:pw@cache:6379",
                                     "redis://cache:6379/zero"])
def test_a_malformed_store_address_stops_startup(address: str) -> None:
    with pytest.raises(ConfigError, match="state"):
        load_settings(None, pools=[{"name": "p", "urls": ["http://127.0.0.1:1"]}], shared_state={"address": address})


def test_what_else_writes_in_the_store_breaks_no_request() -> None:
    """A key of another type where a shape's statistics go, and garbage where a placement
    goes: Redis refuses the one and the proxy ignores the other, and requests are served."""
    with fleet() as f:
        body = {"model": MODEL, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
                "tools": [WEATHER], "tool_choice": "auto", "max_tokens": 8}
        assert httpx.post(f"{f.proxies[0].url}/v1/chat/completions", json=body, timeout=60).status_code == 200
        client = f.store.client()
        assert wait_until(lambda: any(True for _ in client.scan_iter("draftgate:shape:*")))
        for key in client.scan_iter("draftgate:shape:*"):
            client.delete(key)
            client.rpush(key, "not a hash")
        for key in client.scan_iter("draftgate:placement:*"):
            client.set(key, "garbage")
        for i in range(3):
            assert httpx.post(f"{f.proxies[i].url}/v1/chat/completions", json=body, timeout=60).status_code == 200
        assert sum(f.metric(i, "draftgate_gate_errors_total") for i in range(3)) == 0
        assert all(f.metric(i, "draftgate_state_up") == 1 for i in range(3))
