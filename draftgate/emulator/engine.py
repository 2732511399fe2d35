"""One server's continuous-batching engine: what it schedules each step and what the step costs.

Each step schedules the running sequences first and then admits waiting ones,
as vLLM's V1 scheduler does, within a budget of ``max_num_batched_tokens``
tokens: a decoding sequence takes one token and its draft, a prefilling one a
chunk of its prompt (only what the prefix cache does not hold, plus the draft
model's own prefill on a speculation server). Admission also needs a free
sequence slot (``max_num_seqs``) and KV blocks for the chunk it prefills. KV
blocks are allocated as tokens are computed, with room for a speculation
step's draft ahead; when a running sequence needs a block and none is free,
the last admitted sequence is preempted, as vLLM's V1 scheduler does: its
blocks are freed and it waits again, to prefill its prompt and what it had
generated (recompute), the prefix cache holding what it can. What the
step costs comes from ``physics.step_time``: the GPU's bytes and FLOPs for the
tokens in flight, the drafter's passes, fixed overheads. On a speculation
server each decoding sequence emits its accepted draft prefix plus one token;
a prefill's last chunk emits the first token.

The engine has no clock of its own: ``step(now)`` plans a step starting at
``now`` and says how long it takes, ``finish(step, end)`` applies it. The HTTP
server paces steps in wall time (``pacing.py``); the evaluation runs many
engines on one simulated clock (``draftgate/evaluate/simulation.py``). Every
sequence carries its own account in simulated seconds (GPU time charged to it,
first token, last token), the ground truth the evaluation reads.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from draftgate.emulator.physics import Physics, Work
from draftgate.emulator.profile import KINDS, EngineProfile
from draftgate.emulator.speculation import PositionModel
from draftgate.emulator.textgen import OutputToken


@dataclass(frozen=True)
class SpecConfig:
    """The parts of vLLM's ``--speculative-config`` the emulator honours."""

    method: str
    num_speculative_tokens: int
    per_batch_size: tuple[tuple[int, int, int], ...] = ()
    draft_model: str | None = None
    # ngram's prompt_lookup_min and _max, as vLLM resolves them (5 and 5 when neither is given)
    lookup_min: int = 5
    lookup_max: int = 5

    def depth_at(self, batch: int) -> int:
        for lo, hi, k in self.per_batch_size:
            if lo <= batch <= hi:
                return k
        return self.num_speculative_tokens


@dataclass
class SpecStats:
    """Per-request speculation counts, the source of ``metrics.speculative_decoding``."""

    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    histogram: dict[int, list[int]] = field(default_factory=dict)  # draft length -> counts by accepted
    per_step_accepted: list[int] = field(default_factory=list)
    per_step_drafted: list[int] = field(default_factory=list)

    def record(self, draft_len: int, accepted: int, detailed: bool) -> None:
        """One round; ``detailed``: keep it in the per-step lists too (``--per-request-spec-decode-metrics
        detailed``)."""
        self.steps += 1
        self.drafted += draft_len
        self.accepted += accepted
        counts = self.histogram.get(draft_len)
        if counts is None:
            counts = self.histogram[draft_len] = [0] * (draft_len + 1)
        counts[accepted] += 1
        if detailed:
            self.per_step_accepted.append(accepted)
            self.per_step_drafted.append(draft_len)

    def as_json(self, detailed: bool) -> dict[str, Any]:
        longest = max(self.histogram, default=0)
        overall = [0] * (longest + 1)
        for counts in self.histogram.values():
            for i, c in enumerate(counts):
                overall[i] += c
        out: dict[str, Any] = {
            "mean_acceptance_length": 1.0 + self.accepted / self.steps if self.steps else 1.0,
            "draft_acceptance_rate": self.accepted / self.drafted if self.drafted else 0.0,
            "num_spec_steps": self.steps,
            "num_spec_tokens": self.drafted,
            "num_draft_tokens": self.drafted,
            "num_accepted_draft_tokens": self.accepted,
            "acceptance_histogram": overall,
            "acceptance_histogram_by_draft_length": {str(k): v for k, v in sorted(self.histogram.items())},
        }
        if detailed:
            out["per_step_accepted"] = list(self.per_step_accepted)
            out["per_step_drafted"] = list(self.per_step_drafted)
        return out


@dataclass(eq=False)
class Sequence:
    """One output sequence (a request with ``n`` choices has ``n``)."""

    prompt_len: int
    block_hashes: list[int]
    output: list[OutputToken]
    finish_reason: str
    temperature: float
    speculate: bool
    positions: PositionModel | None
    emitted: int = 0
    cached_tokens: int = 0
    cached_blocks: int = 0  # of its prompt's blocks, those the prefix cache held when it was admitted
    computed: int = 0  # prefill tokens in the KV cache: its prefill is done when this reaches prefill_len
    prefill_len: int = 0  # tokens to prefill: the prompt, and after a preemption what it had generated too
    kv_tokens: int = 0  # KV blocks allocated to it, in tokens
    preemptions: int = 0
    aborted: bool = False
    finished: bool = False
    spec: SpecStats = field(default_factory=SpecStats)
    # the ground truth, in simulated seconds
    gpu_seconds: float = 0.0
    arrived_at: float = 0.0
    first_token_sim: float | None = None
    last_token_sim: float | None = None
    draft_len: int = 0  # proposed for the step being run
    detailed: bool = False  # its speculation is reported round by round
    # the wall-clock side, kept by the paced server (``pacing.py``): its events and latency histograms
    events: asyncio.Queue[tuple[str, int, int]] | None = None
    arrival: float = 0.0
    first_token_at: float | None = None
    last_token_at: float | None = None

    def truth(self) -> dict[str, float]:
        """GPU time charged to this sequence, time to first token and time per output token after it."""
        first = self.first_token_sim if self.first_token_sim is not None else self.arrived_at
        last = self.last_token_sim if self.last_token_sim is not None else first
        return {"gpu_seconds": self.gpu_seconds, "ttft": first - self.arrived_at,
                "tpot": (last - first) / max(1, self.emitted - 1), "tokens": self.emitted}


def _counts(keys: tuple[str, ...] | str) -> dict[str, int]:
    return dict.fromkeys(keys, 0)


@dataclass
class GroundTruth:
    """What the emulator actually produced, by output class and by token kind: the answer key for tests."""

    drafted: dict[str, int] = field(default_factory=lambda: _counts("srf"))
    accepted: dict[str, int] = field(default_factory=lambda: _counts("srf"))
    steps: dict[str, int] = field(default_factory=lambda: _counts("srf"))
    drafted_by_kind: dict[str, int] = field(default_factory=lambda: _counts(KINDS))
    accepted_by_kind: dict[str, int] = field(default_factory=lambda: _counts(KINDS))

    def record(self, output: list[OutputToken], start: int, draft_len: int, accepted: int) -> None:
        self.steps[output[start].cls] += 1
        for j in range(draft_len):
            token = output[start + j]
            self.drafted[token.cls] += 1
            self.drafted_by_kind[token.kind] = self.drafted_by_kind.get(token.kind, 0) + 1
            if j < accepted:
                self.accepted[token.cls] += 1
                self.accepted_by_kind[token.kind] = self.accepted_by_kind.get(token.kind, 0) + 1

    def as_json(self) -> dict[str, Any]:
        return {
            "acceptance_rate": {c: self.accepted[c] / self.drafted[c] if self.drafted[c] else None for c in "srf"},
            "tau": {c: self.accepted[c] / self.steps[c] if self.steps[c] else None for c in "srf"},
            "drafted": dict(self.drafted),
            "accepted": dict(self.accepted),
            "steps": dict(self.steps),
            "acceptance_rate_by_kind": {k: self.accepted_by_kind[k] / n if n else None
                                        for k, n in self.drafted_by_kind.items()},
        }


class Observer(Protocol):
    """Told what an engine did, for what lives outside it (metrics, streams, ground truth)."""

    def admitted(self, seq: Sequence) -> None: ...

    def round(self, seq: Sequence, start: int, draft_len: int, accepted: int) -> None: ...

    def tokens(self, seq: Sequence, start: int, end: int) -> None: ...

    def finished(self, seq: Sequence) -> None: ...


@dataclass(slots=True)
class Step:
    """One planned step: who is in it, and how long it takes."""

    seconds: float
    prefills: list[tuple[Sequence, int]]  # (sequence, prompt tokens computed this step)
    decodes: list[Sequence]


class Engine:
    """One server's scheduler and step physics, on whatever clock its caller keeps."""

    def __init__(self, profile: EngineProfile, spec: SpecConfig | None, max_num_seqs: int,
                 max_num_batched_tokens: int | None = None, observer: Observer | None = None) -> None:
        self.profile = profile
        self.spec = spec
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens or profile.max_num_batched_tokens
        self.observer = observer
        self.kv_capacity = profile.kv_capacity_tokens(spec.method if spec else None)
        self.method = spec.method if spec else None
        self.model_drafter = spec is not None and profile.drafter(spec.method).shape is not None
        self.physics = Physics(profile, self.method, max_num_seqs)
        self.kv_used = 0
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.cache: OrderedDict[int, None] = OrderedDict()
        self.cache_blocks = self.kv_capacity // profile.block_size
        self.busy_seconds = 0.0
        self.generated_tokens = 0
        self._done: list[Sequence] = []  # finished or aborted since the last retirement
        # vLLM's spec-decode counters, summed over every round
        self.num_drafts = self.num_draft_tokens = self.num_accepted_tokens = 0
        self.num_preemptions = 0

    # ------------------------------------------------------------ requests

    def submit(self, seq: Sequence, now: float) -> None:
        if seq.prompt_len + len(seq.output) > self.kv_capacity:
            raise ValueError(
                f"This model's maximum context length is {self.kv_capacity} tokens; the request needs "
                f"{seq.prompt_len + len(seq.output)}"
            )
        seq.arrived_at = now
        seq.prefill_len = seq.prompt_len
        self.waiting.append(seq)

    def abort(self, seq: Sequence) -> None:
        seq.aborted = True
        self._done.append(seq)

    def reset_prefix_cache(self) -> None:
        self.cache.clear()

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    @property
    def kv_usage(self) -> float:
        """The share of the KV cache held by admitted sequences, as vLLM reports it."""
        return self.kv_used / self.kv_capacity

    # ------------------------------------------------------------ steps

    def step(self) -> Step | None:
        """Schedule the next step; None when nothing can run (idle, or the queue's head does not fit)."""
        if self._done:
            self._retire()
        budget = self.max_num_batched_tokens
        depth = self._depth(len(self.running))
        decodes: list[Sequence] = []
        prefills: list[tuple[Sequence, int]] = []
        members: list[Sequence] = []  # in the order of ``works``
        works: list[Work] = []
        preempted = False
        block = self.profile.block_size
        for seq in list(self.running):  # running first, in order, as vLLM's scheduler takes them
            if budget <= 0:
                break
            if seq.kv_tokens == 0:  # preempted earlier in this step
                continue
            if seq.computed < seq.prefill_len:
                chunk = min(seq.prefill_len - seq.computed, budget)
                need, draft = seq.computed + chunk, 0
            else:
                draft = max(0, min(self._proposal(seq, depth), budget - 1)) if depth else 0
                need = seq.prompt_len + seq.emitted + 1 + draft
            # most steps fit in the blocks a sequence holds: ``_grow`` only when they do not
            if -(-need // block) * block > seq.kv_tokens and not self._grow(seq, need, members):
                preempted = True
                continue
            if seq.computed < seq.prefill_len:
                prefills.append((seq, chunk))
                works.append(self._prefill_work(seq, chunk))
                budget -= chunk
            else:
                seq.draft_len = draft
                decodes.append(seq)
                works.append(Work(seq.prompt_len + seq.emitted, 1 + draft, draft))
                budget -= 1 + draft
            members.append(seq)
        while not preempted and budget > 0 and self.waiting and len(self.running) < self.max_num_seqs:
            if not self._admit(self.waiting[0], budget):
                break
            seq = self.waiting.popleft()
            chunk = min(seq.prefill_len - seq.computed, budget)
            prefills.append((seq, chunk))
            works.append(self._prefill_work(seq, chunk))
            members.append(seq)
            budget -= chunk
        if not works:
            # a sequence that preempted itself waits at the queue's head, and fits now
            return self.step() if preempted else None
        timed = self.physics.step_time(works)
        for seq, charge in zip(members, timed.charges):
            seq.gpu_seconds += charge
        self.busy_seconds += timed.seconds
        return Step(timed.seconds, prefills, decodes)

    def finish(self, step: Step, end: float) -> None:
        """Apply ``step``, ended at ``end``: prompts computed, tokens emitted, finished sequences retired."""
        for seq, chunk in step.prefills:
            seq.computed += chunk
            if seq.computed >= seq.prefill_len and not seq.aborted:
                self._emit(seq, 1, end)  # the prefill's last chunk samples the first token
        for seq in step.decodes:
            if seq.aborted:
                continue
            if seq.draft_len <= 0 or seq.positions is None:
                self._emit(seq, 1, end)
            else:
                self._decode(seq, end)
        if self._done:
            self._retire()

    def _depth(self, batch: int) -> int:
        if self.spec is None:
            return 0
        return max(0, self.spec.depth_at(batch))

    def _prefill_work(self, seq: Sequence, chunk: int) -> Work:
        return Work(seq.computed, chunk, draft_prefill=chunk if self.model_drafter else 0)

    def _proposal(self, seq: Sequence, depth: int) -> int:
        """Draft tokens proposed for ``seq`` this step: ``depth`` from a model drafter; from a
        lookup, what it found to copy, up to ``depth``; never past the answer's end."""
        room = len(seq.output) - seq.emitted - 1
        if not seq.speculate or seq.positions is None or depth <= 0 or room <= 0:
            return 0
        if not self.model_drafter:
            return min(depth, room, seq.positions.proposed_at(seq.emitted))
        return min(depth, room)

    def _blocks(self, tokens: int) -> int:
        """``tokens`` rounded up to whole KV blocks, in tokens."""
        block = self.profile.block_size
        return -(-tokens // block) * block

    def _admit(self, seq: Sequence, budget: int) -> bool:
        """Take ``seq`` in when the KV blocks for what it prefills this step are free."""
        cached = self._cached_prefix(seq)
        need = self._blocks(min(seq.prefill_len, cached + budget))
        if self.kv_used + need > self.kv_capacity:
            return False
        seq.kv_tokens = need
        self.kv_used += need
        seq.cached_tokens = seq.computed = cached
        seq.cached_blocks = cached // self.profile.block_size
        self.running.append(seq)
        if self.observer is not None:
            self.observer.admitted(seq)
        return True

    def _grow(self, seq: Sequence, tokens: int, scheduled: list[Sequence]) -> bool:
        """KV blocks for ``tokens`` of ``seq``, preempting the last admitted sequences not yet
        ``scheduled`` this step until they fit; False when ``seq`` itself had to be preempted."""
        need = self._blocks(tokens) - seq.kv_tokens
        taken = {id(s) for s in scheduled}
        while need > 0 and self.kv_used + need > self.kv_capacity:
            victim = next((s for s in reversed(self.running) if id(s) not in taken), None)
            if victim is None:
                return False
            self._preempt(victim)
            if victim is seq:
                return False
        if need > 0:
            seq.kv_tokens += need
            self.kv_used += need
        return True

    def _preempt(self, seq: Sequence) -> None:
        """Free ``seq``'s blocks and queue it first, to recompute its prompt and what it generated."""
        self.running.remove(seq)
        self.kv_used -= seq.kv_tokens
        seq.kv_tokens = 0
        block = self.profile.block_size
        self._insert_cache(seq.block_hashes[seq.cached_blocks:min(seq.computed, seq.prompt_len) // block])
        seq.computed = 0
        seq.cached_blocks = 0
        seq.prefill_len = seq.prompt_len + seq.emitted
        seq.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def _cached_prefix(self, seq: Sequence) -> int:
        hits = 0
        for h in seq.block_hashes:
            if h not in self.cache:
                break
            self.cache.move_to_end(h)
            hits += 1
        # vLLM always recomputes the last prompt token to produce logits
        return min(hits * self.profile.block_size, max(0, seq.prefill_len - 1))

    def _decode(self, seq: Sequence, end: float) -> None:
        """A speculation round of ``seq``: its accepted draft tokens and the target's own."""
        draft_len = seq.draft_len
        assert seq.positions is not None
        start = seq.emitted
        accepted = seq.positions.accepted(start, draft_len, seq.temperature, not self.model_drafter)
        self.num_drafts += 1
        self.num_draft_tokens += draft_len
        self.num_accepted_tokens += accepted
        seq.spec.record(draft_len, accepted, seq.detailed)
        if self.observer is not None:
            self.observer.round(seq, start, draft_len, accepted)
        self._emit(seq, accepted + 1, end)

    def _emit(self, seq: Sequence, count: int, end: float) -> None:
        start = seq.emitted
        stop = start + count
        if stop > len(seq.output):
            stop = len(seq.output)
        if stop <= start:
            return
        seq.emitted = stop
        self.generated_tokens += stop - start
        if seq.first_token_sim is None:
            seq.first_token_sim = end
        seq.last_token_sim = end
        if self.observer is not None:
            self.observer.tokens(seq, start, stop)
        if stop >= len(seq.output):
            seq.finished = True
            self._done.append(seq)

    def _retire(self) -> None:
        """Take the finished and aborted sequences out: their KV freed, their blocks cached."""
        done, self._done = self._done, []
        leaving = set(done)
        self.running = [s for s in self.running if s not in leaving]
        if any(s.aborted for s in done):
            self.waiting = deque(s for s in self.waiting if not s.aborted)
        for seq in done:
            if seq.kv_tokens:
                self.kv_used -= seq.kv_tokens
                seq.kv_tokens = 0
                # its prefix's blocks were found (and made the most recent) when it was admitted
                self._insert_cache(seq.block_hashes[seq.cached_blocks:])
            if seq.finished and not seq.aborted and self.observer is not None:
                self.observer.finished(seq)

    def _insert_cache(self, hashes: list[int]) -> None:
        for h in hashes:
            self.cache[h] = None
            self.cache.move_to_end(h)
        while len(self.cache) > self.cache_blocks:
            self.cache.popitem(last=False)
