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
from typing import Any

import yaml
from pydantic import Field, field_validator

from draftgate.emulator.hardware import DEFAULT, Catalogue, Frozen, Gpu, ModelShape


class Drafter(Frozen):
    """One speculation method: what proposing a token costs, and how often it is right."""

    shape: ModelShape | None = Field(None, description="a drafting model; None for a lookup (ngram, suffix)")
    bandwidth_efficiency: float = Field(0.5, gt=0, le=1, description="a small model's kernels use HBM worse")
    pass_overhead_seconds: float = Field(
        0.0003, ge=0, description="a model drafter: one pass's launch and bookkeeping; a lookup: its CPU work a step")
    lookup_seconds_per_sequence: float = Field(3e-6, ge=0, description="a lookup's CPU work per drafting sequence")
    misalignment: float = Field(1.0, ge=0, description="sd of the drafter's logit noise against the target's")


class Efficiency(Frozen):
    """How much of the GPU a serving engine gets, and what it spends beside the GPU's arithmetic.
    Assumptions, each with its range and its effect in docs/emulator.md; ``EngineProfile.random``
    draws them around these values."""

    target_bandwidth: float = Field(0.8, gt=0, le=1, description="weight streaming (GEMV) at small batch")
    compute: float = Field(0.6, gt=0, le=1, description="GEMMs at large batch, share of dense BF16 peak")
    attention_compute: float = Field(0.5, gt=0, le=1, description="FlashAttention prefill, share of peak")
    attention_bandwidth: float = Field(0.7, gt=0, le=1, description="paged KV reads of decode attention")
    link: float = Field(0.7, gt=0, le=1, description="all-reduce bus bandwidth, share of NVLink's")
    allreduce_latency_seconds: float = Field(10e-6, ge=0, description="one all-reduce of a small message")
    gpu_step_overhead_seconds: float = Field(0.0003, ge=0, description="graph launch, norms, small kernels")
    spec_round_overhead_seconds: float = Field(0.0002, ge=0, description="the rejection sampler's fixed kernels")
    cpu_step_seconds: float = Field(0.0012, ge=0, description="scheduling, input preparation, output processing")
    cpu_per_sequence_seconds: float = Field(12e-6, ge=0, description="the same, per running sequence")
    piecewise_layer_seconds: float = Field(20e-6, ge=0, description="attention launched outside a CUDA graph")
    eager_layer_seconds: float = Field(80e-6, ge=0, description="a layer's kernels launched with no CUDA graph")
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


class Lengths(Frozen):
    """How long the emulated model's answers are, in tokens (means), where the request does not fix it."""

    prose: float = 150.0
    prose_after_tool: float = 70.0
    reasoning_default: float = 800.0
    reasoning_low: float = 250.0
    reasoning_medium: float = 800.0
    reasoning_high: float = 2200.0
    free_text_value: float = 90.0  # a message body or a file's content inside a tool call
    spread: float = Field(0.35, ge=0.0, le=2.0, description="sd of log-length")


class Repeats(Frozen):
    """How often prose repeats a run of its conversation verbatim: real answers quote the question,
    restate earlier turns and reuse their own phrases, which is all a lookup drafter can copy. Set so
    that vLLM's ngram proposer (lookup 2-4, depth 4) accepts on the emulator's answers about what it
    accepts on ShareGPT's real ones (`draftgate measure-ngram`: 0.13 of first-turn tokens, 0.21 of
    later turns'); a model drafter sees such runs as the prose they are."""

    sentence: float = Field(0.15, ge=0.0, le=1.0, description="chance a sentence is a repeated run, short context")
    with_context: float = Field(0.3, ge=0.0, le=1.0,
                                description="added chance once the conversation holds ~400 words")
    run_words: tuple[int, int] = (4, 12)


class EngineProfile(Frozen):
    """Everything that decides timing, capacity and acceptance of one server."""

    gpu: Gpu = DEFAULT.gpu("H200")
    target: ModelShape = DEFAULT.model("Qwen/Qwen3-32B")
    tensor_parallel_size: int = Field(1, description="GPUs the target (and its drafter) is split over: 1, 2, 4 or 8")
    drafters: dict[str, Drafter] = Field(default_factory=lambda: drafters_for(DEFAULT.model("Qwen/Qwen3-32B")))
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
        family = _family(method)
        found = self.drafters.get(family)
        if found is None:
            raise ValueError(f"no {family} drafter for {self.target.name}: name one in the catalogue's drafters")
        return found

    @field_validator("tensor_parallel_size")
    @classmethod
    def _power_of_two(cls, tp: int) -> int:
        if tp not in (1, 2, 4, 8):
            raise ValueError("tensor_parallel_size must be 1, 2, 4 or 8")
        return tp

    def kv_capacity_tokens(self, method: str | None) -> int:
        """KV tokens the server holds: each GPU's memory under the utilisation cap, less its share of
        the weights (the drafter's too) and a reserve for activations, over its share of the KV a
        token takes. KV heads split over the GPUs, and are copied where there are fewer than GPUs.
        Raises ``ValueError`` when the weights leave no room."""
        tp = self.tensor_parallel_size
        free = self.gpu.memory_bytes * self.efficiency.memory_utilization - self.efficiency.activation_reserve_bytes
        free -= self.target.weight_bytes / tp
        per_token = self.target.kv_bytes_per_token / min(tp, self.target.kv_heads)
        shape = self.drafter(method).shape if method else None
        if shape is not None:
            free -= shape.weight_bytes / tp
            per_token += shape.kv_bytes_per_token / min(tp, shape.kv_heads)
        tokens = int(free / per_token) if free > 0 else 0
        if tokens < self.block_size * 64:
            what = self.target.name + (f" and {shape.name}" if shape is not None else "")
            raise ValueError(
                f"{what} at tensor parallel size {tp} leave{'s' if shape is None else ''} "
                f"{max(0.0, free) / 1e9:.1f} GB for KV cache on each {self.gpu.name} "
                f"({self.gpu.memory_bytes / 1e9:.0f} GB): too little to serve; use more GPUs per replica")
        return tokens

    def with_drafter(self, method: str, name: str | None, catalogue: Catalogue = DEFAULT) -> EngineProfile:
        """This profile drafting for ``method`` with the model ``name`` (a --speculative-config's
        ``model``) where the catalogue holds it and it is not already the drafter; a lookup, or no
        name, leaves it as it is. Raises ``UnknownName`` for a model the catalogue does not hold."""
        drafter = self.drafter(method)
        if name is None or drafter.shape is None or drafter.shape.name == name:
            return self
        shaped = drafter.model_copy(update={"shape": catalogue.model(name)})
        return self.model_copy(update={"drafters": {**self.drafters, _family(method): shaped}})

    @classmethod
    def build(cls, gpu: str, model: str, tensor_parallel_size: int = 1, catalogue: Catalogue = DEFAULT,
              **fields: object) -> EngineProfile:
        """A profile for ``model`` on ``gpu`` at ``tensor_parallel_size``, with the drafters the
        catalogue names for that model; ``fields`` set any other field."""
        target = catalogue.model(model)
        return cls.model_validate({"gpu": catalogue.gpu(gpu), "target": target,
                                   "tensor_parallel_size": tensor_parallel_size,
                                   "drafters": drafters_for(target, catalogue), **fields})

    @classmethod
    def load(cls, path: str | Path, gpu: str | None = None, model: str | None = None,
             tensor_parallel_size: int | None = None) -> EngineProfile:
        """A profile file: any of this model's fields, with ``gpu`` and ``target`` given whole or by
        catalogue name, and ``gpus`` and ``models`` entries that extend the catalogue. The
        arguments, when given, name the GPU, the model and the tensor parallelism over the file's."""
        return cls.from_mapping(read_profile_file(path), gpu, model, tensor_parallel_size)

    @classmethod
    def from_mapping(cls, raw: dict[str, Any], gpu: str | None = None, model: str | None = None,
                     tensor_parallel_size: int | None = None) -> EngineProfile:
        """``load``'s work on a mapping already read."""
        fields = dict(raw)
        catalogue = Catalogue.load({"gpus": fields.pop("gpus", None), "models": fields.pop("models", None)})
        gpu = gpu or _named(fields, "gpu")
        model = model or _named(fields, "target")
        if gpu is not None:
            fields["gpu"] = catalogue.gpu(gpu)
        if model is not None:
            target = catalogue.model(model)
            fields["target"] = target
            fields.setdefault("drafters", drafters_for(target, catalogue))
        if tensor_parallel_size is not None:
            fields["tensor_parallel_size"] = tensor_parallel_size
        return cls.model_validate(fields)

    @classmethod
    def random(cls, seed: int, base: EngineProfile | None = None) -> EngineProfile:
        """The uncertain figures drawn around ``base``'s (the default profile's) from ``seed``;
        the facts (GPU, model shapes, tensor parallelism) kept."""
        rng = random.Random(seed)
        base = base or cls()

        def around(value: float, spread: float = 0.25) -> float:
            return value * rng.lognormvariate(0.0, spread)

        drafters = {name: d.model_copy(update={
            "bandwidth_efficiency": min(1.0, around(d.bandwidth_efficiency, 0.15)),
            "pass_overhead_seconds": around(d.pass_overhead_seconds, 0.3),
            "misalignment": around(d.misalignment, 0.2)}) for name, d in base.drafters.items()}
        e = base.efficiency
        efficiency = e.model_copy(update={
            "target_bandwidth": min(0.95, around(e.target_bandwidth, 0.06)),
            "compute": min(0.8, around(e.compute, 0.12)),
            "cpu_step_seconds": around(e.cpu_step_seconds, 0.3),
            "spec_round_overhead_seconds": around(e.spec_round_overhead_seconds, 0.3)})
        # the rest from a stream of their own: a seed's draws above and below do not depend on
        # how many figures the profile has
        more = random.Random(f"{seed}:more")
        efficiency = efficiency.model_copy(update={
            name: min(cap, value * more.lognormvariate(0.0, spread)) for name, value, spread, cap in (
                ("attention_compute", e.attention_compute, 0.12, 0.8),
                ("attention_bandwidth", e.attention_bandwidth, 0.1, 0.95),
                ("link", e.link, 0.1, 0.95),
                ("allreduce_latency_seconds", e.allreduce_latency_seconds, 0.3, 1.0),
                ("gpu_step_overhead_seconds", e.gpu_step_overhead_seconds, 0.3, 1.0),
                ("cpu_per_sequence_seconds", e.cpu_per_sequence_seconds, 0.3, 1.0))})
        return base.model_copy(update=dict(
            drafters=drafters,
            efficiency=efficiency,
            entropy={kind: around(value, 0.3) for kind, value in DEFAULT_ENTROPY.items()},
            entropy_spread=rng.uniform(0.3, 0.8),
            entropy_correlation=rng.uniform(0.7, 0.95),
            lengths=Lengths(prose=rng.uniform(90, 220), prose_after_tool=rng.uniform(40, 100),
                            free_text_value=rng.uniform(60, 140)),
            auto_call_probability=rng.uniform(0.6, 0.9),
        ))


def _family(method: str) -> str:
    """The drafter family (a key of ``EngineProfile.drafters``) a speculation method drafts with."""
    return {"eagle3": "eagle", "mtp": "eagle", "medusa": "eagle", "ngram": "ngram",
            "suffix": "ngram"}.get(method, "draft_model")


def _named(fields: dict[str, Any], key: str) -> str | None:
    """``fields[key]`` taken out where it names a catalogue entry (a string) rather than giving it whole."""
    return fields.pop(key) if isinstance(fields.get(key), str) else None


def read_profile_file(path: str | Path) -> dict[str, Any]:
    """A profile file's mapping; ``ValueError`` (``OSError`` for a missing file) saying what is wrong."""
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a profile file is a YAML mapping")
    return raw


def drafters_for(target: ModelShape, catalogue: Catalogue = DEFAULT) -> dict[str, Drafter]:
    """The drafters deployed for ``target``: the catalogue's draft model and EAGLE-3 head for it,
    and a prompt lookup."""
    def shape(family: str) -> ModelShape | None:
        name = target.drafters.get(family)
        return catalogue.model(name) if name else None

    drafters = {}  # in this order: ``random`` draws each one's figures in turn
    if (draft := shape("draft_model")) is not None:
        drafters["draft_model"] = Drafter(shape=draft, bandwidth_efficiency=0.5, misalignment=1.0)
    if (head := shape("eagle")) is not None:
        # EAGLE-style heads see the target's hidden states: better aligned than a separate model.
        # Its one layer is as wide as the target's, so its GEMVs stream as well as the target's do.
        drafters["eagle"] = Drafter(shape=head, bandwidth_efficiency=0.75, misalignment=0.8)
    # a prompt lookup proposes what followed the last tokens where they occurred before
    drafters["ngram"] = Drafter(shape=None, pass_overhead_seconds=0.0001, misalignment=0.0)
    return drafters
