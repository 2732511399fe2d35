"""The pieces under the verdict: the engine's steps, one clock for a fleet and its proxy, the capacity
search, the calibration run in simulation, and the physics' step times."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import pytest

from draftgate.emulator.engine import Engine, Sequence
from draftgate.emulator.lookup import AnswerCache
from draftgate.emulator.physics import Physics, Work
from draftgate.emulator.profile import EngineProfile
from draftgate.emulator.textgen import OutputToken
from draftgate.evaluate.bench import calibration_arms
from draftgate.evaluate.calibration import calibrate
from draftgate.evaluate.capacity import Point, attainment, search
from draftgate.evaluate.fleet import Fleet, PoolSpec
from draftgate.evaluate.requests import Bank
from draftgate.evaluate.simulation import Served, Simulation, proxy_settings
from draftgate.evaluate.traffic import OpenLoop, Schedule
from draftgate.policy.calibration import Calibration
from draftgate.policy.gate import PoolView, predicted_taus
from draftgate.policy.plan import Targets
from draftgate.policy.structure import estimate
from draftgate.workloads import mix


def _sequence(prompt: int, output: int) -> Sequence:
    return Sequence(prompt, [], [OutputToken("x", "f", "content")] * output, "length", 0.0, False, None)


def test_a_long_prompt_is_prefilled_in_chunks_of_the_token_budget_while_the_others_decode() -> None:
    engine = Engine(EngineProfile(), None, max_num_seqs=1024, max_num_batched_tokens=8192)
    short, long = _sequence(100, 50), _sequence(20_000, 5)
    engine.submit(short, 0.0)
    step = engine.step()
    assert step is not None and [c for _, c in step.prefills] == [100]
    engine.finish(step, step.seconds)
    engine.submit(long, step.seconds)
    chunks = []
    now = step.seconds
    while long.first_token_sim is None:
        step = engine.step()
        assert step is not None
        chunks += [c for s, c in step.prefills if s is long]
        assert sum(1 + s.draft_len for s in step.decodes) + sum(c for _, c in step.prefills) <= 8192
        now += step.seconds
        engine.finish(step, now)
    assert chunks == [8191, 8191, 20_000 - 2 * 8191]  # the short one decodes a token in each step
    assert short.emitted > 1  # it kept decoding through the long prefill


def test_the_fleet_and_its_proxy_run_on_one_clock_and_repeat_exactly() -> None:
    def run() -> list[tuple[str, str, float, float]]:
        bank = Bank(EngineProfile.random(5), 5)
        fleet = Fleet((PoolSpec("eagle3", 1, "eagle3", 3), PoolSpec("plain", 1)))
        settings = proxy_settings(fleet, 1024, {"plan": {"routing": {"prose": "plain"}}})
        sim = Simulation(fleet, bank, settings, Calibration(), 5, 1024)
        schedule = Schedule(5.0, 30.0, 5.0)
        done = sim.run(OpenLoop(mix.stream("verdict", 5), bank, 2.0, mix.requests_per_item("verdict"), schedule, 5),
                       schedule.measured, 1e9)
        return [(s.key, s.pool, s.ttft, s.tpot) for s in done.served]

    first, second = run(), run()
    assert first == second and len(first) > 50
    assert {pool for _, pool, _, _ in first} == {"eagle3", "plain"}


def test_the_proxy_in_the_simulation_knows_a_pools_load_only_from_its_scrapes_and_its_own_counts() -> None:
    bank = Bank(EngineProfile.random(6), 6)
    fleet = Fleet((PoolSpec("plain", 2),))
    settings = proxy_settings(fleet, 1024, {"health": {"scrape_interval": 7.0}})
    sim = Simulation(fleet, bank, settings, Calibration(), 6, 1024)
    seen: list[tuple[float, float, float]] = []
    original = sim.planner.plan

    def plan(*args, **kwargs):  # type: ignore[no-untyped-def]
        for replica in sim.pools.pools["plain"].replicas.values():
            seen.append((sim.now, replica.scraped_at, replica.running))
        return original(*args, **kwargs)

    sim.planner.plan = plan  # type: ignore[method-assign]
    schedule = Schedule(2.0, 20.0, 2.0)
    sim.run(OpenLoop(mix.stream("verdict", 6), bank, 4.0, mix.requests_per_item("verdict"), schedule, 6),
            schedule.measured, 1e9)
    assert seen and all(math.isclose(scraped % 7.0, 0.0, abs_tol=1e-9) and scraped <= now for now, scraped, _ in seen)
    assert any(running > 0 for _, _, running in seen)


def _point(rate: float, attainment: float) -> Point:
    return Point(rate, 100, attainment, 0.1, 0.2, 0.01, 0.02, 1.0, 0.001, 0.001)


def test_capacity_is_found_where_attainment_crosses_the_threshold() -> None:
    measured: list[float] = []

    def measure(rate: float) -> Point:
        measured.append(rate)
        return _point(rate, 1.0 - 0.01 * rate / 1.5)  # 99% at exactly 1.5

    capacity = search(measure, [0.5, 1.0, 2.0, 4.0], steps=3)
    assert capacity.bounded and capacity.rate == pytest.approx(1.5, abs=0.02)
    assert measured[:4] == [0.5, 1.0, 2.0, 4.0] and len(measured) == 7  # the grid, then three halvings
    assert search(lambda r: _point(r, 1.0), [1.0, 2.0]).bounded is False
    assert search(lambda r: _point(r, 0.5), [1.0, 2.0]).rate == 0.0


def test_a_fleet_within_the_targets_at_the_heaviest_rate_is_searched_past_it() -> None:
    measured: list[float] = []

    def measure(rate: float) -> Point:
        measured.append(rate)
        return _point(rate, 1.0 - 0.01 * rate / 11.0)  # 99% at exactly 11

    capacity = search(measure, [2.0, 4.0, 8.0], steps=3, beyond=2)
    assert capacity.bounded and capacity.rate == pytest.approx(11.0, abs=0.1)
    assert measured[:4] == [2.0, 4.0, 8.0, 16.0] and len(measured) == 7  # one doubling brackets it
    unreachable = search(lambda r: _point(r, 1.0), [2.0, 4.0, 8.0], beyond=2)
    assert not unreachable.bounded and unreachable.rate == 32.0
    assert [p.rps for p in search(measure, [2.0, 4.0], steps=0, beyond=0).points] == [2.0, 4.0]


def _served(tokens: int, ttft: float, tpot: float, finished: bool = True) -> Served:
    return Served("k", "w", 0.0, True, tokens=tokens, first_token=ttft, last_token=ttft + tpot * (tokens - 1),
                  finished=finished)


def test_attainment_counts_first_tokens_by_request_and_the_pace_by_output_token() -> None:
    """A three-token answer stalled by one long prefill misses the TPOT target by its two gaps, not as a
    whole request; a request answered late misses the TTFT target as one in a hundred, however short."""
    targets = Targets(ttft=2.0, tpot=0.05)
    paced = [_served(500, 0.1, 0.02) for _ in range(99)]
    stalled = _served(3, 0.1, 0.3)
    assert attainment([*paced, stalled], targets) == pytest.approx(1 - 2 / (99 * 499 + 2))
    slow_long = _served(500, 0.1, 0.3)
    assert attainment([*paced, slow_long], targets) == pytest.approx(1 - 499 / (100 * 499))
    late = _served(3, 2.5, 0.02)
    assert attainment([*paced, late], targets) == pytest.approx(0.99)
    unanswered = Served("k", "w", 0.0, True)
    assert attainment([*paced, unanswered], targets) == pytest.approx(0.99)
    assert attainment([*paced, stalled], Targets(ttft=2.0, tpot=None)) == 1.0
    assert attainment([], targets) == 0.0


def test_the_grid_stops_past_a_rate_the_fleet_is_far_from_carrying() -> None:
    """Past saturation every fleet misses and its runs cost the most: the rates heavier than one that kept
    the targets for less than 90% are not run, and count as missing the targets."""
    measured: list[float] = []

    def measure(per_gpu: float) -> Point:  # searched per GPU, reported over a fleet of two
        measured.append(per_gpu)
        return replace(_point(per_gpu, {0.5: 1.0, 1.0: 0.995, 2.0: 0.85}.get(per_gpu, 0.97)), rps=per_gpu * 2)

    capacity = search(measure, [0.5, 1.0, 2.0, 4.0, 8.0], steps=1)
    assert measured[:3] == [0.5, 1.0, 2.0] and 4.0 not in measured and 8.0 not in measured
    assert 1.0 < capacity.rate < 2.0 and measured[3] == 1.5  # the bisection still runs
    skipped = capacity.at(16.0)
    assert skipped.requests == 0 and skipped.attainment == 0.0 and math.isnan(skipped.tpot_p99)


def test_calibration_in_simulation_fits_every_pool_and_a_lookups_own_copy_coefficients() -> None:
    bank = Bank(EngineProfile.random(7), 7)
    pools = [PoolSpec("draft", 1, "draft_model", 4), PoolSpec("ngram", 1, "ngram", 4, (2, 4))]
    fit = calibrate(bank, pools, calibration_arms(), 3, (1, 8), 1024).fit
    cal = fit.calibration
    assert cal.source == "measured" and set(cal.pools) == {"draft", "ngram"}
    assert cal.pools["draft"].draft_cost > 0 and cal.pools["ngram"].draft_cost == 0
    rates = cal.pools["ngram"].copy_rates
    assert rates is not None and rates.s_base > rates.f_base  # tool calls copy more than prose
    # the gate prices the lookup pool by the coefficients its calibration wrote, not the committed ones
    body = {"model": mix.MODEL, "messages": [{"role": "user", "content": "weather in Paris"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
            "tool_choice": "required", "temperature": 0}
    view = PoolView("ngram", "ngram", gamma=4, lookup=(2, 4))
    copy = estimate(body).copyable
    fitted = predicted_taus(cal, view, 0.0, copy)
    committed = predicted_taus(cal.model_copy(update={"pools": {}}), view, 0.0, copy)
    assert fitted["s"] != pytest.approx(committed["s"])


def test_step_times_are_shared_out_in_full_and_never_beat_streaming_the_weights() -> None:
    """A step's shares add up to it; it never takes less than streaming each GPU's share of the
    weights; a draft model's passes and a prefill's arithmetic add to the target's decode."""
    rng = random.Random(3)
    for method, trial in itertools.product((None, "draft_model", "eagle3", "ngram"), range(50)):
        profile = EngineProfile.random(rng.randint(0, 20), EngineProfile.build(
            rng.choice(["H100", "H200", "B200"]), "Qwen/Qwen3-32B", rng.choice([1, 2, 4, 8])))
        works = []
        for _ in range(rng.randint(1, 30)):
            draft = rng.randint(0, 6) if method else 0
            prefill = rng.random() < 0.2
            tokens = rng.randint(2, 3000) if prefill else 1 + draft
            works.append(Work(rng.randint(0, 6000), tokens, 0 if prefill else draft,
                              tokens if prefill and method in ("draft_model", "eagle3") else 0))
        physics = Physics(profile, method)
        timed = physics.step_time(works)
        assert sum(timed.charges) == pytest.approx(timed.seconds, rel=1e-9)
        assert all(c > 0 for c in timed.charges)
        gpu = profile.gpu
        streaming = profile.target.weight_bytes / profile.tensor_parallel_size / gpu.hbm_bytes_per_second
        assert timed.seconds > streaming
        plain = Physics(profile, None).step_time([Work(w.context, 1) for w in works if w.decoding] or [Work(0, 1)])
        if method == "draft_model" and any(w.draft_len for w in works):
            assert timed.seconds > plain.seconds


def test_a_dip_below_the_threshold_between_two_passing_rates_does_not_set_the_capacity() -> None:
    shape = {0.5: 1.0, 1.0: 0.986, 2.0: 0.996, 4.0: 0.9}  # the dip at 1.0 is noise: 2.0 passes
    capacity = search(lambda r: _point(r, shape.get(r, 0.992 if r < 3 else 0.95)), [0.5, 1.0, 2.0, 4.0], steps=1)
    assert capacity.rate > 2.0


def test_a_replayed_request_drawn_again_is_new_to_a_suffix_replica_as_to_its_prefix_cache() -> None:
    """The verdict replays a few hundred requests again and again; a suffix replica that copied a
    repeat's own earlier answer would accept it whole, which new traffic never offers."""
    bank = Bank(EngineProfile(), 1)
    item = mix.items("verdict")["tool_call"][0]
    request = bank.requests_of(item)[0]
    pool, answers = PoolSpec("suffix", 1, "suffix", 24), AnswerCache()
    first = bank.answer(request, pool, answers)
    again = bank.answer(request, pool, answers)
    assert again.positions.matching.tolist() == first.positions.matching.tolist()
    # the emulator's server copies what it answered before, as vLLM's does
    maker = bank.maker(pool)
    assert request.written is not None
    served = maker.drafted(request.body, "chat", request.prompt, request.written)
    repeated = maker.drafted(request.body, "chat", request.prompt, request.written)
    assert repeated.positions.matching.sum() > served.positions.matching.sum() + 5

