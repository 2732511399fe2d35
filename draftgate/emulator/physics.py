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
caused, which the evaluation's per-request figures need; summed over all
requests it is the engine's busy time exactly.

A pass's time and shares come from sums over its sequences, and a drafter's
passes (one per draft position, each over the sequences still drafting) from
the same sums taken per draft length: a step costs a few operations per
sequence, not one pass's worth per draft position. The evaluation runs
millions of steps, and this is most of its time (``bench/bench_simulation.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from draftgate.emulator.profile import Drafter, EngineProfile, ModelShape


@dataclass(frozen=True, slots=True)
class Work:
    """One sequence's part of a step."""

    context: int  # tokens already in its KV cache
    new_tokens: int  # tokens through the target this step: 1 + draft length, or the uncached prompt
    draft_len: int = 0  # draft tokens proposed by a model drafter this step
    draft_prefill: int = 0  # prompt tokens the draft model must prefill this step


@dataclass(frozen=True, slots=True)
class StepTime:
    seconds: float
    charges: list[float]  # per Work, in order; sums to ``seconds``


@dataclass(frozen=True, slots=True)
class _Model:
    """What a pass of one model on one GPU moves and computes, per unit."""

    weight_bytes: float
    kv_bytes: float  # per token of context
    flops_per_token: float  # two per parameter
    attention: float  # FLOPs per token per token of context: QK^T and AV, two each
    bandwidth: float  # bytes a second, as achieved
    flops: float  # FLOPs a second, as achieved


def _model(shape: ModelShape, bandwidth: float, flops: float, heads: int | None) -> _Model:
    return _Model(shape.weight_bytes, shape.kv_bytes_per_token, 2.0 * shape.params,
                  4.0 * shape.layers * (heads if heads is not None else shape.q_heads) * shape.head_dim,
                  bandwidth, flops)


def _pass(m: _Model, contexts: Sequence[float], tokens: Sequence[float]) -> tuple[float, list[float]]:
    """One forward pass over sequences given as (context, tokens): its roofline time and each
    sequence's share of it (the weights' bytes split evenly)."""
    n = len(contexts)
    if n == 0:
        return 0.0, []
    in_cache = sum(contexts) + sum(tokens)
    work = sum(t * (c + t / 2) for c, t in zip(contexts, tokens))
    total_bytes = m.weight_bytes + in_cache * m.kv_bytes
    total_flops = m.flops_per_token * sum(tokens) + m.attention * work
    memory, compute = total_bytes / m.bandwidth, total_flops / m.flops
    if memory >= compute:
        each, per = memory * m.weight_bytes / n / total_bytes, memory * m.kv_bytes / total_bytes
        return memory, [each + per * (c + t) for c, t in zip(contexts, tokens)]
    scale = compute / total_flops
    return compute, [scale * (m.flops_per_token * t + m.attention * t * (c + t / 2)) for c, t in zip(contexts, tokens)]


def _draft_passes(m: _Model, drafter: Drafter, contexts: list[int], lengths: list[int]) -> tuple[float, list[float]]:
    """A model drafter's passes, one per draft position, each over the sequences still drafting at it
    (their context grown by the position): the passes' time, and each sequence's share of it.

    A pass is a roofline over its sequences; a sequence's share is linear in its context, so it is
    taken per draft position as a coefficient pair and summed up to each sequence's draft length."""
    longest = max(lengths)
    count = [0] * (longest + 1)  # sequences drafting exactly d tokens
    summed = [0.0] * (longest + 1)  # their contexts
    for c, d in zip(contexts, lengths):
        count[d] += 1
        summed[d] += c
    seconds = 0.0
    overhead = drafter.pass_overhead_seconds
    a = [0.0] * (longest + 1)  # a sequence drafting d tokens is charged a[d] + b[d] * context
    b = [0.0] * (longest + 1)
    still, still_context = 0, 0.0
    passes: list[tuple[float, float]] = []
    for p in range(longest - 1, -1, -1):  # position p: sequences drafting more than p tokens
        still += count[p + 1]
        still_context += summed[p + 1]
        total_bytes = m.weight_bytes + (still_context + still * (p + 1)) * m.kv_bytes
        total_flops = m.flops_per_token * still + m.attention * (still_context + still * (p + 0.5))
        memory, compute = total_bytes / m.bandwidth, total_flops / m.flops
        if memory >= compute:
            pass_seconds = memory
            per = memory * m.kv_bytes / total_bytes
            constant = memory * m.weight_bytes / still / total_bytes + per * (p + 1)
        else:
            pass_seconds = compute
            per = compute * m.attention / total_flops
            constant = compute * m.flops_per_token / total_flops + per * (p + 0.5)
        seconds += pass_seconds + overhead
        passes.append((constant + overhead / still, per))
    passes.reverse()  # by position
    for d in range(1, longest + 1):
        a[d] = a[d - 1] + passes[d - 1][0]
        b[d] = b[d - 1] + passes[d - 1][1]
    return seconds, [a[d] + b[d] * c if d else 0.0 for c, d in zip(contexts, lengths)]


class Physics:
    """One server's step times: the target and its drafter on its GPU, worked out once."""

    def __init__(self, profile: EngineProfile, method: str | None) -> None:
        gpu, efficiency = profile.gpu, profile.efficiency
        flops = gpu.bf16_flops * efficiency.compute
        self.target = _model(profile.target, gpu.hbm_bytes_per_second * efficiency.target_bandwidth, flops, None)
        self.step_overhead = efficiency.step_overhead_seconds
        self.drafter = profile.drafter(method) if method is not None else None
        self.round_overhead = efficiency.spec_round_overhead_seconds
        if self.drafter is not None and self.drafter.shape is None:
            self.round_overhead += self.drafter.pass_overhead_seconds  # a lookup in the prompt: no GPU pass
        self.draft = None if self.drafter is None or self.drafter.shape is None else _model(
            self.drafter.shape, gpu.hbm_bytes_per_second * self.drafter.bandwidth_efficiency, flops,
            self.drafter.attention_heads)

    def step_time(self, works: Sequence[Work]) -> StepTime:
        """GPU seconds of one engine step over ``works`` (decodes and prefills together, as
        vLLM's chunked prefill schedules them)."""
        n = len(works)
        if n == 0:
            return StepTime(0.0, [])
        seconds, charges = _pass(self.target, [w.context for w in works], [w.new_tokens for w in works])
        overhead = self.step_overhead
        if self.drafter is not None:
            drafting = [i for i, w in enumerate(works) if w.draft_len > 0]
            if drafting:
                overhead += self.round_overhead
                if self.draft is not None:
                    passes, shares = _draft_passes(self.draft, self.drafter, [works[i].context for i in drafting],
                                                   [works[i].draft_len for i in drafting])
                    seconds += passes
                    for i, share in zip(drafting, shares):
                        charges[i] += share
            prefilling = [i for i, w in enumerate(works) if w.draft_prefill > 0]
            if self.draft is not None and prefilling:
                pre_seconds, shares = _pass(self.draft, [works[i].context for i in prefilling],
                                            [works[i].draft_prefill for i in prefilling])
                seconds += pre_seconds
                for i, share in zip(prefilling, shares):
                    charges[i] += share
        seconds += overhead
        each = overhead / n
        return StepTime(seconds, [c + each for c in charges])


def step_time(profile: EngineProfile, works: Sequence[Work], method: str | None) -> StepTime:
    """GPU seconds of one engine step over ``works``, on a server of ``profile`` drafting with ``method``."""
    return Physics(profile, method).step_time(works)
