"""The proxy's scrape parser reads vLLM's exposition as a full Prometheus parser would."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from draftgate.emulator.metrics import EngineMetrics
from draftgate.vllm_metrics import SCRAPED, parse_vllm_metrics

# What a second engine, a label value with braces and spaces, *_created samples
# (vLLM does not export them, other exporters do) and comments look like.
AWKWARD = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 5.0
vllm:num_requests_running{engine="1",model_name="odd {name} with spaces"} 3.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 321
vllm:generation_tokens_total{engine="1",model_name="m"} 1.5e3
vllm:generation_tokens_created{engine="1",model_name="m"} 1.7e9
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 2
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 4
"""


def reference(text: str) -> dict[str, float]:
    """prometheus_client's parser, summing the scraped series over label sets."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            values["speculative_tokens"] = max(float(s.labels["position"]) + 1 for s in family.samples)
        key = SCRAPED.get(family.name)
        for sample in family.samples if key else ():
            if not sample.name.endswith("_created"):
                values[key] = values.get(key, 0.0) + float(sample.value)
    return values


def emulator_exposition() -> str:
    metrics = EngineMetrics("Qwen/Qwen3-32B", speculative_tokens=8)
    metrics.running.set(5)
    metrics.waiting.set(1)
    metrics.kv_usage.set(0.25)
    metrics.generation_tokens.inc(321)
    metrics.prefix_queries.inc(1000)
    metrics.prefix_hits.inc(640)
    for accepted in (3, 0, 7):
        metrics.record_spec_step(8, accepted)
    metrics.ttft.observe(0.05)
    return generate_latest(metrics.registry).decode()


def test_scrape_parser_agrees_with_prometheus_client() -> None:
    text = emulator_exposition()
    fast = parse_vllm_metrics(text)
    assert fast == reference(text)
    assert fast["running"] == 5 and fast["generation_tokens"] == 321 and fast["num_accepted_tokens"] == 10
    assert fast["speculative_tokens"] == 8  # the depth, before and whatever it has accepted


def test_a_server_that_does_not_speculate_shows_no_depth() -> None:
    plain = parse_vllm_metrics(generate_latest(EngineMetrics("Qwen/Qwen3-32B").registry).decode())
    assert "num_drafts" not in plain and "speculative_tokens" not in plain


def test_scrape_parser_handles_labels_totals_and_created_samples() -> None:
    fast = parse_vllm_metrics(AWKWARD)
    assert fast == reference(AWKWARD)
    assert fast == {"running": 8, "waiting": 2, "generation_tokens": 1821}


def test_scrape_parser_rejects_a_line_without_a_value() -> None:
    try:
        parse_vllm_metrics('vllm:num_requests_running{engine="0"}\n')
    except ValueError as exc:
        assert "without a value" in str(exc)
    else:
        raise AssertionError("a truncated line must not read as zero")


def test_scrape_parser_skips_samples_that_are_not_finite() -> None:
    text = ('vllm:num_requests_running{engine="0"} NaN\nvllm:num_requests_running{engine="1"} 3\n'
            'vllm:num_requests_waiting{engine="0"} +Inf\nvllm:kv_cache_usage_perc{engine="0"} 0.5\n')
    assert parse_vllm_metrics(text) == {"running": 3.0, "kv_usage": 0.5}
