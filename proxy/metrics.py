"""The proxy's Prometheus metrics, in one private registry.

Names carry units; labels are low-cardinality (model, pool, class, route,
reason) and never hold request ids, tool names or keys.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

disable_created_metrics()

_OVERHEAD_BUCKETS = (0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1)


class ProxyMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("draftgate_requests", "Requests answered, by model, route and HTTP status.",
                                ["model", "route", "status"], registry=r)
        self.decisions = Counter("draftgate_decisions", "Gate decisions, by route and deciding reason.",
                                 ["model", "route", "reason"], registry=r)
        self.failovers = Counter("draftgate_failovers", "Requests retried on another pool.",
                                 ["from_pool", "to_pool", "reason"], registry=r)
        self.retry_denied = Counter("draftgate_retry_budget_exhausted", "Failovers refused by the retry budget.",
                                    registry=r)
        self.shed = Counter("draftgate_shed", "Requests refused with 503 because every pool was full.",
                            ["model"], registry=r)
        self.upstream_errors = Counter("draftgate_upstream_errors", "Upstream failures, by pool and kind.",
                                       ["pool", "kind"], registry=r)
        self.overhead = Histogram("draftgate_proxy_overhead_seconds",
                                  "Time spent in the proxy itself, upstream time excluded.", ["endpoint"],
                                  buckets=_OVERHEAD_BUCKETS, registry=r)
        self.pool_healthy = Gauge("draftgate_pool_healthy_replicas", "Replicas passing health checks.", ["pool"],
                                  registry=r)
        self.pool_inflight = Gauge("draftgate_pool_inflight_requests", "Requests this proxy has in flight.",
                                   ["pool"], registry=r)
        self.affinity_entries = Gauge("draftgate_affinity_entries", "Conversations remembered for prefix affinity.",
                                      registry=r)
        self.learner_shapes = Gauge("draftgate_learner_shapes", "Request shapes the structure learner tracks.",
                                    registry=r)
