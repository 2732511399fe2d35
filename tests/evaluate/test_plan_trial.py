"""The traffic an operator names (``--mix``) and the plan's trial: its shortlist, and a split only
where the trial measured it serving more than the model's best single fleet by more than the plan's error."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

from draftgate.evaluate import trial
from draftgate.evaluate.capacity import Point
from draftgate.policy.plan import Candidate, Composition, PoolPlan, Recommendation
from draftgate.workloads import mix

PLAIN, EAGLE, NGRAM = Candidate("plain"), Candidate("eagle3-k3", "eagle3", 3), Candidate("ngram-k4", "ngram", 4)


def test_a_mix_is_parsed_over_the_verdicts_kinds_and_draws_only_what_it_weighs() -> None:
    weights = mix.parse_mix("tool_call=3, chat=1,agent session=0")
    assert weights == {"tool_call": 3.0, "chat": 1.0, "agent_session": 0.0, "reasoning": 0.0, "conversation": 0.0}
    drawn = Counter(item.workload for item in mix.sample("verdict", 800, 5, weights))
    assert set(drawn) == {"tool_call", "chat"} and 2.4 < drawn["tool_call"] / drawn["chat"] < 3.8
    assert mix.requests_per_item("verdict", {"agent_session": 1.0}) > 2  # a session's turns each count
    # the default mix is the one the verdict always drew: the same items for the same seed
    assert list(itertools.islice(mix.stream("verdict", 9), 50)) == list(
        itertools.islice(mix.stream("verdict", 9, dict(mix.WEIGHTS)), 50))


@pytest.mark.parametrize("text", ["", "chat", "gossip=1", "chat=x", "chat=-1", "chat=inf", "chat=nan", "chat=0",
                                  "chat=1,chat=2"])
def test_a_mix_that_means_nothing_is_refused_with_the_reason(text: str) -> None:
    with pytest.raises(mix.MixError) as raised:
        mix.parse_mix(text)
    assert str(raised.value) and "\n" not in str(raised.value)


def _composition(capacity: float, *pools: tuple[Candidate, int, tuple[str, ...]]) -> Composition:
    return Composition(tuple(PoolPlan(c, n, kinds) for c, n, kinds in pools), capacity, 0.0)


def _recommendation(*options: Composition) -> Recommendation:
    ranked = sorted(options, key=lambda o: -o.capacity)
    return Recommendation(ranked[0], next(o for o in ranked if o.homogeneous), None, tuple(ranked))


KINDS = ("prose", "tool_auto")
ALL_EAGLE = _composition(10.0, (EAGLE, 8, KINDS))
ALL_PLAIN = _composition(9.0, (PLAIN, 8, KINDS))
ALL_NGRAM = _composition(5.0, (NGRAM, 8, KINDS))  # far below the best: not worth a trial
SPLIT = _composition(12.0, (PLAIN, 2, ("prose",)), (EAGLE, 6, ("tool_auto",)))


def test_the_shortlist_is_the_near_best_single_fleets_and_the_best_splits() -> None:
    listed = trial.shortlist(_recommendation(ALL_EAGLE, ALL_PLAIN, ALL_NGRAM, SPLIT))
    assert listed == [ALL_EAGLE, ALL_PLAIN, SPLIT]


def test_the_models_best_single_fleet_stands_unless_the_trial_finds_another_better_by_more_than_its_error() -> None:
    recommendation = _recommendation(ALL_EAGLE, ALL_PLAIN, SPLIT)
    # the model ranks EAGLE-3 first among the single fleets; the trial finds plain and the split ahead
    # of it, but by less than the plan's error
    measured = {ALL_EAGLE: 8.0, ALL_PLAIN: 8.0 * (1 + trial.MARGIN / 2), SPLIT: 8.0 * (1 + trial.MARGIN * 0.9)}
    chosen = trial.choose(recommendation, measured.__getitem__)
    assert chosen.best.pools == ALL_EAGLE.pools and chosen.best.capacity == 8.0  # the trial's figure, not the model's
    assert chosen.best_split is not None and chosen.best_split.pools == SPLIT.pools
    measured[ALL_PLAIN] = 8.0 * (1 + 2 * trial.MARGIN)  # a gain beyond the error: plain
    assert trial.choose(recommendation, measured.__getitem__).best.pools == ALL_PLAIN.pools
    measured[SPLIT] = 8.0 * (1 + 3 * trial.MARGIN)  # ahead of plain, but by less than the error: plain
    assert trial.choose(recommendation, measured.__getitem__).best.pools == ALL_PLAIN.pools
    measured[SPLIT] = 8.0 * (1 + 5 * trial.MARGIN)  # the split beyond it, and the model puts it first: the split
    chosen = trial.choose(recommendation, measured.__getitem__)
    assert chosen.best.pools == SPLIT.pools and chosen.best.capacity == measured[SPLIT]
    assert {t.composition.pools for t in chosen.tried} == {ALL_EAGLE.pools, ALL_PLAIN.pools, SPLIT.pools}


def test_where_the_model_barely_ranks_two_single_fleets_the_trial_ranks_them() -> None:
    """A model that puts ngram everywhere 1% ahead of EAGLE-3 everywhere has not ranked them: a trial
    that puts EAGLE-3 5% ahead overturns that lead, while a lead the model gave by more than the
    margin still needs the margin."""
    near = _composition(9.9, (NGRAM, 8, KINDS))  # the model: 1% below EAGLE-3
    recommendation = _recommendation(ALL_EAGLE, near)
    trialled = {ALL_EAGLE: 8.0, near: 8.0 * 1.05}
    assert trial.choose(recommendation, trialled.__getitem__).best.pools == near.pools
    confirmed = {ALL_EAGLE: 10.0, near: 10.0 * 1.005}  # the longer trial: not ahead by the model's 1%
    chosen = trial.choose(recommendation, trialled.__getitem__, confirm_of=confirmed.__getitem__)
    assert chosen.best.pools == ALL_EAGLE.pools and chosen.best.capacity == 10.0
    confirmed[near] = 10.0 * 1.05  # borne out
    assert trial.choose(recommendation, trialled.__getitem__, confirm_of=confirmed.__getitem__).best.pools == near.pools
    trialled[near] = 8.0 * 1.005  # within the model's own 1%: the model's stands
    assert trial.choose(recommendation, trialled.__getitem__).best.pools == ALL_EAGLE.pools


def test_a_split_the_model_ranks_below_its_best_single_fleet_is_not_taken_on_the_trial_alone() -> None:
    """The trial's sample can put a split far ahead where the model and the verdict put it behind; the
    split is taken only where both the model and the trial put it ahead."""
    doubtful = _composition(9.5, (PLAIN, 2, ("prose",)), (EAGLE, 6, ("tool_auto",)))  # the model: below EAGLE-3
    recommendation = _recommendation(ALL_EAGLE, ALL_PLAIN, doubtful)
    measured = {ALL_EAGLE: 8.0, ALL_PLAIN: 7.0, doubtful: 8.0 * (1 + 5 * trial.MARGIN)}
    chosen = trial.choose(recommendation, measured.__getitem__)
    assert chosen.best.pools == ALL_EAGLE.pools and chosen.best_split is not None
    assert chosen.best_split.pools == doubtful.pools  # still reported as the best split tried


def _point(rate: float, capacity: float) -> Point:
    met = 1.0 if rate <= capacity else 0.5
    return Point(rate, 100, met, 0.1, 0.2, 0.01, 0.02, 1.0, 0.001, 0.002)


@pytest.mark.parametrize("truth", [1.0, 9.0, 40.0])
def test_the_trial_finds_a_capacity_far_from_the_models(truth: float) -> None:
    """The model may be off by more than the grid spans: the trial widens it until it brackets."""
    found = trial.search_around(lambda rate: _point(rate, truth), modelled=8.0, steps=4)
    assert found == pytest.approx(truth, rel=0.06)


def test_a_grid_row_sets_the_gate_beside_the_best_homogeneous_fleet_seed_by_seed() -> None:
    from draftgate.evaluate import grid

    def entry(by_seed: list[float], bounded: bool = True) -> dict[str, Any]:
        return {"capacity_rps_per_gpu": {"mean": sum(by_seed) / len(by_seed), "by_seed": by_seed},
                "capacity_bounded": bounded}

    strategies = {"always off": entry([3.0, 2.0]), "always EAGLE-3 K=3": entry([2.8, 2.6]),
                  "gate": {**entry([3.0, 2.2]), "plan": "all plain",
                           "plan_predicted_capacity_rps_per_gpu": {"mean": 2.75}, "plan_error_by_seed": [0.1, -0.05]}}
    row = grid.row("relaxed", "chat-heavy", 4, strategies)
    assert row["best_homogeneous"] == "always EAGLE-3 K=3" and row["best_rps_per_gpu"] == 2.7
    assert row["ratio"] == pytest.approx(2.6 / 2.7, abs=1e-4)
    assert row["worst_seed_ratio"] == pytest.approx(2.2 / 2.6, abs=1e-4)  # the seed the gate did worst on
    assert row["plan_error_mean_abs"] == pytest.approx(0.075)
    printed = grid.table([row])
    assert "| relaxed | chat-heavy | 4 | always EAGLE-3 K=3 | 2.70 | 2.60 | 0.96 | 0.85 | 2.75 | +10%, -5% |" in printed
    assert "within 10% on every seed at 1 of 1 points" in printed
    assert "0.98x the best homogeneous fleet at 0 of 1" in printed
    assert printed.rstrip().splitlines()[2].endswith("| all plain |")
    # seeds that ran different fleets are each named: the worst seed's ratio is read against its own
    split = {**strategies["gate"], "plans_by_seed": {"2": "all eagle3-k3", "1": "all plain"}}
    row = grid.row("relaxed", "chat-heavy", 4, {**strategies, "gate": split})
    assert row["gate_fleet"] == "seed 1: all plain; seed 2: all eagle3-k3"
    # a fleet within the targets at every rate tried has a floor for a capacity, and the table says so
    floor = grid.row("relaxed", "chat-heavy", 4, {**strategies, "always EAGLE-3 K=3": entry([2.8, 2.6], False)})
    assert "| always EAGLE-3 K=3 | 2.70+ | 2.60 |" in grid.table([floor])


def test_the_capacity_table_of_real_pools_names_the_gates_fleet_without_a_plan_to_set_beside_it() -> None:
    """Against real pools the gate runs the pools it was given: there is no plan's prediction to print."""
    from draftgate.evaluate import real, verdict
    from draftgate.evaluate.capacity import Capacity
    from draftgate.policy.plan import Targets

    point = _point(2.0, 3.0)
    found = {"always off": (1, {"plain": 1}, Capacity(2.0, (point,), True)),
             "gate": (2, {"plain": 1, "eagle3": 1}, Capacity(2.5, (point,), True))}
    table = verdict.capacity_table(real.summary(found, Targets(2.0, 0.05)))
    assert "the gate's fleet on 2 GPUs: plain x1, eagle3 x1" in table and "predicted" not in table


def test_the_verdict_says_when_the_gates_fleet_differs_between_seeds() -> None:
    """A fleet named by the most common plan must not pass for every seed's: the seeds that ran another
    are counted, and each seed's plan named."""
    from draftgate.evaluate import verdict

    def entry(by_seed: list[float], **more: Any) -> dict[str, Any]:
        return {"capacity_rps_per_gpu": {"mean": sum(by_seed) / len(by_seed), "min": min(by_seed),
                                         "max": max(by_seed), "by_seed": by_seed},
                "capacity_bounded": True, "rates": [], **more}

    plans = {"1": "all eagle3-k3", "2": "1 plain (prose) + 3 eagle3-k3 (tool_auto)", "3": "all eagle3-k3"}
    summary = {"targets": {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 50.0, "attainment": 0.99}, "seeds": 3,
               "fleets": {"4": {"strategies": {
                   "always EAGLE-3 K=3": entry([2.0, 2.1, 1.9], composition={"eagle3-k3": 4}),
                   "gate": entry([2.0, 1.5, 1.9], composition={"eagle3-k3": 4}, plan="all eagle3-k3",
                                 plans_by_seed=plans, plan_predicted_capacity_rps_per_gpu={"mean": 2.0},
                                 plan_error_by_seed=[0.0, 0.3, 0.05])}}}}
    assert "the gate's fleet on 4 GPUs: eagle3-k3 x4 on 2 of 3 seeds" in verdict.capacity_table(summary)
    said = "\n".join(verdict.findings(summary))
    assert "found no split better" not in said
    assert "seed 2 1 plain (prose) + 3 eagle3-k3 (tool_auto)" in said


def test_the_plans_default_candidates_are_every_configuration_the_verdict_plans_with() -> None:
    from draftgate.evaluate.strategies import DYNAMIC_TABLES, FIXED, candidates
    from draftgate.policy.plan import default_candidates

    def configuration(c: Candidate) -> tuple[Any, ...]:
        return c.method, c.gamma if not c.dynamic else "dynamic", c.lookup if c.method == "ngram" else None

    planned = {configuration(c) for c in candidates(1024, 8192, DYNAMIC_TABLES[0])}
    assert {configuration(c) for c in default_candidates()} == planned
    assert any(c.dynamic for c in default_candidates()) and (None, 0, None) in planned
    # every homogeneous fleet the verdict compares, suffix decoding's too
    assert {(p.method, p.depth) for p in FIXED.values()} <= {(c.method, c.gamma) for c in candidates(1024, 8192)}
    assert ("suffix", 24, None) in planned


def test_a_fleet_that_displaces_the_models_choice_must_win_again_on_more_requests() -> None:
    """One seed's trial put a draft model at dynamic K 20% ahead of EAGLE-3 everywhere; on four times
    the requests EAGLE-3 led by 60%, and the verdict agreed: a displacement the longer trial does not
    bear out leaves the model's best single fleet, at the longer trial's figure."""
    recommendation = _recommendation(ALL_EAGLE, ALL_PLAIN, SPLIT)
    trialled = {ALL_EAGLE: 7.0, ALL_PLAIN: 8.4, SPLIT: 6.0}
    confirmed = {ALL_EAGLE: 12.7, ALL_PLAIN: 7.9}
    chosen = trial.choose(recommendation, trialled.__getitem__, confirm_of=confirmed.__getitem__)
    assert chosen.best.pools == ALL_EAGLE.pools and chosen.best.capacity == 12.7
    confirmed[ALL_PLAIN] = 12.7 * (1 + 2 * trial.MARGIN)  # borne out: plain, at its longer trial's figure
    chosen = trial.choose(recommendation, trialled.__getitem__, confirm_of=confirmed.__getitem__)
    assert chosen.best.pools == ALL_PLAIN.pools and chosen.best.capacity == confirmed[ALL_PLAIN]
    calls: list[Composition] = []
    trialled[ALL_PLAIN] = 7.0  # nothing displaces the model's choice: no second trial is run
    trial.choose(recommendation, trialled.__getitem__, confirm_of=lambda c: calls.append(c) or 0.0)
    assert calls == []
