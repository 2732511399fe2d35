"""Predicted against observed: the proxy's metrics after known traffic, both tau sources."""

from __future__ import annotations

import time

import httpx
import pytest

from draftgate.emulator import truth
from tests.proxy_harness import metric_value, stack

MODEL = "Qwen/Qwen3-32B"


def schema_body(i: int) -> dict:
    schema = {"type": "object", "properties": {"items": {"type": "array", "minItems": 8, "maxItems": 8, "items": {
        "type": "object", "properties": {"name": {"type": "string"}, "qty": {"type": "integer"}},
        "required": ["name", "qty"]}}}, "required": ["items"]}
    return {"model": MODEL, "messages": [{"role": "user", "content": f"Order {i}"}], "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": schema}}}


def prose_body(i: int, stream: bool = False) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": f"Tell me a story {i}"}], "temperature": 0,
            "max_tokens": 120, "stream": stream}


@pytest.mark.parametrize("seed", [1, 2])
def test_metrics_after_known_traffic_match_the_emulators_truth(seed: int) -> None:
    with stack(seed, exploration_share=0.0, price_per_gpu_hour=3.0) as st:
        tokens = 0
        for i in range(12):
            r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=schema_body(i), timeout=60)
            assert r.headers["x-draftgate-route"] == "spec-on"
            tokens += r.json()["usage"]["completion_tokens"]
        for i in range(4):
            r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=prose_body(i, stream=True), timeout=60)
            assert r.status_code == 200
        text = httpx.get(f"{st.proxy.url}/metrics").text
        assert metric_value(text, "draftgate_requests_total", route="spec-on", status="200") == 12
        assert metric_value(text, "draftgate_observed_schema_fraction_count", pool="spec-on") == 12
        assert metric_value(text, "draftgate_observed_schema_fraction_sum", pool="spec-on") == pytest.approx(12)
        assert metric_value(text, "draftgate_output_tokens_total", pool="spec-on", token_class="s") == \
            pytest.approx(tokens)
        count = metric_value(text, "draftgate_observed_tau_count", pool="spec-on", source="per_request")
        mean_tau = metric_value(text, "draftgate_observed_tau_sum", pool="spec-on", source="per_request") / count
        truth = httpx.get(f"{st.on.url}/debug/ground-truth").json()
        assert count == 12
        assert mean_tau == pytest.approx(truth["tau"]["s"], rel=0.15)
        # only one pool was timed for this class: no saving is measured, so none is counted
        assert metric_value(text, "draftgate_gpu_seconds_saved_total") == 0
        assert metric_value(text, "draftgate_modelled_net_cost_ratio_count", pool="spec-on") == 12
        # the exact root demands less acceptance than the paper's closed form
        assert metric_value(text, "draftgate_break_even_acceptance", form="exact", load_band="1") < \
            metric_value(text, "draftgate_break_even_acceptance", form="closed_form", load_band="1")
        assert metric_value(text, "draftgate_calibration_is_default") == 1
        assert metric_value(text, "draftgate_decode_seconds_per_token_count") >= 1


def _truth(response: httpx.Response) -> dict[str, float]:
    return truth.read(response.headers[truth.HEADER])


def test_the_observed_saving_is_measured_from_time_and_matches_the_emulators_truth() -> None:
    """Exploration sends half the JSON requests to the plain pool, so both pools are timed in the
    same class and load band: the saving the proxy exports, and counts in GPU-seconds, is the
    one the emulator's clock gives, not the law at the observed acceptance."""
    slow = {"time_scale": 0.2}  # a step of 20 ms takes 4 ms: the proxy's own time is lost in it
    with stack(4, exploration_share=0.5, price_per_gpu_hour=3.0, on_kwargs=slow, off_kwargs=slow) as st:
        per_token: dict[str, list[float]] = {"spec-on": [], "spec-off": []}
        for i in range(24):
            r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=schema_body(i), timeout=60)
            t = _truth(r)
            per_token[r.headers["x-draftgate-route"]].append((t["ttft"] + t["tpot"] * (t["tokens"] - 1)) / t["tokens"])
        text = httpx.get(f"{st.proxy.url}/metrics").text
    assert len(per_token["spec-on"]) >= 5 and len(per_token["spec-off"]) >= 5
    expected = 1 - (sum(per_token["spec-on"]) / len(per_token["spec-on"])) / (
        sum(per_token["spec-off"]) / len(per_token["spec-off"]))
    measured = metric_value(text, "draftgate_observed_time_saving_ratio", pool="spec-on", load_band="1")
    assert expected > 0.3
    assert measured == pytest.approx(expected, abs=0.08)
    assert metric_value(text, "draftgate_gpu_seconds_saved_total") > 0
    assert metric_value(text, "draftgate_gpu_seconds_lost_total") == 0
    assert metric_value(text, "draftgate_money_saved_total", currency="USD") > 0
    predicted = metric_value(text, "draftgate_predicted_net_cost_ratio_sum", pool="spec-on") / metric_value(
        text, "draftgate_predicted_net_cost_ratio_count", pool="spec-on")
    drift = metric_value(text, "draftgate_saving_drift_ratio", pool="spec-on")
    assert drift == pytest.approx((1 - predicted) - measured, abs=0.15)
    # the gate chose the kind of pool the measured saving says was cheaper: no routing regret
    assert metric_value(text, "draftgate_routed_gpu_seconds_total", kind="json") > 0
    assert metric_value(text, "draftgate_routing_regret_gpu_seconds_total") == 0


def test_routing_regret_is_estimated_from_what_exploration_measures() -> None:
    """A margin of 90% keeps JSON off the speculation pool, which exploration shows saves a third
    or more: each gated request's regret is that saving of the GPU time it caused on the plain
    pool, so their ratio on the dashboard is the measured saving."""
    slow = {"time_scale": 0.2}
    with stack(4, exploration_share=0.5, default_policy={"margin": 0.9}, on_kwargs=slow, off_kwargs=slow) as st:
        for i in range(24):
            httpx.post(f"{st.proxy.url}/v1/chat/completions", json=schema_body(i), timeout=60)
        text = httpx.get(f"{st.proxy.url}/metrics").text
    measured = metric_value(text, "draftgate_observed_time_saving_ratio", pool="spec-on", load_band="1")
    routed = metric_value(text, "draftgate_routed_gpu_seconds_total", kind="json")
    regret = metric_value(text, "draftgate_routing_regret_gpu_seconds_total", kind="json")
    assert measured > 0.3 and routed > 0
    assert regret / routed == pytest.approx(measured, abs=0.1)


def test_counter_attribution_when_responses_carry_no_metrics() -> None:
    # always_on: prose goes to the speculation pool too, so windows mix classes
    with stack(3, exploration_share=0.0, health={"scrape_interval": 0.25}, on_kwargs={"per_request_metrics": "none"},
               pools_per_request_metrics=False, models={MODEL: {"mode": "always_on"}}) as st:
        # windows with different S:F mixes, so per-class acceptance is identifiable
        for window in range(8):
            n_schema, n_prose = (3, 0) if window % 2 == 0 else (1, 2)
            for i in range(n_schema):
                httpx.post(f"{st.proxy.url}/v1/chat/completions", json=schema_body(100 * window + i), timeout=60)
            for i in range(n_prose):
                r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=prose_body(100 * window + i), timeout=60)
                assert r.status_code == 200 and r.headers["x-draftgate-route"] == "spec-on"
            time.sleep(0.6)
        text = httpx.get(f"{st.proxy.url}/metrics").text
        truth = httpx.get(f"{st.on.url}/debug/ground-truth").json()
        for cls in ("s", "f"):
            attributed = metric_value(text, "draftgate_attributed_tau", pool="spec-on", token_class=cls)
            assert attributed == pytest.approx(truth["tau"][cls], rel=0.15, abs=0.15), cls
        assert metric_value(text, "draftgate_observed_tau_count", source="counters") > 0


def test_exploration_sends_a_share_to_the_other_pool() -> None:
    with stack(4, exploration_share=0.5) as st:
        routes = [httpx.post(f"{st.proxy.url}/v1/chat/completions", json=schema_body(i), timeout=60)
                  .headers["x-draftgate-route"] for i in range(16)]
        assert "spec-off" in routes and "spec-on" in routes
        explored = st.metric("draftgate_exploration_requests_total")
        assert explored == routes.count("spec-off")
