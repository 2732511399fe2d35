"""Operating the proxy: the serve command, configuration, reload, keys, DNS replicas."""

from __future__ import annotations

import asyncio
import gc
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from draftgate.emulator.faults import Faults
from draftgate.proxy.app import create_app
from draftgate.proxy.config import ConfigError, load_settings
from draftgate.proxy.metrics import (
    MAX_MODEL_LABEL_CHARS,
    MAX_MODEL_LABELS,
    OTHER_MODELS,
)
from draftgate.proxy.monitor import Monitor
from draftgate.proxy.pools import PoolSet
from draftgate.proxy.upstream import UpstreamClient
from draftgate.servers import ServerProcess, free_port
from tests.conftest import emulator
from tests.proxy_harness import (
    container_health_check,
    metric_value,
    proxy_server,
    proxy_settings,
    stack,
    wait_until,
)

MODEL = "Qwen/Qwen3-32B"
USER = [{"role": "user", "content": "hello"}]
DRAFTGATE = [sys.executable, "-m", "draftgate.cli.main"]


def test_invalid_configuration_stops_startup_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"pools": [{"name": "a", "urls": ["127.0.0.1:80"]}]}))
    for args in (["--config", str(bad)], ["--config", str(tmp_path / "missing.yaml")], []):
        proc = subprocess.run([*DRAFTGATE, "serve", *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = subprocess.run([*DRAFTGATE, "serve", "--config", str(bad)], capture_output=True, text=True, timeout=60)
    assert "pools.0.urls" in proc.stderr


def test_check_validates_a_configuration_without_serving(tmp_path: Path) -> None:
    """``serve --check`` is a deploy pipeline's gate: the validation a start does,
    calibration file included, then exit."""
    cfg = tmp_path / "draftgate.yaml"
    config = {"pools": [{"name": "spec-on", "urls": ["http://127.0.0.1:1"], "speculation": {"gamma": 4}}], "port": 0}
    cfg.write_text(yaml.safe_dump(config))
    ok = subprocess.run([*DRAFTGATE, "serve", "--config", str(cfg), "--check"], capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0 and "configuration ok: would serve on http://127.0.0.1:0/v1" in ok.stdout, ok.stderr
    (tmp_path / "calibration.yaml").write_text("kappa: not-a-number\n")
    cfg.write_text(yaml.safe_dump({**config, "calibration_file": str(tmp_path / "calibration.yaml")}))
    bad = subprocess.run([*DRAFTGATE, "serve", "--config", str(cfg), "--check"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "calibration_file" in bad.stderr and bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1


def test_serve_freezes_what_it_built_before_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The heap built at startup is out of the cycle collector's walks before the first
    request comes (proxy.serving.settle_startup_heap): a full collection stops the loop."""
    from draftgate.cli.main import main
    from draftgate.proxy.serving import SignalAwareServer

    frozen_when_serving: list[int] = []
    monkeypatch.setattr(SignalAwareServer, "run", lambda self, sockets=None: frozen_when_serving.append(
        gc.get_freeze_count()))
    monkeypatch.setattr("draftgate.proxy.logs.configure", lambda level: None)  # the test process keeps its logging
    gc.unfreeze()  # conftest froze the session's heap: what is frozen now is serve's doing alone
    main(["serve", "--spec-on", "http://127.0.0.1:9", "--spec-off", "http://127.0.0.1:10", "--port", "0"])
    assert len(frozen_when_serving) == 1 and frozen_when_serving[0] > 10_000


@pytest.mark.parametrize(("url", "needle"), [
    ("http://vllm:8000/v1", "the proxy adds /v1 itself"),
    ("http://vllm:99999", "port outside"),
    ("http://", "with a host"),
    ("vllm:8000", "with a host"),
    ("http://vllm:8000/?x=1", "without a path or query"),
    ("http://user:key@vllm:8000", "api_key"),
])
def test_pool_urls_that_could_not_serve_stop_startup(url: str, needle: str) -> None:
    """Each of these used to be accepted, then failed every request (a port out of range with a 500)."""
    with pytest.raises(ConfigError, match="pools.0.urls") as raised:
        load_settings(None, pools=[{"name": "p", "urls": [url]}])
    assert needle in str(raised.value)
    assert load_settings(None, pools=[{"name": "p", "urls": ["https://[::1]:8000/"]}]).pools[0].urls == [
        "https://[::1]:8000"]


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"port": 9000, "pools": [{"name": "p", "urls": ["http://127.0.0.1:1"]}],
                                   "default_policy": {"margin": 0.1}}))
    monkeypatch.setenv("DRAFTGATE_PORT", "9001")
    monkeypatch.setenv("DRAFTGATE_DEFAULT_POLICY__MARGIN", "0.2")
    settings = load_settings(cfg)
    assert settings.port == 9001 and settings.default_policy.margin == 0.2
    monkeypatch.setenv("DRAFTGATE_PORT", "not-a-port")
    with pytest.raises(ConfigError, match="port"):
        load_settings(cfg)


def test_settings_come_in_groups_and_the_flat_keys_of_before_still_load_with_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Grouped keys, in the file and the environment; the flat keys they replace (file and
    environment) are moved into their groups with a warning naming where they go, and a key
    written in its group wins over its flat form."""
    pools = [{"name": "p", "urls": ["http://127.0.0.1:1"]}]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"pools": pools, "timeouts": {"queue": 3.0}, "health": {"interval": 0.5},
                                   "plan": {"routing": {"prose": "p"}}}))
    monkeypatch.setenv("DRAFTGATE_HEALTH__SCRAPE_INTERVAL", "4")
    grouped = load_settings(cfg)
    assert (grouped.timeouts.queue, grouped.health.interval, grouped.health.scrape_interval) == (3.0, 0.5, 4.0)
    assert grouped.plan.routing == {"prose": "p"} and not caplog.records
    cfg.write_text(yaml.safe_dump({"pools": pools, "queue_timeout": 3.0, "routing": {"prose": "p"},
                                   "timeouts": {"connect": 1.0}, "health_interval": 9.0, "health": {"interval": 0.5}}))
    monkeypatch.setenv("DRAFTGATE_STATE", "redis://store:6379/0")
    flat = load_settings(cfg)
    assert (flat.timeouts.queue, flat.timeouts.connect, flat.plan.routing) == (3.0, 1.0, {"prose": "p"})
    assert flat.health.interval == 0.5 and flat.shared_state.address == "redis://store:6379/0"
    warned = {r.getMessage() for r in caplog.records if r.name == "draftgate.config"}
    assert "configuration key queue_timeout is deprecated and will be removed: write timeouts.queue" in warned
    assert any("state is deprecated" in w and "shared_state.address" in w for w in warned)
    with pytest.raises(ConfigError, match="timeouts.queue"):
        load_settings(None, pools=pools, queue_timeout=-1)


def test_serve_process_quick_start_and_sighup_reload(tmp_path: Path) -> None:
    with emulator(21, True) as on, emulator(21, False) as off:
        cfg = tmp_path / "draftgate.yaml"
        config = {"pools": [{"name": "spec-on", "urls": [on.url], "speculation": {"gamma": 8}},
                            {"name": "spec-off", "urls": [off.url]}],
                  "models": {MODEL: {"mode": "always_off"}}, "timeouts": {"client_header": 0.5, "keep_alive": 0.5}}
        cfg.write_text(yaml.safe_dump(config))
        body = {"model": MODEL, "messages": USER, "tool_choice": "required", "temperature": 0,
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}
        with ServerProcess(["serve", "--config", str(cfg)]) as proxy:
            assert httpx.post(f"{proxy.url}/v1/chat/completions", json=body).headers["x-draftgate-route"] == "spec-off"
            config["models"][MODEL]["mode"] = "always_on"
            cfg.write_text(yaml.safe_dump(config))
            proxy.process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            route = ""
            while time.monotonic() < deadline and route != "spec-on":
                route = httpx.post(f"{proxy.url}/v1/chat/completions", json=body).headers["x-draftgate-route"]
                time.sleep(0.1)
            assert route == "spec-on"
            assert "serving on http://127.0.0.1" in proxy.output()
            assert container_health_check(proxy.port) == 0
            assert '"event": "request"' in proxy.output()
            with socket.create_connection(("127.0.0.1", proxy.port)) as sock:  # the file's head deadline is served
                sock.sendall(b"GET /health HTTP/1.1\r\n")
                sock.settimeout(10)
                assert sock.recv(100).startswith(b"HTTP/1.1 408")
            with socket.create_connection(("127.0.0.1", proxy.port)) as sock:  # and its keep-alive timeout
                sock.sendall(b"GET /health HTTP/1.1\r\nhost: p\r\n\r\n")
                sock.settimeout(10)
                answer = b""
                while b'"status":"ok"' not in answer:  # uvicorn writes the head and the body apart
                    chunk = sock.recv(4096)
                    assert chunk, answer
                    answer += chunk
                assert answer.startswith(b"HTTP/1.1 200")
                started = time.monotonic()
                assert sock.recv(4096) == b"" and time.monotonic() - started < 3  # closed once idle 0.5 s
        with ServerProcess(["serve", "--spec-on", on.url, "--spec-off", off.url]) as proxy:
            assert httpx.post(f"{proxy.url}/v1/chat/completions", json=body).status_code == 200
            # the collector's runs are exported; the full one that settled the startup heap among them
            scrape = httpx.get(f"{proxy.url}/metrics").text
            assert metric_value(scrape, "python_gc_collections_total", generation="2") >= 1


def test_a_cold_tool_call_right_after_start_goes_where_its_estimate_says_beside_a_busy_processor() -> None:
    """The proxy takes connections only once it has checked and scraped its pools: the first
    request, sent the moment it answers, is routed on what the pools are (up, idle, drafting 8
    tokens a round as their /metrics say), not on a guess, however slow a busy machine (here,
    and a speculation pool's /metrics answering in 0.8 s) makes that."""
    body = {"model": MODEL, "messages": [{"role": "system", "content": "You are an agent. Call tools."}, *USER],
            "tool_choice": "required", "temperature": 0,
            "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {
                "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]}
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with emulator(22, True, faults=Faults(metrics_delay=0.8)) as on, emulator(22, False) as off:
            for _ in range(3):
                # exploration would send 2% elsewhere on purpose; the route asserted is the gate's own
                with ServerProcess(["serve", "--spec-on", on.url, "--spec-off", off.url],
                                   env={"DRAFTGATE_EXPLORATION_SHARE": "0"}) as proxy:
                    answer = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=60)
                    assert answer.status_code == 200
                    assert float(answer.headers["x-draftgate-predicted-saving"]) > 0
                    assert wait_until(lambda: '"event": "request"' in proxy.output())
                    (served,) = [json.loads(line) for line in proxy.output().splitlines()
                                 if line.startswith("{") and '"event": "request"' in line]
                    assert (served["decided"], served["route"], served["failovers"]) == ("spec-on", "spec-on", 0), \
                        served
    finally:
        burner.kill()
        burner.wait()


def test_serve_takes_the_hard_open_files_limit_so_connections_do_not_starve_accept() -> None:
    """Container runtimes start processes with a soft limit of 1,024 descriptors; past it
    accept() fails and new clients are turned away. The proxy raises it to the hard limit at start."""
    with emulator(25, True) as on, emulator(25, False) as off, \
            ServerProcess(["serve", "--spec-on", on.url, "--spec-off", off.url], open_files=256) as proxy:
        row = next(line for line in Path(f"/proc/{proxy.process.pid}/limits").read_text().splitlines()
                   if line.startswith("Max open files"))
        soft, hard = row.split()[3:5]
        assert soft == hard, row
        assert "open files limit raised from 256 to" in proxy.output()
        assert metric_value(httpx.get(f"{proxy.url}/metrics").text, "process_max_fds") == float(hard)
        idle = [socket.create_connection(("127.0.0.1", proxy.port)) for _ in range(400)]
        try:  # more connections than the limit the proxy was started with, and one more request
            assert httpx.post(f"{proxy.url}/v1/chat/completions", json={"model": MODEL, "messages": USER},
                              timeout=10).status_code == 200
            assert metric_value(httpx.get(f"{proxy.url}/metrics").text, "process_open_fds") > 400
        finally:
            for sock in idle:
                sock.close()


def test_sigterm_lets_requests_in_flight_finish_within_the_grace(tmp_path: Path) -> None:
    """A rollout sends SIGTERM: the proxy refuses new connections at once and lets
    requests in flight run to their end. What would outlast graceful_shutdown_seconds
    is ended just before it, in a form clients understand: a stream with vLLM's error
    event, an answer not yet begun with a 503 to retry elsewhere. No traceback."""
    stream = {"model": MODEL, "messages": USER, "reasoning_effort": "high", "max_tokens": 1500, "stream": True}
    whole = {**stream, "stream": False}
    with emulator(25, True, time_scale=0.1) as on, emulator(25, False, time_scale=0.1) as off:
        for grace, run_to_the_end in ((30, True), (1.0, False)):
            cfg = tmp_path / f"grace-{grace}.yaml"
            cfg.write_text(yaml.safe_dump({"pools": [{"name": "spec-on", "urls": [on.url], "speculation": {"gamma": 8}},
                                                     {"name": "spec-off", "urls": [off.url]}],
                                           "timeouts": {"graceful_shutdown": grace}}))
            with ServerProcess(["serve", "--config", str(cfg)]) as proxy:
                lines: list[str] = []
                answers: list[httpx.Response] = []

                def read_stream() -> None:
                    with httpx.stream("POST", f"{proxy.url}/v1/chat/completions", json=stream, timeout=60) as r:
                        lines.extend(line for line in r.iter_lines() if line)

                def read_whole() -> None:
                    answers.append(httpx.post(f"{proxy.url}/v1/chat/completions", json=whole, timeout=60))

                clients = [threading.Thread(target=read_stream), threading.Thread(target=read_whole)]
                for client in clients:
                    client.start()
                assert wait_until(lambda: len(lines) > 10, 20), "the stream never started"
                started = time.monotonic()
                proxy.process.send_signal(signal.SIGTERM)
                time.sleep(0.3)
                with pytest.raises(httpx.ConnectError):
                    httpx.get(f"{proxy.url}/health")
                for client in clients:
                    client.join(60)
                # uvicorn re-raises the signal once it has shut down cleanly: it dies "by SIGTERM"
                assert proxy.process.wait(30) in (0, -signal.SIGTERM)
                assert lines[-1] == "data: [DONE]" and len(answers) == 1
                events = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
                if run_to_the_end:
                    assert events[-1]["choices"][0]["finish_reason"] == "length"
                    assert answers[0].status_code == 200
                else:
                    assert time.monotonic() - started < grace + 3, "the grace was not honoured"
                    assert events[-1]["error"]["code"] == 503 and "shutting down" in events[-1]["error"]["message"]
                    assert answers[0].status_code == 503 and answers[0].headers["retry-after"] == "1"
                    assert answers[0].json()["error"]["code"] == "shutting_down"
                    logged = [json.loads(x) for x in proxy.output().splitlines() if '"event": "request"' in x]
                    assert sorted(entry["status"] for entry in logged) == [503, 503]
                assert "Traceback" not in proxy.output()


def test_reload_endpoint_needs_the_admin_token(tmp_path: Path) -> None:
    with emulator(22, True) as on, emulator(22, False) as off:
        cfg = tmp_path / "c.yaml"
        config = {"pools": [{"name": "spec-on", "urls": [on.url], "speculation": {"gamma": 8}},
                            {"name": "spec-off", "urls": [off.url]}], "admin_token": "s3cret", "log_requests": False}
        cfg.write_text(yaml.safe_dump(config))
        app = create_app(load_settings(cfg), reload_settings=lambda: load_settings(cfg))
        with proxy_server(app) as proxy:
            assert httpx.post(f"{proxy.url}/draftgate/reload").status_code == 401
            config["pools"][0]["speculation"]["gamma"] = 4
            cfg.write_text(yaml.safe_dump(config))
            r = httpx.post(f"{proxy.url}/draftgate/reload", headers={"authorization": "Bearer s3cret"})
            assert r.status_code == 200 and r.json()["reloaded"] and r.json()["restart_needed"] == []
            assert app.state.proxy.upstreams.pool("spec-on").config.speculation.gamma == 4
            # a table sized at startup keeps its size: the answer says so, each time, until a restart
            config["affinity_capacity"] = 10
            cfg.write_text(yaml.safe_dump(config))
            for _ in range(2):
                r = httpx.post(f"{proxy.url}/draftgate/reload", headers={"authorization": "Bearer s3cret"})
                assert r.status_code == 200 and r.json()["restart_needed"] == ["affinity_capacity"]
            assert app.state.proxy.planner.affinity.capacity == 100_000
            cfg.write_text("pools: [")
            r = httpx.post(f"{proxy.url}/draftgate/reload", headers={"authorization": "Bearer s3cret"})
            assert r.status_code == 400 and "YAML" in r.json()["error"]["message"]
            assert app.state.proxy.upstreams.pool("spec-on").config.speculation.gamma == 4


def test_reload_keeps_in_flight_requests(tmp_path: Path) -> None:
    with emulator(23, True, time_scale=0.1) as on, emulator(23, False, time_scale=0.1) as off:
        cfg = tmp_path / "c.yaml"
        config = {"pools": [{"name": "spec-on", "urls": [on.url], "speculation": {"gamma": 8}},
                            {"name": "spec-off", "urls": [off.url]}], "admin_token": "t", "log_requests": False}
        cfg.write_text(yaml.safe_dump(config))
        app = create_app(load_settings(cfg), reload_settings=lambda: load_settings(cfg))
        with proxy_server(app) as proxy:
            async def run() -> int:
                async with httpx.AsyncClient(timeout=60) as h:
                    slow = asyncio.ensure_future(h.post(f"{proxy.url}/v1/chat/completions", json={
                        "model": MODEL, "messages": USER, "reasoning_effort": "low"}))
                    await asyncio.sleep(0.2)
                    r = await h.post(f"{proxy.url}/draftgate/reload", headers={"authorization": "Bearer t"})
                    assert r.status_code == 200
                    return (await slow).status_code
            assert asyncio.run(run()) == 200


def test_api_keys_and_upstream_key() -> None:
    with stack(24, api_keys=["client-key"]) as st:
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json={"model": MODEL, "messages": USER})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json={"model": MODEL, "messages": USER, "max_tokens": 2},
                       headers={"authorization": "Bearer client-key"})
        assert r.status_code == 200
        backend = st.on.url if r.headers["x-draftgate-route"] == "spec-on" else st.off.url
        seen = httpx.get(f"{backend}/debug/requests").json()[-1]
        assert "authorization" not in seen["headers"]  # the proxy's key is not the backend's
        # every /v1 route is guarded, as vLLM guards them with its own key
        for path in ("/v1/models", "/v1/embeddings"):
            refused = httpx.request("GET" if path == "/v1/models" else "POST", f"{st.proxy.url}{path}", json={})
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key", path
        models = httpx.get(f"{st.proxy.url}/v1/models", headers={"authorization": "Bearer client-key"})
        assert models.status_code == 200 and [m["id"] for m in models.json()["data"]] == [MODEL]
        # a path that names no route is refused for want of a key before it is found wanting
        with httpx.Client() as client:
            for headers, status in (({}, 401), ({"authorization": "Bearer client-key"}, 404)):
                dotted = client.build_request("POST", f"{st.proxy.url}/", json={}, extensions={"target": b"/v1/../x"},
                                              headers=headers)
                assert client.send(dotted).status_code == status, headers


def test_a_browsers_cors_preflight_is_answered_as_the_pool_answers_it() -> None:
    """vLLM answers CORS preflights as its --allowed-origins say. A browser client of
    the proxy must get the same answer, though its preflight carries no API key."""
    origin = {"origin": "https://agent.example"}
    preflight = {**origin, "access-control-request-method": "POST",
                 "access-control-request-headers": "authorization, content-type"}

    def cors(r: httpx.Response) -> dict[str, str]:
        return {k: v for k, v in r.headers.items() if k.startswith("access-control-")}

    with stack(27, api_keys=["client-key"]) as st:
        for path in ("/v1/chat/completions", "/v1/models"):
            via = httpx.options(f"{st.proxy.url}{path}", headers=preflight)
            direct = httpx.options(f"{st.off.url}{path}", headers=preflight)
            assert via.status_code == direct.status_code == 200, (path, via.text)
            assert cors(via) == cors(direct) and cors(via)["access-control-allow-origin"] == "*", path
        body = {"model": MODEL, "messages": USER, "max_tokens": 2}
        answer = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body,
                            headers={**origin, "authorization": "Bearer client-key"})
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == "*"
        # the preflight needs no key; the request it clears still does
        assert httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body, headers=origin).status_code == 401


def test_answers_the_proxy_makes_itself_carry_cors_headers_as_vllms_do() -> None:
    """The merged model list, a 400 or a 401 never come from a pool, so a pool's
    CORS headers cannot come with them. Without their own, a browser could not list
    models and would see every proxy-made error as a CORS failure."""
    origin = {"origin": "https://agent.example"}
    key = {"authorization": "Bearer client-key"}

    def allow_origin(r: httpx.Response) -> list[str]:
        return r.headers.get_list("access-control-allow-origin")

    with stack(37, api_keys=["client-key"]) as st:
        via = httpx.get(f"{st.proxy.url}/v1/models", headers={**origin, **key})
        direct = httpx.get(f"{st.off.url}/v1/models", headers=origin)
        assert via.status_code == direct.status_code == 200
        assert allow_origin(via) == allow_origin(direct) == ["*"]
        malformed = httpx.post(f"{st.proxy.url}/v1/chat/completions", content=b"{", headers={**origin, **key,
                                                                                             "content-type": "application/json"})
        assert malformed.status_code == 400 and allow_origin(malformed) == ["*"]
        assert allow_origin(httpx.get(f"{st.proxy.url}/v1/models", headers=origin)) == ["*"]  # the 401
        # a pool's own answer keeps its header, not a second one
        body = {"model": MODEL, "messages": USER, "max_tokens": 2}
        answer = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body, headers={**origin, **key})
        assert answer.status_code == 200 and allow_origin(answer) == ["*"]
        # clients that are not browsers send no Origin and get no CORS headers
        plain = httpx.get(f"{st.proxy.url}/v1/models", headers=key)
        assert not [k for k in plain.headers if k.startswith("access-control-")]

    with stack(38, cors={"allowed_origins": ["https://agent.example"], "allow_credentials": True}) as st:
        listed = httpx.get(f"{st.proxy.url}/v1/models", headers=origin)
        assert allow_origin(listed) == ["https://agent.example"]  # named: "*" is refused with credentials
        assert listed.headers["access-control-allow-credentials"] == "true" and "Origin" in listed.headers["vary"]
        stranger = httpx.get(f"{st.proxy.url}/v1/models", headers={"origin": "https://elsewhere.example"})
        assert stranger.status_code == 200 and not allow_origin(stranger)


def test_a_passed_through_answer_cut_midway_is_cut_for_the_client_too() -> None:
    """Bytes of it have gone, so no other pool can take over; but ending it cleanly
    would hand the client a truncated body as whole. The client's connection drops,
    as a direct client's would, and the proxy says so in one JSON line, no traceback."""
    with emulator(30, True) as on, emulator(30, False) as off, \
            ServerProcess(["serve", "--spec-on", on.url, "--spec-off", off.url]) as proxy:
        httpx.post(f"{off.url}/debug/faults", json={"cut_answer_short": True})
        for url in (off.url, proxy.url):
            with pytest.raises(httpx.RemoteProtocolError):
                httpx.post(f"{url}/tokenize", json={"prompt": "How many tokens is this?"}, timeout=30)
        with socket.create_connection(("127.0.0.1", proxy.port)) as raw:  # uvicorn's own warning, too
            raw.sendall(b"NOT HTTP\r\n\r\n")
            assert raw.recv(100).startswith(b"HTTP/1.1 400")
        assert wait_until(lambda: "Invalid HTTP request" in proxy.output())
        assert metric_value(httpx.get(f"{proxy.url}/metrics").text, "draftgate_upstream_errors_total",
                            error="mid_body") == 1
        lines = proxy.output().splitlines()[1:]  # after the "serving on" banner
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    (cut,) = [r for r in records if r["message"].startswith("a passed-through answer broke midway")]
    assert cut["replica"] == off.url and cut["path"] == "/tokenize" and "before the response was complete" in cut["error"]
    assert not [r for r in records if "traceback" in r]


def test_no_key_reaches_the_log(tmp_path: Path) -> None:
    """Client keys, right or wrong, the admin token and the keys sent upstream appear
    nowhere in what the proxy prints, at its most verbose."""
    secrets = ["client-secret", "wrong-secret", "admin-secret", "wrong-admin", "upstream-one", "upstream-two"]
    with emulator(26, True) as on, emulator(26, False) as off:
        cfg = tmp_path / "draftgate.yaml"
        cfg.write_text(yaml.safe_dump({
            "pools": [{"name": "spec-on", "urls": [on.url], "speculation": {"gamma": 8}, "api_key": "upstream-one"},
                      {"name": "spec-off", "urls": [off.url], "api_key": "upstream-two"}],
            "api_keys": ["client-secret"], "admin_token": "admin-secret"}))
        with ServerProcess(["serve", "--config", str(cfg), "--log-level", "debug"]) as proxy, \
                httpx.Client(timeout=30) as h:
            statuses = [h.post(f"{proxy.url}/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
                               json={"model": MODEL, "messages": USER, "max_tokens": 2}).status_code
                        for key in ("client-secret", "wrong-secret")]
            assert statuses == [200, 401]
            assert h.post(f"{proxy.url}/draftgate/reload", headers={"authorization": "Bearer wrong-admin"}
                          ).status_code == 401
            assert h.post(f"{proxy.url}/draftgate/reload", headers={"authorization": "Bearer admin-secret"}
                          ).status_code == 200
            output = proxy.output()
    assert '"event": "request"' in output  # the request log was written
    assert not [secret for secret in secrets if secret in output]


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


def test_a_failing_gate_or_recorder_never_costs_the_client_its_answer() -> None:
    """Bugs in weighing or recording a request are contained: the request is served
    (by a plain pool, unassessed), counted, and no replica slot is leaked."""
    with stack(11) as st:
        proxy = st.proxy.server.config.app.state.proxy

        def broken_plan(*args: object) -> None:
            raise ZeroDivisionError("a bug in the gate")

        def broken_finish(*args: object) -> None:
            raise KeyError("a bug in the recorder")

        proxy.planner.plan = broken_plan
        proxy.recorder.record = broken_finish
        tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
        with httpx.Client(timeout=30) as h:
            for stream in (False, True):
                r = h.post(f"{st.proxy.url}/v1/chat/completions",
                           json={"model": MODEL, "messages": USER, "tools": [tool], "tool_choice": "required",
                                 "temperature": 0, "stream": stream, "max_tokens": 16})
                assert r.status_code == 200 and r.headers["x-draftgate-route"] == "spec-off"
                assert "the gate failed" not in r.text  # the client sees the backend's answer, nothing else
        assert st.metric("draftgate_gate_errors_total") == 2
        assert wait_until(lambda: all(p.inflight == 0 for p in proxy.upstreams.pools))


def test_model_names_clients_type_cannot_grow_the_metrics_without_bound() -> None:
    """With no pool answering, the proxy cannot tell real model names from typos and admits
    them all; past MAX_MODEL_LABELS distinct names their series share the label "other", as
    does a name too long to be one."""
    down = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]  # nothing listens there
    with proxy_server(create_app(proxy_settings(*down))) as proxy, httpx.Client(timeout=30) as h:
        names = ["x" * (MAX_MODEL_LABEL_CHARS + 1)] + [f"typo-{i}" for i in range(MAX_MODEL_LABELS + 8)]
        for name in names:
            r = h.post(f"{proxy.url}/v1/chat/completions", json={"model": name, "messages": USER})
            assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_unavailable"
        text = h.get(f"{proxy.url}/metrics").text
    labelled = {name for name in names if metric_value(text, "draftgate_requests_total", model=name) > 0}
    assert len(labelled) == MAX_MODEL_LABELS and names[0] not in labelled
    assert metric_value(text, "draftgate_requests_total", model=OTHER_MODELS) == 9
    assert metric_value(text, "draftgate_requests_total") == len(names)


SCHEMA_CALL = {"model": MODEL, "messages": USER, "temperature": 0, "max_tokens": 8,
               "response_format": {"type": "json_object"}}


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
