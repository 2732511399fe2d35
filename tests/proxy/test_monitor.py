"""The monitor: health checks, DNS names resolved to replicas, and what is kept per replica."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import yaml

from draftgate.proxy.app import create_app
from draftgate.proxy.config import load_settings
from draftgate.proxy.monitor import Monitor
from draftgate.proxy.pools import PoolSet
from draftgate.proxy.upstream import UpstreamClient
from tests.conftest import emulator
from tests.proxy_harness import (
    proxy_server,
    stack,
    wait_until,
)

MODEL = "Qwen/Qwen3-32B"
USER = [{"role": "user", "content": "hello"}]
SCHEMA_CALL = {"model": MODEL, "messages": USER, "temperature": 0, "max_tokens": 8,
               "response_format": {"type": "json_object"}}


def test_dns_names_resolve_to_replicas() -> None:
    with emulator(25, True) as on, emulator(25, False) as off:
        port = on.port
        settings = load_settings(None, pools=[
            {"name": "spec-on", "urls": [f"http://localhost:{port}"], "speculation": {"gamma": 8},
             "dns_refresh_seconds": 0.2},
            {"name": "spec-off", "urls": [off.url]}], health={"interval": 0.2}, log_requests=False)
        app = create_app(settings)
        with proxy_server(app) as proxy:
            pool = app.state.proxy.upstreams.pool("spec-on")
            assert wait_until(lambda: f"http://127.0.0.1:{port}" in pool.replicas), list(pool.replicas)
            r = httpx.post(f"{proxy.url}/v1/chat/completions", json={"model": MODEL, "messages": USER, "max_tokens": 2})
            assert r.status_code == 200


def test_a_dns_change_is_reported_once_so_state_of_gone_replicas_can_be_dropped() -> None:
    settings = load_settings(None, pools=[{"name": "p", "urls": ["http://localhost:8000"],
                                           "dns_refresh_seconds": 1}])
    pools = PoolSet(settings.pools, 0)
    pool = pools.pools["p"]
    changes: list[int] = []

    async def resolve_twice() -> None:
        monitor = Monitor(pools, UpstreamClient(), lambda: settings, on_replicas_changed=lambda: changes.append(1))
        await monitor.resolve(pool)
        assert "http://localhost:8000" not in pool.replicas and "http://127.0.0.1:8000" in pool.replicas
        await monitor.resolve(pool)  # the same addresses again: nothing changed

    asyncio.run(resolve_twice())
    assert changes == [1]


def test_what_is_kept_per_replica_goes_with_the_replica(tmp_path: Path) -> None:
    """Every rollout behind a headless Service gives the pods new addresses: the
    connections and attribution windows kept per replica URL must not pile up."""
    with emulator(26, True) as old, emulator(27, True) as new, emulator(26, False) as off:
        cfg = tmp_path / "c.yaml"

        def write(spec_url: str) -> None:
            cfg.write_text(yaml.safe_dump({
                "pools": [{"name": "spec-on", "urls": [spec_url], "speculation": {"gamma": 8},
                           "per_request_metrics": False}, {"name": "spec-off", "urls": [off.url]}],
                "default_policy": {"mode": "always_on"}, "health": {"scrape_interval": 0.2}, "log_requests": False}))

        write(old.url)
        app = create_app(load_settings(cfg), reload_settings=lambda: load_settings(cfg))
        proxy = app.state.proxy
        body = {"model": MODEL, "messages": USER, "max_tokens": 4}
        with proxy_server(app) as server:
            assert httpx.post(f"{server.url}/v1/chat/completions", json=body).headers["x-draftgate-route"] == "spec-on"
            assert wait_until(lambda: old.url in proxy.recorder.last_accepted), "no attribution window was opened"
            assert old.url in proxy.client
            write(new.url)
            proxy.do_reload()
            assert old.url not in proxy.client
            assert all(old.url not in state for state in (proxy.recorder.attribution, proxy.recorder.window_tokens,
                                                          proxy.recorder.last_accepted, proxy.recorder.window_age))
            assert httpx.post(f"{server.url}/v1/chat/completions", json=body).status_code == 200
            assert new.url in proxy.client


def test_health_checks_act_on_a_503_at_once_and_on_silence_only_when_repeated() -> None:
    """A slow /health is ambiguous (busy or dead), so only repeated silence takes a
    replica out; a 503 is the replica's own word, and takes it out on the first check."""
    with stack(26, health={"interval": 0.05, "timeout": 0.1, "timeouts_to_fail": 1000}) as st:
        replica = next(iter(st.proxy.server.config.app.state.proxy.upstreams.pool("spec-on").replicas.values()))
        httpx.post(f"{st.on.url}/debug/faults", json={"health_delay": 0.5})
        assert wait_until(lambda: replica.timeouts >= 3, seconds=10), replica.timeouts
        assert replica.healthy
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=SCHEMA_CALL, timeout=30)
        assert r.headers["x-draftgate-route"] == "spec-on"
        httpx.post(f"{st.on.url}/debug/faults", json={"health_delay": 0.0, "health_503": True})
        assert wait_until(lambda: not replica.healthy, seconds=10)
        httpx.post(f"{st.on.url}/debug/faults", json={"health_503": False})
        assert wait_until(lambda: replica.healthy, seconds=10)
        assert replica.timeouts == 0
    with stack(27, health={"interval": 0.05, "timeout": 0.1, "timeouts_to_fail": 2}) as st:
        replica = next(iter(st.proxy.server.config.app.state.proxy.upstreams.pool("spec-on").replicas.values()))
        httpx.post(f"{st.on.url}/debug/faults", json={"health_delay": 0.5})
        assert wait_until(lambda: not replica.healthy, seconds=10)
        assert replica.timeouts >= 2
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=SCHEMA_CALL, timeout=30)
        assert r.status_code == 200 and r.headers["x-draftgate-route"] == "spec-off"
