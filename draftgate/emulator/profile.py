"""What an emulated server is: the GPU, the target, its drafters, and how predictable output is.

Every constant is a hardware or model fact with its source beside it, or an
assumption said to be one. Nothing here comes from the gate: the gate's
``c_T(b)``, ``delta(b)`` and ``d`` are approximations of what these facts imply,
which calibration has to find by measuring. ``EngineProfile.random(seed)``
draws the uncertain figures (efficiencies, overheads, predictability,
alignment) around their values, so nothing is tuned to one setting; the facts
(bandwidth, FLOPs, parameter counts, layer shapes) stay as published.

A profile is data (YAML-loadable): ``draftgate emulate --profile FILE``.
"""

from __future__ import annotations

import random
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Gpu(_Frozen):
    """NVIDIA H200 SXM, from NVIDIA's H200 datasheet: 141 GB of HBM3e at 4.8 TB/s,
    989 TFLOPS dense BF16 (1,979 is the figure with structured sparsity)."""

    name: str = "H200 SXM"
    memory_bytes: float = 141e9
    hbm_bytes_per_second: float = 4.8e12
    bf16_flops: float = 989e12


class ModelShape(_Frozen):
    """What a pass of a model moves and computes. BF16 weights: two bytes a parameter."""

    name: str
    params: float
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int

    @property
    def weight_bytes(self) -> float:
        return 2.0 * self.params

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V, each ``kv_heads * head_dim`` BF16 values, in every layer."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * 2


# Qwen3 model cards and config.json: Qwen3-32B has 32.8B parameters, 64 layers, 64 query
# and 8 KV heads of dimension 128; Qwen3-4B has 4.0B, 36 layers, 32 query and 8 KV heads of 128.
QWEN3_32B = ModelShape(name="Qwen/Qwen3-32B", params=32.8e9, layers=64, q_heads=64, kv_heads=8, head_dim=128)
QWEN3_4B = ModelShape(name="Qwen/Qwen3-4B", params=4.0e9, layers=36, q_heads=32, kv_heads=8, head_dim=128)
# An EAGLE-3 head for a 32B target: one decoder layer at the target's width (5120) plus the
# LM head over Qwen3's 151,936-token vocabulary, about 0.45B + 0.78B parameters (EAGLE-3
# paper's architecture; the exact count varies by release). Its KV is one layer's.
EAGLE3_HEAD = ModelShape(name="EAGLE-3 head", params=1.2e9, layers=1, q_heads=64, kv_heads=8, head_dim=128)


class Drafter(_Frozen):
    """One speculation method: what proposing a token costs, and how often it is right."""

    shape: ModelShape | None = Field(None, description="a drafting model; None for a lookup (ngram, suffix)")
    bandwidth_efficiency: float = Field(0.5, gt=0, le=1, description="a small model's kernels use HBM worse")
    pass_overhead_seconds: float = Field(0.0004, ge=0, description="launch cost of one draft pass, or one lookup")
    attention_heads: int | None = None
    misalignment: float = Field(1.0, ge=0, description="sd of the drafter's logit noise against the target's")


class Efficiency(_Frozen):
    """How much of the GPU's peak a serving engine gets, and its fixed costs. Assumptions,
    in the ranges vLLM's own profiling reports: large-GEMV decode at 75-85% of HBM peak,
    prefill GEMMs at 50-65% of BF16 peak, 1-2 ms of scheduling and sampling a step."""

    target_bandwidth: float = Field(0.8, gt=0, le=1)
    compute: float = Field(0.6, gt=0, le=1)
    step_overhead_seconds: float = Field(0.0015, ge=0)
    spec_round_overhead_seconds: float = Field(0.0005, ge=0, description="proposer bookkeeping, rejection sampler")
    memory_utilization: float = Field(0.9, gt=0, le=1, description="vLLM's --gpu-memory-utilization default")
    activation_reserve_bytes: float = Field(4e9, ge=0)


# Mean next-token entropy of the target, nats, by what the token is. Published figures
# are scarce and named where used (docs/emulator.md): under a grammar the JSON syntax and
# the keys of a schema are forced or nearly so; a value the prompt states is copied; free
# text inside a string is as open as prose; reasoning is more predictable than chat prose
# (it restates the question and follows set phrasings); code sits between.
DEFAULT_ENTROPY = {
    "syntax": 0.03,  # JSON punctuation and keys
    "enum": 0.25,  # a choice among a schema's listed values
    "number": 0.6,
    "copied": 0.08,  # a value the prompt states (a city, a path, an id)
    "text": 1.1,  # free text inside a string value (a message body, a file's content)
    "reasoning": 0.7,
    "prose": 1.1,
    "code": 0.55,
}
KINDS = tuple(DEFAULT_ENTROPY)


class Lengths(_Frozen):
    """How long the emulated model's answers are, in tokens (means), where the request does not fix it."""

    prose: float = 150.0
    prose_after_tool: float = 70.0
    reasoning_default: float = 800.0
    reasoning_low: float = 250.0
    reasoning_medium: float = 800.0
    reasoning_high: float = 2200.0
    free_text_value: float = 90.0  # a message body or a file's content inside a tool call
    spread: float = Field(0.35, ge=0.0, le=2.0, description="sd of log-length")


class Repeats(_Frozen):
    """How often prose repeats a run of its conversation verbatim: real answers quote the question,
    restate earlier turns and reuse their own phrases, which is all a lookup drafter can copy. Set so
    that vLLM's ngram proposer (lookup 2-4, depth 4) accepts on the emulator's answers about what it
    accepts on ShareGPT's real ones (`draftgate measure-ngram`: 0.13 of first-turn tokens, 0.21 of
    later turns'); a model drafter sees such runs as the prose they are."""

    sentence: float = Field(0.15, ge=0.0, le=1.0, description="chance a sentence is a repeated run, short context")
    with_context: float = Field(0.3, ge=0.0, le=1.0,
                                description="added chance once the conversation holds ~400 words")
    run_words: tuple[int, int] = (4, 12)


class EngineProfile(_Frozen):
    """Everything that decides timing, capacity and acceptance of one server."""

    gpu: Gpu = Gpu()
    target: ModelShape = QWEN3_32B
    drafters: dict[str, Drafter] = Field(default_factory=lambda: {
        "draft_model": Drafter(shape=QWEN3_4B, bandwidth_efficiency=0.5, misalignment=1.0),
        # EAGLE-style heads see the target's hidden states: better aligned than a separate model
        "eagle": Drafter(shape=EAGLE3_HEAD, bandwidth_efficiency=0.45, misalignment=0.8),
        # a prompt lookup proposes what followed the last tokens where they occurred before
        "ngram": Drafter(shape=None, pass_overhead_seconds=0.0001, misalignment=0.0),
    })
    efficiency: Efficiency = Efficiency()
    block_size: int = Field(16, ge=1)
    # vLLM's defaults for its API server on a GPU of 70 GiB or more (not an A100): an H200's
    max_num_seqs: int = Field(1024, ge=1)
    max_num_batched_tokens: int = Field(8192, ge=1, description="tokens one step schedules: decodes, their "
                                                                "drafts and prefill chunks")
    # Acceptance: emerges from target and draft distributions, never from the law.
    entropy: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_ENTROPY))
    entropy_spread: float = Field(0.6, ge=0.0, description="sd of log-entropy along a span")
    entropy_correlation: float = Field(0.9, ge=0.0, lt=1.0, description="AR(1) coefficient along a span")
    candidates: int = Field(16, ge=2, le=256, description="vocabulary slice each position is drawn over")
    # Behaviour.
    lengths: Lengths = Lengths()
    repeats: Repeats = Repeats()
    auto_call_probability: float = Field(0.8, ge=0.0, le=1.0)
    auto_call_probability_after_tool: float = Field(0.4, ge=0.0, le=1.0)
    thinking_by_default: bool = Field(True, description="Qwen3's template thinks unless told enable_thinking: false")
    speculation_blocked_by: list[str] = Field(
        default_factory=lambda: ["penalties", "min_p", "logprobs"],
        description="sampling settings run without speculation (older V1 engines); [] as in vLLM 0.33",
    )
    generation_defaults: dict[str, float] = Field(
        default_factory=lambda: {"temperature": 0.6, "top_p": 0.95, "top_k": 20}  # Qwen3's generation_config.json
    )

    def drafter(self, method: str) -> Drafter:
        """The drafter behind a ``--speculative-config`` method (eagle3 and mtp draft as EAGLE heads,
        suffix as a lookup)."""
        family = {"eagle3": "eagle", "mtp": "eagle", "medusa": "eagle", "suffix": "ngram"}.get(method, method)
        return self.drafters.get(family) or self.drafters["draft_model"]

    def kv_capacity_tokens(self, method: str | None) -> int:
        """KV tokens the server holds: memory under the utilisation cap, less weights and a
        reserve for activations, over the KV bytes a token takes (the draft model's too)."""
        free = self.gpu.memory_bytes * self.efficiency.memory_utilization - self.efficiency.activation_reserve_bytes
        free -= self.target.weight_bytes
        per_token = self.target.kv_bytes_per_token
        shape = self.drafter(method).shape if method else None
        if shape is not None:
            free -= shape.weight_bytes
            per_token += shape.kv_bytes_per_token
        return max(1024, int(free / per_token))

    @classmethod
    def load(cls, path: str | Path) -> EngineProfile:
        return cls.model_validate(yaml.safe_load(Path(path).read_text()) or {})

    @classmethod
    def random(cls, seed: int) -> EngineProfile:
        """The uncertain figures drawn around their values from ``seed``; the facts kept."""
        rng = random.Random(seed)
        base = cls()

        def around(value: float, spread: float = 0.25) -> float:
            return value * rng.lognormvariate(0.0, spread)

        drafters = {name: d.model_copy(update={
            "bandwidth_efficiency": min(1.0, around(d.bandwidth_efficiency, 0.15)),
            "pass_overhead_seconds": around(d.pass_overhead_seconds, 0.3),
            "misalignment": around(d.misalignment, 0.2)}) for name, d in base.drafters.items()}
        efficiency = base.efficiency.model_copy(update={
            "target_bandwidth": min(0.95, around(0.8, 0.06)), "compute": min(0.8, around(0.6, 0.12)),
            "step_overhead_seconds": around(0.0015, 0.3), "spec_round_overhead_seconds": around(0.0005, 0.3)})
        return cls(
            drafters=drafters,
            efficiency=efficiency,
            entropy={kind: around(value, 0.3) for kind, value in DEFAULT_ENTROPY.items()},
            entropy_spread=rng.uniform(0.3, 0.8),
            entropy_correlation=rng.uniform(0.7, 0.95),
            lengths=Lengths(prose=rng.uniform(90, 220), prose_after_tool=rng.uniform(40, 100),
                            free_text_value=rng.uniform(60, 140)),
            auto_call_probability=rng.uniform(0.6, 0.9),
        )
