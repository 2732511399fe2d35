"""The Grafana dashboard, written as data, beside the JSON the chart ships (the
compose stack mounts it from here too); and its key panels rendered to a PNG
from a Prometheus server with the same queries.

    python helm/draftgate/dashboards/dashboard.py             # writes draftgate.json
    python helm/draftgate/dashboards/dashboard.py --render [--seconds 90] [--out docs/dashboard.png]

``--render`` without a Prometheus of yours starts the whole laptop stack (two
emulated pools, the proxy, Debian's Prometheus), drives a mixed agent workload
through the proxy, and renders what an operator would see. The tests evaluate
every query here against a real Prometheus.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
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
    ], "The share of each pool's answers within the TTFT target and of its output tokens within the TPOT target "
       "(the smaller), predicted and observed, and the plan's observed error: a kind of request moves to another "
       "pool only for a predicted gain larger than it."),
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


# the chart cannot reach outside itself; the compose stack mounts this folder
PATH = Path(__file__).with_name("draftgate.json")


KEY_PANELS = ("Saving: predicted against measured", "tau per kind of request: predicted, observed, and vLLM's own",
              "Traffic by route", "Schema fraction against break-even")


def concrete(expr: str, step: str) -> str:
    return expr.replace("$__rate_interval", step).replace("$model", ".*").replace("$pool", ".*")


def render(prometheus: str, out: str | Path, seconds: float, rate_window: str = "30s") -> None:
    import httpx

    from draftgate.plots import plt

    end = time.time()
    start = end - seconds
    fig, axes = plt.subplots(2, 2, figsize=(13, 7.5))
    for ax, title in zip(axes.flat, KEY_PANELS):
        panel = next(p for p in PANELS if p[0] == title)
        for legend, expr in panel[2]:
            r = httpx.get(f"{prometheus}/api/v1/query_range", params={
                "query": concrete(expr, rate_window), "start": start, "end": end, "step": "2s"}).json()
            if r.get("status") != "success":
                raise RuntimeError(f"Prometheus rejected {expr!r}: {r.get('error')}")
            for series in r.get("data", {}).get("result", []):
                label = legend
                for key, value in series["metric"].items():
                    label = label.replace("{{" + key + "}}", value)
                xs = [float(t) - start for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                ax.plot(xs, ys, label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("seconds")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("draftgate dashboard (emulated pools: the figures show the mechanism, not your hardware)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def _render_a_replay(seconds: float, out: str) -> None:
    from draftgate.emulator.app import EmulatorConfig
    from draftgate.emulator.app import create_app as emulator_app
    from draftgate.emulator.engine import SpecConfig
    from draftgate.proxy.app import create_app
    from draftgate.proxy.config import load_settings
    from draftgate.servers import ServerThread, free_port

    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("Prometheus is not installed: apt-get install prometheus")
    spec = EmulatorConfig(spec=SpecConfig("draft_model", 8), per_request_metrics="summary", force_include_usage=True,
                          time_scale=0.05, seed=1)
    plain = EmulatorConfig(force_include_usage=True, time_scale=0.05, seed=1)
    with ServerThread(emulator_app(spec)) as on, ServerThread(emulator_app(plain)) as off:
        settings = load_settings(None, pools=[
            {"name": "spec-on", "urls": [on.url], "speculation": {"gamma": 8}},
            {"name": "spec-off", "urls": [off.url]}], log_requests=False, exploration_share=0.1,
            price_per_gpu_hour=3.0)
        with ServerThread(create_app(settings)) as proxy, tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            config = Path(tmp) / "prometheus.yml"
            config.write_text(
                "global: {scrape_interval: 1s}\nscrape_configs:\n"
                f"  - {{job_name: draftgate, static_configs: [{{targets: ['{proxy.url[7:]}']}}]}}\n"
                f"  - {{job_name: vllm, static_configs: [{{targets: ['{on.url[7:]}', '{off.url[7:]}']}}]}}\n")
            prom = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
                                     f"--web.listen-address=127.0.0.1:{port}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                from draftgate.workloads.agent import replay_for

                replay_for(proxy.url, seconds)
                render(f"http://127.0.0.1:{port}", out, seconds)
            finally:
                prom.terminate()
                prom.wait(timeout=10)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description="the dashboard: its JSON, or its key panels as a PNG")
    parser.add_argument("--render", action="store_true", help="render the key panels from a replay instead")
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--out", default="docs/dashboard.png")
    args = parser.parse_args()
    if args.render:
        _render_a_replay(args.seconds, args.out)
        return
    PATH.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {PATH}")


if __name__ == "__main__":
    main()
