"""Never lose a request another pool could serve: failover, ejection, capacity and
shedding, and a client's disconnect reaching the backend. The proxy under uvicorn
in front of emulated pools, as in test_proxy.py."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from draftgate.proxy.app import create_app
from tests.conftest import emulator
from tests.proxy_harness import (
    metric_value,
    proxy_server,
    proxy_settings,
    stack,
    wait_until,
)

MODEL = "Qwen/Qwen3-32B"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city", "unit"]}}}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_failover_when_a_pool_is_down() -> None:
    # health checks slow enough that requests, not the checker, find the dead pool first
    with stack(4, health={"interval": 30.0}) as st:
        # the first check runs at start-up: let it pass first, or it may be what finds the pool dead
        pools = st.proxy.server.config.app.state.proxy.upstreams.pools
        assert wait_until(lambda: all(r.checked_at > 0 for pool in pools for r in pool.replicas.values()))
        st.on.server.should_exit = True
        st.on.thread.join(timeout=10)
        for _ in range(5):
            r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json={
                "model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0},
                timeout=30)
            assert r.status_code == 200 and r.headers["x-draftgate-route"] == "spec-off"
        assert st.metric("draftgate_failovers_total") == 1  # then the dead replica is marked down
        ready = httpx.get(f"{st.proxy.url}/ready").json()
        assert ready["healthy_replicas"] == {"spec-on": 0, "spec-off": 1}


def test_failover_on_503_and_stream_dying_midway() -> None:
    with stack(5) as st:
        httpx.post(f"{st.on.url}/debug/faults", json={"error_status": 503})
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json={
            "model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0})
        assert r.status_code == 200 and r.headers["x-draftgate-route"] == "spec-off"
        assert st.metric("draftgate_failovers_total", reason="upstream answered 503") == 1
        httpx.post(f"{st.on.url}/debug/faults", json={"error_status": None})
        httpx.post(f"{st.off.url}/debug/faults", json={"die_after_tokens": 3})
        text = httpx.post(f"{st.proxy.url}/v1/chat/completions", json={
            "model": MODEL, "messages": USER, "temperature": 0.7, "stream": True, "max_tokens": 50}).text
        events = [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {")]
        assert "error" in events[-1] and events[-1]["error"]["code"] == 502
        assert text.rstrip().endswith("data: [DONE]")


def test_a_replica_failing_every_answer_leaves_rotation_though_its_health_checks_pass() -> None:
    """Its /health says 200, so only its answers tell. Without ejection every request
    sent its way fails over, spending the retry budget that real failovers need."""
    tool_call = {"model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0}
    with stack(39, health={"eject_after_failed_answers": 3, "ejection_seconds": 1.0}) as st:
        assert httpx.post(f"{st.proxy.url}/v1/chat/completions", json=tool_call).headers[
            "x-draftgate-route"] == "spec-on"
        httpx.post(f"{st.on.url}/debug/faults", json={"error_status": 503})
        answers = [httpx.post(f"{st.proxy.url}/v1/chat/completions", json=tool_call) for _ in range(8)]
        assert [a.status_code for a in answers] == [200] * 8
        assert {a.headers["x-draftgate-route"] for a in answers} == {"spec-off"}
        assert st.metric("draftgate_failovers_total") == 3  # then the gate saw the pool out of rotation
        assert st.metric("draftgate_replica_ejections_total", pool="spec-on") == 1
        ready = httpx.get(f"{st.proxy.url}/ready")  # health checks decide readiness, not ejections
        assert ready.status_code == 200 and ready.json()["ejected_replicas"] == {"spec-on": 1, "spec-off": 0}
        assert st.metric("draftgate_pool_healthy_replicas", pool="spec-on") == 0  # out of rotation
        assert httpx.get(f"{st.on.url}/health").status_code == 200
        httpx.post(f"{st.on.url}/debug/faults", json={"error_status": None})
        # the ejection ends by itself; the replica is back and serves its share again
        assert wait_until(lambda: httpx.post(f"{st.proxy.url}/v1/chat/completions", json=tool_call).headers[
            "x-draftgate-route"] == "spec-on", seconds=10)
        assert st.metric("draftgate_failovers_total") == 3


def test_a_replica_failing_half_its_answers_leaves_rotation_though_it_never_fails_many_in_a_row() -> None:
    """Failing every other answer, it would never eject by the in-a-row rule (off here),
    yet every second request sent its way costs a failover."""
    tool_call = {"model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0}
    with stack(40, health={"eject_after_failed_answers": 0, "eject_failure_share": 0.5, "ejection_window": 6,
                           "ejection_seconds": 60.0}) as st:
        httpx.post(f"{st.on.url}/debug/faults", json={"error_status": 503, "error_rate": 0.5})
        answers = []
        while st.metric("draftgate_replica_ejections_total", pool="spec-on") == 0 and len(answers) < 40:
            answers.append(httpx.post(f"{st.proxy.url}/v1/chat/completions", json=tool_call))
        assert [a.status_code for a in answers] == [200] * len(answers)  # failed over, none lost
        assert st.metric("draftgate_replica_ejections_total", pool="spec-on") == 1
        assert 0 < st.metric("draftgate_failovers_total") < len(answers)  # some failed, not all
        failovers = st.metric("draftgate_failovers_total")
        after = [httpx.post(f"{st.proxy.url}/v1/chat/completions", json=tool_call) for _ in range(6)]
        assert {a.headers["x-draftgate-route"] for a in after} == {"spec-off"}
        assert st.metric("draftgate_failovers_total") == failovers  # none sent its way meanwhile


def test_a_stream_that_breaks_before_its_first_event_goes_to_another_pool() -> None:
    """A replica that fails during prefill has sent headers and nothing else: the
    client has nothing yet, so the request is failed over, not answered with an error."""
    with stack(8) as st:
        body = {"model": MODEL, "messages": USER, "temperature": 0.7, "stream": True, "max_tokens": 20}
        chosen = httpx.post(f"{st.proxy.url}/draftgate/explain", json=body).json()["route"]
        dying, other = (st.off, "spec-on") if chosen == "spec-off" else (st.on, "spec-off")
        httpx.post(f"{dying.url}/debug/faults", json={"die_before_first_event": True})
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200 and r.headers["x-draftgate-route"] == other
        events = [json.loads(line[6:]) for line in r.text.split("\n\n") if line.startswith("data: {")]
        assert not any("error" in e for e in events) and events[-1]["choices"][0]["finish_reason"] == "length"
        assert st.metric("draftgate_failovers_total", from_pool=chosen, to_pool=other) == 1
        assert wait_until(lambda: all(p.inflight == 0 for p in st.proxy.server.config.app.state.proxy.upstreams.pools))


def test_an_answer_cut_short_goes_to_another_pool() -> None:
    """A non-streamed answer goes to the client whole, so until its last byte the
    client has nothing: a pool that dies while writing it is failed over."""
    with stack(9) as st:
        body = {"model": MODEL, "messages": USER, "temperature": 0.7, "max_tokens": 20}
        chosen = httpx.post(f"{st.proxy.url}/draftgate/explain", json=body).json()["route"]
        dying, other = (st.off, "spec-on") if chosen == "spec-off" else (st.on, "spec-off")
        httpx.post(f"{dying.url}/debug/faults", json={"cut_answer_short": True})
        with pytest.raises(httpx.RemoteProtocolError):  # what a direct client would get
            httpx.post(f"{dying.url}/v1/chat/completions", json=body, timeout=30)
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200 and r.headers["x-draftgate-route"] == other
        assert r.json()["choices"][0]["finish_reason"] == "length"
        assert st.metric("draftgate_failovers_total", from_pool=chosen, to_pool=other) == 1
        assert wait_until(lambda: all(p.inflight == 0 for p in st.proxy.server.config.app.state.proxy.upstreams.pools))


def test_a_model_one_pool_lacks_goes_only_to_pools_that_serve_it() -> None:
    """Pools may differ in what they serve (a LoRA adapter, a second model): whatever
    the gate would prefer, a request goes only to a pool that lists its model."""
    small = "Qwen/Qwen3-8B"
    with emulator(41, True) as on, emulator(41, False, model=small) as off:
        app = create_app(proxy_settings(on.url, off.url))
        with proxy_server(app) as proxy:
            tool_call = {"messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0}
            prose = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 20}
            for model, body, only in ((small, tool_call, "spec-off"), (MODEL, prose, "spec-on")):
                r = httpx.post(f"{proxy.url}/v1/chat/completions", json={"model": model, **body}, timeout=30)
                assert r.status_code == 200 and r.headers["x-draftgate-route"] == only, (model, r.text[:200])
                explained = httpx.post(f"{proxy.url}/draftgate/explain", json={"model": model, **body}).json()
                assert explained["route"] == only and f"{model} is served only by {only}" in explained["reasons"]
            # passed-through requests too: the plain pool is tried first, unless it lacks the model
            tokens = httpx.post(f"{proxy.url}/tokenize", json={"model": MODEL, "prompt": "count these"})
            assert tokens.status_code == 200 and tokens.headers["x-draftgate-route"] == "spec-on"


def test_saturated_speculation_pool_sheds_marginal_traffic() -> None:
    with stack(6, spec_max_num_seqs=2, on_kwargs={"max_num_seqs": 2, "time_scale": 0.1}) as st:
        async def run() -> list[str]:
            async with httpx.AsyncClient(timeout=60) as h:
                schema = {"type": "object", "properties": {"rows": {"type": "array", "minItems": 40, "maxItems": 40,
                          "items": {"type": "object", "properties": {"city": {"type": "string"}},
                                    "required": ["city"]}}}, "required": ["rows"]}
                bodies = [{"model": MODEL, "messages": [{"role": "user", "content": f"List {i}"}], "temperature": 0,
                           "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}}
                          for i in range(8)]
                rs = await asyncio.gather(*(h.post(f"{st.proxy.url}/v1/chat/completions", json=b) for b in bodies))
                assert all(r.status_code == 200 for r in rs)
                return [r.headers["x-draftgate-route"] for r in rs]
        routes = asyncio.run(run())
        assert "spec-off" in routes and "spec-on" in routes
        assert st.metric("draftgate_decisions_total", reason="capacity") >= 1


def test_a_pool_whose_kv_cache_is_full_takes_no_marginal_traffic() -> None:
    """vllm:kv_cache_usage_perc, scraped: a request sent to a pool whose cache is
    nearly full would wait for blocks or cause a preemption there."""
    body = {"model": MODEL, "messages": USER, "tools": [WEATHER], "tool_choice": "required", "temperature": 0}
    with stack(10) as st:
        def route() -> str:
            return httpx.post(f"{st.proxy.url}/draftgate/explain", json=body).json()["route"]

        assert route() == "spec-on"
        httpx.post(f"{st.on.url}/debug/faults", json={"kv_usage": 0.99})
        assert wait_until(lambda: route() == "spec-off"), "the next scrape should have read the full cache"
        r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body)
        assert r.status_code == 200 and r.headers["x-draftgate-route"] == "spec-off"
        assert st.metric("draftgate_decisions_total", route="spec-off", reason="capacity") == 1
        httpx.post(f"{st.on.url}/debug/faults", json={"kv_usage": None})
        assert wait_until(lambda: route() == "spec-on"), "room again: back to speculation"


def test_sheds_with_503_when_every_pool_is_full() -> None:
    slow = {"max_num_seqs": 1, "time_scale": 0.2}
    with stack(7, spec_max_num_seqs=1, off_max_num_seqs=1, queue_depth_per_replica=0, timeouts={"queue": 0.1},
               on_kwargs=slow, off_kwargs=slow) as st:
        async def run() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=60) as h:
                body = {"model": MODEL, "messages": USER, "reasoning_effort": "low", "temperature": 0}
                return await asyncio.gather(*(h.post(f"{st.proxy.url}/v1/chat/completions", json=body)
                                              for _ in range(4)))
        responses = asyncio.run(run())
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [200, 200, 503, 503], statuses
        shed = next(r for r in responses if r.status_code == 503)
        assert shed.headers["retry-after"] == "1" and shed.json()["error"]["code"] == "overloaded"
        assert st.metric("draftgate_shed_total") == 2


def test_client_disconnect_cancels_a_non_streamed_request_quickly() -> None:
    with stack(8, on_kwargs={"time_scale": 0.2}, off_kwargs={"time_scale": 0.2}) as st:
        async def run() -> float:
            body = {"model": MODEL, "messages": USER, "reasoning_effort": "high", "temperature": 0.7}
            async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=0.5)) as h:
                try:
                    await h.post(f"{st.proxy.url}/v1/chat/completions", json=body)
                    return 98.0  # answered within the read timeout: the test proves nothing
                except httpx.ReadTimeout:
                    pass  # the client gives up and closes its connection
                start = time.perf_counter()
                while time.perf_counter() - start < 5:
                    running = 0.0
                    for backend in (st.on, st.off):
                        text = (await h.get(f"{backend.url}/metrics")).text
                        running += metric_value(text, "vllm:num_requests_running")
                    if running == 0:
                        return time.perf_counter() - start
                    await asyncio.sleep(0.01)
                return 99.0
        # the answer would take seconds more; the bound is loose for a busy CI machine
        assert asyncio.run(run()) < 1.0
        assert st.metric("draftgate_requests_total", status="499") == 1


def test_client_disconnect_cancels_upstream_quickly() -> None:
    with stack(8, on_kwargs={"time_scale": 0.2}, off_kwargs={"time_scale": 0.2}) as st:
        async def run() -> float:
            async with httpx.AsyncClient(timeout=30) as h:
                body = {"model": MODEL, "messages": USER, "stream": True, "reasoning_effort": "high",
                        "temperature": 0.7}
                async with h.stream("POST", f"{st.proxy.url}/v1/chat/completions", json=body) as r:
                    route = r.headers["x-draftgate-route"]
                    async for _ in r.aiter_lines():
                        break
                backend = st.on.url if route == "spec-on" else st.off.url
                start = time.perf_counter()
                while time.perf_counter() - start < 5:
                    running = metric_value((await h.get(f"{backend}/metrics")).text, "vllm:num_requests_running")
                    if running == 0:
                        return time.perf_counter() - start
                    await asyncio.sleep(0.01)
                return 99.0
        assert asyncio.run(run()) < 1.0


def test_a_stream_received_whole_is_a_success_when_the_client_hangs_up_before_the_upstream_closes() -> None:
    """A benchmark client closes as soon as it reads ``[DONE]``; the upstream's close may
    come later. The client has its whole answer: a 200 with its usage, never a 499."""
    with stack(9) as st:
        for backend in (st.on, st.off):
            httpx.post(f"{backend.url}/debug/faults", json={"linger_after_done": 5.0})
        body = {"model": MODEL, "messages": USER, "stream": True, "max_tokens": 20, "temperature": 0.7,
                "stream_options": {"include_usage": True}}
        with httpx.Client(timeout=30) as h, h.stream("POST", f"{st.proxy.url}/v1/chat/completions", json=body) as r:
            lines = []
            for line in r.iter_lines():
                lines.append(line)
                if line == "data: [DONE]":
                    break  # and the client hangs up, the upstream still open
        assert any('"usage"' in line for line in lines)
        assert wait_until(lambda: st.metric("draftgate_requests_total", status="200") == 1), \
            st.metric("draftgate_requests_total", status="499")
        assert st.metric("draftgate_requests_total", status="499") == 0
        assert st.metric("draftgate_output_tokens_total") > 0


def test_a_long_non_streamed_answer_is_waited_for_as_a_direct_client_waits() -> None:
    """vLLM sends a non-streamed answer whole, once generated: its first byte comes
    after the whole generation, minutes of it for long reasoning. Timed as a
    stream's first event, such an answer was cut, generated again on the other
    pool, cut there too, and answered 504, where a direct client got it."""
    story = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 60,
             "temperature": 0.7}
    slow = {"time_scale": 1.0}  # 60 tokens take about a second, twice first_byte_timeout
    with stack(41, timeouts={"first_byte": 0.5}, on_kwargs=slow, off_kwargs=slow) as st:
        started = time.monotonic()
        whole = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=story, timeout=60)
        assert whole.status_code == 200 and time.monotonic() - started > 0.5, whole.text
        assert whole.json()["choices"][0]["finish_reason"] == "length"
        # streamed, the same answer's events each come well within first_byte_timeout
        streamed = httpx.post(f"{st.proxy.url}/v1/chat/completions", json={**story, "stream": True}, timeout=60)
        assert streamed.status_code == 200 and '"error"' not in streamed.text
        assert st.metric("draftgate_failovers_total") == 0
        # a pool that stays silent past first_byte_timeout still loses a stream to the other
        chosen = streamed.headers["x-draftgate-route"]
        silent = st.on if chosen == "spec-on" else st.off
        httpx.post(f"{silent.url}/debug/faults", json={"first_byte_delay": 2.0})
        moved = httpx.post(f"{st.proxy.url}/v1/chat/completions", json={**story, "stream": True}, timeout=60)
        assert moved.status_code == 200 and moved.headers["x-draftgate-route"] != chosen
        assert st.metric("draftgate_failovers_total", reason="timed out before the first byte") == 1
    with stack(42, timeouts={"first_byte": 0.5, "answer": 0.5}, on_kwargs=slow, off_kwargs=slow) as st:
        cut = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=story, timeout=60)
        assert cut.status_code == 504  # answer_timeout is the bound on a whole answer
