"""The four-arm protocol: plan the runs, execute them resumably, fit the calibration.

Runs are keyed (kind, arm, pool, concurrency, regime) and appended to a state
file as they finish, so an interrupted calibration resumes where it stopped.

Acceptance comes from the arms' own answers; a step's time does not. A closed
loop replaces each finished request at once, so where the arms' answers are
short (tool calls of a few dozen tokens, agent turns behind thousands of
prompt tokens) and the load high, a new prompt is prefilled every step or two
and its TPOT carries those prefills, which the plan prices again as stalls
(``bench.calibration_step_time``: there a plain step at 64 running reads 28%
high, an EAGLE-3 round 34%). So the plain pool and each model drafter also run *step*
batches at every load: the prose arm's prompts answered at ``STEP_ANSWER``
tokens, a prefill every few steps at most, from which a plain step and a
model drafter's round are timed. A lookup drafts only on what the arms'
answers hold to copy, so its rounds stay timed in the arms' batches.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from draftgate.calibrate.runner import Record, run_batch
from draftgate.policy import copying, fitting, law
from draftgate.policy.calibration import (
    LOOKUP_METHODS,
    METHOD_DEFAULTS,
    Calibration,
    ClassValues,
    CopyCoefficients,
    Curve,
    PoolCalibration,
    RhoTable,
)
from draftgate.progress import draw
from draftgate.workloads import ARMS

ARMS_DIR = ARMS
ARM_NAMES = {"A": "free prose", "B": "schema-bound tool calls (temperature 0)", "C": "long reasoning",
             "D": "agent loop replay"}
DELTA_AT_ONE = 0.01  # the d / delta split is a convention: delta(1) is taken as this prior
MIN_DRAFTED_TO_FIT = 1.0  # draft tokens a round must verify, on average, for its cost per token to be fitted
STEP_ANSWER = 512  # tokens a step batch's answers run to: at 128 running, a new prompt every 4 steps
STEP_ARM = "A"  # whose prompts the step batches answer (short prose prompts: cheap to prefill)
STEP_REQUESTS = 4  # a step batch's requests at the least
# words the longest prefill probe adds to the shortest's 150: about 8,000 of the emulator's tokens, one
# step within vLLM's default 8,192-token budget, where FlashAttention is 14% of an H200's prefill (7% at 4,000)
PREFILL_WORDS = 3800


@dataclass(frozen=True)
class Pool:
    name: str
    url: str
    gamma: int  # 0: speculation off
    method: str = "draft_model"  # of its --speculative-config

    @property
    def copies(self) -> bool:
        return self.method in LOOKUP_METHODS


@dataclass
class CalibrationPlan:
    model: str
    spec: list[Pool]
    off: Pool
    arms: list[str]
    concurrency: list[int]
    regimes: list[str]
    requests: int
    dynamic_k: Pool | None = None
    workloads: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # what makes each prefill prompt unlike any other, so no cache holds it: random, or given
    # where a run must repeat exactly
    nonce: Callable[[int], str] = field(default=lambda i: uuid.uuid4().hex, repr=False)

    def runs(self) -> list[tuple[str, str, Pool, int, str]]:
        """(kind, arm, pool, concurrency, regime), timing runs first.

        Greedy batches time every pool and give each its acceptance. A sampled batch is run only on
        the law's reference pools: their acceptance under sampling is all the fit reads of that regime
        (``_calibration``), and on the other pools such a batch would cost as much and tell nothing."""
        out = []
        for arm in self.arms:
            for c in self.concurrency:
                for regime in self.regimes:
                    for pool in [self.off, *self.spec] if regime == "greedy" else _law_reference(self):
                        out.append(("timing", arm, pool, c, regime))
            out.append(("entropy", arm, self.off, max(self.concurrency), "greedy"))
        if STEP_ARM in self.arms:
            out += [("step", STEP_ARM, pool, c, "greedy") for c in self.concurrency for pool in [self.off, *self.spec]
                    if not pool.copies]
        if "B" in self.arms:
            out.append(("repeat", "B", self.off, self.concurrency[0], "greedy"))
        out.append(("prefill", "P", self.off, 1, "greedy"))
        if self.dynamic_k is not None and "D" in self.arms:
            out += [("timing", "D", self.dynamic_k, c, "greedy") for c in self.concurrency]
        return out


def load_arm(name: str, source: Path | None = None) -> list[dict[str, Any]]:
    path = source or ARMS_DIR / f"arm_{name}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows or not all(isinstance(r, dict) and isinstance(r.get("messages"), list) for r in rows):
        raise ValueError(f"{path}: every line must be a chat request with messages")
    return rows


def timing_bodies(workload: list[dict[str, Any]], requests: int, concurrency: int) -> list[dict[str, Any]]:
    """``requests`` of the arm's bodies, or twice ``concurrency`` if more, cycling the arm: a run
    measures the load it is labelled with only while that many requests are in flight."""
    count = max(requests, 2 * concurrency)
    return [workload[i % len(workload)] for i in range(count)]


def step_bodies(workload: list[dict[str, Any]], concurrency: int, answer: int = STEP_ANSWER) -> list[dict[str, Any]]:
    """Twice ``concurrency`` of the arm's requests (the fewest that hold the load; ``STEP_REQUESTS`` at
    least), each answered at ``answer`` tokens whatever it would say: every TPOT averages hundreds of
    steps, so a few requests time a step."""
    return [dict(body, max_tokens=answer, ignore_eos=True)
            for body in timing_bodies(workload, STEP_REQUESTS, concurrency)]


def step_records(state: dict[str, dict[str, Any]], pool: str, concurrency: int) -> list[Record]:
    """A pool's greedy records a step's time is read from at one load: its step batch's, or, in a state
    written without step batches, its timing batches'."""
    found = records_of(state, "step", pool, regime="greedy", concurrency=concurrency)
    return found or records_of(state, "timing", pool, regime="greedy", concurrency=concurrency)


def prefill_bodies(model: str, n: int, nonce: Callable[[int], str] = lambda i: uuid.uuid4().hex
                   ) -> list[dict[str, Any]]:
    """Prompts of spread lengths that no cache can hold (each starts with its own ``nonce``): from a few
    hundred tokens to several thousand, where attention's share of a prefill is large enough to be told
    apart from the GEMMs' (``hardware_fit``)."""
    bodies = []
    for i in range(max(n, 4)):
        words = 150 + (i * PREFILL_WORDS) // max(1, max(n, 4) - 1)
        text = f"{nonce(i)} " + " ".join(f"w{j % 97}" for j in range(words))
        bodies.append({"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 1})
    return bodies


def key(kind: str, arm: str, pool: Pool, concurrency: int, regime: str) -> str:
    return f"{kind}|{arm}|{pool.name}|{concurrency}|{regime}"


def load_state(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    state = {}
    for line in path.read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            state[entry["key"]] = entry
    return state


Batch = Callable[[Pool, list[dict[str, Any]], Record, str], tuple[list[Record], dict[str, float]]]


def over_http(pool: Pool, bodies: list[dict[str, Any]], template: Record, model: str
              ) -> tuple[list[Record], dict[str, float]]:
    """A batch run against the pool's server (``runner.run_batch``)."""
    return asyncio.run(run_batch(pool.url, bodies, template, model))


def execute(plan: CalibrationPlan, state_path: Path | None, progress: Callable[[int, int, str], None] | None = None,
            batch: Batch = over_http) -> dict[str, dict[str, Any]]:
    """Run every planned batch not already in the state file (None: keep the state in memory);
    ``batch`` runs one against a pool."""
    state = load_state(state_path) if state_path is not None else {}
    runs = plan.runs()
    for i, (kind, arm, pool, c, regime) in enumerate(runs):
        k = key(kind, arm, pool, c, regime)
        if progress:
            progress(i, len(runs), k)
        if k in state:
            continue
        if kind == "prefill":
            bodies = prefill_bodies(plan.model, plan.requests, plan.nonce)
        elif kind == "step":
            bodies = step_bodies(plan.workloads[arm], c)
        else:
            bodies = timing_bodies(plan.workloads[arm], plan.requests, c if kind == "timing" else 1)
        template = Record(arm=arm, pool=pool.name, gamma=pool.gamma, concurrency=c, regime=regime,
                          kind="entropy" if kind == "entropy" else "timing", index=0)
        records, deltas = batch(pool, bodies, template, plan.model)
        entry = {"key": k, "records": [r.as_json() for r in records], "counters": deltas}
        if state_path is not None:
            with state_path.open("a") as f:
                f.write(json.dumps(entry) + "\n")
        state[k] = entry
    if progress:
        progress(len(runs), len(runs), "done")
    return state


def records_of(state: dict[str, dict[str, Any]], kind: str | None = None, pool: str | None = None,
               arm: str | None = None, regime: str | None = None, concurrency: int | None = None) -> list[Record]:
    out = []
    for k, entry in state.items():
        k_kind, k_arm, k_pool, k_c, k_regime = k.split("|")
        if ((kind and k_kind != kind) or (pool and k_pool != pool) or (arm and k_arm != arm)
                or (regime and k_regime != regime) or (concurrency and int(k_c) != concurrency)):
            continue
        out += [Record(**r) for r in entry["records"]]
    return out


@dataclass
class PoolFit:
    """One speculation pool's own cost fit: never pooled across methods or depths."""

    method: str
    gamma: int
    overhead: dict[int, float]  # delta + d per draft token verified, by load
    draft_cost: float
    delta: list[tuple[float, float]]
    kappa: float | None  # fitted for EAGLE and MTP heads; draft models share the calibration's
    drafted_per_round: dict[int, float] = field(default_factory=dict)  # a lookup's, from the counters


@dataclass
class Fit:
    calibration: Calibration
    c_t: dict[int, float]
    overhead: dict[int, float]  # the draft-model pools', the reference the report's tests use
    round_time: dict[tuple[str, int], float]
    tau: dict[str, dict[str, float | None]]  # pool -> class -> tau (greedy)
    tau_sampled: dict[str, dict[str, float | None]]
    entropy: dict[str, float | None]
    missing_mass: float | None
    kappa_pairs: list[tuple[float, float]]
    uncertainty: dict[str, float | None]
    residuals: dict[str, float]
    pools: dict[str, PoolFit] = field(default_factory=dict)


def fit(plan: CalibrationPlan, state: dict[str, dict[str, Any]], default_temperature: float) -> Fit:
    c_t = _plain_steps(plan, lambda c: step_records(state, plan.off.name, c))
    # a lookup drafts only on the arms' own answers, so its rounds are timed in the arms' batches, against
    # the plain pool's step in the same batches
    c_t_arms = _plain_steps(plan, lambda c: records_of(state, "timing", plan.off.name, regime="greedy",
                                                        concurrency=c))
    round_time: dict[tuple[str, int], float] = {}
    overheads: dict[int, float] = {}
    pool_overheads: dict[str, dict[int, float]] = {p.name: {} for p in plan.spec}
    drafted: dict[str, dict[int, float]] = {p.name: {} for p in plan.spec}
    for c in plan.concurrency:
        rounds = []
        for pool in plan.spec:
            step = (c_t_arms if pool.copies else c_t).get(c)
            found = _round(state, pool, c)
            if found is None or step is None:
                continue
            round_time[(pool.name, c)], per_round = found
            drafted[pool.name][c] = per_round
            # a lookup that verifies less than a token a round leaves its cost per drafted token buried
            # in the noise of comparing two pools' timings: not fitted at that load
            ov = (fitting.overhead(step, [(per_round, round_time[(pool.name, c)])])
                  if per_round >= MIN_DRAFTED_TO_FIT else None)
            if ov is not None:
                pool_overheads[pool.name][c] = ov
            if pool.method == "draft_model":
                rounds.append((pool.gamma, round_time[(pool.name, c)]))
        ov = fitting.overhead(c_t.get(c, 0.0), rounds)
        if ov is not None:
            overheads[c] = ov
    tau: dict[str, dict[str, float | None]] = {}
    tau_sampled: dict[str, dict[str, float | None]] = {}
    for pool in plan.spec:
        greedy = [(r.w, t) for r in records_of(state, "timing", pool.name, regime="greedy")
                  if (t := _tau_of(pool, r)) is not None]
        sampled = [(r.w, t) for r in records_of(state, "timing", pool.name, regime="default")
                   if (t := _tau_of(pool, r)) is not None]
        tau[pool.name] = fitting.class_tau(greedy)
        tau_sampled[pool.name] = fitting.class_tau(sampled)
    entropy_records = [r for r in records_of(state, "entropy") if r.entropy is not None]
    entropy = fitting.class_entropy([(r.w, r.entropy) for r in entropy_records])
    missing = statistics.mean(r.missing_mass for r in entropy_records) if entropy_records else None
    rho = {c: (math.exp(-h) if h is not None else None) for c, h in entropy.items()}

    def kappa_pairs(pools: list[Pool]) -> list[tuple[float, float]]:
        return [(1.0 - rho[c], 1.0 - fitting.invert_tau(tau[p.name][c], p.gamma))
                for p in pools for c in "srf" if rho[c] is not None and tau[p.name][c] is not None]

    pairs = kappa_pairs(_law_reference(plan))
    kappa = fitting.kappa_through_origin(pairs) or 0.9
    pool_fits = {p.name: _pool_fit(p, pool_overheads[p.name], drafted[p.name], kappa_pairs([p]))
                 for p in plan.spec}
    prefill = _prefill(plan, state)
    calibration = _calibration(plan, state, c_t, pool_fits, tau, tau_sampled, rho, kappa, prefill,
                               default_temperature)
    uncertainty = _uncertainty(plan, state, entropy_records, c_t, overheads)
    residuals = {f"kappa fit, {p:.2f}": round(e - kappa * p, 4) for p, e in pairs}
    return Fit(calibration, c_t, overheads, round_time, tau, tau_sampled, entropy, missing, pairs,
               uncertainty, residuals, pool_fits)


def _plain_steps(plan: CalibrationPlan, records_at: Callable[[int], list[Record]]) -> dict[int, float]:
    """The plain pool's step time by load: the median TPOT of ``records_at(load)``."""
    steps = {}
    for c in plan.concurrency:
        tpots = [r.tpot for r in records_at(c) if r.tpot is not None]
        if tpots:
            steps[c] = statistics.median(tpots)
    return steps


def _law_reference(plan: CalibrationPlan) -> list[Pool]:
    """The pools the calibration's kappa and sampled predictabilities are fitted on: the draft models
    (the law's reference drafter), else any model drafter. Heads also get a kappa of their own; a
    lookup's tau says nothing of alignment."""
    models = [p for p in plan.spec if not p.copies]
    return [p for p in models if p.method == "draft_model"] or models


def _tau_of(pool: Pool, record: Record) -> float | None:
    """A request's tau as the gate prices it. vLLM counts the rounds that drafted; a lookup drafts
    only where it finds a match, so its rounds are all of them: output tokens less accepted ones."""
    if not pool.copies:
        return record.tau
    return copying.tau_over_every_round(record.accepted, record.completion_tokens) if record.spec_steps else None


def _round(state: dict[str, dict[str, Any]], pool: Pool, concurrency: int) -> tuple[float, float] | None:
    """A pool's median seconds per decoding round at one load, and the draft tokens a round verifies.

    A model drafter drafts ``gamma`` every round, and its per-request tau counts every round: its
    rounds are timed in its step batches (``step_records``). A
    lookup proposes only where it finds a match, and vLLM counts only those rounds, so its rounds
    and drafted tokens come from the batch's counters: each round emits one token and the accepted."""
    if not pool.copies:
        records = [r for r in step_records(state, pool.name, concurrency) if r.tpot is not None]
        values = [r.tpot * (r.tau + 1.0) for r in records if r.tau is not None]
        return (statistics.median(values), float(pool.gamma)) if values else None
    records = [r for r in records_of(state, "timing", pool.name, regime="greedy", concurrency=concurrency)
               if r.tpot is not None]
    entries = [entry.get("counters", {}) for k, entry in state.items()
               if (parts := k.split("|"))[0] == "timing" and parts[2:] == [pool.name, str(concurrency), "greedy"]]
    accepted = sum(e.get("num_accepted_tokens", 0.0) for e in entries)
    proposed = sum(e.get("num_draft_tokens", 0.0) for e in entries)
    tokens = sum(r.completion_tokens for r in records)
    if not records or tokens <= accepted:
        return None
    rounds = tokens - accepted
    return statistics.median(r.tpot for r in records) * tokens / rounds, proposed / rounds


def _pool_fit(pool: Pool, overhead: dict[int, float], drafted: dict[int, float],
              pairs: list[tuple[float, float]]) -> PoolFit:
    """Split a pool's overhead into a draft pass's cost (what it costs at the lightest load, less the
    conventional delta there) and verification by load; a lookup drafts on the CPU, so it is all
    verification. A head's kappa comes from its own tau; without data, its method's default."""
    loads = sorted(overhead)
    defaults = METHOD_DEFAULTS.get(pool.method, METHOD_DEFAULTS["draft_model"])
    if pool.copies:
        d = 0.0
    elif loads:
        d = max(0.0, overhead[loads[0]] - DELTA_AT_ONE)
    else:
        d = defaults.draft_cost
    delta = [(float(b), max(0.0, overhead[b] - d)) for b in loads]
    kappa = None
    if pool.method != "draft_model" and not pool.copies:
        kappa = fitting.kappa_through_origin(pairs) or defaults.kappa
    return PoolFit(pool.method, pool.gamma, overhead, d, delta, kappa, drafted)


def _prefill(plan: CalibrationPlan, state: dict[str, dict[str, Any]]) -> float | None:
    """Seconds per uncached prompt token: TTFT against prompt length on fresh prompts.

    The prefill pass itself yields the first token; the intercept absorbs scheduling
    and network time.
    """
    records = [r for r in records_of(state, "prefill") if r.prompt_tokens > 0]
    return fitting.slope([r.prompt_tokens for r in records], [r.ttft for r in records])


def _calibration(plan: CalibrationPlan, state: dict[str, dict[str, Any]], c_t: dict[int, float],
                 pool_fits: dict[str, PoolFit],
                 tau: dict[str, dict[str, float | None]], tau_sampled: dict[str, dict[str, float | None]],
                 rho: dict[str, float | None], kappa: float, prefill: float | None,
                 default_temperature: float) -> Calibration:
    defaults = Calibration()
    rho_greedy = RhoTable(**{c: min(1.0, max(1e-3, rho[c] if rho[c] is not None else defaults.rho_greedy.of(c)))
                             for c in "srf"})
    sampled: dict[str, float] = {}
    for c in "srf":
        values = [fitting.invert_tau(t[c], p.gamma) for p in _law_reference(plan)
                  if (t := tau_sampled[p.name])[c] is not None]
        if values:
            eps = 1.0 - statistics.mean(values)
            sampled[c] = min(rho_greedy.of(c), max(1e-3, 1.0 - eps / kappa))
        else:
            sampled[c] = defaults.rho_sampled.of(c) * rho_greedy.of(c) / defaults.rho_greedy.of(c)
    pools = {}
    for p in plan.spec:
        measured, pool_fit = tau[p.name], pool_fits[p.name]
        tau_values = (ClassValues(**{c: float(measured[c]) for c in "srf"})
                      if all(measured[c] is not None for c in "srf") else None)
        default = defaults.pool("x", p.gamma, p.method)
        pools[p.name] = PoolCalibration(
            method=p.method, gamma=p.gamma, draft_cost=pool_fit.draft_cost,
            delta=Curve(points=pool_fit.delta) if pool_fit.delta else default.delta, tau_greedy=tau_values,
            kappa=None if pool_fit.kappa is None else max(1e-3, min(5.0, pool_fit.kappa)),
            copy_rates=_copy_rates(p, state) if p.copies else None)
    passes = [(float(b), v) for b, v in sorted(c_t.items())] or list(defaults.target_pass_seconds.points)
    return Calibration(
        source="measured", model=plan.model, created=datetime.now(timezone.utc), kappa=max(1e-3, min(5.0, kappa)),
        rho_greedy=rho_greedy, rho_sampled=RhoTable(**sampled), sampled_temperature=default_temperature,
        target_pass_seconds=Curve(points=passes),
        prefill_seconds_per_token=prefill if prefill is not None else defaults.prefill_seconds_per_token,
        pools=pools, sample_sizes={k.split("|")[0] + ":" + k.split("|")[1]: len(v["records"]) for k, v in state.items()},
    )


def _copy_rates(pool: Pool, state: dict[str, dict[str, Any]]) -> CopyCoefficients | None:
    """A lookup pool's own coefficients (``copying.fit_rates``), from what each greedy request held to copy
    and what the pool accepted of its answer, carried to depth 4 where they are stated; None without both
    a schema-bound and a prose request to fit on."""
    samples = []
    for r in records_of(state, "timing", pool.name, regime="greedy"):
        if r.completion_tokens <= 0 or not r.spec_steps:
            continue
        cls = "s" if r.w["s"] >= 0.5 else "f"
        sources = copying.CopySources(r.copy_chars, r.copy_code, r.copy_calls)
        samples.append((cls, sources, r.completion_tokens, round(r.accepted / copying.depth_factor(pool.gamma)),
                        r.drafted))
    if not {"s", "f"} <= {c for c, *_ in samples}:
        return None
    fitted = copying.fit_rates(samples)
    return CopyCoefficients(s_base=min(1.0, fitted.s_base), s_history=min(1.0, fitted.s_history),
                            f_base=min(1.0, fitted.f_base), f_context=min(1.0, fitted.f_context),
                            f_code=min(1.0, fitted.f_code), drafted_per_accepted=max(0.1, fitted.drafted_per_accepted))


def _uncertainty(plan: CalibrationPlan, state: dict[str, dict[str, Any]], entropy_records: list[Record],
                 c_t: dict[int, float], overheads: dict[int, float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    first = min(plan.concurrency)
    for c in plan.concurrency:
        off = [r for r in step_records(state, plan.off.name, c) if r.tpot]
        out[f"c_T({c})"] = fitting.bootstrap(off, lambda rs: statistics.median(r.tpot for r in rs))
    for pool in plan.spec:
        timed = (records_of(state, "timing", pool.name, regime="greedy", concurrency=first) if pool.copies
                 else step_records(state, pool.name, first))
        recs = [r for r in timed if r.tpot and r.tau is not None]
        if first in c_t:
            out[f"delta+d({first}) from {pool.name}"] = fitting.bootstrap(
                recs, lambda rs, g=pool.gamma: fitting.overhead(
                    c_t[first], [(g, statistics.median(r.tpot * (r.tau + 1) for r in rs))]))
    spec_records = [r for p in plan.spec for r in records_of(state, "timing", p.name, regime="greedy")
                    if r.tau is not None]
    gamma = plan.spec[0].gamma if plan.spec else 8

    def kappa_of(sample: list[Record]) -> float | None:
        taus = fitting.class_tau([(r.w, r.tau) for r in sample if r.kind == "timing"])
        ent = fitting.class_entropy([(r.w, r.entropy) for r in sample if r.kind == "entropy"])
        pairs = [(1 - math.exp(-ent[c]), 1 - fitting.invert_tau(taus[c], gamma)) for c in "srf"
                 if ent[c] is not None and taus[c] is not None]
        return fitting.kappa_through_origin(pairs)

    out["kappa"] = fitting.bootstrap(spec_records + entropy_records, kappa_of, rounds=100)
    return out


def predicted_tau(fit_: Fit, gamma: int, w: dict[str, float], rule: str) -> float:
    cal = fit_.calibration
    mix = law.ClassMix(max(0.0, w["s"]), max(0.0, w["r"]), max(0.0, 1.0 - max(0.0, w["s"]) - max(0.0, w["r"])))
    rho = cal.rho_greedy.as_law()
    if rule == "mixture":
        return law.tau(law.acceptance(law.mixture_rho(mix, rho), cal.kappa), gamma)
    drafter = law.Drafter(gamma, 0.0, 0.0)
    return law.predict_spans(mix, rho, cal.kappa, drafter).effective_tau


def progress_bar(done: int, total: int, label: str) -> None:
    draw("", done, total, f"{label[:50]:<50}")
