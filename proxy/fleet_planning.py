"""The fleet plan, kept current while the proxy runs: each kind's shares every few seconds, the plan every few minutes.

Every ``plan.assignment_interval`` the planner spills its assignment as the kinds'
current rates need it (``Planner.refresh``); every ``plan_interval`` (the first
a minute in, once there is traffic to read) it plans the fleet from the
traffic it has seen (``Planner.replan``): the copy of its state is taken on the
event loop, the plan itself (seconds of CPU) runs in a thread, and the result
is taken back on the event loop. Both are exported: each kind's shares, and
the fleet the plan would recommend on the same GPUs beside the running one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from draftgate.policy.plan import Recommendation, Targets, plan_fleet
from draftgate.proxy.config import ProxySettings
from draftgate.proxy.metrics import ProxyMetrics
from draftgate.proxy.planner import Planner

log = logging.getLogger("draftgate.plan")

FIRST_PLAN_SECONDS = 60.0


class FleetPlanning:
    """The planner's periodic work, and what it exports."""

    def __init__(self, planner: Planner, metrics: ProxyMetrics, settings: Callable[[], ProxySettings]) -> None:
        self.planner = planner
        self.metrics = metrics
        self.settings = settings
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._assign_loop(), name="draftgate-assignment"),
                       loop.create_task(self._plan_loop(), name="draftgate-plan")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _assign_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings().plan.assignment_interval)
            try:
                self.planner.refresh()
                self.export_assignment()
            except Exception:  # a bug here must not end the spill for the proxy's lifetime
                log.exception("spilling the assignment failed")

    async def _plan_loop(self) -> None:
        await asyncio.sleep(min(FIRST_PLAN_SECONDS, self.settings().plan.interval or FIRST_PLAN_SECONDS))
        while True:
            interval = self.settings().plan.interval
            if interval > 0:
                await self.plan_once()
            await asyncio.sleep(interval or FIRST_PLAN_SECONDS)

    async def plan_once(self) -> Recommendation | None:
        """One plan from the traffic seen; None without any."""
        try:
            inputs = self.planner.fleet_inputs()
            if inputs is None:
                return None
            planned = await asyncio.to_thread(plan_fleet, inputs)
            recommendation = self.planner.adopt(planned)
        except Exception:  # a plan that fails leaves the routing as it was
            log.exception("planning the fleet failed")
            return None
        self.export_assignment()
        self.export_feedback()
        if recommendation is not None:
            self.export_plan(recommendation)
        return recommendation

    def export_assignment(self) -> None:
        gauge = self.metrics.assignment_share
        gauge.clear()
        assignment = self.planner.assignment
        if assignment is None:
            return
        for kind, shares in assignment.shares.items():
            for pool, share in shares.items():
                gauge.labels(kind=kind, pool=pool).set(share)

    def export_feedback(self) -> None:
        """The plan's predictions for the running pools beside what they did, and its corrections."""
        m, feedback = self.metrics, self.planner.feedback
        for gauge in (m.plan_predicted_latency, m.plan_observed_latency, m.plan_predicted_attainment,
                      m.plan_observed_attainment, m.plan_step_scale):
            gauge.clear()
        tail = str(Targets().attainment)  # the percentile the targets are held at
        for pool, predicted in feedback.predicted.items():
            m.plan_predicted_latency.labels(pool=pool, latency="tpot", quantile="0.5").set(predicted.tpot_median)
            m.plan_predicted_latency.labels(pool=pool, latency="tpot", quantile=tail).set(predicted.tpot_tail)
            m.plan_predicted_latency.labels(pool=pool, latency="ttft", quantile=tail).set(predicted.ttft_tail)
            m.plan_predicted_attainment.labels(pool=pool).set(predicted.within)
            m.plan_step_scale.labels(pool=pool).set(feedback.step_scale(pool))
        for pool, observed in feedback.observed.items():
            m.plan_observed_latency.labels(pool=pool, latency="tpot", quantile="0.5").set(observed.tpot_median)
            m.plan_observed_latency.labels(pool=pool, latency="tpot", quantile=tail).set(observed.tpot_tail)
            m.plan_observed_latency.labels(pool=pool, latency="ttft", quantile="0.5").set(observed.ttft_median)
            m.plan_observed_latency.labels(pool=pool, latency="ttft", quantile=tail).set(observed.ttft_tail)
            m.plan_observed_attainment.labels(pool=pool).set(observed.within)
        m.plan_error.set(feedback.error)

    def export_plan(self, recommendation: Recommendation) -> None:
        m = self.metrics
        m.plan_gpus.clear()
        for pool in recommendation.best.pools:
            m.plan_gpus.labels(pool=pool.candidate.name, kinds=",".join(pool.kinds)).inc(pool.gpus)
        m.plan_capacity.labels(fleet="recommended").set(recommendation.best.capacity)
        m.plan_capacity.labels(fleet="best_homogeneous").set(recommendation.best_homogeneous.capacity)
        if recommendation.current is not None:
            m.plan_capacity.labels(fleet="running").set(recommendation.current.capacity)
        gain = recommendation.gain
        m.plan_gain.set(gain if gain is not None else 0.0)
        m.plan_recommendation.clear()
        m.plan_recommendation.labels(fleet=recommendation.best.name).set(1)
        log.info("fleet plan: %s would serve %.0f%% more than the running fleet", recommendation.best.name,
                 100 * (gain or 0.0))
