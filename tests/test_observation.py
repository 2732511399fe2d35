"""Predicted against observed: the proxy's metrics after known traffic, both tau sources."""

from __future__ import annotations

import time

import httpx
import pytest

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
        assert metric_value(text, "draftgate_gpu_seconds_saved_total") > 0
        assert metric_value(text, "draftgate_money_saved_total", currency="USD") > 0
        # the exact root demands less acceptance than the paper's closed form
        assert metric_value(text, "draftgate_break_even_acceptance", form="exact", load_band="1") < \
            metric_value(text, "draftgate_break_even_acceptance", form="closed_form", load_band="1")
        assert metric_value(text, "draftgate_calibration_is_default") == 1
        assert metric_value(text, "draftgate_decode_seconds_per_token_count") >= 1


def test_counter_attribution_when_responses_carry_no_metrics() -> None:
    # always_on: prose goes to the speculation pool too, so windows mix classes
    with stack(3, exploration_share=0.0, scrape_interval=0.25, on_kwargs={"per_request_metrics": "none"},
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
            attributed = metric_value(text, "draftgate_attributed_tau", pool="spec-on", **{"class": cls})
            assert attributed == pytest.approx(truth["tau"][cls], rel=0.15, abs=0.15), cls
        assert metric_value(text, "draftgate_observed_tau_count", source="counters") > 0


def test_exploration_sends_a_share_to_the_other_pool() -> None:
    with stack(4, exploration_share=0.5) as st:
        routes = [httpx.post(f"{st.proxy.url}/v1/chat/completions", json=schema_body(i), timeout=60)
                  .headers["x-draftgate-route"] for i in range(16)]
        assert "spec-off" in routes and "spec-on" in routes
        explored = st.metric("draftgate_exploration_requests_total")
        assert explored == routes.count("spec-off")
