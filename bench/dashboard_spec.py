"""The Grafana dashboard, written as data: ``python -m bench.dashboard_spec`` writes
helm/draftgate/dashboards/draftgate.json, the one copy (the chart ships it, the
compose stack mounts it). Keeping the queries here lets the
tests and the PNG renderer use exactly what operators see."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

M = '{model=~"$model"}'
MP = '{model=~"$model", pool=~"$pool"}'
R = "$__rate_interval"
# vLLM exports process_* too: joined on a series only the proxy exports, these are the proxy's
PROXY = "group by (job, instance) (draftgate_pool_healthy_replicas)"

# (title, unit, [(legend, expr)], description)
PANELS: list[tuple[str, str, list[tuple[str, str]], str]] = [
    ("Traffic by route", "reqps", [
        ("{{route}}", f'sum by (route) (rate(draftgate_requests_total{M}[{R}]))'),
    ], "Requests per second, by the pool that served them."),
    ("Traffic by endpoint, and what passed through ungated", "reqps", [
        ("{{endpoint}}", f'sum by (endpoint) (rate(draftgate_requests_total{M}[{R}]))'),
        ("passed through: {{endpoint}}, {{reason}}",
         f'sum by (endpoint, reason) (rate(draftgate_passed_through_total[{R}]))'),
    ], "Gated requests by API (chat, completions, responses, messages), and requests to a gated API that were "
       "passed through to a plain pool: follow-ups to a stored response, background responses, or an endpoint the "
       "configuration does not gate."),
    ("Traffic by client key and route", "reqps", [
        ("{{key}} {{route}}", f'sum by (key, route) (rate(draftgate_requests_total{M}[{R}]))'),
    ], "Gated requests by the label of the client key they carried (api_keys[].label; empty: unlabelled or an "
       "open proxy), and the pool each was sent to."),
    ("Traffic by kind of request", "reqps", [
        ("{{kind}}", f'sum by (kind) (rate(draftgate_predicted_schema_fraction_count{MP}[{R}]))'),
    ], "Completed requests per second, by what kind of request they were."),
    ("Saving: predicted against measured", "percentunit", [
        ("predicted", f'1 - sum(rate(draftgate_predicted_net_cost_ratio_sum{MP}[{R}])) / '
                      f'sum(rate(draftgate_predicted_net_cost_ratio_count{MP}[{R}]))'),
        ("measured (time) {{kind}}", 'avg by (kind) (draftgate_observed_time_saving_ratio{pool=~"$pool"})'),
        ("modelled (law at observed acceptance)", f'1 - sum(rate(draftgate_modelled_net_cost_ratio_sum{MP}[{R}])) / '
                                                  f'sum(rate(draftgate_modelled_net_cost_ratio_count{MP}[{R}]))'),
    ], "Mean saving per speculated request. The key panel: predicted should lie on measured; the modelled line "
       "is the law at the acceptance observed, not a measurement."),
    ("tau per kind of request: predicted, observed, and vLLM's own", "short", [
        ("predicted {{kind}}", f'sum by (kind) (rate(draftgate_predicted_tau_sum{MP}[{R}])) / '
                               f'sum by (kind) (rate(draftgate_predicted_tau_count{MP}[{R}]))'),
        ("observed {{kind}}", f'sum by (kind) (rate(draftgate_observed_tau_sum{MP}[{R}])) / '
                              f'sum by (kind) (rate(draftgate_observed_tau_count{MP}[{R}]))'),
        ("vLLM counters (all kinds)", f'sum(rate(vllm:spec_decode_num_accepted_tokens_total[{R}])) / '
                                        f'sum(rate(vllm:spec_decode_num_drafts_total[{R}]))'),
    ], "Accepted draft tokens per round."),
    ("Schema fraction against break-even", "percentunit", [
        ("observed w_S median", f'histogram_quantile(0.5, sum by (le) '
                                f'(rate(draftgate_observed_schema_fraction_bucket{MP}[{R}])))'),
        ("predicted w_S median", f'histogram_quantile(0.5, sum by (le) '
                                 f'(rate(draftgate_predicted_schema_fraction_bucket{MP}[{R}])))'),
        ("break-even w_S* median", f'histogram_quantile(0.5, sum by (le) '
                                   f'(rate(draftgate_break_even_schema_fraction_bucket{MP}[{R}])))'),
    ], "Where traffic sits against the per-request break-even schema fraction."),
    ("Break-even acceptance alpha* by load", "short", [
        ("{{form}} {{load_band}}", f'max by (form, load_band) (draftgate_break_even_acceptance{MP})'),
    ], "Exact root and the paper's closed form, per concurrency band."),
    ("GPU-hours saved (net, per hour)", "h", [
        ("{{pool}}", f'(sum by (pool) (increase(draftgate_gpu_seconds_saved_total{MP}[1h])) - '
                     f'sum by (pool) (increase(draftgate_gpu_seconds_lost_total{MP}[1h]))) / 3600'),
    ], "Busy GPU-seconds saved by speculation, measured from time per token against the plain pool."),
    ("Money saved (net, per hour)", "currencyUSD", [
        ("{{currency}}", f'sum by (currency) (increase(draftgate_money_saved_total{MP}[1h])) - '
                         f'sum by (currency) (increase(draftgate_money_lost_total{MP}[1h]))'),
    ], "At the configured price per GPU-hour."),
    ("Decode time per output token", "s", [
        ("p50 {{pool}}", f'histogram_quantile(0.5, sum by (le, pool) '
                         f'(rate(draftgate_decode_seconds_per_token_bucket{{pool=~"$pool"}}[{R}])))'),
        ("vLLM inter-token p50", f'histogram_quantile(0.5, sum by (le) '
                                 f'(rate(vllm:inter_token_latency_seconds_bucket[{R}])))'),
    ], "Streams only; per pool."),
    ("Proxy overhead", "s", [
        ("p50", f'histogram_quantile(0.5, sum by (le) (rate(draftgate_proxy_overhead_seconds_bucket[{R}])))'),
        ("p99", f'histogram_quantile(0.99, sum by (le) (rate(draftgate_proxy_overhead_seconds_bucket[{R}])))'),
    ], "Time spent in draftgate itself, upstream excluded."),
    ("Errors and failovers", "reqps", [
        ("status {{status}}", f'sum by (status) (rate(draftgate_requests_total{{status!="200"}}[{R}]))'),
        ("failovers {{from_pool}}", f'sum by (from_pool) (rate(draftgate_failovers_total[{R}]))'),
        ("ejections {{pool}}", f'sum by (pool) (rate(draftgate_replica_ejections_total[{R}]))'),
    ], "Non-200 answers, requests retried on another pool, and replicas taken out of rotation for failing "
       "their answers."),
    ("Proxy memory", "bytes", [
        ("{{instance}}", f"process_resident_memory_bytes and on (job, instance) {PROXY}"),
    ], "Resident memory of each proxy replica. Its tables are bounded, so it levels off once they fill."),
    ("Proxy open files, share of the limit", "percentunit", [
        ("{{instance}}", f"process_open_fds / process_max_fds and on (job, instance) {PROXY}"),
    ], "Each request in flight holds two descriptors (alert above 80%). The proxy takes the container's hard "
       "limit at start."),
    ("Drift and calibration", "short", [
        ("drift {{pool}}", f'draftgate_saving_drift_ratio{MP}'),
        ("on defaults", f'max(draftgate_calibration_is_default{M})'),
    ], "Predicted minus observed saving (alert above 0.15); 1 while no calibration file is loaded."),
    ("Routing regret (estimated from exploration)", "percentunit", [
        ("{{kind}}", f"sum by (kind) (rate(draftgate_routing_regret_gpu_seconds_total{M}[1h])) / "
                     f"sum by (kind) (rate(draftgate_routed_gpu_seconds_total{M}[1h]))"),
    ], "Share of the gated requests' GPU time spent over what the other sort of pool (speculating or plain) "
       "would have cost where it was cheaper for their kind and load band, as the exploration share measures both. "
       "A request that would have paid elsewhere within "
       "its kind is not seen; bench/routing_regret.py measures that against ground truth."),
    ("Fleet plan: this fleet would serve more split as ...", "percentunit", [
        ("{{fleet}}", "draftgate_plan_predicted_gain_ratio * on () group_left (fleet) draftgate_plan_recommendation"),
    ], "How much more traffic within the latency targets the fleet the plan recommends would serve than the "
       "running one, on as many GPUs, as predicted from the traffic of the last minutes; the legend names the "
       "recommended fleet (0: the running fleet is the best the plan found). draftgate plan prints it with the "
       "routing that applies it."),
    ("Where each kind of request goes", "percentunit", [
        ("{{kind}} to {{pool}}", "draftgate_assignment_share"),
    ], "The share of each kind of request each pool takes: the plan's assignment, spilled where a pool nears its "
       "limit (the kind whose move costs least moves first)."),
    ("Plan against the pools: median time per token", "s", [
        ("predicted {{pool}}", 'draftgate_plan_predicted_latency_seconds{latency="tpot", quantile="0.5"}'),
        ("observed {{pool}}", 'draftgate_plan_observed_latency_seconds{latency="tpot", quantile="0.5"}'),
    ], "What the plan predicts for each running pool at the traffic's rate, beside what its streamed answers took "
       "between the last two plans. The plan corrects each pool's step time from the difference."),
    ("Plan against the pools: share within the targets", "percentunit", [
        ("predicted {{pool}}", "draftgate_plan_predicted_attainment_ratio"),
        ("observed {{pool}}", "draftgate_plan_observed_attainment_ratio"),
        ("the plan's error", "draftgate_plan_observed_error_ratio"),
    ], "The share of each pool's requests within the latency targets, predicted and observed, and the plan's "
       "observed error: a kind of request moves to another pool only for a predicted gain larger than it."),
]


def dashboard() -> dict[str, Any]:
    panels = []
    for i, (title, unit, targets, description) in enumerate(PANELS):
        panels.append({
            "id": i + 1, "type": "timeseries", "title": title, "description": description,
            "datasource": {"type": "prometheus", "uid": "prometheus"},
            "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i // 2) * 8},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": chr(65 + j), "expr": expr, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": "prometheus"}}
                        for j, (legend, expr) in enumerate(targets)],
        })

    def variable(name: str, query: str) -> dict[str, Any]:
        return {"name": name, "type": "query", "datasource": {"type": "prometheus", "uid": "prometheus"},
                "query": {"query": query, "refId": name}, "definition": query, "includeAll": True,
                "multi": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"}, "refresh": 2}

    return {
        "uid": "draftgate", "title": "draftgate: is speculation paying?", "schemaVersion": 39, "version": 1,
        "time": {"from": "now-1h", "to": "now"}, "refresh": "30s", "tags": ["draftgate", "vllm"],
        "templating": {"list": [variable("model", "label_values(draftgate_requests_total, model)"),
                                variable("pool", "label_values(draftgate_pool_healthy_replicas, pool)")]},
        "panels": panels,
    }


# inside the chart, which cannot reach outside itself; the compose stack mounts it from there
PATH = Path(__file__).parents[1] / "helm" / "draftgate" / "dashboards" / "draftgate.json"


if __name__ == "__main__":
    PATH.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {PATH}")
