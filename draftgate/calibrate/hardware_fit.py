"""The emulator's uncertain figures, fitted to what calibration measured on the operator's pools.

The catalogue knows the GPU's datasheet and the model's shape; how well a
serving engine uses them, what a drafter costs and how often it is right are
what calibration measures. Each figure is found by bisection against the
emulator's own physics at the conditions it was measured under:

- the target's weight streaming, from the plain pool's time per token at the
  lightest load (bandwidth-bound, so it is this one figure);
- its GEMM and FlashAttention compute, from time to first token against
  prompt length on uncached prompts (compute-bound prefill): the slope and
  the bend of attention's square;
- each model drafter's streaming, from its pool's time per round at the
  lightest load, the target's share already known;
- prose's and reasoning's predictability, from the entropy the plain pool's
  top logprobs showed;
- each drafter's misalignment, from its greedy tau on prose, through the
  emulator's own acceptance at that predictability; and the schema-bound
  kinds' predictability, scaled together, from tau on the emulator's own
  answers to the calibration's tool-call requests.

The result is a profile file that ``simulate``, ``emulate``, ``evaluate`` and
``validate`` take (``--profile``). What the measurements leave undetermined
(CPU overheads, all-reduce latency) keeps its assumed value, and so does a
figure the physics cannot reach within its bounds (a measurement from another
GPU than the one named, say), with a note that says so.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from draftgate.calibrate.protocol import CalibrationPlan, Fit, Pool, records_of, step_records
from draftgate.emulator.hardware import DEFAULT
from draftgate.emulator.physics import Physics, Work
from draftgate.emulator.profile import EngineProfile
from draftgate.emulator.speculation import position_model
from draftgate.emulator.textgen import generate

SCHEMA_KINDS = ("syntax", "enum", "copied", "number")
POSITIONS = 6000  # of prose, to read the emulator's tau at a misalignment


@dataclass
class HardwareFit:
    """The fitted profile, and per figure what it was fitted from and where the search ended."""

    profile: EngineProfile
    notes: dict[str, str] = field(default_factory=dict)

    def as_file(self) -> dict[str, Any]:
        """The profile as a profile file: every field, the GPU and the target by catalogue name."""
        data = self.profile.model_dump(mode="json")
        data["gpu"] = _gpu_key(self.profile)
        data["target"] = self.profile.target.name
        return data


def _gpu_key(profile: EngineProfile) -> Any:
    """The GPU's catalogue name, or the GPU whole where the catalogue does not hold it."""
    gpu = profile.gpu
    return gpu.name if DEFAULT.gpus.get(gpu.name) == gpu else gpu.model_dump(mode="json")


def bisect(measure: Callable[[float], float], target: float, low: float, high: float, rising: bool,
           steps: int = 40) -> tuple[float, bool]:
    """The argument in [low, high] at which ``measure`` (monotone: ``rising`` or falling) meets
    ``target``; and whether it lies inside rather than at a bound."""
    for _ in range(steps):
        mid = (low + high) / 2
        if (measure(mid) < target) == rising:
            low = mid
        else:
            high = mid
    value = (low + high) / 2
    inside = abs(measure(value) - target) <= 0.02 * target
    return value, inside


def fit_hardware(plan: CalibrationPlan, state: dict[str, dict[str, Any]], fit: Fit, base: EngineProfile,
                 time_scale: float = 1.0) -> HardwareFit:
    """``base`` (the catalogue's GPU, target and tensor parallelism) with its uncertain figures fitted
    to the calibration ``state``; ``time_scale`` wall seconds a second at the pools (1 for real ones)."""
    result = HardwareFit(base)
    lightest = min(plan.concurrency)
    _fit_bandwidth(result, plan, state, fit, lightest, time_scale)
    _fit_compute(result, state, time_scale)
    _fit_entropy(result, plan, fit)
    for pool in plan.spec:
        _fit_drafter(result, plan, state, fit, pool, lightest, time_scale)
    return result


def _mean_context(state: dict[str, dict[str, Any]], pool: str, concurrency: int) -> int:
    """The context a pool's step was timed at (``protocol.step_records``): prompt and half the answer."""
    records = [r for r in step_records(state, pool, concurrency) if r.tpot]
    if not records:
        return 500
    return int(statistics.fmean(r.prompt_tokens + r.completion_tokens / 2 for r in records))


def _with_efficiency(profile: EngineProfile, **update: float) -> EngineProfile:
    return profile.model_copy(update={"efficiency": profile.efficiency.model_copy(update=update)})


def _fit_bandwidth(result: HardwareFit, plan: CalibrationPlan, state: dict[str, dict[str, Any]], fit: Fit, batch: int,
                   time_scale: float) -> None:
    measured = fit.c_t.get(batch)
    if measured is None:
        result.notes["target_bandwidth"] = "kept: no plain-pool timing at the lightest load"
        return
    work = [Work(_mean_context(state, plan.off.name, batch), 1)] * batch

    def step(efficiency: float) -> float:
        return Physics(_with_efficiency(result.profile, target_bandwidth=efficiency), None).step_time(work).seconds

    value, inside = bisect(step, measured / time_scale, 0.05, 1.0, rising=False)
    if inside:
        result.profile = _with_efficiency(result.profile, target_bandwidth=value)
    result.notes["target_bandwidth"] = (f"{value:.3f} from {measured / time_scale * 1e3:.2f} ms a token at "
                                        f"{batch} running" + ("" if inside else ": out of reach, kept (is it the GPU "
                                                              "the pools run on?)"))


def _fit_compute(result: HardwareFit, state: dict[str, dict[str, Any]], time_scale: float) -> None:
    """GEMM and FlashAttention compute from time to first token against prompt length: the GEMMs grow
    with the prompt, attention with its square, so prompts of spread lengths (``protocol.prefill_bodies``)
    tell them apart by the curve's bend. Each candidate attention efficiency gets the GEMM efficiency
    that matches the time between the shortest and the longest prompt, and the pair that best matches
    every prompt's time is kept; with fewer than three lengths, or the bend out of reach, attention
    keeps its assumed share of the GEMMs'."""
    records = [r for r in records_of(state, "prefill") if r.prompt_tokens > 0]
    lengths = sorted({r.prompt_tokens for r in records})
    if len(lengths) < 2:
        result.notes["compute"] = "kept: no prefill measurements"
        return
    x = np.array([r.prompt_tokens for r in records], dtype=float)
    y = np.array([r.ttft for r in records], dtype=float) / time_scale
    if float(np.polyfit(x, y, 1)[0]) <= 0:
        result.notes["compute"] = "kept: prefill time does not grow with the prompt"
        return
    # each length's mean time, less the shortest's: what the intercept (HTTP, scheduling) leaves out
    mean_at = {n: float(y[x == n].mean()) for n in lengths}
    short, long = lengths[0], lengths[-1]
    measured = {n: mean_at[n] - mean_at[short] for n in lengths}
    base = result.profile.efficiency

    def prefill(compute: float, attention: float) -> Callable[[int], float]:
        physics = Physics(_with_efficiency(result.profile, compute=compute, attention_compute=attention), None)
        budget = result.profile.max_num_batched_tokens

        def seconds(tokens: int) -> float:  # chunked as the scheduler chunks it
            return sum(physics.step_time([Work(done, min(budget, tokens - done))]).seconds
                       for done in range(0, tokens, budget))
        return seconds

    def matched(attention: float | None) -> tuple[float, bool, float, float]:
        """(GEMM compute, inside its bounds, attention compute, squared error over every length);
        ``attention`` None: at its assumed share of the GEMMs'."""
        def attention_at(compute: float) -> float:
            share = base.attention_compute / base.compute
            return attention if attention is not None else min(1.0, compute * share)

        def span(compute: float) -> float:
            seconds = prefill(compute, attention_at(compute))
            return seconds(long) - seconds(short)

        compute, inside = bisect(span, measured[long], 0.02, 1.0, rising=False)
        seconds = prefill(compute, attention_at(compute))
        error = sum((seconds(n) - seconds(short) - measured[n]) ** 2 for n in lengths)
        return compute, inside, attention_at(compute), error

    compute, inside, attention, _ = matched(None)
    bend = "attention kept at its assumed share of the GEMMs'"
    if inside and len(lengths) >= 3:
        grid = [i / 100 for i in range(5, 101)]
        best = min((matched(a) for a in grid), key=lambda m: m[3])
        if best[1] and grid[0] < best[2] < grid[-1]:
            compute, attention = best[0], best[2]
            bend = f"attention {attention:.3f} from the bend over {short}-{long} tokens"
        else:
            bend = f"attention out of reach over {short}-{long} tokens, kept at its assumed share"
    if inside:
        result.profile = _with_efficiency(result.profile, compute=compute, attention_compute=attention)
    result.notes["compute"] = (f"{compute:.3f} of peak from {measured[long] * 1e3:.0f} ms between {short} and {long} "
                               f"prompt tokens; {bend}" if inside else f"{compute:.3f} of peak: out of reach, kept")


def _fit_drafter(result: HardwareFit, plan: CalibrationPlan, state: dict[str, dict[str, Any]], fit: Fit, pool: Pool,
                 batch: int, time_scale: float) -> None:
    profile = result.profile
    try:
        drafter = profile.drafter(pool.method)
    except ValueError:
        result.notes[pool.name] = f"kept: no {pool.method} drafter for {profile.target.name} in the catalogue"
        return
    family = next(name for name, d in profile.drafters.items() if d is drafter)

    def with_drafter(**update: float) -> EngineProfile:
        return profile.model_copy(update={"drafters": {**profile.drafters, family: drafter.model_copy(update=update)}})

    notes = []
    round_time = fit.round_time.get((pool.name, batch))
    if drafter.shape is not None and round_time is not None:
        context = _mean_context(state, pool.name, batch)
        work = [Work(context, 1 + pool.gamma, pool.gamma)] * batch

        def round_seconds(efficiency: float) -> float:
            return Physics(with_drafter(bandwidth_efficiency=efficiency), pool.method).step_time(work).seconds

        value, inside = bisect(round_seconds, round_time / time_scale, 0.02, 1.0, rising=False)
        if inside:
            drafter = drafter.model_copy(update={"bandwidth_efficiency": value})
        notes.append(f"streaming {value:.3f} from {round_time / time_scale * 1e3:.2f} ms a round"
                     + ("" if inside else ": out of reach, kept"))
    tau = fit.tau.get(pool.name, {})
    if drafter.shape is not None and tau.get("f"):
        def prose_tau(misalignment: float) -> float:
            return _emulated_tau(["prose"] * POSITIONS, profile, misalignment, pool.gamma)

        value, inside = bisect(prose_tau, float(tau["f"]), 0.01, 6.0, rising=False, steps=24)
        if inside:
            drafter = drafter.model_copy(update={"misalignment": value})
        notes.append(f"misalignment {value:.3f} from tau_F {tau['f']:.2f}" + ("" if inside else ": out of reach, kept"))
    result.profile = profile = profile.model_copy(update={"drafters": {**profile.drafters, family: drafter}})
    if drafter.shape is not None and tau.get("s") and plan.workloads.get("B"):
        kinds = _answer_kinds(plan.workloads["B"], profile, "s")

        def schema_tau(scale: float) -> float:
            return _emulated_tau(kinds, _scaled(profile, SCHEMA_KINDS, scale), drafter.misalignment, pool.gamma)

        scale, inside = bisect(schema_tau, float(tau["s"]), 0.05, 20.0, rising=False, steps=24)
        if inside:
            result.profile = _scaled(profile, SCHEMA_KINDS, scale)
        notes.append(f"schema-bound kinds' entropy x{scale:.2f} from tau_S {tau['s']:.2f}"
                     + ("" if inside else ": out of reach, kept"))
    result.notes[pool.name] = "; ".join(notes) or "kept: a lookup, or nothing measured"


def _fit_entropy(result: HardwareFit, plan: CalibrationPlan, fit: Fit) -> None:
    """Prose's (and free text's inside strings) and reasoning's predictability from the entropy the
    plain pool's top logprobs showed for F and R. S is a mixture of kinds whose shares differ from
    request to request, so its kinds are fitted on tau instead (``_fit_drafter``)."""
    profile = result.profile
    notes = []
    for cls, kinds, scaled in (("f", ["prose"] * POSITIONS, ("prose", "text")),
                               ("r", ["reasoning"] * POSITIONS, ("reasoning",))):
        measured = fit.entropy.get(cls)
        if measured is None:
            continue

        def entropy(scale: float, kinds: list[str] = kinds, scaled: tuple[str, ...] = scaled) -> float:
            return _realized_entropy(kinds, _scaled(profile, scaled, scale))

        scale, inside = bisect(entropy, float(measured), 0.02, 20.0, rising=True, steps=24)
        if inside:
            profile = _scaled(profile, scaled, scale)
        notes.append(f"{'/'.join(scaled)} x{scale:.2f} from {cls.upper()}'s {measured:.3f} nats"
                     + ("" if inside else ": out of reach, kept"))
    result.profile = profile
    result.notes["entropy"] = "; ".join(notes) or "kept: no entropy measured"


def _scaled(profile: EngineProfile, kinds: tuple[str, ...], scale: float) -> EngineProfile:
    return profile.model_copy(update={"entropy": {k: v * scale if k in kinds else v
                                                  for k, v in profile.entropy.items()}})


def _realized_entropy(kinds: list[str], profile: EngineProfile) -> float:
    """Mean next-token entropy of the emulator's target over ``kinds``, as top logprobs show it."""
    lp = position_model(kinds, profile, 0.0, np.random.default_rng(11), 0.0).target_logprobs
    return float(-(np.exp(lp) * lp).sum(axis=1).mean())


def _answer_kinds(bodies: list[dict[str, Any]], profile: EngineProfile, cls: str) -> list[str]:
    """The token kinds of the emulator's answers to ``bodies``, those of class ``cls``."""
    rng = random.Random(0)
    kinds: list[str] = []
    for body in bodies[:40]:
        kinds += [t.kind for t in generate(dict(body, temperature=0), profile, rng, "chat").tokens if t.cls == cls]
    return kinds


def _emulated_tau(kinds: list[str], profile: EngineProfile, misalignment: float, gamma: int) -> float:
    """Mean draft tokens accepted a round, greedy, drafting ``gamma`` a round through ``kinds``."""
    positions = position_model(kinds, profile, 0.0, np.random.default_rng(7), misalignment)
    n = len(kinds)
    accepted = rounds = start = 0
    while start < n - 1:
        got = positions.accepted(start, min(gamma, n - 1 - start), 0.0, False)
        accepted += got
        rounds += 1
        start += got + 1
    return accepted / rounds if rounds else 0.0
