"""The protocol's fit read from a state written by hand: where a step's time comes from."""

from __future__ import annotations

from typing import Any

import pytest

from draftgate.calibrate import protocol
from draftgate.calibrate.runner import Record

OFF = protocol.Pool("spec-off", "http://off", 0)
DRAFT = protocol.Pool("spec-on", "http://on", 4)
NGRAM = protocol.Pool("spec-ngram", "http://ngram", 4, "ngram")
LOADS = [1, 16]


def _entry(kind: str, arm: str, pool: protocol.Pool, load: int, tpot: float,
           tau: float | None = None) -> tuple[str, dict[str, Any]]:
    """A batch of three requests of 101 tokens at ``tpot`` seconds a token (``tau`` per round when given)."""
    records = [Record(arm=arm, pool=pool.name, gamma=pool.gamma, concurrency=load, regime="greedy", kind="timing",
                      index=i, status=200, completion_tokens=101, decode_time=100 * tpot, tau=tau,
                      spec_steps=0 if tau is None else 30).as_json() for i in range(3)]
    k = protocol.key(kind, arm, pool, load, "greedy")
    return k, {"key": k, "records": records, "counters": {}}


def _state(with_steps: bool) -> dict[str, dict[str, Any]]:
    """Timing batches whose TPOTs carry the prefills of short answers at 16 running (plain 30 ms a token,
    a round 60 ms), and step batches that do not (20 and 36 ms)."""
    entries = [_entry("timing", "A", OFF, 1, 0.017), _entry("timing", "A", DRAFT, 1, 0.008, 2.0),
               _entry("timing", "A", OFF, 16, 0.030), _entry("timing", "A", DRAFT, 16, 0.020, 2.0)]
    if with_steps:
        entries += [_entry("step", "A", OFF, 1, 0.017), _entry("step", "A", DRAFT, 1, 0.008, 2.0),
                    _entry("step", "A", OFF, 16, 0.020), _entry("step", "A", DRAFT, 16, 0.012, 2.0)]
    return dict(entries)


def _plan(*spec: protocol.Pool) -> protocol.CalibrationPlan:
    return protocol.CalibrationPlan("m", list(spec), OFF, ["A"], LOADS, ["greedy"], 4, None, {"A": []})


def test_a_step_is_timed_in_the_step_batches_and_in_the_arms_batches_only_where_a_state_has_none() -> None:
    fit = protocol.fit(_plan(DRAFT), _state(with_steps=True), 0.6)
    assert fit.c_t[16] == pytest.approx(0.020) and fit.round_time[("spec-on", 16)] == pytest.approx(0.036)
    # a state written before step batches existed: the arms' batches, prefills and all
    old = protocol.fit(_plan(DRAFT), _state(with_steps=False), 0.6)
    assert old.c_t[16] == pytest.approx(0.030) and old.round_time[("spec-on", 16)] == pytest.approx(0.060)
    # the overhead a round costs per draft token is read against the plain step from the same batches
    assert fit.pools["spec-on"].overhead[16] == pytest.approx((0.036 / 0.020 - 1) / 4)


def test_every_load_gets_a_step_batch_of_the_plain_pool_and_each_model_drafter_but_no_lookup() -> None:
    runs = [(kind, arm, pool.name, c) for kind, arm, pool, c, _ in _plan(DRAFT, NGRAM).runs() if kind == "step"]
    assert runs == [("step", "A", name, c) for c in LOADS for name in ("spec-off", "spec-on")]
    bodies = protocol.step_bodies([{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}], 16)
    assert len(protocol.step_bodies([{"messages": []}], 1)) == protocol.STEP_REQUESTS
    assert len(bodies) == 32 and all(b["max_tokens"] == protocol.STEP_ANSWER and b["ignore_eos"] for b in bodies)


def test_every_pool_is_timed_greedy_and_only_the_laws_reference_pools_sampled() -> None:
    head = protocol.Pool("spec-eagle", "http://eagle", 3, "eagle3")
    both = protocol.CalibrationPlan("m", [DRAFT, head, NGRAM], OFF, ["A"], LOADS, ["greedy", "default"], 4, None,
                                    {"A": []})
    timed = {(regime, pool.name) for kind, _, pool, _, regime in both.runs() if kind == "timing"}
    assert timed == {("greedy", p) for p in ("spec-off", "spec-on", "spec-eagle", "spec-ngram")} | {
        ("default", "spec-on")}
    # without a draft model, the model drafters are the reference; a lookup never is
    heads = protocol.CalibrationPlan("m", [head, NGRAM], OFF, ["A"], LOADS, ["default"], 4, None, {"A": []})
    assert {pool.name for kind, _, pool, _, _ in heads.runs() if kind == "timing"} == {"spec-eagle"}
