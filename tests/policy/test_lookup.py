"""Copy-based drafters: vLLM's proposers replayed exactly, the gate's prediction of them, and the
``draftgate measure-ngram`` tool run as a user runs it."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Hashable, Sequence

import pytest

from draftgate.emulator.lookup import (
    SUFFIX_LONGEST_MATCH,
    SUFFIX_SPEC_FACTOR,
    SUFFIX_TREE_DEPTH,
    AnswerCache,
    NgramProposer,
    OwnMatches,
    SuffixProposer,
    replay,
    runs_from_each_position,
    suffix_runs,
)
from draftgate.policy import copying
from draftgate.policy.calibration import Calibration, PoolCalibration
from draftgate.policy.gate import PoolView, decide, predicted_taus
from draftgate.policy.structure.estimator import estimate


def test_the_ngram_proposer_is_vllms_rule() -> None:
    # vLLM's own example (ngram_proposer.py): [4, 2, 3] cannot be found earlier, [2, 3] can,
    # and the tokens that followed it there are proposed, as many as there are up to k
    proposer = NgramProposer([1, 2, 3, 4, 2, 3], lookup_min=2, lookup_max=3)
    assert list(proposer.propose(4)) == [4, 2, 3]
    # the longest suffix wins over a shorter one, and at one length the earliest occurrence
    proposer = NgramProposer(["x", "b", "c", "P", "a", "b", "c", "Q", "a", "b", "c", "R", "a", "b", "c"], 2, 3)
    assert list(proposer.propose(1)) == ["Q"]  # "a b c" first at 4, followed by Q; "b c" alone would say P
    # shorter than lookup_min: nothing; and a suffix that only occurs as itself: nothing
    assert list(NgramProposer(["a"], 2, 2).propose(4)) == []
    assert list(NgramProposer(["a", "b", "c"], 2, 2).propose(4)) == []


def test_a_replay_accepts_exactly_the_drafted_prefix_that_the_answer_repeats() -> None:
    prompt = ["the", "cat", "sat", "on", "the", "mat", "."]
    answer = ["the", "cat", "sat", "on", "a", "mat", "."]
    result = replay(NgramProposer(prompt, 1, 2), answer, 4)
    # 1: "." occurred only as itself: nothing drafted, the target writes "the";
    # 2: "the" first occurred at 0: "cat sat on the" drafted, "cat sat on" accepted, the target writes "a";
    # 3: neither "on a" nor "a" occurred: the target writes "mat";
    # 4: "mat" occurred at 5: ". the cat sat" drafted, "." accepted, and the answer is done
    assert result.rounds == (0, 3, 0, 1)
    assert result.accepted == (False, True, True, True, False, False, True)
    assert result.drafted == 8 and result.tau == 1.0
    # the same rounds from every start position: what the emulator's engine decodes with
    proposed, matching = runs_from_each_position(NgramProposer(prompt, 1, 2), answer, 4)
    assert matching[1] == 3 and proposed[1] == 4
    assert all(m <= p for m, p in zip(matching, proposed))


def test_suffix_decoding_also_copies_from_earlier_answers_and_speculates_less_after_short_matches() -> None:
    cache = AnswerCache()
    answer = list("the answer is forty-two")
    cold = replay(SuffixProposer(list("question: "), cache), answer, 16)
    cache.add(answer)
    warm = replay(SuffixProposer(list("question: "), cache), answer, 16)
    assert sum(warm.rounds) > sum(cold.rounds) + 10
    # a match of one token speculates at most one (max_spec_factor 1.0)
    proposer = SuffixProposer(list("ab"), None)
    proposer.extend(["a"])
    assert len(proposer.propose(16)) == 1


def test_a_request_copies_other_requests_answers_but_not_its_own_when_told_it_is_new() -> None:
    prompt, answer = list("question: "), list("the answer is forty-two")
    cache = AnswerCache()
    cache.add(answer, source=1)
    own = OwnMatches.of(prompt, answer)
    copied = suffix_runs(prompt, answer, 16, own, cache)
    assert suffix_runs(prompt, answer, 16, own, cache, exclude=2) == copied  # another request's answer
    fresh = suffix_runs(prompt, answer, 16, own, cache, exclude=1)
    assert fresh == suffix_runs(prompt, answer, 16, own, None)  # its own: as if never answered
    assert sum(fresh[1]) + 10 < sum(copied[1])
    assert runs_from_each_position(SuffixProposer(prompt, cache, exclude=1), answer, 16) == fresh


def test_the_answer_cache_forgets_evicted_answers_and_its_index_stays_within_twice_the_live_ones() -> None:
    cache = AnswerCache(size=4, longest=3)
    answers = [[f"a{i}", f"b{i}", f"c{i}", f"d{i}", f"e{i}"] for i in range(20)]
    largest = 0
    for answer in answers:
        cache.add(answer)
        largest = max(largest, len(cache._latest))
        assert cache.continuation((answer[0], answer[1]), 2) == (answer[2], answer[3])  # the newest, found
    assert cache.continuation(("a0", "b0"), 2) == ()  # evicted long ago
    live = 4 * sum(min(3, end) for end in range(1, 5))  # the n-grams four answers of five tokens index
    assert largest <= 2 * live


class _EveryLength(SuffixProposer):
    """Suffix decoding as its rule reads: every length tried, from the longest down."""

    def propose(self, k: int) -> Sequence[Hashable]:
        for n in range(min(SUFFIX_LONGEST_MATCH, len(self.context)), 0, -1):
            suffix = tuple(self.context[-n:])
            limit = min(k, int(SUFFIX_SPEC_FACTOR * n), SUFFIX_TREE_DEPTH - n)
            end = self._latest.get(suffix)
            if limit > 0 and end is not None:
                return self.context[end:end + limit]
            if limit > 0 and self.cache is not None and (found := self.cache.continuation(suffix, limit)):
                return found
        return ()


def test_suffix_decoding_proposes_what_trying_every_length_from_the_longest_would() -> None:
    rng = random.Random(7)
    ours, every = AnswerCache(size=6), AnswerCache(size=6)
    for _ in range(40):  # answers over a small vocabulary repeat their n-grams, and the caches evict
        prompt = [rng.randrange(12) for _ in range(rng.randrange(0, 30))]
        answer = [rng.randrange(12) for _ in range(rng.randrange(1, 80))]
        own = OwnMatches.of(prompt, answer)  # the request's own context, worked out once for every replica
        for k in (1, 4, 24):
            expected = runs_from_each_position(_EveryLength(prompt, every), answer, k)
            assert runs_from_each_position(SuffixProposer(prompt, ours), answer, k) == expected
            assert suffix_runs(prompt, answer, k, own, ours) == expected
        ours.add(answer)
        every.add(answer)


def test_the_predictor_reads_what_a_request_holds_to_copy() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    first = estimate({"messages": [{"role": "user", "content": "weather in Paris?"}], "tools": tools})
    later = estimate({"messages": [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "user", "content": "and in Rome? ```print(1)```" + " and more" * 300}], "tools": tools})
    assert first.copyable.earlier_calls == 0 and later.copyable.earlier_calls == 1
    assert later.copyable.code and not first.copyable.code and later.copyable.text_chars > 2000
    rates = copying.RATES[(2, 4)]
    a, b = copying.lookup_taus(first.copyable, 4, rates), copying.lookup_taus(later.copyable, 4, rates)
    assert b["f"] > a["f"] * 2 and b["s"] > a["s"]
    assert a["s"] > a["f"] * 3  # a call copies its name, keys and format; first-turn prose little
    # deeper drafts reach further, along one curve, and never beyond what k allows
    assert copying.depth_factor(1) < copying.depth_factor(2) < 1.0 == copying.depth_factor(4) < copying.depth_factor(8)
    assert all(t < 1.0 for t in copying.lookup_taus(later.copyable, 1, rates).values())
    # settings with no committed coefficients take the nearest by minimum match
    assert copying.rates_for("ngram", (2, 6))[1] == (2, 4)
    assert copying.rates_for("suffix", (5, 5))[0] is copying.SUFFIX_RATES


def test_the_gate_prices_an_ngram_pool_by_what_the_request_holds_to_copy() -> None:
    cal = Calibration()
    ngram = PoolView("ngram", "ngram", gamma=4, lookup=(2, 4))
    prose = estimate({"messages": [{"role": "user", "content": "write a story"}], "temperature": 0})
    pasted = estimate({"messages": [{"role": "user", "content": "fix this: ```" + "x = f(y)\n" * 300 + "```"}],
                       "temperature": 0})
    pasted_tau = predicted_taus(cal, ngram, 0.0, pasted.copyable)["f"]
    assert pasted_tau > 2 * predicted_taus(cal, ngram, 0.0, prose.copyable)["f"]
    # a lookup costs no draft pass, and verifies only what it proposes: at idle, with nothing
    # to copy, speculating on it costs almost the same as not speculating
    decision = decide(prose, [ngram, PoolView("off", None)], cal)
    ngram_cost, off_cost = (decision.cost_of(name).cost_per_token for name in ("ngram", "off"))
    assert abs(ngram_cost / off_cost - 1.0) < 0.15
    assert cal.pool("ngram", 4, "ngram").draft_cost == 0.0
    # heads are priced by the law with their own cost and alignment, and no draft prefill
    eagle = cal.pool("eagle-pool", 4, "eagle3")
    assert eagle.draft_cost < cal.pool("d", 4, "draft_model").draft_cost and eagle.kappa is not None
    heads = predicted_taus(cal, PoolView("eagle-pool", "eagle3", gamma=4), 0.0)
    model = predicted_taus(cal, PoolView("d", "draft_model", gamma=4), 0.0)
    assert heads["f"] > model["f"]
    # a pool's calibration is used only for the method it was measured with
    measured = Calibration(pools={"p": PoolCalibration(method="ngram", gamma=4, draft_cost=0.0)})
    assert measured.pool("p", 4, "ngram").draft_cost == 0.0
    assert measured.pool("p", 4, "draft_model").draft_cost == cal.pool("x", 4, "draft_model").draft_cost > 0


def test_measure_ngram_runs_on_the_committed_data_and_predicts_each_class_within_a_quarter() -> None:
    done = subprocess.run([sys.executable, "-m", "draftgate", "measure-ngram", "--lookup-min", "2",
                           "--lookup-max", "4"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {line[:24].strip(): line[24:].split() for line in done.stdout.splitlines() if line.startswith("all ")}
    assert set(rows) == {"all F (prose)", "all S (tool calls)"}, done.stdout
    for name, (answers, tokens, replayed, predicted, _) in rows.items():
        assert int(answers) > 70 and int(tokens) > 5000
        assert abs(float(predicted) / float(replayed) - 1.0) <= 0.25, (name, replayed, predicted)
    assert "parallel calls" in done.stdout and "name" in done.stdout  # per class, per kind of token
    bad = subprocess.run([sys.executable, "-m", "draftgate", "measure-ngram", "--lookup-min", "5", "--lookup-max", "2"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "lookup-min" in bad.stderr and "Traceback" not in bad.stderr


def test_behind_the_proxy_an_ngram_pool_is_observed_per_round_as_it_is_predicted() -> None:
    """Through the proxy to an emulated ngram pool: the observed tau counts every round (vLLM's
    per-request metrics count only rounds that drafted), and a tool call, whose keys are in the
    tool list, is both predicted and observed to copy more than prose."""
    import httpx

    from draftgate.emulator.engine import SpecConfig
    from draftgate.proxy.app import create_app
    from draftgate.proxy.config import load_settings
    from tests.conftest import emulator
    from tests.proxy_harness import metric_value, proxy_server

    settings_tool = {"type": "function", "function": {"name": "configure", "parameters": {
        "type": "object", "properties": {f"option_{i}": {"type": "string", "enum": ["enabled", "disabled"]}
                                         for i in range(12)}, "required": [f"option_{i}" for i in range(12)]}}}
    asks = {"prose": {"messages": [{"role": "user", "content": "Write a short poem about the sea."}]},
            "call": {"messages": [{"role": "user", "content": "Turn every option on."}], "tools": [settings_tool],
                     "tool_choice": "required"}}
    with emulator(11, True, spec=SpecConfig("ngram", 4, lookup_min=2, lookup_max=4)) as lookup:
        settings = load_settings(None, pools=[
            {"name": "lookup", "urls": [lookup.url],
             "speculation": {"method": "ngram", "gamma": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}}],
            exploration_share=0.0, log_requests=False, structure_priors={"thinking_by_default": False})
        with proxy_server(create_app(settings)) as proxy:
            observed, predicted = {}, {}
            for name, ask in asks.items():
                body = {"model": "Qwen/Qwen3-32B", "temperature": 0, "max_tokens": 300, **ask}
                explained = httpx.post(f"{proxy.url}/draftgate/explain", json=body, timeout=60).json()
                predicted[name] = explained["predicted_tau"]["s" if name == "call" else "f"]
                answer = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=60)
                assert answer.status_code == 200 and answer.headers["x-draftgate-route"] == "lookup"
                accepted = answer.json()["metrics"]["speculative_decoding"]["num_accepted_draft_tokens"]
                observed[name] = accepted / (answer.json()["usage"]["completion_tokens"] - accepted)
            page = httpx.get(f"{proxy.url}/metrics").text
    assert observed["call"] > observed["prose"] + 0.3 and predicted["call"] > predicted["prose"] + 0.3
    count = metric_value(page, "draftgate_observed_tau_count", pool="lookup")
    total = metric_value(page, "draftgate_observed_tau_sum", pool="lookup")
    assert count == 2 and total == pytest.approx(sum(observed.values()), rel=1e-6)
