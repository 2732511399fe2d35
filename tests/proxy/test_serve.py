"""``draftgate serve`` as an operator runs it: the start, the first request, reloads, signals, limits."""

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
from draftgate.proxy.config import load_settings
from draftgate.servers import ServerProcess
from tests.conftest import emulator
from tests.proxy_harness import (
    container_health_check,
    metric_value,
    proxy_server,
    wait_until,
)

MODEL = "Qwen/Qwen3-32B"
USER = [{"role": "user", "content": "hello"}]


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
