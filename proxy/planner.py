"""What the gate knows and decides: the calibration, the per-shape learner, the
conversations' placements, and the plan for each request (its structure
estimate and the gate's decision).

The ``Planner`` reads the pools' load and writes nothing of theirs; what a
finished request teaches comes back to it through ``learn``.
"""

from __future__ import annotations

import logging
import random
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from draftgate.policy.calibration import Calibration, CalibrationError
from draftgate.policy.gate import Affinity, Decision, GatePolicy, decide
from draftgate.policy.structure import (
    ObservedStructure,
    SamplingDefaults,
    StructureEstimate,
    StructureLearner,
    estimate,
    shape_key,
)
from draftgate.policy.structure.learner import shared_shape_key
from draftgate.proxy.affinity import AffinityTable, Conversation, Match
from draftgate.proxy.calibration_file import load_calibration
from draftgate.proxy.callers import Caller, seconds
from draftgate.proxy.config import ConfigError, ModelPolicy, ProxySettings
from draftgate.proxy.endpoints import BY_NAME
from draftgate.proxy.metrics import ProxyMetrics
from draftgate.proxy.pools import Pool, PoolSet
from draftgate.proxy.shared_state import SharedState

log = logging.getLogger("draftgate.gate")


@dataclass(slots=True)
class Plan:
    body: dict[str, Any]
    endpoint: str
    model: str | None
    estimate: StructureEstimate
    shape: str
    conversation: Conversation
    affinity: Match | None
    decision: Decision
    order: list[str]  # pools to try, the route first
    explored: bool = False  # sent to the pool the gate did not choose, to measure the counterfactual
    caller: Caller = field(default_factory=Caller)

    @property
    def route(self) -> str:
        return self.order[0]

    @property
    def request_class(self) -> str:
        """A low-cardinality label for what kind of request this is."""
        e = self.estimate
        if e.thinking:
            return "reasoning"
        if e.constrained and e.p_tool_call >= 1.0:
            return "tool"
        if e.constrained:
            return "json"
        if e.p_tool_call > 0:
            return "tool_auto"
        return "prose"

    def headers(self, route: str | None = None) -> dict[str, str]:
        """What the client is told of the decision; ``route`` is where it was served, if not the plan's."""
        return {
            "x-draftgate-route": route or self.route,
            "x-draftgate-schema-fraction": f"{self.estimate.w_s:.3f}",
            "x-draftgate-predicted-saving": f"{self.decision.predicted_saving:.3f}",
            # how much of the estimate rests on responses of this shape (0: the priors alone)
            "x-draftgate-confidence": f"{self.estimate.confidence:.2f}",
        }

    def explain(self) -> dict[str, Any]:
        d = self.decision
        return {
            **self.estimate.as_dict(),
            "route": d.route,
            "predicted_saving": d.predicted_saving,
            "predicted_tau": d.predicted_tau,
            "break_even_ws": d.break_even_ws,
            "break_even_note": d.break_even_note,
            "reasons": [*self.estimate.reasons, *d.reasons],
            "pools": [{"pool": c.pool, "saving": c.saving, "tau": dict(c.tau), "cost_per_token": c.cost_per_token,
                       "gpu_seconds_per_token": c.gpu_seconds_per_token, "eligible": c.eligible, "note": c.note,
                       "running": c.batch - 1.0, "gamma": c.gamma, "extrapolated_beyond": c.extrapolated_beyond,
                       "step_increment": c.step_increment, "steps": c.steps, "prefill_seconds": c.prefill_seconds,
                       "predicted_tpot": c.predicted_tpot,
                       "predicted_ttft": c.predicted_ttft, "meets_targets": c.meets_targets,
                       "if_call_seconds": dict(c.outcome_seconds).get("call"),
                       "if_answer_seconds": dict(c.outcome_seconds).get("answer")}
                      for c in d.costs],
            "affinity": None if self.affinity is None else {
                "pool": self.affinity.placement.pool, "cached_tokens": self.affinity.cached_tokens,
                "via": self.affinity.via},
        }


class Reading(NamedTuple):
    """What the gate reads in a request: its prior estimate, its shape, its conversation."""

    prior: StructureEstimate
    shape: str
    conversation: Conversation


def load_calibration_or_defaults(settings: ProxySettings) -> Calibration:
    if settings.calibration_file is None:
        return Calibration()
    try:
        return load_calibration(settings.calibration_file)
    except CalibrationError as exc:
        raise ConfigError(f"invalid configuration: calibration_file: {exc}") from None


class Planner:
    """``pools``: read for their load, never changed here; ``metrics``: where the
    exploration share is counted."""

    def __init__(self, settings: ProxySettings, pools: PoolSet, metrics: ProxyMetrics,
                 shared: SharedState | None = None) -> None:
        """``shared``: the store proxy replicas share (``proxy/shared_state.py``), if any:
        what it knows of a request is pulled in before the request is planned, and what
        its answer taught is pushed to it."""
        self.settings = settings
        self.pools = pools
        self.metrics = metrics
        self.shared = shared
        self.calibration = load_calibration_or_defaults(settings)
        self.learner = StructureLearner(capacity=settings.learner_capacity)
        self.affinity = AffinityTable(settings.affinity_capacity)
        # the keys replicas share are hashed alike in every process; this proxy's alone, faster
        self._shape_key = shared_shape_key if shared is not None else shape_key
        self._last_route: OrderedDict[str, str] = OrderedDict()
        self._random = random.Random()
        self._derive_from_settings()

    def _derive_from_settings(self) -> None:
        """What every request would otherwise rebuild from the settings."""
        pools = list(self.pools)
        self._sampling_defaults = next((p for p in pools if p.speculative), pools[0]).config.sampling_defaults
        # one per configured model and one for the rest, built here: a table filled as
        # requests come would be keyed by whatever model names clients send
        self._policies = {name: self._gate_policy_of(config) for name, config in self.settings.models.items()}
        self._default_policy = self._gate_policy_of(self.settings.default_policy)

    def reload(self, settings: ProxySettings, calibration: Calibration) -> None:
        """Swap configuration in place (after the pools have taken theirs)."""
        self.settings = settings
        self.calibration = calibration
        self._derive_from_settings()

    def sampling_defaults(self) -> SamplingDefaults | None:
        """The target model's generation defaults as the pools declare them; None: the
        estimator takes the model family's."""
        return self._sampling_defaults

    def gate_policy(self, model: str | None) -> GatePolicy:
        """The policy ``models`` configures for ``model``; ``default_policy`` for any other
        model, and for a request that names none."""
        return self._policies.get(model or "", self._default_policy)

    def _gate_policy_of(self, config: ModelPolicy) -> GatePolicy:
        return GatePolicy(mode=config.mode, margin=config.margin, hysteresis=config.hysteresis,
                          kv_cache_full=self.settings.kv_cache_full, kv_cache_ramp=self.settings.kv_cache_ramp,
                          tpot_target=seconds(config.tpot_target_ms), ttft_target=seconds(config.ttft_target_ms),
                          objective=config.objective, gpu_budget=seconds(config.gpu_budget_ms_per_token))

    def read(self, body: dict[str, Any], endpoint: str, context: int | None = None) -> Reading:
        """What the gate reads in a request before it weighs the pools."""
        model = body.get("model") if isinstance(body.get("model"), str) else None
        prior = estimate(body, priors=self.settings.structure_priors, defaults=self.sampling_defaults(),
                         endpoint=BY_NAME[endpoint].estimated_as, context_tokens=context)
        return Reading(prior, self._shape_key(body, model, prior.temperature),
                       Conversation.of(body, shared=self.shared is not None))

    async def pull(self, reading: Reading) -> None:
        """What the replicas sharing a store know of the request's shape and conversation,
        into this proxy's tables (nothing without a store, or while it is away)."""
        if self.shared is not None:
            await self.shared.pull(reading.shape, reading.conversation, self.learner, self.affinity)

    def plan(self, body: dict[str, Any], endpoint: str, serving: set[str] | None = None,
             context: int | None = None, caller: Caller | None = None, reading: Reading | None = None) -> Plan:
        """``serving``: the pools that serve the request's model, when not all do;
        ``context``: its ``max_model_len``, when the pools have said it; ``caller``:
        who sent it, whose key (or own choice) may set the mode and targets;
        ``reading``: ``read``'s of it, when already made."""
        caller = caller or Caller()
        model = body.get("model") if isinstance(body.get("model"), str) else None
        prior, shape, conversation = reading or self.read(body, endpoint, context)
        blended = self.learner.blend(shape, prior, body, context)
        match = self.affinity.lookup(conversation, blended.prompt_tokens)
        policy = caller.policy(self.gate_policy(model))
        affinity = Affinity(match.placement.pool, match.cached_tokens) if match else None
        views = self.pools.views()
        if serving is not None:
            views = [v for v in views if v.name in serving] or views
        decision = decide(blended, views, self.calibration, policy, affinity, previous=self._last_route.get(shape),
                          draw=self._random.random())
        if len(views) < len(self.pools.pools):
            decision = replace(decision, reasons=(f"{model} is served only by {', '.join(v.name for v in views)}",
                                                  *decision.reasons))
        order = [decision.route] + [c.pool for c in sorted(decision.costs, key=lambda c: c.cost_per_token)
                                    if c.pool != decision.route]
        self._remember(shape, decision.route)
        plan = Plan(body, endpoint, model, blended, shape, conversation, match, decision, order, caller=caller)
        self._maybe_explore(plan, policy.mode)
        return plan

    def fallback_plan(self, body: dict[str, Any], endpoint: str, error: Exception,
                      serving: set[str] | None = None, caller: Caller | None = None) -> Plan:
        """A plan made without the gate, for a request the gate failed on: plain pools
        first. Speculation is an optimisation; a bug in weighing it must not cost the
        client its answer."""
        order = self.pools.plain_first(serving)
        reason = f"the gate failed ({type(error).__name__}): sent to a plain pool unassessed"
        decision = Decision(route=order[0], predicted_saving=0.0, predicted_tau={}, reasons=(reason,),
                            cause="gate_error", break_even=lambda: (None, "the gate failed"))
        model = body.get("model") if isinstance(body.get("model"), str) else None
        return Plan(body, endpoint, model, StructureEstimate.unknown(reason), "", Conversation((), None), None,
                    decision, order, caller=caller or Caller())

    def explanation(self, plan: Plan, gated: bool = True) -> dict[str, Any]:
        """What ``plan`` says, and where its request would go: to a plain pool,
        when its endpoint is not ``gated``."""
        result = plan.explain()
        if not gated:
            result["route"] = self.pools.plain_first()[0]
            result["reasons"].insert(0, f"gate_responses is off: /v1/responses is passed through to "
                                        f"{result['route']}; the rest says what the gate would do")
        if plan.caller.chose_mode:
            result["reasons"].insert(0, f"the request chose mode {plan.caller.mode} (x-draftgate-mode)")
        return result

    def learn(self, plan: Plan, measured: ObservedStructure | None, pool: str, replica: str,
              prompt_tokens: float) -> None:
        """What a finished answer taught: its shape's output (``measured``, when it was
        measured) and where its conversation's prefix is now cached."""
        if measured is not None and measured.total_tokens > 0 and plan.shape:  # a fallback plan has no shape
            self.learner.observe(plan.shape, measured)
        self.affinity.record(plan.conversation, pool, replica, prompt_tokens)
        if self.shared is not None:
            self.shared.push(plan.shape, measured, plan.conversation, (pool, replica, float(prompt_tokens)))

    def _maybe_explore(self, plan: Plan, mode: str) -> None:
        """Send a small share to the other kind of pool, so both savings stay measured.

        Never for requests the gate had to route one way (vLLM would not speculate,
        n > 1, a fixed mode, a pool at capacity) or that would lose a cached prefix.
        """
        share = self.settings.exploration_share
        if share <= 0 or self._random.random() >= share or mode != "auto":
            return
        e, d = plan.estimate, plan.decision
        if e.speculation_unsupported or e.n > 1 or any("capacity" in r for r in d.reasons):
            return
        if plan.affinity is not None and plan.affinity.cached_tokens > 1000:
            return
        chosen = self.pool(d.route)
        others = [c for c in sorted(d.costs, key=lambda c: c.cost_per_token)
                  if c.eligible and c.pool != d.route and (p := self.pool(c.pool)) is not None
                  and chosen is not None and p.speculative != chosen.speculative]
        if not others:
            return
        target = others[0].pool
        plan.order = [target] + [name for name in plan.order if name != target]
        plan.explored = True
        self.metrics.exploration.labels(model=self.metrics.model_label(plan.model), **{"class": plan.request_class},
                                       pool=target).inc()

    def _remember(self, shape: str, route: str) -> None:
        self._last_route[shape] = route
        self._last_route.move_to_end(shape)
        while len(self._last_route) > self.settings.learner_capacity:
            self._last_route.popitem(last=False)

    def pool(self, name: str) -> Pool | None:
        return self.pools.pools.get(name)

    @staticmethod
    def decision_reason(plan: Plan) -> str:
        """One low-cardinality label for why the route was chosen."""
        if plan.decision.cause != "content":
            return plan.decision.cause
        if plan.affinity is not None and plan.decision.route == plan.affinity.placement.pool:
            return "affinity"
        return "content"
