"""The live plan checked against what the pools do: predicted beside observed latencies per pool, the
step time corrected from the difference, and no traffic moved on a gain within the plan's own error."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from draftgate.policy import plan as plans
from draftgate.policy.plan import LEAST_ANSWERS, Latencies, PlanFeedback
from draftgate.proxy.metrics import ProxyMetrics
from draftgate.proxy.planner import Planner
from draftgate.proxy.pools import PoolSet
from tests.proxy_harness import metric_value, proxy_settings, stack

TARGETS = plans.Targets(2.0, 0.05)
MODEL = "Qwen/Qwen3-32B"


def _predicted(tpot_median: float) -> dict[str, Latencies]:
    return {"eagle": Latencies(tpot_median, tpot_median * 2, float("nan"), 0.5, 0.99)}


def test_a_pool_slower_than_predicted_has_its_steps_scaled_until_the_plan_agrees() -> None:
    feedback = PlanFeedback()
    feedback.predict(_predicted(0.020))
    for _ in range(LEAST_ANSWERS - 1):
        feedback.answered("eagle", 0.3, 0.040, 200)
    feedback.settle(TARGETS)  # too few answers to say anything
    assert feedback.step_scale("eagle") == 1.0 and feedback.error == 0.0
    errors = []
    for _ in range(6):  # each plan predicts with the scale so far; the pool keeps taking 40 ms a token
        feedback.predict(_predicted(0.020 * feedback.step_scale("eagle")))
        for i in range(100):
            feedback.answered("eagle", 0.3, 0.040 * (1 + (i % 5 - 2) / 100), 200)
        observed = feedback.settle(TARGETS)["eagle"]
        errors.append(feedback.error)
        assert observed.tpot_median == pytest.approx(0.040, rel=0.02) and observed.within == 1.0
    assert errors[0] == pytest.approx(1.0, rel=0.03)  # twice as slow as predicted
    assert feedback.step_scale("eagle") == pytest.approx(2.0, rel=0.03)
    assert errors[-1] < 0.03 and all(a > b for a, b in zip(errors, errors[1:]))
    assert feedback.step_scale("plain") == feedback.step_scale("eagle")  # not timed yet: the others' scale
    feedback.keep_only({"plain"})
    assert feedback.step_scale("eagle") == 1.0 and not feedback.predicted


def test_the_observed_pace_counts_output_tokens_as_the_prediction_does() -> None:
    """Thirty three-token turns stalled to 300 ms a token beside ten paced 500-token answers: by answer
    the median pace is the stalled one, by output token (as the model predicts it) the paced one."""
    feedback = PlanFeedback()
    for _ in range(30):
        feedback.answered("eagle", 0.2, 0.300, 3)
    for _ in range(10):
        feedback.answered("eagle", 0.2, 0.020, 500)
    observed = feedback.settle(TARGETS)["eagle"]
    assert observed.tpot_median == 0.020 and observed.tpot_tail == 0.300 and observed.ttft_median == 0.2
    assert observed.within == pytest.approx(1 - 60 / (60 + 4990))


def test_a_move_within_the_plans_observed_error_is_not_made() -> None:
    from draftgate.policy.plan import FleetPlan

    plain, eagle = plans.Candidate("plain"), plans.Candidate("eagle3", "eagle3", 3)
    now = plans.Composition((plans.PoolPlan(plain, 1, ("prose",)), plans.PoolPlan(eagle, 1, ("tool",))), 10.0, 0.0)
    moved = plans.Composition((plans.PoolPlan(plain, 1, ()), plans.PoolPlan(eagle, 1, ("prose", "tool"))), 10.5, 0.0)
    assert FleetPlan(moved, [], None, now).gain == pytest.approx(0.05)
    assert FleetPlan(moved, [], None, None).gain == float("inf")  # nothing routed yet: take the plan
    # the proxy's planner keeps its routing for a 5% gain while its observed error is 10%, and takes it at 1%
    settings = proxy_settings("http://127.0.0.1:1", "http://127.0.0.1:2")
    planner = Planner(settings, PoolSet(settings.pools, 0), ProxyMetrics())
    on, off = plans.Candidate("spec-on", "draft_model", 8), plans.Candidate("spec-off")
    routed = plans.Composition((plans.PoolPlan(off, 1, ("prose",)), plans.PoolPlan(on, 1, ("tool",))), 10.0, 0.0)
    better = plans.Composition((plans.PoolPlan(off, 1, ()), plans.PoolPlan(on, 1, ("prose", "tool"))), 10.5, 0.0)
    planner.adopt(FleetPlan(routed, [], None, None))
    assert planner.assignment is not None and planner.assignment.of("prose") == {"spec-off": 1.0}
    planner.feedback.error = 0.10
    planner.adopt(FleetPlan(better, [], None, routed))
    assert planner.assignment.of("prose") == {"spec-off": 1.0}
    planner.feedback.error = 0.01
    planner.adopt(FleetPlan(better, [], None, routed))
    assert planner.assignment.of("prose") == {"spec-on": 1.0}


async def _stream(client: httpx.AsyncClient, url: str, i: int) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"A short story, number {i}"}],
            "max_tokens": 24, "temperature": 0, "stream": True}
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as answer:
        assert answer.status_code == 200
        async for _ in answer.aiter_bytes():
            pass


def test_the_live_plan_closes_a_deliberate_error_in_its_step_times() -> None:
    """The pools run three times slower than the calibration says (the emulators' time scale): the first
    plan predicts a third of the time per token the answers take; the corrections close the gap."""
    slow = {"time_scale": 3.0}
    with stack(47, on_kwargs=slow, off_kwargs=slow, plan={"interval": 2.5, "assignment_interval": 1.0}) as st:
        errors: list[float] = []

        async def drive() -> None:
            async with httpx.AsyncClient(timeout=60) as client:
                deadline, i = time.monotonic() + 25, 0
                while time.monotonic() < deadline and not (len(errors) >= 3 and errors[-1] < errors[0] / 3):
                    await asyncio.gather(*(_stream(client, st.proxy.url, i + j) for j in range(16)))
                    i += 16
                    text = (await client.get(f"{st.proxy.url}/metrics")).text
                    error = metric_value(text, "draftgate_plan_observed_error_ratio")
                    if error > 0 and (not errors or error != errors[-1]):
                        errors.append(error)

        asyncio.run(drive())
        text = httpx.get(f"{st.proxy.url}/metrics", timeout=10).text
    assert len(errors) >= 3, errors
    assert errors[0] > 0.8, errors  # the deliberate error: answers far slower than predicted
    assert errors[-1] < errors[0] / 3, errors  # closed by the corrections
    scales = [line for line in text.splitlines() if line.startswith("draftgate_plan_step_scale_ratio{")]
    assert scales and max(float(line.rsplit(" ", 1)[1]) for line in scales) > 1.8
    for pool in ("spec-on", "spec-off"):
        predicted = metric_value(text, "draftgate_plan_predicted_latency_seconds", pool=pool, latency="tpot",
                                 quantile="0.5")
        observed = metric_value(text, "draftgate_plan_observed_latency_seconds", pool=pool, latency="tpot",
                                quantile="0.5")
        if predicted and observed:  # a pool the routing sent enough to
            assert predicted == pytest.approx(observed, rel=0.5), pool


def test_explain_gives_the_draft_law_for_the_requests_kind_where_the_live_plan_routes_it() -> None:
    from draftgate.cli.explain import render

    tool = {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tool_choice": "required",
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
            "temperature": 0}
    with stack(48, plan={"interval": 1.0, "assignment_interval": 0.5}) as st:
        assert httpx.post(f"{st.proxy.url}/draftgate/explain", json=tool).json()["plan_law"] is None  # no plan yet

        def planned() -> dict[str, object] | None:
            for i in range(4):
                httpx.post(f"{st.proxy.url}/v1/chat/completions", timeout=60, json=tool if i % 2 else {
                    "model": MODEL, "messages": [{"role": "user", "content": f"A story {i}"}], "max_tokens": 30})
            result = httpx.post(f"{st.proxy.url}/draftgate/explain", json=tool).json()
            return result if result["plan_law"] is not None else None

        deadline, result = time.monotonic() + 30, None
        while result is None and time.monotonic() < deadline:
            result = planned()
    assert result is not None, "no plan within 30 s"
    law = result["plan_law"]
    assert law["kind"] == result["kind"] == "tool" and law["pool"] in ("spec-on", "spec-off")
    assert law["w_s"] > 0.5 and law["batch"] > 0 and law["summary"].startswith(f"tool on {law['pool']}")
    assert f"fleet plan: {law['summary']}" in render(result)
