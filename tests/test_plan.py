"""``draftgate plan`` on a log recorded from the proxy, and the fleet model under it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from draftgate.policy import law
from draftgate.policy.calibration import Calibration
from draftgate.policy.fleet import ClassTraffic, Traffic, plan, pool_load
from draftgate.proxy.logs import RequestLog
from tests.proxy_harness import stack, wait_until

MODEL = "Qwen/Qwen3-32B"
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TAUS = {"s": 6.0, "r": 2.5, "f": 1.2}


def traffic(rate: float) -> Traffic:
    return Traffic(rate, (ClassTraffic("tool", 0.6, 30, 500, law.ClassMix(1, 0, 0), TAUS),
                          ClassTraffic("prose", 0.4, 200, 300, law.ClassMix(0, 0, 1), TAUS)))


def test_a_pool_batches_more_as_traffic_grows_and_overloads_past_its_slots() -> None:
    cal = Calibration()
    light = pool_load(traffic(0.5), traffic(0.5).classes, 1, 0, cal, 256)
    heavy = pool_load(traffic(20), traffic(20).classes, 1, 0, cal, 256)
    assert light is not None and heavy is not None
    assert light.batch < 1 < heavy.batch and heavy.tpot > light.tpot
    assert light.gpu_seconds_per_second < heavy.gpu_seconds_per_second <= 1.0
    # more traffic on one GPU shares each step among more requests: cheaper per token
    assert heavy.gpu_seconds_per_second / heavy.tokens_per_second < light.gpu_seconds_per_second / light.tokens_per_second
    assert pool_load(traffic(5000), traffic(5000).classes, 1, 0, cal, 256).overloaded


def test_light_tool_traffic_speculates_and_the_plan_is_the_cheapest_feasible_option() -> None:
    options = plan(traffic(2), Calibration(), 2, 8, 256, 48)
    best = options[0]
    assert best.feasible and best.meets_target
    assert "tool" in best.speculated
    assert all(best.cost_per_token <= o.cost_per_token for o in options if o.feasible)
    names = {o.name for o in options}
    assert {"all plain", "all speculating at depth 8"} <= names
    with_dynamic = plan(traffic(2), Calibration(), 2, 8, 256, 48, dynamic_k=[(1, 4, 8), (5, 1024, 2)])
    assert any(o.name.startswith("all with dynamic K") for o in with_dynamic)


def test_a_target_no_option_meets_leaves_them_ordered_by_cost_and_marked() -> None:
    options = plan(traffic(2), Calibration(), 2, 8, 256, 48, tpot_target=1e-6)
    assert not any(o.meets_target for o in options)
    assert [o.cost_per_token for o in options if o.feasible] == sorted(o.cost_per_token for o in options if o.feasible)


def test_draftgate_plan_on_a_log_the_proxy_recorded(tmp_path: Path) -> None:
    before, RequestLog.stream = RequestLog.stream, io.StringIO()
    try:
        with stack(41, log_requests=True) as st:
            for i in range(10):
                body = ({"model": MODEL, "messages": [{"role": "user", "content": f"Weather in city {i}?"}],
                         "tools": [TOOL], "tool_choice": "required", "temperature": 0} if i % 2 == 0 else
                        {"model": MODEL, "messages": [{"role": "user", "content": f"Tell a story {i}"}],
                         "max_tokens": 80, "temperature": 0})
                assert httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body, timeout=60).status_code == 200
            assert wait_until(lambda: RequestLog.stream.getvalue().count("\n") >= 10)
            recorded = RequestLog.stream.getvalue()
    finally:
        RequestLog.stream = before
    log = tmp_path / "draftgate.log"
    log.write_text("not json, from another process\n" + recorded)
    done = subprocess.run([sys.executable, "-m", "draftgate.proxy.cli.main", "plan", "--from-log", str(log),
                           "--gpus", "4", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result["classes"]) == {"tool", "prose"}
    assert result["classes"]["tool"]["share"] == pytest.approx(0.5)
    assert result["classes"]["tool"]["prompt_tokens"] > 0 and result["requests_per_second"] > 0
    options = result["options"]
    assert options[0]["feasible"] and sum(1 for o in options if o["spec_gpus"] + o["plain_gpus"] == 4) == len(options)
    text = subprocess.run([sys.executable, "-m", "draftgate.proxy.cli.main", "plan", "--from-log", str(log),
                           "--gpus", "4"], capture_output=True, text=True, timeout=120).stdout
    assert "PLAN" in text and "all plain" in text and "all speculating at depth 8" in text


def test_draftgate_plan_refuses_a_log_without_traffic(tmp_path: Path) -> None:
    log = tmp_path / "empty.log"
    log.write_text('{"event": "request", "status": 503, "ts": 1}\n')
    done = subprocess.run([sys.executable, "-m", "draftgate.proxy.cli.main", "plan", "--from-log", str(log),
                           "--gpus", "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("draftgate plan: error: ")


def test_draftgate_plan_from_a_proxys_metrics_over_a_window() -> None:
    import threading

    with stack(42) as st:
        stop = threading.Event()

        def traffic_for_a_while() -> None:
            with httpx.Client(timeout=60) as client:
                i = 0
                while not stop.is_set():
                    body = ({"model": MODEL, "messages": [{"role": "user", "content": f"Weather in {i}?"}],
                             "tools": [TOOL], "tool_choice": "required", "temperature": 0} if i % 2 == 0 else
                            {"model": MODEL, "messages": [{"role": "user", "content": f"A story {i}"}],
                             "max_tokens": 60, "temperature": 0})
                    client.post(f"{st.proxy.url}/v1/chat/completions", json=body)
                    i += 1

        sender = threading.Thread(target=traffic_for_a_while)
        sender.start()
        try:
            done = subprocess.run([sys.executable, "-m", "draftgate.proxy.cli.main", "plan", "--from-metrics",
                                   st.proxy.url, "--window", "2", "--gpus", "2", "--json"],
                                  capture_output=True, text=True, timeout=120)
        finally:
            stop.set()
            sender.join()
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result["classes"]) == {"tool", "prose"} and result["requests_per_second"] > 1
    assert result["classes"]["prose"]["output_tokens"] == pytest.approx(60, rel=0.2)
    assert result["classes"]["tool"]["prompt_tokens"] > 0
