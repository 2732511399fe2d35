"""The gate: which pool serves a request, and what it is predicted to save.

Pure: numbers and models in, a decision out. The gate minimises the busy
GPU-seconds a request causes (docs/model.md, "What the gate minimises"): on a
pool running ``b`` sequences, joining raises every step from ``R(b)`` to
``R(b+1)`` for as many steps as the request runs (fewer, dearer ones on a
speculation pool), and its prefill is added, less what the pool has cached.
Starting an idle pool costs its whole step; joining a busy one, the increment.
Queueing costs no GPU time, so it is not priced; a pool that is full takes no
marginal traffic.

Load enters through ``delta(b)`` and ``c_T(b)``; cache locality through the
prefix a pool already holds; temperature through the class predictabilities;
requests vLLM will not speculate, and ``n > 1``, go to a plain pool.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from draftgate.policy import copying, law
from draftgate.policy.calibration import LOOKUP_METHODS, Calibration
from draftgate.policy.structure.estimates import ClassTokens, StructureEstimate

Mode = Literal["auto", "always_on", "always_off"]
Objective = Literal["cost", "latency"]
CAUSES = ("unsupported_sampling", "n_gt_1", "mode", "capacity", "latency_target", "hysteresis", "health")  # strongest first
_AT_CAPACITY = "at capacity"  # a pool's note when every sequence slot is taken


def depth_at(table: Sequence[tuple[int, int, int]], batch: float, depth: int) -> int:
    """The depth vLLM drafts at with ``batch`` requests running: the K of the row of dynamic K's
    ``table`` (``num_speculative_tokens_per_batch_size``, rows [lo, hi, K]) that holds the batch,
    else ``depth``, the pool's ``num_speculative_tokens``."""
    for lo, hi, k in table:
        if lo <= batch <= hi:
            return k
    return depth


@dataclass(frozen=True, slots=True)
class PoolView:
    """What the gate needs to know of a pool right now."""

    name: str
    method: str | None  # None: speculation off
    gamma: int = 0
    draft_cost: float | None = None  # None: take it from calibration
    healthy: bool = True
    running: float = 0.0  # running requests (scraped, or the proxy's own count if fresher)
    waiting: float = 0.0
    max_num_seqs: int = 256
    draft_prefill_ratio: float = 0.0
    kv_usage: float = 0.0  # KV-cache usage of its least-used replica, 0..1 (scraped)
    lookup: tuple[int, int] = copying.DEFAULT_LOOKUP  # ngram's prompt_lookup_min and _max

    @property
    def speculative(self) -> bool:
        return self.method is not None and self.gamma > 0

    @property
    def at_capacity(self) -> bool:
        return self.running >= self.max_num_seqs


@dataclass(frozen=True, slots=True)
class GatePolicy:
    mode: Mode = "auto"
    margin: float = 0.0  # speculation must cost at least this fraction less than the plain pool
    hysteresis: float = 0.03  # a route changes only when the other side is this much cheaper
    # latency targets, seconds (None: none): a request goes where they hold when the cheaper pool would break one
    tpot_target: float | None = None
    ttft_target: float | None = None
    # cost: the fewest busy GPU-seconds; latency: the fastest tokens, within gpu_budget (GPU-seconds per
    # output token the request may cause) when one is set
    objective: Objective = "cost"
    gpu_budget: float | None = None
    # what the fleet plan makes best (policy/plan/): the most traffic within the targets, or the cheapest
    fleet_objective: Literal["capacity", "cost"] = "capacity"
    # KV-cache usage from which a pool takes no marginal traffic: a new request there
    # would wait for free blocks, or make the scheduler preempt one that runs
    kv_cache_full: float = 0.95
    # Over this much usage below kv_cache_full, marginal traffic thins out by chance in
    # proportion, so proxies reading the same scrape do not all turn away at once
    kv_cache_ramp: float = 0.05


@dataclass(frozen=True, slots=True)
class Affinity:
    """Where the conversation's prefix is cached, and how many prompt tokens it covers."""

    pool: str
    cached_tokens: float


@dataclass(frozen=True, slots=True)
class PoolCost:
    pool: str
    saving: float  # predicted speculative saving on this pool (0 for plain pools)
    tau: dict[str, float]
    cost_per_token: float  # busy GPU-seconds the request would cause here, per output token: what is minimised
    gpu_seconds_per_token: float  # the pool's busy GPU-seconds per token at its load, shared out evenly
    prefill_seconds: float
    eligible: bool
    note: str = ""
    batch: float = 1.0  # running requests including this one, when decided
    has_room: bool = True  # takes marginal traffic now (see _no_room)
    gamma: int = 0  # the depth the pool drafts at with this request in it (dynamic K varies it)
    # the highest load calibration measured, when ``batch`` is past it: the costs are extrapolated
    extrapolated_beyond: float | None = None
    step_increment: float = 0.0  # seconds the request adds to each step: the whole step on an idle pool
    steps: float = 0.0  # steps it is expected to run for
    predicted_tpot: float = 0.0  # seconds per output token it would see here: a step per steps/tokens
    predicted_ttft: float = 0.0  # its prefill and a first step (a queue is not predicted: a full pool takes none)
    meets_targets: bool = True
    # when the answer may be a call or prose: the busy GPU-seconds each outcome would cause
    # here, ((outcome, seconds), ...); the expectation over them is what is minimised
    outcome_seconds: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)  # no slots: break_even is remembered in a cached_property
class Decision:
    route: str
    predicted_saving: float
    predicted_tau: dict[str, float]
    reasons: tuple[str, ...]
    costs: tuple[PoolCost, ...] = field(default_factory=tuple)
    # what settled the route, one low-cardinality label: content (the costs alone), or one of
    # CAUSES, the strongest that applied; ``causes``: every one that applied
    cause: str = "content"
    causes: frozenset[str] = frozenset()
    # The break-even w_S* is reported (metrics, explain), never used to route: it is worked
    # out on first use, after the request has gone, not while the client waits.
    break_even: Callable[[], tuple[float | None, str | None]] = field(
        default=lambda: (None, "no speculative pool"), repr=False, compare=False)

    def cost_of(self, pool: str) -> PoolCost | None:
        return next((c for c in self.costs if c.pool == pool), None)

    @functools.cached_property
    def _break_even_result(self) -> tuple[float | None, str | None]:
        return self.break_even()

    @property
    def break_even_ws(self) -> float | None:
        return self._break_even_result[0]

    @property
    def break_even_note(self) -> str | None:
        return self._break_even_result[1]


def predicted_taus(calibration: Calibration, pool: PoolView, temperature: float,
                   copy: copying.CopySources | None = None) -> dict[str, float]:
    """Per-class tau on a pool.

    A model drafter (a draft model, EAGLE or MTP heads): the law from the method's kappa and
    the class predictabilities at this temperature, or, when calibration measured tau at
    temperature 0, that measure moved by the law's change from temperature 0 to this one.
    A lookup drafter (ngram, suffix): what the request holds to copy (``copy``) predicts the
    share of each class it gets right (``copying.py``), moved to this temperature the same way.

    A model drafter's are derived once per calibration, pool and temperature and shared: read
    them only. A lookup's depend on the request, and cost a few multiplications.
    """
    if pool.method in LOOKUP_METHODS:
        return _predicted_taus(calibration, pool, temperature, copy)
    key = ("taus", pool.name, pool.gamma, pool.method, temperature)
    return calibration.derived(key, lambda: _predicted_taus(calibration, pool, temperature, copy))


def _predicted_taus(calibration: Calibration, pool: PoolView, temperature: float,
                    copy: copying.CopySources | None) -> dict[str, float]:
    cal = calibration.pool(pool.name, pool.gamma, pool.method)
    kappa = cal.kappa if cal.kappa is not None else calibration.kappa
    taus = _law_taus(calibration, pool.gamma, temperature, kappa)
    if pool.method in LOOKUP_METHODS:
        base = copying.lookup_taus(copy or copying.CopySources(), pool.gamma, copy_rates(calibration, pool))
    elif cal.tau_greedy is not None:
        base = {c: cal.tau_greedy.of(c) for c in "srf"}
    else:
        return taus
    # Measured (or, for a lookup, predicted) at temperature 0 and carried to this one by the
    # law's trend: a class's tokens are not equally predictable (a call's keys are near-certain,
    # its values are not), and one acceptance per class overstates the runs such a mix gives.
    greedy = taus if temperature <= 1e-5 else _law_taus(calibration, pool.gamma, 0.0, kappa)
    return {c: min(float(pool.gamma), base[c] * (taus[c] / greedy[c] if greedy[c] > 0 else 1.0)) for c in "srf"}


def _law_taus(calibration: Calibration, gamma: int, temperature: float, kappa: float) -> dict[str, float]:
    rho = calibration.rho_at(temperature)
    return {c: law.tau(law.acceptance(rho.of(c), kappa), gamma) for c in "srf"}


def pool_cost(
    estimate: StructureEstimate,
    pool: PoolView,
    calibration: Calibration,
    policy: GatePolicy,
    affinity: Affinity | None,
    mix: law.ClassMix | None = None,
    draw: float | None = None,
) -> PoolCost:
    batch = pool.running + 1.0
    c_t = calibration.target_pass_seconds(batch)
    tokens = max(1.0, estimate.expected_tokens.total)
    mix = mix or _mix(estimate)
    taus = {"s": 0.0, "r": 0.0, "f": 0.0}
    saving = 0.0
    measured = calibration.target_pass_seconds.measured_up_to
    steps = tokens
    drafted: float | None = None
    if pool.speculative and not estimate.speculation_unsupported:
        cal = calibration.pool(pool.name, pool.gamma, pool.method)
        measured = min(measured, cal.delta.measured_up_to)
        d = cal.draft_cost_with(pool.draft_cost)
        taus = predicted_taus(calibration, pool, estimate.temperature, estimate.copyable)
        drafted = drafted_per_round(calibration, pool, taus, mix)
        # the span form's saving, from inputs calibration and configuration have validated
        steps = tokens * law.rounds_per_token(mix, taus)
        saving = 1.0 - law.round_cost(drafted, cal.delta(batch), d) * steps / tokens
    cached = affinity.cached_tokens if affinity is not None and affinity.pool == pool.name else 0.0
    uncached = max(0.0, estimate.prompt_tokens - cached)
    prefill = uncached * calibration.prefill_seconds_per_token * (1.0 + pool.draft_prefill_ratio)
    prefill += cached * calibration.prefill_seconds_per_token * calibration.prefill_hit_cost_ratio
    step = step_seconds(calibration, pool, batch, drafted)
    increment = step if pool.running < 1.0 else max(0.0, step - step_seconds(calibration, pool, pool.running, drafted))
    decode = tokens * c_t * (1.0 - saving)
    outcomes: tuple[tuple[str, float], ...] = ()
    if estimate.uncertain:
        speculated = saving != 0.0
        outcomes = tuple((name, _outcome_steps(split, estimate.sequences, taus if speculated else None) * increment
                          + prefill) for name, split in (("call", estimate.if_call), ("answer", estimate.if_answer)))
    tpot = step * steps / tokens
    ttft = prefill + step
    meets = ((policy.tpot_target is None or tpot <= policy.tpot_target)
             and (policy.ttft_target is None or ttft <= policy.ttft_target))
    eligible = pool.healthy
    no_room = _no_room(pool, policy, affinity, draw)
    note = no_room or ("" if pool.healthy else "unhealthy")
    return PoolCost(
        pool=pool.name,
        saving=saving,
        tau=taus,
        cost_per_token=(steps * increment + prefill) / tokens,
        gpu_seconds_per_token=(decode / batch + prefill) / tokens,
        prefill_seconds=prefill,
        eligible=eligible,
        note=note,
        batch=batch,
        has_room=not no_room,
        gamma=pool.gamma,
        extrapolated_beyond=measured if batch > measured else None,
        step_increment=increment,
        steps=steps,
        predicted_tpot=tpot,
        predicted_ttft=ttft,
        meets_targets=meets,
        outcome_seconds=outcomes,
    )


def _outcome_steps(split: ClassTokens, sequences: int, taus: dict[str, float] | None) -> float:
    """Steps one outcome runs for: a token a step, or on a speculation pool (``taus``)
    the span form's rounds."""
    if taus is None:
        return split.total * sequences
    return sequences * (split.s / (taus["s"] + 1.0) + split.r / (taus["r"] + 1.0) + split.f / (taus["f"] + 1.0))


def step_seconds(calibration: Calibration, pool: PoolView, running: float, drafted: float | None = None) -> float:
    """One step of ``pool`` with ``running`` sequences: a target pass, or on a speculation
    pool a round of draft passes and the verification of ``drafted`` tokens a sequence
    (``gamma`` unless a lookup drafts fewer)."""
    c_t = calibration.target_pass_seconds(running)
    if not pool.speculative:
        return c_t
    cal = calibration.pool(pool.name, pool.gamma, pool.method)
    d = cal.draft_cost_with(pool.draft_cost)
    return c_t * law.round_cost(pool.gamma if drafted is None else drafted, cal.delta(running), d)


def drafted_per_round(calibration: Calibration, pool: PoolView, taus: dict[str, float], mix: law.ClassMix) -> float:
    """Draft tokens a round verifies for this request: ``gamma`` from a model drafter; from a
    lookup, only where it found something to copy (``copying.drafted_per_round``)."""
    if pool.method not in LOOKUP_METHODS:
        return float(pool.gamma)
    return copying.drafted_per_round(taus, {"s": mix.s, "r": mix.r, "f": mix.f}, pool.gamma,
                                     copy_rates(calibration, pool))


def copy_rates(calibration: Calibration, pool: PoolView) -> copying.CopyRates:
    """What a lookup pool copies from a request's sources: as its calibration fitted it, else the
    committed coefficients of its method and lookup setting."""
    fitted = calibration.pool(pool.name, pool.gamma, pool.method).copy_rates
    return fitted.rates() if fitted is not None else copying.rates_for(pool.method or "", pool.lookup)[0]


def decide(
    estimate: StructureEstimate,
    pools: list[PoolView],
    calibration: Calibration,
    policy: GatePolicy = GatePolicy(),
    affinity: Affinity | None = None,
    previous: str | None = None,
    draw: float | None = None,
) -> Decision:
    """Pick the pool with the lowest predicted cost per output token.

    ``draw``, uniform in [0, 1) and the caller's to make, thins marginal traffic to
    a pool whose KV cache nears full (``GatePolicy.kv_cache_ramp``); without one,
    only a full cache turns traffic away.
    """
    if not pools:
        raise ValueError("the gate needs at least one pool")
    reasons: list[str] = []
    causes: set[str] = set()
    mix = _mix(estimate)
    costs = [pool_cost(estimate, p, calibration, policy, affinity, mix, draw) for p in pools]
    by_name = {p.name: p for p in pools}
    candidates = [c for c in costs if c.eligible] or costs
    if len(candidates) < len(costs):
        reasons.append("skipped unhealthy: " + ", ".join(c.pool for c in costs if not c.eligible))
        causes.add("health")
    with_room = [c for c in candidates if c.has_room]
    if with_room and len(with_room) < len(candidates):
        reasons.append("at capacity, no marginal traffic: " + ", ".join(
            c.pool if c.note == _AT_CAPACITY else f"{c.pool} ({c.note})" for c in candidates if not c.has_room))
        causes.add("capacity")
        candidates = with_room
    plain = [c for c in candidates if not by_name[c.pool].speculative]
    spec = [c for c in candidates if by_name[c.pool].speculative]

    forced: list[PoolCost] | None = None
    if estimate.speculation_unsupported:
        reasons.append("vLLM will not speculate on this request (" + ", ".join(estimate.speculation_blockers) + ")")
        causes.add("unsupported_sampling")
        forced = plain or None
    elif estimate.n > 1:
        reasons.append(f"n={estimate.n}: plain pool")
        causes.add("n_gt_1")
        forced = plain or None
    elif policy.mode == "always_off":
        reasons.append("mode always_off")
        causes.add("mode")
        forced = plain or None
    elif policy.mode == "always_on":
        reasons.append("mode always_on")
        causes.add("mode")
        forced = spec or None
    if forced is not None:
        chosen = min(forced, key=lambda c: c.cost_per_token)
    else:
        within = _within_targets(candidates, policy, reasons, causes)
        chosen = (_fastest(within, policy, reasons) if policy.objective == "latency"
                  else _cheapest(within, by_name, policy, previous, reasons, causes))
    best_spec = max(spec or [c for c in costs if by_name[c.pool].speculative] or [chosen], key=lambda c: c.saving)
    pool = by_name[chosen.pool]
    if pool.speculative:
        reasons.append(f"speculate on {chosen.pool} (gamma={pool.gamma}): predicted saving {chosen.saving:+.1%}")
    else:
        reasons.append(f"plain pool {chosen.pool}: best speculative saving {best_spec.saving:+.1%}")
    if affinity is not None:
        reasons.append(f"prefix of ~{affinity.cached_tokens:.0f} tokens cached on {affinity.pool}")
    for c in costs:
        if c.extrapolated_beyond is not None:
            reasons.append(f"{c.pool}: {c.batch:.0f} running is past the {c.extrapolated_beyond:.0f} calibration "
                           "measured; its step time and verification cost there are extrapolated")
    return Decision(
        route=chosen.pool,
        predicted_saving=chosen.saving,
        predicted_tau=dict(chosen.tau if pool.speculative else best_spec.tau),
        reasons=tuple(reasons),
        costs=tuple(costs),
        cause=next((c for c in CAUSES if c in causes), "content"),
        causes=frozenset(causes),
        break_even=functools.partial(_break_even, estimate, by_name.get(best_spec.pool), best_spec.tau,
                                     calibration, mix),
    )


def _no_room(pool: PoolView, policy: GatePolicy, affinity: Affinity | None, draw: float | None) -> str:
    """Why ``pool`` takes no marginal traffic now, or "" when it does.

    Below a full cache, a request is turned away by chance, with a probability that
    rises from 0 to 1 over the ramp; not one whose prefix the pool holds, which needs
    few new blocks there.
    """
    if pool.at_capacity:
        return _AT_CAPACITY
    usage, full = pool.kv_usage, policy.kv_cache_full
    if usage >= full:
        return f"KV cache {usage:.0%} used"
    start = full - policy.kv_cache_ramp
    if draw is None or usage <= start or (affinity is not None and affinity.pool == pool.name):
        return ""
    if draw < (usage - start) / policy.kv_cache_ramp:
        return f"KV cache {usage:.0%} used, thinning"
    return ""


def _within_targets(candidates: list[PoolCost], policy: GatePolicy, reasons: list[str],
                    causes: set[str]) -> list[PoolCost]:
    """The candidates that meet the latency targets, when some do and some do not; else all of
    them (with no pool meeting a target, cost alone decides)."""
    meeting = [c for c in candidates if c.meets_targets]
    if not meeting or len(meeting) == len(candidates):
        if not meeting and (policy.tpot_target is not None or policy.ttft_target is not None):
            reasons.append("no pool meets the latency targets: cost alone decides")
        return candidates
    missed = [c for c in candidates if not c.meets_targets]
    reasons.append("latency targets: " + ", ".join(
        f"{c.pool} would give {c.predicted_tpot * 1000:.0f} ms per token, {c.predicted_ttft * 1000:.0f} ms to the "
        f"first" for c in missed) + _targets(policy))
    causes.add("latency_target")
    return meeting


def _fastest(candidates: list[PoolCost], policy: GatePolicy, reasons: list[str]) -> PoolCost:
    """``objective: latency``: the pool with the fastest predicted tokens among those within the
    GPU budget (all of them when none is, or none is set)."""
    affordable = [c for c in candidates if policy.gpu_budget is None or c.cost_per_token <= policy.gpu_budget]
    if policy.gpu_budget is not None and len(affordable) < len(candidates):
        reasons.append(f"GPU budget {policy.gpu_budget * 1000:.2f} ms per token: " + (", ".join(
            f"{c.pool} would cause {c.cost_per_token * 1000:.2f}" for c in candidates if c not in affordable)
            if affordable else "no pool is within it"))
    chosen = min(affordable or candidates, key=lambda c: c.predicted_tpot)
    reasons.append(f"objective latency: {chosen.pool} gives the fastest tokens, "
                   f"{chosen.predicted_tpot * 1000:.0f} ms each")
    return chosen


def _targets(policy: GatePolicy) -> str:
    parts = ([f"{policy.tpot_target * 1000:.0f} ms per token"] if policy.tpot_target is not None else []) + (
        [f"{policy.ttft_target * 1000:.0f} ms to the first"] if policy.ttft_target is not None else [])
    return " (targets: " + ", ".join(parts) + ")"


def _mix(estimate: StructureEstimate) -> law.ClassMix:
    return law.ClassMix(estimate.w_s, estimate.w_r, max(0.0, 1.0 - estimate.w_s - estimate.w_r))


def _cheapest(candidates: list[PoolCost], pools: dict[str, PoolView], policy: GatePolicy, previous: str | None,
              reasons: list[str], causes: set[str]) -> PoolCost:
    def adjusted(c: PoolCost) -> float:
        # the margin is charged to speculation: it must cost at least `margin` less than plain
        return c.cost_per_token / (1.0 - policy.margin) if pools[c.pool].speculative else c.cost_per_token

    best = min(candidates, key=adjusted)
    if previous is not None and previous != best.pool:
        incumbent = next((c for c in candidates if c.pool == previous), None)
        if incumbent is not None and adjusted(incumbent) <= adjusted(best) * (1.0 + policy.hysteresis):
            reasons.append(f"hysteresis: staying on {previous}")
            causes.add("hysteresis")
            return incumbent
    return best


def _break_even(estimate: StructureEstimate, pool: PoolView | None, taus: dict[str, float],
                calibration: Calibration, mix: law.ClassMix) -> tuple[float | None, str | None]:
    if pool is None or not pool.speculative:
        return None, "no speculative pool"
    cal = calibration.pool(pool.name, pool.gamma, pool.method)
    d = cal.draft_cost_with(pool.draft_cost)
    drafter = law.Drafter(pool.gamma, cal.delta(pool.running + 1.0), d)
    if estimate.speculation_unsupported:  # its cost carries no taus: the pool would not speculate
        taus = predicted_taus(calibration, pool, estimate.temperature, estimate.copyable)
    ws = law.break_even_ws_spans(taus, drafter, mix)
    if ws.value is None or math.isnan(ws.value):
        return None, ws.reason
    return ws.value, ws.reason
