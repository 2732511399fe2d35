"""What the gate knows and decides: the calibration, the per-shape learner, the
conversations' placements, and the plan for each request (its structure
estimate and the gate's decision).

The ``Planner`` reads the pools' load and writes nothing of theirs; what a
finished request teaches comes back to it through ``learn``.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from draftgate.calibration_file import load_calibration
from draftgate.policy import plan as plans
from draftgate.policy.calibration import Calibration, CalibrationError
from draftgate.policy.gate import Affinity, Decision, GatePolicy, decide
from draftgate.policy.kinds import kind_of
from draftgate.policy.plan import (
    Assignment,
    FleetInputs,
    FleetPlan,
    Latencies,
    PlanFeedback,
    PoolRates,
    Recommendation,
    TrafficWindow,
    Turns,
    plan_fleet,
    spill,
)
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
from draftgate.proxy.callers import Caller, seconds
from draftgate.proxy.config import ConfigError, ModelPolicy, ProxySettings, SpeculationConfig
from draftgate.proxy.endpoints import BY_NAME
from draftgate.proxy.metrics import ProxyMetrics
from draftgate.proxy.pools import Pool, PoolSet
from draftgate.proxy.shared_state import SharedState

log = logging.getLogger("draftgate.gate")


@dataclass(slots=True)
class RequestPlan:
    """One request's plan: what the gate read of it, where it goes, and why (the fleet's plan,
    which pool serves each kind, is ``FleetPlan``)."""

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
    assigned: Mapping[str, float] | None = None  # the shares of its kind, when the fleet plan's assignment routed it

    @property
    def route(self) -> str:
        return self.order[0]

    def cached_share(self, pool: str) -> float:
        """The share of the prompt ``pool`` holds in its prefix cache, as the gate reckons it (its
        conversation's placement)."""
        match = self.affinity
        if match is None or match.placement.pool != pool:
            return 0.0
        return min(1.0, match.cached_tokens / max(1.0, self.estimate.prompt_tokens))

    @property
    def kind(self) -> str:
        """A low-cardinality label for what kind of request this is (``kind_of``)."""
        return kind_of(self.estimate)

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
            "kind": self.kind,
            "assignment": None if self.assigned is None else dict(self.assigned),
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


# decisions the assignment may overrule: those made on the costs alone or by the gate's own habits; not a
# request vLLM would not speculate, n > 1, a mode, a pool out of rotation or at capacity
_FOLLOWS_ASSIGNMENT = ("content", "latency_target", "hysteresis")
AFFINITY_HOLD_TOKENS = 1024  # a conversation with this much of its prefix cached stays where it is
RATE_WINDOW_SECONDS = 60.0  # the kinds' arrival rates are taken over this
ARRIVALS_KEPT = 100_000  # at most, within the window: past 1,600 requests a second the rates read low


def candidate_of(name: str, speculation: SpeculationConfig | None, max_num_seqs: int,
                 max_num_batched_tokens: int, depth: int | None = None) -> plans.Candidate:
    """A pool's configuration as the fleet plan weighs it; ``depth``: the pool's own, when it
    runs (``Pool.depth``), else the configured one."""
    if speculation is None:
        return plans.Candidate(name, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens)
    gamma = depth if depth is not None else speculation.gamma or 0
    return plans.Candidate(name, speculation.method, gamma, speculation.lookup,
                           tuple(tuple(row) for row in speculation.num_speculative_tokens_per_batch_size),
                           max_num_seqs, max_num_batched_tokens,
                           speculation.draft_prefill_ratio if speculation.method == "draft_model" else 0.0,
                           speculation.draft_cost)


class Planner:
    """``pools``: read for their load, never changed here; ``metrics``: where the
    exploration share is counted."""

    def __init__(self, settings: ProxySettings, pools: PoolSet, metrics: ProxyMetrics,
                 shared: SharedState | None = None, calibration: Calibration | None = None,
                 seed: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """``shared``: the store proxy replicas share (``proxy/shared_state.py``), if any:
        what it knows of a request is pulled in before the request is planned, and what
        its answer taught is pushed to it. ``calibration``: in place of the settings'
        file; ``seed``: for the draws that thin traffic and explore, and ``clock``: the
        time, where a run must repeat exactly (the evaluation's simulation)."""
        self.settings = settings
        self.pools = pools
        self.metrics = metrics
        self.shared = shared
        self.clock = clock
        self.traffic = TrafficWindow()
        # which pool each kind of request goes to: the base (configured, then the proxy's own plan) and its
        # spill under load; the kinds' arrivals it is spilled by
        self._base: Assignment | None = Assignment.whole(settings.plan.routing) if settings.plan.routing else None
        self.assignment: Assignment | None = self._base
        self._capacities: list[PoolRates] = []
        self._turns = Turns()
        self._arrivals: deque[tuple[float, str]] = deque(maxlen=ARRIVALS_KEPT)
        self.recommendation: Recommendation | None = None
        self.law: dict[str, plans.KindLaw] = {}  # kind -> the Draft Law where the adopted plan routes it
        self.feedback = PlanFeedback()  # the plan's predictions for the running pools against their answers
        self.calibration = calibration if calibration is not None else load_calibration_or_defaults(settings)
        self.learner = StructureLearner(capacity=settings.learner_capacity)
        self.affinity = AffinityTable(settings.affinity_capacity)
        # the keys replicas share are hashed alike in every process; this proxy's alone, faster
        self._shape_key = shared_shape_key if shared is not None else shape_key
        self._last_route: OrderedDict[str, str] = OrderedDict()
        self._random = random.Random(seed)
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
        self.feedback.keep_only({p.name for p in settings.pools})
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
                          objective=config.objective, gpu_budget=seconds(config.gpu_budget_ms_per_token),
                          fleet_objective=config.fleet_objective)

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
             context: int | None = None, caller: Caller | None = None, reading: Reading | None = None) -> RequestPlan:
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
        kind = kind_of(blended)
        self._arrivals.append((self.clock(), kind))
        shares = self.assignment.of(kind) if self.assignment is not None else {}
        if shares and decision.cause in _FOLLOWS_ASSIGNMENT and not caller.chose_mode:
            decision = self._assigned(decision, kind, shares, match)
        else:
            shares = {}
        order = [decision.route] + [c.pool for c in sorted(decision.costs, key=lambda c: c.cost_per_token)
                                    if c.pool != decision.route]
        self._remember(shape, decision.route)
        plan = RequestPlan(body, endpoint, model, blended, shape, conversation, match, decision, order, caller=caller,
                    assigned=shares or None)
        if not shares:
            self._maybe_explore(plan, policy.mode)
        return plan

    def _assigned(self, decision: Decision, kind: str, shares: Mapping[str, float], match: Match | None) -> Decision:
        """The decision as the assignment routes the kind: in turn among its pools that can take it now, but a
        conversation stays on the pool that holds enough of its prefix."""
        open_pools = {c.pool for c in decision.costs if c.eligible and c.has_room}
        if match is not None and match.placement.pool in open_pools and match.cached_tokens >= AFFINITY_HOLD_TOKENS:
            route, why = match.placement.pool, (f"kept on {match.placement.pool}, which holds "
                                                f"~{match.cached_tokens:.0f} tokens of its prefix")
        else:
            chosen = self._turns.next(kind, shares, open_pools)
            if chosen is None:
                return replace(decision, reasons=(*decision.reasons, f"no pool assigned {kind} can take it now: "
                                                                     "the gate's choice stands"))
            route, why = chosen, f"assigned: {kind} goes to " + ", ".join(
                f"{p} {s:.0%}" for p, s in sorted(shares.items()))
        cost = decision.cost_of(route)
        assert cost is not None
        return replace(decision, route=route, cause="assignment", causes=decision.causes | {"assignment"},
                       predicted_saving=cost.saving,
                       predicted_tau=dict(cost.tau) if cost.saving else decision.predicted_tau,
                       reasons=(*decision.reasons, why))

    # ------------------------------------------------------------ the fleet plan

    def rates(self, now: float) -> dict[str, float]:
        """Requests a second of each kind over the last ``RATE_WINDOW_SECONDS``."""
        arrivals = self._arrivals
        while arrivals and arrivals[0][0] < now - RATE_WINDOW_SECONDS:
            arrivals.popleft()
        counts: dict[str, int] = {}
        for _, kind in arrivals:
            counts[kind] = counts.get(kind, 0) + 1
        return {kind: n / RATE_WINDOW_SECONDS for kind, n in counts.items()}

    def refresh(self) -> None:
        """Spill the base assignment as the kinds' current rates need it (``assignment.spill``)."""
        if self._base is not None and self._capacities:
            self.assignment = spill(self._base, self.rates(self.clock()), self._capacities)

    def replan(self, recommend: bool = True) -> Recommendation | None:
        """Plan the fleet from the traffic of the last minutes and take the plan (``fleet_inputs``,
        ``plan_fleet``, ``adopt``); None without traffic, or when not asked to ``recommend`` a fleet (what
        the routing needs is the assignment alone). The proxy runs the middle step off its event loop."""
        inputs = self.fleet_inputs()
        if inputs is None:
            return None
        return self.adopt(plan_fleet(inputs, recommend))

    def fleet_inputs(self) -> FleetInputs | None:
        """What the fleet plan needs, copied out of the proxy's state: the traffic of the last minutes, the
        pools as they run (each with the step scale its answers set against the last plan: ``settle``), the
        candidates, the targets and objective of the busiest model, the routing now. None without traffic."""
        traffic = self.traffic.traffic(self.clock())
        if traffic is None:
            return None
        policy = self.gate_policy(self.traffic.busiest_model())
        targets = plans.Targets(policy.ttft_target or plans.Targets().ttft, policy.tpot_target or plans.Targets().tpot)
        self.feedback.settle(targets)
        scaled = self.feedback.step_scale
        running = tuple(
            (replace(candidate_of(p.name, p.config.speculation, p.config.max_num_seqs, p.config.max_num_batched_tokens,
                                  p.depth), step_scale=scaled(p.name)), max(1, len(p.replicas_in_rotation())))
            for p in self.pools)
        candidates = tuple(candidate_of(c.name, c.speculation, c.max_num_seqs, c.max_num_batched_tokens)
                           for c in self.settings.plan.candidates) or plans.default_candidates()
        candidates = tuple(replace(c, step_scale=scaled(c.name)) for c in candidates)
        routed = tuple(sorted((kind, next(iter(pools))) for kind, pools in self._base.shares.items())
                       ) if self._base is not None else ()
        return FleetInputs(traffic, self.calibration, running, candidates, targets, policy.fleet_objective, routed)

    def adopt(self, planned: FleetPlan) -> Recommendation | None:
        """Route by the plan: its assignment for the running fleet becomes the base, spilled at once; unless
        it would move traffic for a gain no larger than the plan's observed error (``policy/plan/feedback.py``), when
        the routing stays. Either way, what the plan predicts for the routing taken is kept, to be set
        beside what the pools do."""
        taken = planned.assignment
        if planned.routed is not None and planned.assignment.assignment() != planned.routed.assignment() and (
                planned.gain <= self.feedback.error):
            log.info("fleet plan: routing kept; moving kinds would gain %.1f%%, within the plan's observed error "
                     "of %.1f%%", 100 * planned.gain, 100 * self.feedback.error)
            taken = planned.routed
            self.law = {k.kind: k for k in planned.routed_law}
        else:
            self.law = {k.kind: k for k in planned.law}
            self._base = Assignment.whole(taken.assignment())
            self.assignment = self._base
        self._capacities = planned.capacities
        self.recommendation = planned.recommendation or self.recommendation
        self.feedback.predict({plan.candidate.name: Latencies(load.tpot_median, load.tpot, math.nan, load.ttft,
                                                               load.within)
                               for plan, load in zip(taken.pools, taken.loads) if load is not None})
        self.refresh()
        return planned.recommendation

    def answered(self, pool: str, ttft: float, tpot: float, tokens: int) -> None:
        """A streamed answer's timing, for the plan to be checked against (``policy/plan/feedback.py``)."""
        self.feedback.answered(pool, ttft, tpot, tokens)

    def fallback_plan(self, body: dict[str, Any], endpoint: str, error: Exception,
                      serving: set[str] | None = None, caller: Caller | None = None) -> RequestPlan:
        """A plan made without the gate, for a request the gate failed on: plain pools
        first. Speculation is an optimisation; a bug in weighing it must not cost the
        client its answer."""
        order = self.pools.plain_first(serving)
        reason = f"the gate failed ({type(error).__name__}): sent to a plain pool unassessed"
        decision = Decision(route=order[0], predicted_saving=0.0, predicted_tau={}, reasons=(reason,),
                            cause="gate_error", causes=frozenset({"gate_error"}), break_even=lambda: (None, "the gate failed"))
        model = body.get("model") if isinstance(body.get("model"), str) else None
        return RequestPlan(body, endpoint, model, StructureEstimate.unknown(reason), "", Conversation((), None), None,
                    decision, order, caller=caller or Caller())

    def explanation(self, plan: RequestPlan, gated: bool = True) -> dict[str, Any]:
        """What ``plan`` says, and where its request would go: to a plain pool,
        when its endpoint is not ``gated``."""
        result = plan.explain()
        result["depths"] = [{"pool": p.name, "configured": p.config.speculation.gamma, "reported": p.reported_depth,
                             "priced_at": p.depth} for p in self.pools if p.config.speculation is not None]
        law = self.law.get(plan.kind)
        if law is not None:  # the fleet plan's view of the request's kind, once there is a plan
            result["plan_law"] = law.as_dict()
        if not gated:
            result["route"] = self.pools.plain_first()[0]
            result["reasons"].insert(0, f"gate_responses is off: /v1/responses is passed through to "
                                        f"{result['route']}; the rest says what the gate would do")
        if plan.caller.chose_mode:
            result["reasons"].insert(0, f"the request chose mode {plan.caller.mode} (x-draftgate-mode)")
        return result

    def learn(self, plan: RequestPlan, measured: ObservedStructure | None, pool: str, replica: str,
              prompt_tokens: float) -> None:
        """What a finished answer taught: its shape's output (``measured``, when it was
        measured) and where its conversation's prefix is now cached."""
        if measured is not None and measured.total_tokens > 0 and plan.shape:  # a fallback plan has no shape
            self.learner.observe(plan.shape, measured)
            self.traffic.add(self.clock(), plan.kind, measured.total_tokens,
                             prompt_tokens * (1.0 - plan.cached_share(pool)), measured.w_s, measured.w_r,
                             plan.estimate.temperature, plan.model or "")
        self.affinity.record(plan.conversation, pool, replica, prompt_tokens)
        if self.shared is not None:
            self.shared.push(plan.shape, measured, plan.conversation, (pool, replica, float(prompt_tokens)))

    def _maybe_explore(self, plan: RequestPlan, mode: str) -> None:
        """Send a small share to the other kind of pool, so both savings stay measured.

        Never for requests the gate had to route one way (vLLM would not speculate,
        n > 1, a fixed mode, a pool at capacity) or that would lose a cached prefix.
        """
        share = self.settings.exploration_share
        if share <= 0 or self._random.random() >= share or mode != "auto":
            return
        e, d = plan.estimate, plan.decision
        if e.speculation_unsupported or e.n > 1 or "capacity" in d.causes:
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
        self.metrics.exploration.labels(model=self.metrics.model_label(plan.model), kind=plan.kind,
                                       pool=target).inc()

    def _remember(self, shape: str, route: str) -> None:
        self._last_route[shape] = route
        self._last_route.move_to_end(shape)
        while len(self._last_route) > self.settings.learner_capacity:
            self._last_route.popitem(last=False)

    def pool(self, name: str) -> Pool | None:
        return self.pools.pools.get(name)

    @staticmethod
    def decision_reason(plan: RequestPlan) -> str:
        """One low-cardinality label for why the route was chosen."""
        if plan.decision.cause != "content":
            return plan.decision.cause
        if plan.affinity is not None and plan.decision.route == plan.affinity.placement.pool:
            return "affinity"
        return "content"
