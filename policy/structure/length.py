"""How long an output may run: the bounds a request sets on the estimate.

``max_completion_tokens`` / ``max_tokens`` cut it short, and so does the
model's context: vLLM stops a request at ``max_model_len`` less its prompt,
whether or not it set a cap. Reasoning is generated first, so it is what
remains. vLLM's ``min_tokens`` holds the end off until that many tokens exist,
and ``ignore_eos`` until the cap: what a model writes past the point where it
would have stopped is bound by no schema, so it is counted as prose. vLLM's
``thinking_token_budget`` ends the reasoning at that many tokens.
"""

from __future__ import annotations

from typing import Any

from draftgate.policy.vllm_fields import as_bool, as_int, is_thinking_budget

Split = tuple[float, float, float]  # expected tokens: schema-bound, reasoning, prose
_BOUNDS = frozenset({"thinking_token_budget", "max_completion_tokens", "max_tokens", "min_tokens", "ignore_eos"})


def bounded(body: dict[str, Any], split: Split, room: float | None = None,
            sequences: int = 1) -> tuple[Split, list[str]]:
    """``split`` within the request's bounds, and what was changed, in words.

    ``room``: the tokens the context leaves after the prompt, when the model's
    context is known. Without it a schema that asks for 100,000 items is
    expected to run that long, and so long an answer makes any prefill it
    costs look free. ``split`` counts ``sequences`` outputs (``n``, for each
    prompt of a batch), each bounded alike; the notes speak of one.
    """
    if sequences > 1:
        (s, r, f), notes = bounded(body, (split[0] / sequences, split[1] / sequences, split[2] / sequences), room)
        return (s * sequences, r * sequences, f * sequences), notes
    if room is None and body.keys().isdisjoint(_BOUNDS):
        return split, []  # most requests set no bound: nothing to read
    s, r, f = split
    notes: list[str] = []
    budget = body.get("thinking_token_budget")
    if budget is not None:
        r = _within_thinking_budget(budget, r, notes)
    cap = _count(body, "max_completion_tokens") or _count(body, "max_tokens")
    if room is not None and (cap is None or room < cap):
        cap, capped_by = max(1.0, room), "the context's room after the prompt"
    else:
        capped_by = "max_tokens"
    floor = _count(body, "min_tokens")
    ignore_eos = as_bool(body.get("ignore_eos")) is True
    if ignore_eos:
        if cap is None:
            notes.append("ignore_eos without max_tokens: runs to the context's end, length not estimated")
        else:
            floor = cap
    if cap is not None and floor is not None:
        floor = min(floor, cap)  # vLLM refuses min_tokens above max_tokens; never estimate past the cap
    total = s + r + f
    if floor is not None and total < floor:
        why = "ignore_eos" if ignore_eos and floor == cap else f"min_tokens={floor:.0f}"
        notes.append(f"{why}: ~{floor - total:.0f} tokens past the answer's end, estimated as prose")
        return (s, r, f + floor - total), notes
    if cap is None or total <= cap:
        return (s, r, f), notes
    notes.append(f"output capped at {cap:.0f} tokens ({capped_by})")
    r_capped = min(r, cap)
    rest = s + f
    scale = (cap - r_capped) / rest if rest > 0 else 0.0
    return (s * scale, r_capped, f * scale), notes


def _within_thinking_budget(budget: Any, reasoning: float, notes: list[str]) -> float:
    """Reasoning within ``thinking_token_budget`` (-1: none); vLLM refuses a value it does not take."""
    if not is_thinking_budget(budget):
        notes.append(f"thinking_token_budget {str(budget)[:24]!r} is not a whole number from -1: vLLM refuses it")
        return reasoning
    if budget == -1 or reasoning <= budget:
        return reasoning
    notes.append(f"thinking_token_budget={budget}: reasoning ends there")
    return float(budget)


def _count(body: dict[str, Any], name: str) -> float | None:
    """A positive whole number as vLLM reads one (450.0 and "450" are 450), as a float;
    None when absent or not one."""
    value = as_int(body.get(name))
    if value is None or value <= 0:
        return None
    return float(value) if value < 1 << 53 else float(1 << 53)  # JSON integers have no bound
