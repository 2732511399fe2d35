"""The proxy's Prometheus metrics, in one private registry.

Names carry units; labels are low-cardinality (model, pool, class, route,
reason) and never hold request ids, tool names or keys.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.metrics import MetricWrapperBase

disable_created_metrics()

_OVERHEAD_BUCKETS = (0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1)
_FRACTION_BUCKETS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
_TAU_BUCKETS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 12.0, 16.0)
_TOKEN_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 65536)
# Savings can be negative, and a histogram with negative buckets loses its _sum in the
# exposition; so the distribution is of the net cost ratio 1 - saving, which is never negative.
_COST_RATIO_BUCKETS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0)
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_TPOT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2)
# Model names come from clients, and while no pool answers /v1/models the proxy cannot
# tell a real one from a typo, so it admits any. Past this many distinct names the rest
# share one label value: a client cannot grow the series without bound. Nor their size:
# a name longer than any model id is no name, and every scrape would carry it.
MAX_MODEL_LABELS = 32
MAX_MODEL_LABEL_CHARS = 256
OTHER_MODELS = "other"


class Labelled:
    """A labelled metric whose children are remembered.

    prometheus_client validates the label names on every ``labels()`` call,
    which costs several times the update itself; the proxy updates a dozen
    series per request, with label values from a small, fixed set.
    """

    __slots__ = ("metric", "_children")

    def __init__(self, metric: MetricWrapperBase) -> None:
        self.metric = metric
        self._children: dict[tuple[tuple[str, Any], ...], Any] = {}

    def labels(self, **labels: Any) -> Any:
        key = tuple(labels.items())
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.metric.labels(**labels)
        return child

    def clear(self) -> None:
        """Every labelled child gone, from the registry and from here."""
        self.metric.clear()
        self._children.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.metric, name)


class ProxyMetrics:
    def __init__(self) -> None:
        self._models: set[str] = set()
        r = self.registry = CollectorRegistry()
        # what every Prometheus client exports by default: memory, CPU, descriptors against
        # their limit (proxy/open_files.py), start time, the Python version, and the cycle
        # collector's runs by generation (a full one stops the event loop: proxy/serving.py)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.requests = Counter("draftgate_requests", "Gated requests answered, by model, route, HTTP status, "
                                "endpoint and client key label.", ["model", "route", "status", "endpoint", "key"],
                                registry=r)
        self.decisions = Counter("draftgate_decisions", "Gate decisions, by route and deciding reason.",
                                 ["model", "route", "reason", "key"], registry=r)
        self.passed_through = Counter("draftgate_passed_through", "Requests to a gated endpoint passed through "
                                      "ungated, by why: configuration (the endpoint is not gated), "
                                      "continues_stored_response, background.", ["endpoint", "reason"], registry=r)
        self.state_up = Gauge("draftgate_state_up", "1 while the shared store (state) answers, 0 while the proxy "
                              "plans from its own memory; absent without a shared store.", registry=r)
        self.state_fallbacks = Counter("draftgate_state_fallbacks", "Round trips to the shared store that failed "
                                       "or took over state_timeout, by operation (read: before planning; write: "
                                       "after answering; sync: ejections); the proxy used its own state.",
                                       ["operation"], registry=r)
        self.failovers = Counter("draftgate_failovers", "Requests retried on another pool.",
                                 ["from_pool", "to_pool", "reason"], registry=r)
        self.retry_denied = Counter("draftgate_retry_budget_exhausted", "Failovers refused by the retry budget.",
                                    registry=r)
        self.gate_errors = Counter("draftgate_gate_errors", "Requests the gate failed to assess; they were sent "
                                   "to a plain pool unassessed (the log has the traceback).", registry=r)
        self.shed = Counter("draftgate_shed", "Requests refused with 503 because every pool was full.",
                            ["model"], registry=r)
        self.upstream_errors = Counter("draftgate_upstream_errors", "Upstream failures, by pool and error.",
                                       ["pool", "error"], registry=r)
        self.ejections = Counter("draftgate_replica_ejections", "Replicas taken out of rotation for failing "
                                 "answers (in a row, or a large share) while their health checks passed.",
                                 ["pool"], registry=r)
        self.overhead = Histogram("draftgate_proxy_overhead_seconds",
                                  "Time spent in the proxy itself, upstream time excluded.", ["endpoint"],
                                  buckets=_OVERHEAD_BUCKETS, registry=r)
        self.pool_healthy = Gauge("draftgate_pool_healthy_replicas", "Replicas in rotation: passing health "
                                  "checks, not ejected.", ["pool"], registry=r)
        self.pool_inflight = Gauge("draftgate_pool_inflight_requests", "Requests this proxy has in flight.",
                                   ["pool"], registry=r)
        self.affinity_entries = Gauge("draftgate_affinity_entries", "Conversations remembered for prefix affinity.",
                                      registry=r)
        self.learner_shapes = Gauge("draftgate_learner_shapes", "Request shapes the structure learner tracks.",
                                    registry=r)
        # predicted against observed, per model, pool and kind of request
        per = ["model", "pool", "kind"]
        self.ws_predicted = Histogram("draftgate_predicted_schema_fraction", "Predicted schema-bound share w_S.",
                                      per, buckets=_FRACTION_BUCKETS, registry=r)
        self.ws_observed = Histogram("draftgate_observed_schema_fraction", "Observed schema-bound share w_S.",
                                     per, buckets=_FRACTION_BUCKETS, registry=r)
        self.request_tokens = Histogram("draftgate_request_tokens", "Prompt and output tokens of completed "
                                        "requests, by kind of request (what draftgate plan sizes traffic from).",
                                        ["model", "kind", "part"], buckets=_TOKEN_BUCKETS, registry=r)
        self.ws_break_even = Histogram("draftgate_break_even_schema_fraction",
                                       "Per-request break-even w_S* (span form) for its R:F split.", ["model", "pool"],
                                       buckets=_FRACTION_BUCKETS, registry=r)
        self.tau_predicted = Histogram("draftgate_predicted_tau", "Predicted accepted draft tokens per round.",
                                       per, buckets=_TAU_BUCKETS, registry=r)
        self.tau_observed = Histogram("draftgate_observed_tau", "Observed accepted draft tokens per round.",
                                      [*per, "source"], buckets=_TAU_BUCKETS, registry=r)
        self.cost_predicted = Histogram("draftgate_predicted_net_cost_ratio",
                                        "Predicted cost per token with speculation over without (1 - saving).",
                                        per, buckets=_COST_RATIO_BUCKETS, registry=r)
        self.cost_modelled = Histogram("draftgate_modelled_net_cost_ratio",
                                       "Modelled cost ratio (1 - saving): the law at the observed acceptance, "
                                       "not a measurement.", per, buckets=_COST_RATIO_BUCKETS, registry=r)
        self.saving_time = Gauge("draftgate_observed_time_saving_ratio",
                                 "Saving measured from time per output token, speculation pool against plain pool, "
                                 "same kind of request and load band (streams against streams, other answers "
                                 "against the same).", ["model", "pool", "kind", "load_band"], registry=r)
        self.drift = Gauge("draftgate_saving_drift_ratio",
                           "Mean predicted minus measured saving over the last requests (drift window).",
                           ["model", "pool"], registry=r)
        self.tau_attributed = Gauge("draftgate_attributed_tau",
                                    "Tau per token class (s, r, f) attributed from the pool's counters (no "
                                    "per-request metrics).", ["pool", "token_class"], registry=r)
        self.output_tokens = Counter("draftgate_output_tokens", "Output tokens by class, as measured on responses.",
                                     ["model", "pool", "token_class"], registry=r)
        self.ttft = Histogram("draftgate_time_to_first_token_seconds", "Time to first token through the proxy.",
                              ["pool", "kind"], buckets=_TTFT_BUCKETS, registry=r)
        self.tpot = Histogram("draftgate_decode_seconds_per_token", "Decode time per output token (streams).",
                              ["pool", "kind", "load_band"], buckets=_TPOT_BUCKETS, registry=r)
        self.gpu_saved = Counter("draftgate_gpu_seconds_saved", "GPU-seconds speculation saved (measured from "
                                 "time per token against the plain pool).", ["model", "pool"], registry=r)
        self.gpu_lost = Counter("draftgate_gpu_seconds_lost", "GPU-seconds speculation cost extra (measured from "
                                "time per token against the plain pool).", ["model", "pool"], registry=r)
        self.money_saved = Counter("draftgate_money_saved", "Net money saved at the configured GPU-hour price.",
                                   ["model", "pool", "currency"], registry=r)
        self.money_lost = Counter("draftgate_money_lost", "Money lost where speculation cost more.",
                                  ["model", "pool", "currency"], registry=r)
        self.routed_seconds = Counter(
            "draftgate_routed_gpu_seconds", "GPU-seconds the gated requests caused, estimated from the measured time "
            "per token of their kind and load band (the denominator of routing regret).", ["model", "kind"],
            registry=r)
        self.regret_seconds = Counter(
            "draftgate_routing_regret_gpu_seconds", "GPU-seconds the gated requests cost over the pool that was "
            "cheaper for their kind and load band, as the exploration share measures the two pools.",
            ["model", "kind"], registry=r)
        self.exploration = Counter("draftgate_exploration_requests", "Requests sent to the pool the gate did not "
                                   "choose, to keep the counterfactual measured.", ["model", "kind", "pool"],
                                   registry=r)
        self.break_even_alpha = Gauge("draftgate_break_even_acceptance",
                                      "Break-even acceptance alpha* per pool and concurrency band.",
                                      ["model", "pool", "load_band", "form"], registry=r)
        self.assignment_share = Gauge("draftgate_assignment_share", "The share of each kind of request the gate "
                                      "sends to each pool: the fleet plan's assignment, spilled under load.",
                                      ["kind", "pool"], registry=r)
        self.plan_gpus = Gauge("draftgate_plan_recommended_gpus", "GPUs of each pool of the fleet the plan "
                               "recommends for the traffic seen, and the kinds of request it serves.",
                               ["pool", "kinds"], registry=r)
        self.plan_capacity = Gauge("draftgate_plan_capacity_requests_per_second", "Requests a second a fleet serves "
                                   "within the latency targets, as the plan predicts it: the running fleet, the one "
                                   "it recommends, the best of one configuration.", ["fleet"], registry=r)
        self.plan_gain = Gauge("draftgate_plan_predicted_gain_ratio", "How much more the recommended fleet would "
                               "serve than the running one within the targets (0.1: 10% more), as predicted.",
                               registry=r)
        self.plan_recommendation = Gauge("draftgate_plan_recommendation", "1, labelled with the fleet the plan "
                                         "recommends, in words.", ["fleet"], registry=r)
        self.plan_predicted_latency = Gauge("draftgate_plan_predicted_latency_seconds", "What the plan predicts "
                                            "for each running pool at the traffic's rate: time per output token "
                                            "(median and targets' percentile) and time to first token (targets' "
                                            "percentile).", ["pool", "latency", "quantile"], registry=r)
        self.plan_observed_latency = Gauge("draftgate_plan_observed_latency_seconds", "What each running pool's "
                                           "streamed answers took between the last two plans, as the prediction "
                                           "states it.", ["pool", "latency", "quantile"], registry=r)
        self.plan_predicted_attainment = Gauge("draftgate_plan_predicted_attainment_ratio", "Share of each "
                                               "running pool's answers (TTFT) and tokens (TPOT) the plan predicts "
                                               "within the targets, the smaller.",
                                               ["pool"], registry=r)
        self.plan_observed_attainment = Gauge("draftgate_plan_observed_attainment_ratio", "Share of each running "
                                              "pool's streamed answers (TTFT) and tokens (TPOT) within the targets "
                                              "between the last two plans, the smaller.", ["pool"], registry=r)
        self.plan_step_scale = Gauge("draftgate_plan_step_scale_ratio", "The correction the plan applies to each "
                                     "pool's step time, learned from its answers against the plan (1: none).",
                                     ["pool"], registry=r)
        self.plan_error = Gauge("draftgate_plan_observed_error_ratio", "How far the last plan's median time per "
                                "token was from what the pools did, relatively, at most over the pools: the least "
                                "gain for which the plan moves traffic.", registry=r)
        self.calibration_parameter = Gauge("draftgate_calibration_parameter", "Calibration parameters in use.",
                                           ["model", "parameter"], registry=r)
        self.calibration_age = Gauge("draftgate_calibration_age_seconds", "Age of the calibration in use.",
                                     ["model"], registry=r)
        self.calibration_default = Gauge("draftgate_calibration_is_default",
                                         "1 while the gate runs on documented defaults, not a measured calibration.",
                                         ["model"], registry=r)
        for name, metric in list(vars(self).items()):
            # _labelnames: prometheus_client offers no public way to ask whether a metric has labels
            if isinstance(metric, MetricWrapperBase) and metric._labelnames:
                setattr(self, name, Labelled(metric))

    def model_label(self, model: str | None) -> str:
        """The label value for a request's model: its name, or OTHER_MODELS once MAX_MODEL_LABELS
        are in use or for a name over MAX_MODEL_LABEL_CHARS."""
        if not model:
            return ""
        if model in self._models:
            return model
        if len(self._models) < MAX_MODEL_LABELS and len(model) <= MAX_MODEL_LABEL_CHARS:
            self._models.add(model)
            return model
        return OTHER_MODELS
