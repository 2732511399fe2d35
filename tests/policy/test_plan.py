"""The fleet plan: its model of a GPU, the compositions it weighs, the assignment and its spill, the
routing that follows it through the proxy, and ``draftgate plan`` on a log the proxy recorded."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from draftgate.policy import law
from draftgate.policy import plan as plans
from draftgate.policy.calibration import Calibration
from draftgate.policy.plan import Assignment, PoolRates, Turns, load, model, spill
from draftgate.proxy.logs import RequestLog
from tests.conftest import emulator
from tests.proxy_harness import metric_value, stack, wait_until

MODEL = "Qwen/Qwen3-32B"
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CAL = Calibration()
TARGETS = plans.Targets(2.0, 0.05)


def kinds(long_prompts: float = 6000.0) -> tuple[plans.Kind, ...]:
    """Short tool calls, some with a long prompt, and longer prose with short prompts."""
    calls = tuple((float(20 + 10 * (i % 5)), long_prompts if i % 4 == 0 else 300.0) for i in range(20))
    prose = tuple((float(150 + 20 * (i % 5)), 200.0) for i in range(20))
    return (plans.Kind("tool", 0.6, calls, law.ClassMix(1.0, 0.0, 0.0)),
            plans.Kind("prose", 0.4, prose, law.ClassMix(0.0, 0.0, 1.0), temperature=0.6))


PLAIN = plans.Candidate("plain")
EAGLE = plans.Candidate("eagle3", "eagle3", 3)
DRAFT8 = plans.Candidate("draft-k8", "draft_model", 8, draft_prefill_ratio=0.15)


def test_a_gpu_batches_more_and_its_tail_grows_with_the_rate_until_it_cannot_hold_the_targets() -> None:
    light, heavy = (plans.gpu_load(kinds(), PLAIN, CAL, rate, TARGETS) for rate in (0.5, 4.0))
    assert light.batch < heavy.batch and light.prefill_share < heavy.prefill_share < 1
    assert light.tpot < heavy.tpot and light.ttft < heavy.ttft
    capacity = plans.capacity_of_gpu(kinds(), PLAIN, CAL, TARGETS)
    assert plans.gpu_load(kinds(), PLAIN, CAL, capacity * 0.98, TARGETS).meets(TARGETS)
    assert not plans.gpu_load(kinds(), PLAIN, CAL, capacity * 1.1, TARGETS).meets(TARGETS)
    # long prompts stall every decoding request: fewer of them, more requests within the targets
    assert plans.capacity_of_gpu(kinds(long_prompts=500.0), PLAIN, CAL, TARGETS) > capacity
    # past what one GPU can prefill, nothing holds
    assert not plans.gpu_load(kinds(), PLAIN, CAL, 1000.0, TARGETS).feasible


def test_a_kind_keeps_its_rare_long_prompts_as_often_as_they_came() -> None:
    """The targets' 1% tail is set by the rare long prompts: a kind keeps every request it saw, up to a
    cap that bounds the plan's time, so their share is what the traffic held."""
    rows = [{"kind": "tool", "output_tokens": 30.0, "prefill_tokens": 6000.0 if i % 40 == 7 else 300.0,
             "w_s": 1.0, "w_r": 0.0, "temperature": 0.0} for i in range(600)]
    (kind,) = plans.kinds_from(rows)
    assert len(kind.requests) == 600 and sum(p > 1000 for _, p in kind.requests) == 15
    (capped,) = plans.kinds_from(rows * 5)
    assert len(capped.requests) == 1024 and 20 <= sum(p > 1000 for _, p in capped.requests) <= 30


def test_a_pool_of_more_gpus_takes_more_per_gpu_because_arrivals_pass_over_a_busy_one() -> None:
    # a request's own GPU is chosen less often the more others there are, and more often as loads grow
    assert model._joins(1, 5.0) == 1.0
    assert 1.0 > model._joins(2, 5.0) > model._joins(4, 5.0) > model._joins(8, 5.0) > 0.0
    assert model._joins(8, 2.0) < model._joins(8, 20.0) < 1.0
    per_gpu = [plans.capacity_of_gpu(kinds(), PLAIN, CAL, TARGETS, gpus) for gpus in (1, 2, 8)]
    assert per_gpu[0] < per_gpu[1] < per_gpu[2]
    # a composition is worked out at its pools' sizes: one pool of 4 takes more than twice a pool of 2
    traffic = plans.Traffic(3.0, kinds())
    four, two = (plans.evaluate([plans.PoolPlan(PLAIN, n, ("tool", "prose"))], traffic, CAL, TARGETS)
                 for n in (4, 2))
    assert four.capacity > 2 * two.capacity


def test_the_plan_chooses_a_method_and_a_depth_and_says_when_one_configuration_is_best() -> None:
    traffic = plans.Traffic(3.0, kinds())
    plan = plans.recommend(traffic, CAL, 4, [PLAIN, DRAFT8, EAGLE], TARGETS)
    assert plan.best.capacity >= plan.best_homogeneous.capacity >= max(
        o.capacity for o in plan.options if o.homogeneous) - 1e-9
    assert all(o.gpus == 4 for o in plan.options)
    assert [o.capacity for o in plan.options] == sorted((o.capacity for o in plan.options), reverse=True)
    # a head drafting cheaply beats a deep draft model: the plan picks the method and the depth
    ranked = {o.name: o.capacity for o in plan.options if o.homogeneous}
    assert ranked["all eagle3"] > ranked["all draft-k8"]
    assert {p.candidate.name for p in plan.best.pools} <= {"eagle3", "plain"}
    # objective cost: among the fleets that carry the rate, the fewest busy GPU-seconds per token
    cheap = plans.recommend(traffic, CAL, 4, [PLAIN, DRAFT8, EAGLE], TARGETS, objective="cost")
    assert cheap.best.capacity >= 3.0 and math.isfinite(cheap.best.cost_per_token)
    carried = [o for o in cheap.options if o.capacity >= 3.0]
    assert cheap.best.cost_per_token <= min(o.cost_per_token for o in carried) + 1e-12
    with pytest.raises(ValueError):
        plans.recommend(plans.Traffic(1.0, ()), CAL, 4, [PLAIN], TARGETS)


def test_the_law_per_kind_sets_its_schema_share_against_the_break_even_at_its_pools_batch() -> None:
    traffic = plans.Traffic(3.0, kinds())
    drafted = plans.recommend(traffic, CAL, 2, [PLAIN, DRAFT8], TARGETS).best  # a draft model on both kinds
    laws = {law.kind: law for law in plans.law_by_kind(drafted, traffic, CAL, [PLAIN, DRAFT8])}
    prose = laws["prose"]
    assert prose.pool == prose.drafter == "draft-k8" and prose.batch > 1
    assert prose.w_s == 0.0 and prose.w_s_star is not None and prose.w_s_star > 0 and prose.pays is False
    # a pure tool call has no R:F split to set w_S* by: undefined, and said why
    assert laws["tool"].w_s_star is None and "undefined" in (laws["tool"].reason or "")
    # on a plain pool, the law is set against the speculating candidate the kind was not given
    plain = plans.evaluate([plans.PoolPlan(PLAIN, 2, ("tool", "prose"))], traffic, CAL, TARGETS)
    on_plain = {law.kind: law for law in plans.law_by_kind(plain, traffic, CAL, [PLAIN, EAGLE])}
    assert on_plain["prose"].pool == "plain" and on_plain["prose"].drafter == "eagle3"
    # an EAGLE head drafts so cheaply at a small batch that it pays with no schema-bound share at all
    assert on_plain["prose"].w_s_star == 0.0 and on_plain["prose"].pays is True


def test_the_plan_prices_a_step_as_the_gate_does_with_the_configured_draft_cost() -> None:
    """A pool configured with its own draft cost d is priced with it by the gate and by the plan alike:
    the plan's step is the gate's ``step_seconds``, and a dearer drafter carries less."""
    from draftgate.policy.gate import PoolView, step_seconds

    dear = dataclasses.replace(DRAFT8, draft_cost=0.6)
    view = dear.view(12.0)
    assert view.draft_cost == 0.6
    assert step_seconds(CAL, view, 12.0) > step_seconds(CAL, DRAFT8.view(12.0), 12.0)
    assert model._step(CAL, dear, 8, 12.0, 8.0) == pytest.approx(step_seconds(CAL, PoolView(
        "draft-k8", "draft_model", gamma=8, draft_cost=0.6), 12.0, 8.0))
    traffic = plans.Traffic(3.0, kinds())
    cheap_plan = plans.evaluate([plans.PoolPlan(DRAFT8, 2, ("tool", "prose"))], traffic, CAL, TARGETS)
    dear_plan = plans.evaluate([plans.PoolPlan(dear, 2, ("tool", "prose"))], traffic, CAL, TARGETS)
    assert dear_plan.capacity < cheap_plan.capacity
    laws = plans.law_by_kind(dear_plan, traffic, CAL, [PLAIN, dear])
    cheap_laws = plans.law_by_kind(cheap_plan, traffic, CAL, [PLAIN, DRAFT8])
    prose = next(law for law in laws if law.kind == "prose")
    assert prose.w_s_star is not None and prose.w_s_star > next(
        law for law in cheap_laws if law.kind == "prose").w_s_star  # a dearer drafter needs more to copy


def test_a_dynamic_k_table_is_priced_at_the_depth_its_batch_sets_and_lookup_drafters_by_what_they_copy() -> None:
    k2, k4 = (plans.Candidate(f"draft-k{k}", "draft_model", k, draft_prefill_ratio=0.15) for k in (2, 4))
    table = plans.Candidate("dynamic", "draft_model", 4, dynamic=((1, 3, 4), (4, 1024, 2)), draft_prefill_ratio=0.15)
    light = [plans.gpu_load(kinds(), c, CAL, 0.5, TARGETS) for c in (table, k4, k2)]
    heavy = [plans.gpu_load(kinds(), c, CAL, 4.0, TARGETS) for c in (table, k4, k2)]
    assert light[0].batch < 4 and light[0] == light[1] != light[2]  # a small batch: depth 4
    assert heavy[0].batch >= 4 and heavy[0] == heavy[2] != heavy[1]  # a large one: depth 2
    suffix, ngram = plans.Candidate("suffix", "suffix", 8), plans.Candidate("ngram", "ngram", 4, lookup=(2, 4))
    capacities = {c.name: plans.capacity_of_gpu(kinds(), c, CAL, TARGETS) for c in (suffix, ngram, PLAIN)}
    assert capacities["suffix"] != capacities["ngram"] and min(capacities["suffix"], capacities["ngram"]) > 0
    plan = plans.recommend(plans.Traffic(3.0, kinds()), CAL, 2, [PLAIN, suffix, ngram, table], TARGETS)
    assert {o.pools[0].candidate.name for o in plan.options if o.homogeneous} == {"plain", "suffix", "ngram",
                                                                                   "dynamic"}


def test_the_best_assignment_for_a_fleet_as_it_runs_and_each_pools_capacity_by_kind() -> None:
    traffic = plans.Traffic(3.0, kinds())
    best, capacities = plans.best_assignment(traffic, CAL, [(EAGLE, 2), (PLAIN, 2)], TARGETS)
    assert set(best.assignment()) == {"tool", "prose"}
    assert [c.pool for c in capacities] == ["eagle3", "plain"] and all(c.gpus == 2 for c in capacities)
    assert all(set(c.per_gpu) == {"tool", "prose"} and min(c.per_gpu.values()) > 0 for c in capacities)


def test_nothing_moves_while_every_pool_is_within_its_limit() -> None:
    base = Assignment.whole({"tool": "a", "prose": "b"})
    capacities = [PoolRates("a", 2, {"tool": 2.0, "prose": 4.0}), PoolRates("b", 2, {"tool": 1.0, "prose": 4.0})]
    assert spill(base, {"tool": 3.0, "prose": 4.0}, capacities) == base  # loads 0.75 and 0.5


def test_a_kind_moves_when_its_pool_nears_its_limit_the_cheapest_first_and_back_when_it_eases() -> None:
    base = Assignment.whole({"tool": "a", "json": "a", "prose": "b"})
    # pool b takes tool calls nearly as well as a, JSON far worse: tool calls are the cheaper kind to move
    capacities = [PoolRates("a", 2, {"tool": 2.0, "json": 2.0, "prose": 4.0}),
                  PoolRates("b", 2, {"tool": 1.8, "json": 0.2, "prose": 4.0})]
    busy = {"tool": 3.0, "json": 1.0, "prose": 1.0}
    moved = spill(base, busy, capacities)
    assert moved.of("json") == {"a": 1.0}
    assert 0 < moved.of("tool")["b"] < 1 and math.isclose(sum(moved.of("tool").values()), 1.0)
    before, after = load(base.shares, busy, capacities), load(moved.shares, busy, capacities)
    assert before["a"] == pytest.approx(1.0) and max(after.values()) < before["a"]
    assert spill(base, {"tool": 1.0, "json": 0.5, "prose": 1.0}, capacities) == base


def test_a_kinds_requests_take_their_pools_in_turn_by_share_among_the_open_ones() -> None:
    turns = Turns()
    picked = [turns.next("tool", {"a": 0.75, "b": 0.25}, {"a", "b"}) for _ in range(8)]
    assert picked.count("a") == 6 and picked.count("b") == 2
    assert turns.next("tool", {"a": 0.75, "b": 0.25}, {"b"}) == "b"
    assert turns.next("tool", {"a": 1.0}, set()) is None


def test_a_kind_is_routed_by_its_assignment_through_the_proxy_and_explain_says_so() -> None:
    tool = {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [TOOL],
            "tool_choice": "required", "temperature": 0}
    prose = {"model": MODEL, "messages": [{"role": "user", "content": "Tell a story"}], "max_tokens": 30,
             "temperature": 0}
    # the gate alone would send the forced call to speculation; the assignment sends it to the plain pool
    with stack(43, plan={"routing": {"tool": "spec-off", "prose": "spec-on"}}) as st:
        for body, pool in ((tool, "spec-off"), (prose, "spec-on")):
            answer = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body, timeout=60)
            assert answer.status_code == 200 and answer.headers["x-draftgate-route"] == pool
        explained = httpx.post(f"{st.proxy.url}/draftgate/explain", json=tool, timeout=30).json()
        assert explained["kind"] == "tool" and explained["assignment"] == {"spec-off": 1.0}
        assert explained["route"] == "spec-off" and any("assigned: tool" in r for r in explained["reasons"])
        assert explained["break_even_ws"] is None or 0.0 <= explained["break_even_ws"] <= 1.0
        # a request the gate must route one way is not overruled: vLLM would not speculate with n > 1
        forced = httpx.post(f"{st.proxy.url}/draftgate/explain", json=dict(prose, n=2), timeout=30).json()
        assert forced["route"] == "spec-off" and forced["assignment"] is None


def test_three_pools_in_explain_each_priced_for_its_method() -> None:
    from draftgate.proxy.app import create_app
    from tests.conftest import emulator
    from tests.proxy_harness import proxy_server, proxy_settings

    with (emulator(44, True, k=4, profile_seed=44) as on, emulator(44, True, k=3, profile_seed=44) as eagle,
          emulator(44, False, profile_seed=44) as off):
        settings = proxy_settings(on.url, off.url, pools=[
            {"name": "draft", "urls": [on.url], "speculation": {"gamma": 4}},
            {"name": "eagle", "urls": [eagle.url], "speculation": {"method": "eagle3", "gamma": 3}},
            {"name": "plain", "urls": [off.url]}])
        with proxy_server(create_app(settings)) as proxy:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "Weather?"}], "tools": [TOOL],
                    "tool_choice": "required", "temperature": 0}
            explained = httpx.post(f"{proxy.url}/draftgate/explain", json=body, timeout=30).json()
    terms = {p["pool"]: p for p in explained["pools"]}
    assert set(terms) == {"draft", "eagle", "plain"} and explained["kind"] == "tool"
    assert terms["draft"]["gamma"] == 4 and terms["eagle"]["gamma"] == 3 and terms["plain"]["gamma"] == 0
    assert terms["plain"]["saving"] == 0 and terms["eagle"]["tau"]["s"] > 0 and terms["draft"]["tau"]["s"] > 0
    assert all(p["predicted_tpot"] > 0 and p["predicted_ttft"] > 0 for p in terms.values())


def test_the_proxy_plans_the_fleet_from_its_own_traffic_and_exports_it() -> None:
    with stack(45, plan={"interval": 1.0, "assignment_interval": 0.5}) as st:
        with httpx.Client(timeout=60) as client:
            for i in range(12):
                body = ({"model": MODEL, "messages": [{"role": "user", "content": f"Weather in {i}?"}],
                         "tools": [TOOL], "tool_choice": "required", "temperature": 0} if i % 2 else
                        {"model": MODEL, "messages": [{"role": "user", "content": f"A story {i}"}],
                         "max_tokens": 40, "temperature": 0})
                assert client.post(f"{st.proxy.url}/v1/chat/completions", json=body).status_code == 200

        def planned() -> bool:
            text = httpx.get(f"{st.proxy.url}/metrics", timeout=10).text
            return "draftgate_plan_recommendation{" in text and "draftgate_assignment_share{" in text

        assert wait_until(planned, 30)
        text = httpx.get(f"{st.proxy.url}/metrics", timeout=10).text
    assert metric_value(text, "draftgate_plan_capacity_requests_per_second", fleet="recommended") > 0
    assert metric_value(text, "draftgate_plan_capacity_requests_per_second", fleet="running") > 0
    assert metric_value(text, "draftgate_plan_predicted_gain_ratio") >= -1e-9
    shares = [line for line in text.splitlines() if line.startswith("draftgate_assignment_share{")]
    assert {'kind="tool"' in line or 'kind="prose"' in line for line in shares} == {True}


def test_draftgate_plan_on_a_log_the_proxy_recorded(tmp_path: Path) -> None:
    before, RequestLog.stream = RequestLog.stream, io.StringIO()
    try:
        with stack(41, log_requests=True) as st:
            for i in range(10):
                body = ({"model": MODEL, "messages": [{"role": "user", "content": f"Weather in city {i}?"}],
                         "tools": [TOOL], "tool_choice": "required", "temperature": 0} if i % 2 == 0 else
                        {"model": MODEL, "messages": [{"role": "user", "content": f"Tell a story {i}"}],
                         "max_tokens": 80, "temperature": 0})
                assert httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body, timeout=60).status_code == 200
            assert wait_until(lambda: RequestLog.stream.getvalue().count("\n") >= 10)
            recorded = RequestLog.stream.getvalue()
    finally:
        RequestLog.stream = before
    log = tmp_path / "draftgate.log"
    log.write_text("not json, from another process\n" + recorded)
    done = subprocess.run([sys.executable, "-m", "draftgate.cli.main", "plan", "--from-log", str(log),
                           "--gpus", "4", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result["kinds"]) == {"tool", "prose"} and result["kinds"]["tool"]["share"] == pytest.approx(0.5)
    assert result["requests_per_second"] > 0 and result["objective"] == "capacity"
    best = result["recommended"]
    assert sum(p["gpus"] for p in best["pools"]) == 4 and best["capacity_rps"] >= result["best_homogeneous"][
        "capacity_rps"] - 1e-9
    assert set(result["routing"]) == {"tool", "prose"}
    # per kind, the Draft Law where the plan puts it: prose has no schema-bound share to pay with
    laws = {law["kind"]: law for law in result["law_by_kind"]}
    assert set(laws) == {"tool", "prose"} and laws["prose"]["w_s"] == 0.0 and laws["prose"]["batch"] > 0
    assert laws["tool"]["w_s"] > 0.9 and laws["prose"]["pool"] == result["routing"]["prose"]
    text = subprocess.run([sys.executable, "-m", "draftgate.cli.main", "plan", "--from-log", str(log),
                           "--gpus", "4"], capture_output=True, text=True, timeout=120).stdout
    assert "PLAN" in text and "one configuration" in text
    assert "The Draft Law per kind" in text and "prose on " in text


def _log_of(path: Path, requests: int) -> Path:
    rows = [{"event": "request", "status": 200, "ts": 1000 + i, "kind": "tool" if i % 2 else "prose",
             "completion_tokens": 30 if i % 2 else 200, "prompt_tokens": 400, "cached_tokens": 0,
             "w_s_observed": 1.0 if i % 2 else 0.0, "temperature": 0.0} for i in range(requests)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_draftgate_plan_refuses_a_log_without_traffic_and_bad_options(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text('{"event": "request", "status": 503, "ts": 1}\n')
    log = _log_of(tmp_path / "traffic.log", 40)
    config = tmp_path / "draftgate.yaml"
    config.write_text("pools: [{name: a, urls: ['http://127.0.0.1:1'], speculation: {method: medusa2, gamma: 2}}]\n")
    for argv in (["--from-log", str(empty), "--gpus", "2"], ["--from-log", str(log), "--gpus", "0"],
                 ["--from-log", str(log), "--gpus", "2", "--candidates", "plain,warp-drive"],
                 ["--from-log", str(log), "--gpus", "2", "--config", str(config)]):
        done = subprocess.run([sys.executable, "-m", "draftgate.cli.main", "plan", *argv],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stderr.startswith("draftgate plan: error: "), argv
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_draftgate_plan_says_when_the_traffic_fills_few_of_the_gpus(tmp_path: Path) -> None:
    log = _log_of(tmp_path / "traffic.log", 40)
    done = subprocess.run([sys.executable, "-m", "draftgate.cli.main", "plan", "--from-log", str(log), "--gpus",
                           "32", "--candidates", "plain,eagle3-k3"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "fills about 1 of the 32 GPUs" in done.stdout and "eagle3-k3" in done.stdout


def test_draftgate_plan_from_a_proxys_metrics_over_a_window() -> None:
    import threading

    with stack(42) as st:
        stop = threading.Event()

        def traffic_for_a_while() -> None:
            with httpx.Client(timeout=60) as client:
                i = 0
                while not stop.is_set():
                    body = ({"model": MODEL, "messages": [{"role": "user", "content": f"Weather in {i}?"}],
                             "tools": [TOOL], "tool_choice": "required", "temperature": 0} if i % 2 == 0 else
                            {"model": MODEL, "messages": [{"role": "user", "content": f"A story {i}"}],
                             "max_tokens": 60, "temperature": 0})
                    client.post(f"{st.proxy.url}/v1/chat/completions", json=body)
                    i += 1

        sender = threading.Thread(target=traffic_for_a_while)
        sender.start()
        try:
            done = subprocess.run([sys.executable, "-m", "draftgate.cli.main", "plan", "--from-metrics",
                                   f"{st.proxy.url}/metrics", "--window", "2", "--gpus", "2", "--json"],
                                  capture_output=True, text=True, timeout=120)
        finally:
            stop.set()
            sender.join()
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result["kinds"]) == {"tool", "prose"} and result["requests_per_second"] > 1
    assert result["kinds"]["prose"]["output_tokens"] == pytest.approx(60, rel=0.3)
    assert result["kinds"]["tool"]["prefill_tokens"] > 0


def test_draftgate_plan_from_an_address_that_is_not_a_proxys_metrics_says_so_in_one_line() -> None:
    with emulator(43, False) as backend:
        unreachable = backend.url  # closed once the emulator stops
        wrong = subprocess.run([sys.executable, "-m", "draftgate.cli.main", "plan", "--from-metrics",
                                f"{backend.url}/nowhere", "--window", "0.1", "--gpus", "2"],
                               capture_output=True, text=True, timeout=60)
    gone = subprocess.run([sys.executable, "-m", "draftgate.cli.main", "plan", "--from-metrics", unreachable,
                           "--window", "0.1", "--gpus", "2"], capture_output=True, text=True, timeout=60)
    for done, said in ((wrong, "/nowhere/metrics"), (gone, "ConnectError")):
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and said in done.stderr, done.stderr


def test_draftgate_plan_for_a_traffic_file_or_a_mix_of_the_built_in_workloads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An operator's own requests, or the built-in workloads in their proportions, replayed through an
    emulated plain GPU for their answers' lengths: the plan's kinds are what the gate reads of them,
    at the rate given; bad input is one line and status 2."""
    from draftgate.cli.main import main

    quiet = {"chat_template_kwargs": {"enable_thinking": False}}  # Qwen3 thinks unless told not to
    lines = [{"messages": [{"role": "user", "content": f"weather in city {i}"}], "tools": [TOOL],
              "tool_choice": "required", "temperature": 0, **quiet} for i in range(90)]
    lines += [{"messages": [{"role": "user", "content": f"tell me about {i}"}], "max_tokens": 200, **quiet}
              for i in range(90)]
    lines += [{"messages": [{"role": "user", "content": f"why {i}?"}], "max_tokens": 400} for i in range(30)]
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["plan", "--gpus", "4", "--traffic", str(traffic), "--rate", "3", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["requests_per_second"] == 3.0
    assert set(planned["kinds"]) == {"tool", "prose", "reasoning"}, planned["kinds"]
    assert planned["kinds"]["tool"]["output_tokens"] < planned["kinds"]["prose"]["output_tokens"]
    assert planned["recommended"]["capacity_rps"] > 0
    assert main(["plan", "--gpus", "4", "--mix", "chat=1", "--json"]) == 0
    chat = json.loads(capsys.readouterr().out)
    assert set(chat["kinds"]) == {"prose"} and chat["requests_per_second"] == 4.0  # one a GPU by default
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"request": {"messages": [{"role": "user", "content": "hi"}]}}\n{"request":\n')
    for argv, says in ((["--traffic", str(broken)], "--traffic: line 2"), (["--mix", "gossip=1"], "--mix:"),
                       (["--mix", "chat=1", "--rate", "0"], "--rate"), ([], "where the traffic comes from"),
                       (["--from-log", str(traffic), "--mix", "chat=1"], "--mix and --rate go with")):
        assert main(["plan", "--gpus", "4", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("draftgate plan: error: ") and says in err and err.count("\n") == 1, err
