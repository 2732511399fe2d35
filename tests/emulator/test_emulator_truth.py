"""The emulator's own physics and predictability, checked against its ground truth.

Nothing here reads the gate: acceptance comes from what each token is, time from
the GPU's bytes and FLOPs, and these tests hold the emulator to what that implies.
"""

from __future__ import annotations

import httpx
import pytest

from draftgate.emulator.physics import Work, step_time
from draftgate.emulator.profile import EngineProfile
from tests.conftest import emulator

MESSAGE = {"type": "function", "function": {"name": "send_message", "parameters": {
    "type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
    "required": ["to", "body"]}}}
# of the same length as a message's arguments: a dozen enumerated settings
SETTINGS = {"type": "function", "function": {"name": "configure", "parameters": {
    "type": "object", "properties": {f"option_{i}": {"type": "string", "enum": ["enabled", "disabled", "automatic"]}
                                     for i in range(14)},
    "required": [f"option_{i}" for i in range(14)]}}}


def _acceptance(url: str, tool: dict, n: int) -> tuple[float, float]:
    """Draft acceptance over ``n`` forced calls of ``tool``, and their mean length in tokens."""
    accepted = drafted = tokens = 0
    with httpx.Client(timeout=60) as client:
        for i in range(n):
            body = {"model": "Qwen/Qwen3-32B", "temperature": 0, "seed": i, "tools": [tool],
                    "tool_choice": {"type": "function", "function": {"name": tool["function"]["name"]}},
                    "messages": [{"role": "user", "content": f"Request {i}: please tell Alice about the plan."}]}
            answer = client.post(f"{url}/v1/chat/completions", json=body).json()
            spec = answer["metrics"]["speculative_decoding"]
            accepted += spec["num_accepted_draft_tokens"]
            drafted += spec["num_draft_tokens"]
            tokens += answer["usage"]["completion_tokens"]
    return accepted / drafted, tokens / n


@pytest.mark.parametrize("seed", [3, 4])
def test_a_tool_call_of_free_text_is_accepted_far_less_often_than_an_enum_heavy_one(seed: int) -> None:
    """Both are schema-bound (class S) to the gate's estimator; the emulator accepts drafts by
    what each token is, so a message body is as hard to guess as prose, and enums are easy."""
    with emulator(seed, True, profile_seed=seed, k=4) as on:
        free, free_len = _acceptance(on.url, MESSAGE, 12)
        enums, enum_len = _acceptance(on.url, SETTINGS, 12)
        truth = httpx.get(f"{on.url}/debug/ground-truth").json()
    assert 0.5 < free_len / enum_len < 2.0, (free_len, enum_len)  # comparable lengths
    assert enums > free + 0.25, (enums, free)
    by_kind = truth["acceptance_rate_by_kind"]
    assert by_kind["syntax"] > by_kind["text"] + 0.3, by_kind
    assert by_kind["enum"] > by_kind["text"], by_kind


def test_a_lookup_drafter_gets_right_what_the_prompt_already_holds() -> None:
    """ngram proposes what followed the last tokens where they occurred before: a tool call's
    keys are in the tool list the prompt carries, a message body it writes is not."""
    from draftgate.emulator.engine import SpecConfig

    with emulator(5, True, spec=SpecConfig("ngram", 4)) as on:
        _acceptance(on.url, SETTINGS, 6)
        _acceptance(on.url, MESSAGE, 6)
        truth = httpx.get(f"{on.url}/debug/ground-truth").json()
    by_kind = truth["acceptance_rate_by_kind"]
    assert by_kind["syntax"] > 0.3, by_kind
    assert by_kind["text"] is None or by_kind["text"] < by_kind["syntax"] / 2, by_kind


def _accepted(url: str, body: dict) -> int:
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).json()
    return answer["metrics"]["speculative_decoding"]["num_accepted_draft_tokens"]


def test_suffix_decoding_copies_from_the_answers_the_server_gave_before() -> None:
    """A suffix drafter also looks in earlier answers: asked the same thing again, it copies the
    answer it gave; an ngram drafter, which sees only the request, does not get better."""
    from draftgate.emulator.engine import SpecConfig

    body = {"model": "Qwen/Qwen3-32B", "temperature": 0, "seed": 5, "max_tokens": 200,
            "messages": [{"role": "user", "content": "Tell me a story about a lighthouse keeper."}]}
    with emulator(7, True, spec=SpecConfig("suffix", 8)) as suffix, \
            emulator(7, True, spec=SpecConfig("ngram", 8, lookup_min=2, lookup_max=4)) as ngram:
        first, again = _accepted(suffix.url, body), _accepted(suffix.url, body)
        assert again > first + 50, (first, again)
        assert _accepted(ngram.url, body) == _accepted(ngram.url, body)


def test_the_emulator_reads_the_lookup_bounds_as_vllm_resolves_them() -> None:
    from draftgate.cli_error import CliError
    from draftgate.emulator.cli import parse_speculative_config

    def bounds(extra: str) -> tuple[int, int]:
        spec = parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 4' + extra + "}")
        return spec.lookup_min, spec.lookup_max

    assert bounds("") == (5, 5)
    assert bounds(', "prompt_lookup_max": 4') == (4, 4)
    assert bounds(', "prompt_lookup_min": 2, "prompt_lookup_max": 4') == (2, 4)
    with pytest.raises(CliError, match="must not exceed"):
        bounds(', "prompt_lookup_min": 5, "prompt_lookup_max": 2')


def test_a_step_grows_with_batch_and_context_and_verification_turns_compute_bound() -> None:
    profile = EngineProfile()

    def step(batch: int, context: int, draft: int = 0, method: str | None = None) -> float:
        return step_time(profile, [Work(context, 1 + draft, draft)] * batch, method).seconds

    assert step(1, 1000) < step(32, 1000) < step(64, 1000)
    assert step(32, 1000) < step(32, 8000)
    # one sequence: verifying 9 tokens reads the same weights as decoding 1 (bandwidth-bound)
    plain = step_time(profile, [Work(1000, 1)], None).seconds
    verify_one = step_time(profile, [Work(1000, 9)], None).seconds
    assert verify_one < plain * 1.05
    # 64 sequences: 576 tokens in flight are compute-bound, dearer than 64
    assert step_time(profile, [Work(1000, 9)] * 64, None).seconds > 1.5 * step(64, 1000)
    # the draft model's passes: about a fifth of a target pass each at batch 1 (the design's 0.2-0.3)
    d = (step(1, 1000, 8, "draft_model") - verify_one) / 8 / plain
    assert 0.12 < d < 0.35, d
    # the charges add up to the step
    mixed = [Work(500, 1, 0), Work(0, 2000, 0, 2000), Work(3000, 5, 4)]
    timed = step_time(profile, mixed, "draft_model")
    assert sum(timed.charges) == pytest.approx(timed.seconds)
    assert timed.charges[1] > timed.charges[0]  # the prefill of 2,000 tokens is the dear part
