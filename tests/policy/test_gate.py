"""The gate decision (policy/gate): pure, so tested directly and with hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draftgate.policy.calibration import Calibration
from draftgate.policy.gate import Affinity, GatePolicy, PoolView, decide, predicted_taus
from draftgate.policy.structure import estimate

SPEC = PoolView("spec", "draft_model", gamma=8)
PLAIN = PoolView("plain", None)
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "a": {"type": "string"}}, "required": ["a"]}}}
CAL = Calibration()


def body(**fields):  # type: ignore[no-untyped-def]
    return {"model": "m", "messages": [{"role": "user", "content": "call f"}], **fields}


def test_schema_speculates_and_prose_does_not() -> None:
    schema = decide(estimate(body(tools=[TOOL], tool_choice="required", temperature=0)), [SPEC, PLAIN], CAL)
    prose = decide(estimate(body(temperature=0.7)), [SPEC, PLAIN], CAL)
    assert schema.route == "spec" and schema.predicted_saving > 0.3
    assert prose.route == "plain"
    assert prose.break_even_ws is not None and 0 < prose.break_even_ws < 1


def test_load_stops_speculation() -> None:
    e = estimate(body(tools=[TOOL], tool_choice="required", temperature=0))
    light = decide(e, [SPEC, PLAIN], CAL)
    heavy = decide(e, [PoolView("spec", "draft_model", gamma=8, running=220), PoolView("plain", None, running=220)],
                   CAL)
    assert light.route == "spec" and heavy.route == "plain"


def test_capacity_unsupported_sampling_n_and_modes() -> None:
    e = estimate(body(tools=[TOOL], tool_choice="required", temperature=0))
    full = decide(e, [PoolView("spec", "draft_model", gamma=8, running=256, max_num_seqs=256), PLAIN], CAL)
    assert full.route == "plain" and any("at capacity" in r for r in full.reasons)
    blocked = decide(estimate(body(tools=[TOOL], tool_choice="required", temperature=0, min_p=0.1)), [SPEC, PLAIN], CAL)
    assert blocked.route == "plain" and blocked.predicted_saving == 0.0
    assert decide(estimate(body(tools=[TOOL], tool_choice="required", n=3)), [SPEC, PLAIN], CAL).route == "plain"
    assert decide(e, [SPEC, PLAIN], CAL, GatePolicy(mode="always_off")).route == "plain"
    prose = estimate(body(temperature=0.9))
    assert decide(prose, [SPEC, PLAIN], CAL, GatePolicy(mode="always_on")).route == "spec"


def test_a_nearly_full_kv_cache_takes_no_marginal_traffic() -> None:
    """A new request on a pool whose KV cache is nearly full would wait for blocks or
    make vLLM preempt one that runs: like a pool at capacity, it gets no marginal traffic."""
    e = estimate(body(tools=[TOOL], tool_choice="required", temperature=0))
    full = decide(e, [PoolView("spec", "draft_model", gamma=8, kv_usage=0.97), PLAIN], CAL)
    assert full.route == "plain" and full.cause == "capacity"
    assert "at capacity, no marginal traffic: spec (KV cache 97% used)" in full.reasons
    assert full.cost_of("spec").note == "KV cache 97% used"
    assert decide(e, [PoolView("spec", "draft_model", gamma=8, kv_usage=0.9), PLAIN], CAL).route == "spec"
    lenient = GatePolicy(kv_cache_full=0.99)
    assert decide(e, [PoolView("spec", "draft_model", gamma=8, kv_usage=0.97), PLAIN], CAL, lenient).route == "spec"
    # when every pool is that full, the gate still routes: to the cheapest
    both = [PoolView("spec", "draft_model", gamma=8, kv_usage=0.99), PoolView("plain", None, kv_usage=0.99)]
    assert decide(e, both, CAL).route == "spec"


def test_near_a_full_kv_cache_marginal_traffic_thins_out_in_proportion() -> None:
    """Over the ramp below kv_cache_full, the share turned away rises from 0 to 1, so
    that proxies reading the same scrape do not all turn away at the same moment."""
    e = estimate(body(tools=[TOOL], tool_choice="required", temperature=0))
    draws = [(i + 0.5) / 100 for i in range(100)]

    def share_turned_away(usage: float, affinity: Affinity | None = None) -> float:
        spec = PoolView("spec", "draft_model", gamma=8, kv_usage=usage)
        return sum(decide(e, [spec, PLAIN], CAL, affinity=affinity, draw=d).route == "plain" for d in draws) / 100

    assert share_turned_away(0.90) == 0.0 and share_turned_away(0.95) == 1.0
    assert share_turned_away(0.925) == pytest.approx(0.5, abs=0.02)
    assert share_turned_away(0.9375) == pytest.approx(0.75, abs=0.02)
    thinned = decide(e, [PoolView("spec", "draft_model", gamma=8, kv_usage=0.94), PLAIN], CAL, draw=0.1)
    assert thinned.cause == "capacity" and thinned.cost_of("spec").note == "KV cache 94% used, thinning"
    # a conversation whose prefix the pool holds needs few new blocks there: never thinned, only turned
    # away from a full cache
    held = Affinity("spec", cached_tokens=2000)
    assert share_turned_away(0.94, held) == 0.0 and share_turned_away(0.96, held) == 1.0
    # without a draw, only a full cache turns traffic away
    assert decide(e, [PoolView("spec", "draft_model", gamma=8, kv_usage=0.94), PLAIN], CAL).route == "spec"


@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0, exclude_max=True))
def test_the_kv_rule_is_bounded_by_its_ramp(usage: float, draw: float) -> None:
    e = estimate(body(tools=[TOOL], tool_choice="required", temperature=0))
    route = decide(e, [PoolView("spec", "draft_model", gamma=8, kv_usage=usage), PLAIN], CAL, draw=draw).route
    if usage < 0.8999:  # the ramp starts at kv_cache_full - kv_cache_ramp, 0.90 give or take rounding
        assert route == "spec"
    if usage >= 0.95:
        assert route == "plain"


def test_unhealthy_pool_is_skipped() -> None:
    e = estimate(body(tools=[TOOL], tool_choice="required", temperature=0))
    d = decide(e, [PoolView("spec", "draft_model", gamma=8, healthy=False), PLAIN], CAL)
    assert d.route == "plain"


def test_margin_and_hysteresis() -> None:
    e = estimate(body(tools=[TOOL], tool_choice="required", temperature=0))
    assert decide(e, [SPEC, PLAIN], CAL, GatePolicy(margin=0.0)).route == "spec"
    assert decide(e, [SPEC, PLAIN], CAL, GatePolicy(margin=0.9)).route == "plain"
    # a near tie stays where it was: the loser by less than the hysteresis band keeps the route
    tie = decide(e, [SPEC, PLAIN], CAL)
    spec_cost, plain_cost = tie.cost_of("spec").cost_per_token, tie.cost_of("plain").cost_per_token
    wide = GatePolicy(hysteresis=plain_cost / spec_cost)
    assert decide(e, [SPEC, PLAIN], CAL, wide, previous="plain").route == "plain"
    assert decide(e, [SPEC, PLAIN], CAL, GatePolicy(hysteresis=0.0), previous="plain").route == "spec"


def test_affinity_keeps_a_long_conversation_in_place() -> None:
    long_prose = estimate(body(messages=[{"role": "user", "content": "x" * 200_000}], temperature=0.7, max_tokens=50))
    without = decide(long_prose, [SPEC, PLAIN], CAL)
    held = decide(long_prose, [SPEC, PLAIN], CAL, affinity=Affinity("spec", long_prose.prompt_tokens))
    assert without.route == "plain" and held.route == "spec"


def test_best_depth_among_speculation_pools() -> None:
    deep = PoolView("deep", "draft_model", gamma=16)
    shallow = PoolView("shallow", "draft_model", gamma=4)
    schema = estimate(body(tools=[TOOL], tool_choice="required", temperature=0))
    mixed = estimate(body(temperature=0, max_tokens=100))
    assert decide(schema, [deep, shallow, PLAIN], CAL).route == "deep"
    assert decide(mixed, [deep, shallow, PLAIN], CAL).route in ("shallow", "plain")


@given(st.floats(0.0, 1.0), st.floats(0.0, 1.5), st.integers(0, 200))
def test_decision_is_always_a_known_pool_and_consistent(share: float, temperature: float, running: int) -> None:
    e = estimate(body(tools=[TOOL], tool_choice="auto", temperature=temperature))
    pools = [PoolView("spec", "draft_model", gamma=8, running=running), PoolView("plain", None, running=running)]
    d = decide(e, pools, CAL, GatePolicy(margin=share / 2))
    assert d.route in ("spec", "plain")
    chosen = d.cost_of(d.route)
    assert chosen is not None
    other = d.cost_of("plain" if d.route == "spec" else "spec")
    if d.route == "spec":
        assert chosen.cost_per_token / (1 - share / 2) <= other.cost_per_token + 1e-12


def test_the_deciding_cause_is_named() -> None:
    e = estimate(body(tools=[TOOL], tool_choice="required", temperature=0))
    assert decide(e, [SPEC, PLAIN], CAL).cause == "content"
    full = PoolView("spec", "draft_model", gamma=8, running=256, max_num_seqs=256)
    assert decide(e, [full, PLAIN], CAL).cause == "capacity"
    assert decide(e, [SPEC, PLAIN], CAL, GatePolicy(mode="always_off")).cause == "mode"
    blocked = estimate(body(tools=[TOOL], tool_choice="required", temperature=0, min_p=0.1))
    assert decide(blocked, [full, PLAIN], CAL).cause == "unsupported_sampling"  # the strongest wins


def test_a_load_past_what_calibration_measured_is_said_to_be_extrapolated() -> None:
    """Calibration measures c_T and delta at some loads; past the last, the gate extrapolates
    and explain says so, naming the pool and the load measured."""
    from draftgate.policy.calibration import Curve

    measured = CAL.model_copy(update={"target_pass_seconds": Curve(points=[(1, 0.02), (8, 0.021)])})
    e = estimate(body(tools=[TOOL], tool_choice="required", temperature=0))
    within = decide(e, [PoolView("spec", "draft_model", gamma=8, running=3), PLAIN], measured)
    beyond = decide(e, [PoolView("spec", "draft_model", gamma=8, running=30), PLAIN], measured)
    assert within.cost_of("spec").extrapolated_beyond is None
    assert beyond.cost_of("spec").extrapolated_beyond == 8
    assert beyond.cost_of("plain").extrapolated_beyond is None  # one running: within what was measured
    assert any("spec: 31 running is past the 8 calibration measured" in r for r in beyond.reasons)
    assert not any("extrapolated" in r for r in within.reasons)


def test_a_dynamic_k_pool_at_a_depth_of_zero_is_priced_as_plain() -> None:
    e = estimate(body(tools=[TOOL], tool_choice="required", temperature=0))
    off_at_this_load = PoolView("dyn", "draft_model", gamma=0, running=40)
    decision = decide(e, [off_at_this_load, PLAIN], CAL)
    assert decision.cost_of("dyn").saving == 0.0 and decision.cost_of("dyn").gamma == 0


def test_a_pool_with_room_takes_the_request_while_joining_it_costs_less_than_waking_the_idle_one() -> None:
    """The gate prices the GPU time a request causes: joining a busy speculation pool costs the
    step's increment, waking the idle plain pool its whole step; so a tool call is not shed
    while the speculation pool has room."""
    e = estimate(body(tools=[TOOL], tool_choice="required", temperature=0))
    for running in range(0, 48):
        spec = PoolView("spec", "draft_model", gamma=8, running=running, max_num_seqs=48)
        decision = decide(e, [spec, PoolView("plain", None, max_num_seqs=256)], CAL)
        assert decision.route == "spec", running
    full = decide(e, [PoolView("spec", "draft_model", gamma=8, running=48, max_num_seqs=48), PLAIN], CAL)
    assert full.route == "plain"


def test_an_idle_pool_costs_its_whole_step_and_a_busy_one_the_increment() -> None:
    from draftgate.policy.gate import step_seconds

    e = estimate(body(temperature=0.7, max_tokens=100))
    idle = decide(e, [PoolView("plain", None)], CAL).cost_of("plain")
    busy = decide(e, [PoolView("plain", None, running=30)], CAL).cost_of("plain")
    assert idle.step_increment == pytest.approx(CAL.target_pass_seconds(1.0))
    assert busy.step_increment == pytest.approx(CAL.target_pass_seconds(31.0) - CAL.target_pass_seconds(30.0))
    assert idle.steps == busy.steps == pytest.approx(e.expected_tokens.total)
    tokens = e.expected_tokens.total
    assert idle.cost_per_token == pytest.approx((idle.steps * idle.step_increment + idle.prefill_seconds) / tokens)
    assert busy.cost_per_token < idle.cost_per_token / 5
    # a speculation pool runs fewer, dearer steps
    spec = PoolView("spec", "draft_model", gamma=8)
    tool = decide(estimate(body(tools=[TOOL], tool_choice="required", temperature=0)), [spec], CAL).cost_of("spec")
    assert tool.steps < estimate(body(tools=[TOOL], tool_choice="required", temperature=0)).expected_tokens.total / 3
    assert tool.step_increment == pytest.approx(step_seconds(CAL, spec, 1.0))
    assert step_seconds(CAL, spec, 1.0) > CAL.target_pass_seconds(1.0) * 2


def _tool_call_with_spec_busy(policy: GatePolicy = GatePolicy()):  # type: ignore[no-untyped-def]
    e = estimate(body(tools=[TOOL], tool_choice="required", temperature=0))
    spec = PoolView("spec", "draft_model", gamma=8, running=40, max_num_seqs=48)
    return decide(e, [spec, PoolView("plain", None, running=10)], CAL, policy)


def test_a_request_goes_where_its_latency_target_holds_when_the_cheaper_pool_would_break_it() -> None:
    """At 40 running a depth-8 round is dear, so the plain pool costs less GPU time; but the
    speculation pool gives the faster tokens. A target between the two sends it there."""
    free = _tool_call_with_spec_busy()
    spec, plain = free.cost_of("spec"), free.cost_of("plain")
    assert free.route == "plain" and plain.predicted_tpot > spec.predicted_tpot  # cheaper, but slower per token
    between = (spec.predicted_tpot + plain.predicted_tpot) / 2
    held = _tool_call_with_spec_busy(GatePolicy(tpot_target=between))
    assert held.route == "spec" and held.cause == "latency_target"
    assert held.cost_of("spec").meets_targets and not held.cost_of("plain").meets_targets
    assert any(r.startswith("latency targets: plain would give") for r in held.reasons)
    # a target both pools meet changes nothing: the cheaper pool keeps the request
    loose = _tool_call_with_spec_busy(GatePolicy(tpot_target=2 * max(spec.predicted_tpot, plain.predicted_tpot),
                                                 ttft_target=2 * max(spec.predicted_ttft, plain.predicted_ttft)))
    assert loose.route == "plain" and loose.cause == "content"
    # one neither meets: cost alone decides, and says so
    tight = _tool_call_with_spec_busy(GatePolicy(tpot_target=spec.predicted_tpot / 10))
    assert tight.route == "plain" and "no pool meets the latency targets: cost alone decides" in tight.reasons


def test_a_time_to_first_token_target_counts_the_prefix_a_pool_holds() -> None:
    """A long conversation's prefix is cached on one pool: only there is its first token quick."""
    history = [{"role": "user", "content": "word " * 6000}, {"role": "assistant", "content": "ok"},
               {"role": "user", "content": "call f"}]
    e = estimate(body(tools=[TOOL], tool_choice="required", temperature=0, messages=history))
    pools = [PoolView("spec", "draft_model", gamma=8), PoolView("plain", None)]
    cached_on_plain = Affinity("plain", e.prompt_tokens - 10)
    free = decide(e, pools, CAL, GatePolicy(), affinity=cached_on_plain)
    ttft = {c.pool: c.predicted_ttft for c in free.costs}
    assert ttft["plain"] < ttft["spec"] / 5
    held = decide(e, pools, CAL, GatePolicy(ttft_target=(ttft["plain"] + ttft["spec"]) / 2), affinity=cached_on_plain)
    assert held.route == "plain"


def test_objective_latency_takes_the_fastest_tokens_within_a_gpu_budget() -> None:
    """At 40 running the plain pool costs less and the speculation pool is faster (see above):
    objective latency speculates, unless the budget rules the speculation pool out."""
    free = _tool_call_with_spec_busy()
    spec = free.cost_of("spec")
    fast = _tool_call_with_spec_busy(GatePolicy(objective="latency"))
    assert free.route == "plain" and fast.route == "spec"
    assert any(r.startswith("objective latency: spec gives the fastest tokens") for r in fast.reasons)
    tight = _tool_call_with_spec_busy(GatePolicy(objective="latency", gpu_budget=spec.cost_per_token * 0.9))
    assert tight.route == "plain"
    assert any(r.startswith("GPU budget") and "spec would cause" in r for r in tight.reasons)
    roomy = _tool_call_with_spec_busy(GatePolicy(objective="latency", gpu_budget=spec.cost_per_token * 1.1))
    assert roomy.route == "spec"


def test_an_uncertain_answer_is_priced_by_its_expected_cost_over_call_and_prose() -> None:
    """Each pool's cost of a call and of a plain answer is shown, and what is minimised is
    their expectation by the call probability."""
    e = estimate(body(tools=[TOOL]))
    assert e.uncertain
    d = decide(e, [SPEC, PLAIN], CAL)
    for cost in d.costs:
        outcomes = dict(cost.outcome_seconds)
        assert set(outcomes) == {"call", "answer"} and outcomes["answer"] > outcomes["call"] > 0
        expected = e.p_tool_call * outcomes["call"] + (1 - e.p_tool_call) * outcomes["answer"]
        assert cost.cost_per_token * e.expected_tokens.total == pytest.approx(expected)
    forced = decide(estimate(body(tools=[TOOL], tool_choice="required")), [SPEC, PLAIN], CAL)
    assert all(c.outcome_seconds == () for c in forced.costs)


def test_measured_tau_is_carried_to_a_sampling_temperature_by_the_laws_trend() -> None:
    """Calibration measures tau at temperature 0; at 0.6 the gate prices that measure times the
    law's ratio between the two, not the law alone, which overstates a mixed class's runs."""
    from draftgate.policy import law
    from draftgate.policy.calibration import ClassValues, PoolCalibration
    measured = Calibration(pools={"spec": PoolCalibration(gamma=8, tau_greedy=ClassValues(s=3.0, r=2.0, f=0.9))})
    greedy = predicted_taus(measured, SPEC, 0.0)
    sampled = predicted_taus(measured, SPEC, 0.6)
    assert greedy == {"s": 3.0, "r": 2.0, "f": 0.9}
    for c in "srf":
        law_at = {t: law.tau(law.acceptance(measured.rho_at(t).of(c), measured.kappa), 8) for t in (0.0, 0.6)}
        assert sampled[c] == pytest.approx(greedy[c] * law_at[0.6] / law_at[0.0])
        assert sampled[c] < greedy[c]  # sampling lowers acceptance
