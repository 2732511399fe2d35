"""How long one engine step takes on a tensor-parallel group of GPUs, from hardware and model facts.

A step is the work vLLM launches for it, kernel by kernel, each priced by what
bounds it:

- the target's linear layers (GEMMs): every weight streamed once and two FLOPs
  per parameter per token in flight, whichever is slower (a roofline), the
  tokens padded to the CUDA graph the step runs in;
- attention as its own kernels: a prefill chunk at FlashAttention's share of
  peak FLOPs, a decoding sequence (and its draft under verification) bound by
  reading its KV cache. A mixed step runs both, so the short answers decoding
  beside a long prefill pay for their KV reads on top of the prefill's
  arithmetic rather than hiding under it;
- with tensor parallelism, two all-reduces a layer of the step's activations
  over NVLink, each with its latency; weights, KV heads and FLOPs split over the
  GPUs;
- sampling over the vocabulary at every sampled position and, on a speculation
  step, the rejection sampler over every drafted one;
- a model drafter's passes: the first over every token the target ran this
  step (it reads their hidden states: the verified tokens, and prompt chunks
  being prefilled), then one token per drafting sequence for each further draft
  position, each pass with the drafter's own all-reduces and its launch;
- the CPU's work (scheduling, input preparation, kernel launches a CUDA graph
  does not cover). vLLM's async scheduling overlaps it with the GPU's for plain
  and EAGLE/MTP steps, so a step takes the longer of the two; ngram, suffix and
  draft-model speculation run synchronously, so there it adds.

Nothing here knows speculative decoding's law: a speculation round is more
work, and how much more follows from the batch, the contexts and the hardware.
Why speculation's gain shrinks as batches grow is then no curve but these
mechanisms: verification's extra tokens turn the GEMMs compute-bound at a
smaller batch than plain decoding does, the drafter's first pass and the
rejection sampler grow with the tokens verified, and its further passes with
the sequences drafting.

Every step's time is also shared out among the sequences in it (the
``charges``): fixed costs and weights streamed evenly, each sequence's tokens,
KV and attention to it. Summed over a request's steps that is the GPU time it
caused; summed over all requests it is the engine's busy time exactly. Shares
are linear in a sequence's tokens, prefill work and KV read, so a pass costs a
few sums over its sequences, and a drafter's further passes the same sums per
draft length: the evaluation runs millions of steps, and this is most of its
time (``bench/bench_simulation.py``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from draftgate.emulator.hardware import Gpu, ModelShape
from draftgate.emulator.profile import Efficiency, EngineProfile

# vLLM's sampler works in FP32 logits: temperature, top-k/top-p and the draw read and write them
# a few times; the rejection sampler reads the target's and the drafter's probabilities.
_LOGIT_BYTES = 4
_SAMPLING_PASSES = 3
_REJECTION_PASSES = 2
# drafting methods vLLM runs with async scheduling (PR 31998: EAGLE and MTP; the others synchronously)
_ASYNC_METHODS = frozenset({"eagle", "eagle3", "mtp", "medusa"})


@dataclass(slots=True)
class Work:
    """One sequence's part of a step."""

    context: int  # tokens already in its KV cache
    new_tokens: int  # tokens through the target this step: 1 + draft length, or the uncached prompt
    draft_len: int = 0  # draft tokens proposed this step
    draft_prefill: int = 0  # prompt tokens a model drafter must also run this step

    @property
    def decoding(self) -> bool:
        return self.new_tokens == 1 + self.draft_len


@dataclass(frozen=True, slots=True)
class StepTime:
    seconds: float
    charges: list[float]  # per Work, in order; sums to ``seconds``


@dataclass(frozen=True, slots=True)
class _Model:
    """What a pass of one model costs on one GPU of its tensor-parallel group, per unit of work."""

    weights: float  # seconds to stream its share of the weights
    per_token: float  # seconds of linear-layer arithmetic per token, compute-bound
    per_kv_token: float  # seconds to read one token of context's KV in every layer
    per_attention: float  # seconds of prefill attention per query token per context token
    allreduce_fixed: float  # a pass's all-reduce latencies (0 on one GPU)
    allreduce_per_token: float  # a pass's all-reduce transfer, per token
    layers: int


def _model(shape: ModelShape, gpu: Gpu, efficiency: Efficiency, tp: int, weight_bandwidth: float) -> _Model:
    flops = gpu.bf16_flops * efficiency.compute
    allreduces = 2 * shape.layers if tp > 1 else 0
    # a ring all-reduce moves 2 (tp - 1) / tp of the message through each GPU's link
    link = gpu.link_bytes_per_second * efficiency.link
    return _Model(
        weights=shape.weight_bytes / tp / (gpu.hbm_bytes_per_second * weight_bandwidth),
        per_token=2.0 * shape.params / tp / flops,
        per_kv_token=shape.kv_bytes_per_token / min(tp, shape.kv_heads)
        / (gpu.hbm_bytes_per_second * efficiency.attention_bandwidth),
        per_attention=4.0 * shape.layers * shape.q_heads * shape.head_dim / tp
        / (gpu.bf16_flops * efficiency.attention_compute),
        allreduce_fixed=allreduces * efficiency.allreduce_latency_seconds,
        allreduce_per_token=allreduces * shape.hidden * 2.0 * 2.0 * (tp - 1) / tp / link,
        layers=shape.layers,
    )


@dataclass(slots=True)
class _Cost:
    """A pass's seconds and how they split: ``each`` per sequence, ``token`` per token, ``attention``
    per unit of prefill work, ``kv`` per token of KV read."""

    seconds: float
    each: float
    token: float
    attention: float
    kv: float


def _pass(m: _Model, n: int, tokens: float, padded: float, prefill_work: float, kv_read: float) -> _Cost:
    """One pass over ``n`` sequences: its GEMMs' roofline over ``padded`` tokens, attention
    (prefill arithmetic and KV reads, one after the other), and its all-reduces."""
    memory, compute = m.weights, m.per_token * padded
    each, token = (memory / n, 0.0) if memory >= compute else (0.0, compute / tokens)
    each += m.allreduce_fixed / n
    token += m.allreduce_per_token
    seconds = (max(memory, compute) + m.allreduce_fixed + m.allreduce_per_token * tokens
               + m.per_attention * prefill_work + m.per_kv_token * kv_read)
    return _Cost(seconds, each, token, m.per_attention, m.per_kv_token)


def gemm_seconds(gpu: Gpu, efficiency: Efficiency, n: int, k: int, tokens: int) -> float:
    """One BF16 GEMM of an ``n`` x ``k`` weight over ``tokens`` rows, on the roofline ``_pass`` prices a
    model's linear layers by: the weight streamed once, or two FLOPs a weight a token, whichever is
    slower. Held against published kernel timings in ``bench/emulator_vs_published.py``."""
    streamed = 2.0 * n * k / (gpu.hbm_bytes_per_second * efficiency.target_bandwidth)
    return max(streamed, 2.0 * n * k * tokens / (gpu.bf16_flops * efficiency.compute))


def capture_sizes(max_size: int) -> list[int]:
    """The batch sizes vLLM captures CUDA graphs for by default: 1, 2, 4, then every 8 to 256,
    then every 16 up to the largest (``max_cudagraph_capture_size``)."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    return [s for s in sizes if s <= max_size] or [max_size]


class Physics:
    """One server's step times: the target and its drafter on its GPUs, worked out once."""

    def __init__(self, profile: EngineProfile, method: str | None, max_num_seqs: int | None = None) -> None:
        gpu, efficiency, tp = profile.gpu, profile.efficiency, profile.tensor_parallel_size
        self.efficiency = efficiency
        self.target = _model(profile.target, gpu, efficiency, tp, efficiency.target_bandwidth)
        self.sample_seconds = _LOGIT_BYTES * profile.target.vocab / (
            gpu.hbm_bytes_per_second * efficiency.target_bandwidth)
        self.drafter = profile.drafter(method) if method is not None else None
        self.draft = None if self.drafter is None or self.drafter.shape is None else _model(
            self.drafter.shape, gpu, efficiency, tp, self.drafter.bandwidth_efficiency)
        self.synchronous = method is not None and method not in _ASYNC_METHODS
        # vLLM captures graphs up to min(2 * max_num_seqs, 512) tokens; a speculation server's
        # uniform decode batches are captured by request count, each request 1 + K tokens
        seqs = max_num_seqs if max_num_seqs is not None else profile.max_num_seqs
        self.graphs = capture_sizes(min(2 * seqs, 512))
        self.decode_graphs = capture_sizes(min(seqs, 512)) if method is not None else self.graphs

    def step_time(self, works: Sequence[Work]) -> StepTime:
        """Seconds of one engine step over ``works`` (decodes and prefills together, as vLLM's
        chunked prefill schedules them), and each work's share of them."""
        n = len(works)
        if n == 0:
            return StepTime(0.0, [])
        e = self.efficiency
        tokens = prefill_work = kv_read = 0.0
        sampled = drafted = 0
        decode_only = True
        widest = narrowest = works[0].new_tokens
        for w in works:
            t = w.new_tokens
            if t > widest:
                widest = t
            elif t < narrowest:
                narrowest = t
            tokens += t
            kv_read += w.context + t
            if t == 1 + w.draft_len:  # decoding
                sampled += t
                drafted += w.draft_len
            else:
                decode_only = False
                prefill_work += t * (w.context + t / 2)
                sampled += 1
        # a model drafter always proposes K, so its decode batches are uniform; a lookup's are
        # where every sequence found as much to copy
        uniform = decode_only and (self.drafter is None or self.draft is not None or widest == narrowest)
        padded, launches = self._graph(n, tokens, uniform)
        cost = _pass(self.target, n, tokens, padded, prefill_work, kv_read)
        each = cost.each + e.gpu_step_overhead_seconds / n + sampled * _SAMPLING_PASSES * self.sample_seconds / n
        seconds = cost.seconds + e.gpu_step_overhead_seconds + sampled * _SAMPLING_PASSES * self.sample_seconds
        if drafted:
            rejection = e.spec_round_overhead_seconds + drafted * _REJECTION_PASSES * self.sample_seconds
            seconds += rejection
            each += rejection / n
        token, kv, attention = cost.token, cost.kv, cost.attention
        if decode_only:
            charges = [each + token * w.new_tokens + kv * (w.context + w.new_tokens) for w in works]
        else:
            charges = [each + token * w.new_tokens + kv * (w.context + w.new_tokens)
                       + (0.0 if w.decoding else attention * w.new_tokens * (w.context + w.new_tokens / 2))
                       for w in works]
        cpu = e.cpu_step_seconds + e.cpu_per_sequence_seconds * n + launches * self.target.layers
        if self.draft is not None:
            if drafted or any(w.draft_prefill for w in works):
                seconds += self._draft(works, charges)
        elif self.drafter is not None and drafted:  # a lookup: CPU work
            cpu += self.drafter.pass_overhead_seconds + self.drafter.lookup_seconds_per_sequence * sum(
                1 for w in works if w.draft_len)
        exposed = cpu if self.synchronous else max(0.0, cpu - seconds)
        if exposed:
            seconds += exposed
            share = exposed / n
            charges = [c + share for c in charges]
        return StepTime(seconds, charges)

    def _graph(self, n: int, tokens: float, uniform: bool) -> tuple[float, float]:
        """The tokens the step's GEMMs run (padded to its CUDA graph) and its launch cost a layer:
        a uniform decode step replays a full graph, padded by request count; any other up to the
        largest graph runs piecewise, its attention launched eagerly; past that, all of it is."""
        e = self.efficiency
        if uniform and n <= self.decode_graphs[-1]:
            return self.decode_graphs[bisect_left(self.decode_graphs, n)] * tokens / n, 0.0
        if tokens <= self.graphs[-1]:
            return float(self.graphs[bisect_left(self.graphs, tokens)]), e.piecewise_layer_seconds
        return tokens, e.eager_layer_seconds

    def _draft(self, works: Sequence[Work], charges: list[float]) -> float:
        """A model drafter's passes for this step, charged into ``charges``: the first over every
        token the target ran for a drafting or prefilling sequence, then one per further draft
        position over the sequences still drafting (their context grown by the position)."""
        m, drafter = self.draft, self.drafter
        assert m is not None and drafter is not None
        overhead = drafter.pass_overhead_seconds
        # the first pass
        first: list[tuple[int, Work, int]] = []
        tokens = kv_read = longest = 0
        prefill_work = 0.0
        for i, w in enumerate(works):
            if w.draft_len:
                t = w.new_tokens
                longest = max(longest, w.draft_len)
            elif w.draft_prefill:
                t = w.draft_prefill
                prefill_work += t * (w.context + t / 2)
            else:
                continue
            first.append((i, w, t))
            tokens += t
            kv_read += w.context + t
        cost = _pass(m, len(first), tokens, tokens, prefill_work, kv_read)
        seconds = cost.seconds + overhead
        for i, w, t in first:
            charges[i] += (cost.each + overhead / len(first) + cost.token * t + cost.kv * (w.context + t)
                           + (0.0 if w.draft_len else cost.attention * t * (w.context + t / 2)))
        # further positions: a sequence drafting d tokens is charged a[d] + b[d] * context
        if longest < 2:
            return seconds
        count = [0] * (longest + 1)
        summed = [0.0] * (longest + 1)
        for w in works:
            count[w.draft_len] += 1
            summed[w.draft_len] += w.context
        still, still_context = 0, 0.0
        passes: list[tuple[float, float]] = []
        for p in range(longest - 1, 0, -1):  # position p: sequences drafting more than p tokens
            still += count[p + 1]
            still_context += summed[p + 1]
            cost = _pass(m, still, still, still, 0.0, still_context + still * (p + 1))
            seconds += cost.seconds + overhead
            passes.append((cost.each + overhead / still + cost.token + cost.kv * (p + 1), cost.kv))
        passes.reverse()  # passes[p - 1] is position p
        a = [0.0] * (longest + 1)
        b = [0.0] * (longest + 1)
        for d in range(2, longest + 1):
            a[d] = a[d - 1] + passes[d - 2][0]
            b[d] = b[d - 1] + passes[d - 2][1]
        for i, w in enumerate(works):
            if w.draft_len >= 2:
                charges[i] += a[w.draft_len] + b[w.draft_len] * w.context
        return seconds


def step_time(profile: EngineProfile, works: Sequence[Work], method: str | None) -> StepTime:
    """Seconds of one engine step over ``works``, on a server of ``profile`` drafting with ``method``."""
    return Physics(profile, method).step_time(works)
