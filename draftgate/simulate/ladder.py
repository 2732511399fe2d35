"""One pool under a ladder of Poisson arrival rates, reported as serving benchmarks report it.

Each rung sends ``rate * duration`` requests at exponential gaps, each with a
prompt and an answer length drawn from the given distributions (the answer runs
to its length, as ``vllm bench serve --ignore-eos`` asks), and waits for all of
them, as ``vllm bench serve`` does. Prompts are unrelated token runs, so the
prefix cache finds nothing (vLLM's ``random`` dataset). The answer is prose by
the emulator's profile, so a model drafter is accepted as on chat and a lookup
finds nothing to copy. One engine, one simulated clock, no wall time: the same
seed gives the same figures on any machine.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from draftgate.emulator.engine import Engine, Sequence, SpecConfig
from draftgate.emulator.profile import EngineProfile
from draftgate.emulator.speculation import position_model
from draftgate.emulator.textgen import OutputToken


@dataclass(frozen=True)
class Lengths:
    """A token-count distribution: ``MEAN:SD`` (normal, at least 1), ``LO-HI`` (uniform) or ``N``."""

    low: int
    high: int
    mean: float = 0.0
    sd: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Lengths:
        text = text.strip()
        if m := re.fullmatch(r"(\d+(?:\.\d+)?):(\d+(?:\.\d+)?)", text):
            mean, sd = float(m[1]), float(m[2])
            if mean < 1:
                raise ValueError(f"{text!r}: the mean must be at least 1")
            return cls(max(1, round(mean - 4 * sd)), max(1, round(mean + 4 * sd)), mean, sd)
        if m := re.fullmatch(r"(\d+)-(\d+)", text):
            low, high = int(m[1]), int(m[2])
            if not 1 <= low <= high:
                raise ValueError(f"{text!r}: LO-HI needs 1 <= LO <= HI")
            return cls(low, high)
        if re.fullmatch(r"\d+", text) and int(text) >= 1:
            return cls(int(text), int(text))
        raise ValueError(f"{text!r} is not MEAN:SD, LO-HI or a count of at least 1")

    def draw(self, rng: random.Random) -> int:
        if self.sd > 0:
            return min(self.high, max(self.low, round(rng.gauss(self.mean, self.sd))))
        return rng.randint(self.low, self.high)


@dataclass(frozen=True)
class Ladder:
    """What to run: the pool and the load."""

    profile: EngineProfile
    spec: SpecConfig | None
    rates: tuple[float, ...]
    duration: float
    prompt: Lengths
    output: Lengths
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    temperature: float = 0.0
    seed: int = 0


@dataclass
class Timing:
    """One request's clock: when it arrived and each time tokens reached it."""

    arrived: float
    emissions: list[float] = field(default_factory=list)
    tokens: int = 0


class _Clock:
    """The engine's observer: records when each sequence receives tokens (its stream's chunks)."""

    def __init__(self) -> None:
        self.timings: dict[int, Timing] = {}

    def admitted(self, seq: Sequence) -> None: ...

    def round(self, seq: Sequence, start: int, draft_len: int, accepted: int) -> None: ...

    def tokens(self, seq: Sequence, start: int, end: int) -> None:
        timing = self.timings[id(seq)]
        assert seq.last_token_sim is not None
        timing.emissions.append(seq.last_token_sim)
        timing.tokens += end - start

    def finished(self, seq: Sequence) -> None: ...


def kv_cache_tokens(ladder: Ladder) -> int:
    return ladder.profile.kv_capacity_tokens(ladder.spec.method if ladder.spec else None)


def run(ladder: Ladder) -> dict[str, Any]:
    """Every rung of the ladder: ``{"kv_cache_tokens", "rates": [...]}``."""
    return {"kv_cache_tokens": kv_cache_tokens(ladder),
            "rates": [run_rate(ladder, rate, index) for index, rate in enumerate(ladder.rates)]}


def run_rate(ladder: Ladder, rate: float, index: int) -> dict[str, Any]:
    """One rung: its requests sent and served, and the figures a serving benchmark prints."""
    clock = _Clock()
    engine = Engine(ladder.profile, ladder.spec, ladder.max_num_seqs or ladder.profile.max_num_seqs,
                    ladder.max_num_batched_tokens, clock)
    arrivals = _arrivals(ladder, rate, index, engine)
    now, pending, batch_seconds = 0.0, 0, 0.0
    while pending < len(arrivals) or not engine.idle:
        while pending < len(arrivals) and arrivals[pending][0] <= now:
            at, seq = arrivals[pending]
            engine.submit(seq, at)
            clock.timings[id(seq)] = Timing(at)
            pending += 1
        step = engine.step()
        if step is None:  # idle, or the queue's head waits for room: on to the next arrival
            if pending == len(arrivals):
                break
            now = max(now, arrivals[pending][0])
            continue
        now += step.seconds
        batch_seconds += (len(step.decodes) + len(step.prefills)) * step.seconds
        engine.finish(step, now)
    served = [t for t in clock.timings.values() if t.emissions]
    return _summary(rate, served, len(arrivals), now, engine, batch_seconds)


def schedule(ladder: Ladder, rate: float, index: int) -> list[tuple[float, int, int]]:
    """The rung's requests: (arrival second, prompt tokens, answer tokens), at exponential gaps. The
    same for the emulated pool and a real one (``validate``), seed by seed."""
    rng = random.Random(f"{ladder.seed}:{index}:{rate}")
    out = []
    at = rng.expovariate(rate)
    while at < ladder.duration:
        out.append((at, ladder.prompt.draw(rng), ladder.output.draw(rng)))
        at += rng.expovariate(rate)
    return out


def _arrivals(ladder: Ladder, rate: float, index: int, engine: Engine) -> list[tuple[float, Sequence]]:
    method = ladder.spec.method if ladder.spec else None
    lookup = ladder.spec is not None and ladder.profile.drafter(ladder.spec.method).shape is None
    misalignment = ladder.profile.drafter(method).misalignment if method else 0.0
    blocks = random.Random(f"{ladder.seed}:{index}:{rate}:blocks")
    out: list[tuple[float, Sequence]] = []
    for i, (at, prompt, answer) in enumerate(schedule(ladder, rate, index)):
        if prompt + answer > engine.kv_capacity:  # longer ones vLLM refuses: not sent
            continue
        positions = position_model(["prose"] * answer, ladder.profile, ladder.temperature,
                                   np.random.default_rng([ladder.seed, index, i]), misalignment,
                                   ([0] * answer, [0] * answer) if lookup else None)
        output = [OutputToken("w", "f", "content") for _ in range(answer)]
        hashes = [blocks.getrandbits(62) for _ in range(prompt // ladder.profile.block_size)]
        out.append((at, Sequence(prompt, hashes, output, "length", ladder.temperature, method is not None,
                                 positions)))
    return out


def _percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    ordered = np.sort(np.asarray(values)) * 1e3
    return {"mean": round(float(ordered.mean()), 3),
            **{f"p{q}": round(float(np.percentile(ordered, q)), 3) for q in (50, 90, 99)}}


def _summary(rate: float, served: list[Timing], sent: int, ended: float, engine: Engine,
             batch_seconds: float) -> dict[str, Any]:
    acceptance = 1.0 + engine.num_accepted_tokens / engine.num_drafts if engine.num_drafts else None
    return {**summary(rate, served, sent, ended, acceptance),
            "mean_batch": round(batch_seconds / engine.busy_seconds, 1) if engine.busy_seconds else 0.0,
            "preemptions": engine.num_preemptions}


def summary(rate: float, served: list[Timing], sent: int, ended: float, acceptance: float | None) -> dict[str, Any]:
    """What a serving benchmark prints for one rung: latency percentiles in milliseconds (TTFT, TPOT
    after the first token, the gap between chunks, end to end) and throughput over the run."""
    ttft = [t.emissions[0] - t.arrived for t in served]
    e2e = [t.emissions[-1] - t.arrived for t in served]
    tpot = [(t.emissions[-1] - t.emissions[0]) / (t.tokens - 1) for t in served if t.tokens > 1]
    itl = [b - a for t in served for a, b in zip(t.emissions, t.emissions[1:])]
    tokens = sum(t.tokens for t in served)
    duration = ended if ended > 0 else 1.0
    return {
        "rps": rate,
        "requests": len(served),
        "failed": sent - len(served),
        "ttft_ms": _percentiles(ttft),
        "tpot_ms": _percentiles(tpot),
        "itl_ms": _percentiles(itl),
        "e2e_ms": _percentiles(e2e),
        "output_tokens_per_s": round(tokens / duration, 2),
        "requests_per_s": round(len(served) / duration, 4),
        "acceptance_length": None if acceptance is None else round(acceptance, 3),
    }
