"""The proxy's plan for any request-shaped JSON: never an exception, always a pool, strict JSON out."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from draftgate.policy.structure import ClassTokens, ObservedStructure
from draftgate.proxy.metrics import ProxyMetrics
from draftgate.proxy.planner import Planner
from draftgate.proxy.pools import PoolSet
from tests.memory import bytes_kept
from tests.policy.test_structure import json_values, request_keys
from tests.proxy_harness import proxy_settings


def planner(**overrides: Any) -> Planner:
    settings = proxy_settings("http://127.0.0.1:1", "http://127.0.0.1:2", **overrides)
    return Planner(settings, PoolSet(settings.pools, 0), ProxyMetrics())


PLANNER = planner()
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(request_keys | st.sampled_from(["top_p", "presence_penalty", "n", "model", "seed"]),
                       json_values, max_size=8),
       st.sampled_from(["chat", "completions"]))
def test_any_request_gets_a_plan_that_explains_itself_in_strict_json(fields: dict[str, Any], endpoint: str) -> None:
    body = {"messages": USER, "prompt": "Paris", **fields}
    plan = PLANNER.plan(body, endpoint)
    assert plan.route in {"spec-on", "spec-off"} and sorted(plan.order) == ["spec-off", "spec-on"]
    json.dumps(plan.explain(), allow_nan=False)  # what /draftgate/explain sends
    for value in plan.headers().values():
        value.encode("latin-1")  # what every response carries


def test_the_plan_holds_what_the_shape_has_produced_within_the_requests_cap() -> None:
    """The learner's blend is bounded by the request it is for: a prose shape that has run to
    3,000 tokens is planned at 50 when this request caps it there."""
    gk = planner()
    free = {"model": "m", "messages": USER, "temperature": 0.7}
    for _ in range(20):
        gk.learner.observe(gk.plan(free, "chat").shape, ObservedStructure(
            tokens=ClassTokens(0.0, 0.0, 3000.0), chars=ClassTokens(0, 0, 12000), total_tokens=3000.0, tool_calls=0,
            source="usage"))
    assert gk.plan(free, "chat").estimate.expected_tokens.total > 2000
    assert gk.plan({**free, "max_tokens": 50}, "chat").estimate.expected_tokens.total == 50
    assert gk.plan(free, "chat", context=1000).estimate.expected_tokens.total < 1000


def test_an_answer_is_learned_on_the_terms_the_estimate_used() -> None:
    """On pools declared older than vLLM 0.12, a guided_* field constrains the answer: the
    estimate says schema-bound, and the recorder must learn the answer as schema-bound too, or
    the learner would pull the shape back to prose after one answer."""
    from draftgate.proxy.observe import Observation
    from draftgate.proxy.recorder import Outcome, Recorder

    def learned_w_s(honoured: bool) -> float:
        gk = planner(structure_priors={"legacy_guided_fields_honoured": honoured})
        request = {"model": "m", "messages": USER, "temperature": 0, "guided_choice": ["sunny", "rainy"]}
        plan = gk.plan(request, "chat")
        observation = Observation()
        observation.feed({"id": "x", "choices": [{"index": 0, "message": {"content": "sunny"}}],
                          "usage": {"prompt_tokens": 9, "completion_tokens": 2}})
        observation.complete = True
        pool = gk.pools.pools[plan.route]
        replica = next(iter(pool.replicas.values()))
        Recorder(gk, gk.pools, gk.metrics).record(Outcome(plan, 200, observation, 0.001, pool, replica))
        assert gk.learner.observations(plan.shape) == 1
        return gk.plan(request, "chat").estimate.w_s

    assert learned_w_s(True) == 1.0
    assert learned_w_s(False) == 0.0


def test_model_names_clients_send_are_kept_nowhere_by_the_gate() -> None:
    """A configured model gets its policy and any other the default; planning for
    thousands of invented names, as /draftgate/explain will, keeps none of them."""
    gk = planner(models={"pinned": {"mode": "always_off"}}, default_policy={"margin": 0.05})
    assert gk.gate_policy("pinned").mode == "always_off"
    assert gk.gate_policy("other").mode == "auto" and gk.gate_policy(None).margin == 0.05
    kept = bytes_kept(lambda: [gk.gate_policy(f"{i}" + "m" * 100_000) for i in range(300)])
    assert kept < 1_000_000, kept


def test_a_models_latency_targets_reach_the_gate_and_explain() -> None:
    gate = planner(models={"Qwen/Qwen3-32B": {"tpot_target_ms": 0.001, "ttft_target_ms": 90000}})
    assert gate.gate_policy("Qwen/Qwen3-32B").tpot_target == 1e-6
    assert gate.gate_policy("Qwen/Qwen3-32B").ttft_target == 90.0
    assert gate.gate_policy("another").tpot_target is None
    explained = gate.plan({"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "hi"}]},
                          "chat").explain()
    assert explained["pools"] and not any(p["meets_targets"] for p in explained["pools"])
    assert "no pool meets the latency targets: cost alone decides" in explained["reasons"]


def test_exploration_leaves_alone_a_request_the_gate_routed_for_want_of_room() -> None:
    """Exploration reads why the gate routed a request from its causes: with every slot of the
    speculation pool taken, requests sent to the plain pool for want of room stay there, while
    with room everywhere about half are explored at a share of 0.5."""
    gk = planner(exploration_share=0.5)
    body = {"model": "m", "messages": USER, "temperature": 0.7}
    free = [gk.plan(body, "chat") for _ in range(40)]
    assert all("capacity" not in p.decision.causes for p in free)
    assert 5 < sum(p.explored for p in free) < 35
    spec_on = gk.pools.pools["spec-on"]
    for replica in spec_on.replicas.values():
        replica.inflight = spec_on.config.max_num_seqs
    full = [gk.plan(body, "chat") for _ in range(40)]
    assert all(p.decision.cause == "capacity" and p.route == "spec-off" and not p.explored for p in full)
