"""Where a finished request leaves its traces: metrics, the learner, affinity, the log."""

from __future__ import annotations

import logging
import time
from typing import Any

from proxy.forwarding import Upstream
from proxy.gatekeeper import Gatekeeper, Plan
from proxy.observe import Observation
from proxy.pools import Pool, Replica

log = logging.getLogger("draftgate.requests")


class Recorder:
    def __init__(self, gk: Gatekeeper) -> None:
        self.gk = gk

    def finish(self, plan: Plan, upstream: Upstream | None, observation: Observation, status: int,
               overhead: float) -> None:
        gk = self.gk
        route = upstream.pool.name if upstream else plan.decision.route
        model = plan.model or ""
        gk.metrics.requests.labels(model=model, route=route, status=str(status)).inc()
        gk.metrics.overhead.labels(endpoint=plan.endpoint).observe(overhead)
        measured = None
        if status == 200 and observation.complete and upstream is not None:
            measured = observation.measured(plan.body)
            if measured.total_tokens > 0:
                gk.learner.observe(plan.shape, measured)
            prompt_tokens = observation.prompt_tokens or plan.estimate.prompt_tokens
            gk.affinity.record(plan.body, upstream.pool.name, upstream.replica.url, float(prompt_tokens))
        if gk.settings.log_requests:
            record: dict[str, Any] = {
                "event": "request", "endpoint": plan.endpoint, "model": model, "route": route,
                "decided": plan.decision.route, "status": status, "stream": plan.body.get("stream") is True,
                "w_s_predicted": round(plan.estimate.w_s, 4),
                "predicted_saving": round(plan.decision.predicted_saving, 4),
                "failovers": observation.failovers,
                "duration_ms": round((time.perf_counter() - observation.started) * 1000, 2),
                "overhead_ms": round(overhead * 1000, 3),
                "reasons": list(plan.decision.reasons),
            }
            if measured is not None:
                record["w_s_observed"] = round(measured.w_s, 4)
                record["completion_tokens"] = measured.total_tokens
            if observation.observed_tau is not None:
                record["tau_observed"] = round(observation.observed_tau, 3)
            log.info("request", extra={"fields": record})

    def on_scrape(self, pool: Pool, replica: Replica, values: dict[str, float]) -> None:
        """Counter snapshots from a pool's /metrics (used for attribution)."""

    def refresh_gauges(self) -> None:
        gk = self.gk
        for pool in gk.pools:
            gk.metrics.pool_healthy.labels(pool=pool.name).set(len(pool.healthy_replicas()))
            gk.metrics.pool_inflight.labels(pool=pool.name).set(pool.inflight)
        gk.metrics.affinity_entries.set(len(gk.affinity))
        gk.metrics.learner_shapes.set(len(gk.learner))
