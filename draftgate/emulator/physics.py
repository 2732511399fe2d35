"""How long one engine step takes on the GPU, from hardware and model facts.

A step is a roofline: the GPU streams bytes (weights once per pass, each
sequence's KV cache) and does arithmetic (two FLOPs per parameter per token in
flight, plus attention over each token's context); the step takes as long as
the slower of the two, plus a fixed scheduling overhead. Nothing here knows
speculative decoding's law: a speculation round is just more work —
``1 + draft_len`` tokens per sequence through the target, and the drafter's own
passes before it — and how much more it costs follows from the batch, the
contexts and the hardware.

Every step's time is also shared out among the sequences in it (the
``charges``): overheads and the weights' bytes equally, each sequence's own KV
bytes and FLOPs to it. Summed over a request's steps that is the GPU time it
caused, which the evaluation's per-request oracle needs; summed over all
requests it is the engine's busy time exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from draftgate.emulator.profile import EngineProfile, ModelShape


@dataclass(frozen=True)
class Work:
    """One sequence's part of a step."""

    context: int  # tokens already in its KV cache
    new_tokens: int  # tokens through the target this step: 1 + draft length, or the uncached prompt
    draft_len: int = 0  # draft tokens proposed by a model drafter this step
    draft_prefill: int = 0  # prompt tokens the draft model must prefill this step


@dataclass(frozen=True)
class StepTime:
    seconds: float
    charges: list[float]  # per Work, in order; sums to ``seconds``


def _pass(shape: ModelShape, work: Sequence[tuple[int, int]], bandwidth: float, flops: float,
          attention_heads: int | None = None) -> tuple[float, list[float]]:
    """One forward pass of ``shape`` over sequences given as (context, tokens): its roofline
    time and each sequence's share of it (the weights' bytes split evenly)."""
    if not work:
        return 0.0, []
    heads = attention_heads if attention_heads is not None else shape.q_heads
    weights = shape.weight_bytes / len(work)
    own_bytes, own_flops = [], []
    for context, tokens in work:
        own_bytes.append(weights + (context + tokens) * shape.kv_bytes_per_token)
        # QK^T and AV over the context (and the causal half of the new tokens), 2 FLOPs each
        attention = 4 * shape.layers * heads * shape.head_dim * tokens * (context + tokens / 2)
        own_flops.append(2 * shape.params * tokens + attention)
    memory_time, compute_time = sum(own_bytes) / bandwidth, sum(own_flops) / flops
    seconds = max(memory_time, compute_time)
    binding = own_bytes if memory_time >= compute_time else own_flops
    total = sum(binding)
    return seconds, [seconds * b / total for b in binding]


def step_time(profile: EngineProfile, works: Sequence[Work], method: str | None, depth: int) -> StepTime:
    """GPU seconds of one engine step over ``works`` (decodes and prefills together, as
    vLLM's chunked prefill schedules them), on a server drafting with ``method`` at ``depth``."""
    n = len(works)
    if n == 0:
        return StepTime(0.0, [])
    gpu, target = profile.gpu, profile.target
    bandwidth = gpu.hbm_bytes_per_second * profile.efficiency.target_bandwidth
    flops = gpu.bf16_flops * profile.efficiency.compute
    seconds, charges = _pass(target, [(w.context, w.new_tokens) for w in works], bandwidth, flops)
    overhead = profile.efficiency.step_overhead_seconds
    drafter = profile.drafter(method) if method is not None else None
    model = drafter.shape if drafter is not None else None  # None: no drafter, or a lookup
    draft_bandwidth = gpu.hbm_bytes_per_second * drafter.bandwidth_efficiency if drafter is not None else 0.0
    drafting = [i for i, w in enumerate(works) if w.draft_len > 0]
    if drafter is not None and drafting:
        overhead += profile.efficiency.spec_round_overhead_seconds
        if model is None:
            overhead += drafter.pass_overhead_seconds  # a lookup in the prompt: no GPU pass
        # a model drafter runs one pass per draft position, each over the sequences still drafting
        for position in range(max(works[i].draft_len for i in drafting) if model is not None else 0):
            still = [i for i in drafting if works[i].draft_len > position]
            pass_seconds, shares = _pass(model, [(works[i].context + position, 1) for i in still],
                                         draft_bandwidth, flops, drafter.attention_heads)
            seconds += pass_seconds + drafter.pass_overhead_seconds
            for i, share in zip(still, shares):
                charges[i] += share + drafter.pass_overhead_seconds / len(still)
    prefilling = [i for i, w in enumerate(works) if w.draft_prefill > 0]
    if model is not None and drafter is not None and prefilling:
        pre_seconds, shares = _pass(model, [(works[i].context, works[i].draft_prefill) for i in prefilling],
                                    draft_bandwidth, flops, drafter.attention_heads)
        seconds += pre_seconds
        for i, share in zip(prefilling, shares):
            charges[i] += share
    seconds += overhead
    charges = [c + overhead / n for c in charges]
    return StepTime(seconds, charges)
