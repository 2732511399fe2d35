"""``draftgate evaluate``: the gate against every alternative, on the same pools and the same traffic.

For each seed: emulated pools whose physics and predictability are drawn from
the seed (a draft model at depth 2, 4 and 8; ngram prompt lookup at depth 4;
off; vLLM's dynamic K), a short calibration on the calibration split with a fit
per speculation pool, two proxies with that calibration (the gate in front of
the depth-8 and plain pools, and the gate in front of the ngram and depth-8
pools), then the held-out verdict split replayed through each strategy at each
concurrency (a closed loop of clients) and in an open-loop burst beyond the
draft-model pools' ``max_num_seqs``. Prefix caches are emptied before every
run, so no strategy inherits another's.

Against real pools (``--spec-on``, ``--spec-off``, ``--dynamic-k``) the same
replay runs once per seed on the URLs given; a strategy whose pool is not given
is reported as not measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from draftgate.calibrate.protocol import Pool
from draftgate.calibrate.short import short_calibration
from draftgate.evaluate import verdict
from draftgate.evaluate.replay import burst, closed_loop
from draftgate.evaluate.verdict import DYNAMIC, GATE, GATE_METHODS, OFF, Results, Run, always_ngram, always_on
from draftgate.progress import draw
from draftgate.servers import ServerProcess
from draftgate.workloads import mix

DEPTHS = (2, 4, 8)
GATED_DEPTH = verdict.GATED_DEPTH  # the proxies' draft-model pool
SPEC_SEQS = 48  # a speculation pool's max_num_seqs: it holds fewer KV tokens, and the burst exceeds it
DYNAMIC_K_TABLE = "[[1, 4, 8], [5, 16, 4], [17, 32, 2], [33, 1024, 0]]"
CALIBRATION_REQUESTS = 4
CALIBRATION_LOADS = (1, 8, 32)  # c_T and delta measured across the levels replayed; past 32, extrapolated
NGRAM_DEPTH = 4
NGRAM_LOOKUP = (2, 4)  # prompt_lookup_min and _max of the ngram pool


@dataclass
class Options:
    seeds: int = 5
    first_seed: int = 1
    concurrency: list[int] = field(default_factory=lambda: [1, 8, 32, 64])
    burst: int = 96
    scale: float = 1.0  # items per level, relative to the default
    time_scale: float = 0.05
    out: Path = Path("evaluate-output")
    spec_on: dict[int, str] = field(default_factory=dict)  # depth -> URL, for real pools
    spec_off: str | None = None
    dynamic_k: str | None = None
    ngram: str | None = None  # a real pool drafting with ngram at NGRAM_DEPTH, NGRAM_LOOKUP
    drafters: bool = True  # emulated: an ngram pool too, alone and gated with the draft-model pool
    model: str = mix.MODEL
    as_json: bool = False  # the summary alone on standard output; everything else on standard error

    @property
    def emulated(self) -> bool:
        return not self.spec_on and self.spec_off is None


def items_at(concurrency: int, scale: float) -> int:
    """Enough items that the loop is held at ``concurrency`` most of the run."""
    return max(4, int(max(16, 2 * concurrency) * scale))


@dataclass
class Pools:
    """Where each strategy's requests go for one seed (the gate's: the proxy), and the pools behind it."""

    by_strategy: dict[str, tuple[str, list[str]]]  # name -> (where requests go, the pools behind it)


def _emulator(seed: int, options: Options, speculative: str | None, max_num_seqs: int | None = None) -> ServerProcess:
    args = ["emulate", "--enable-force-include-usage", "--time-scale", str(options.time_scale),
            "--profile-seed", str(seed), "--seed", str(seed), "--model", options.model]
    if speculative:
        args += ["--speculative-config", speculative]
    if max_num_seqs:
        args += ["--max-num-seqs", str(max_num_seqs)]
    return ServerProcess(args)


def _draft(depth: int, extra: str = "") -> str:
    return ('{"method": "draft_model", "model": "Qwen/Qwen3-4B", '
            f'"num_speculative_tokens": {depth}{extra}}}')


def _ngram() -> str:
    return json.dumps({"method": "ngram", "num_speculative_tokens": NGRAM_DEPTH,
                       "prompt_lookup_min": NGRAM_LOOKUP[0], "prompt_lookup_max": NGRAM_LOOKUP[1]})


@contextlib.contextmanager
def seed_pools(seed: int, options: Options, say: Callable[[str], None]) -> Iterator[Pools]:
    """Every strategy's endpoint for one seed, the proxy calibrated and running; stopped after."""
    with contextlib.ExitStack() as stack:
        if options.emulated:
            spec = {d: stack.enter_context(_emulator(seed, options, _draft(d), SPEC_SEQS)).url for d in DEPTHS}
            off: str | None = stack.enter_context(_emulator(seed, options, None)).url
            dynamic: str | None = stack.enter_context(_emulator(
                seed, options, _draft(8, f', "num_speculative_tokens_per_batch_size": {DYNAMIC_K_TABLE}'),
                SPEC_SEQS)).url
            # a lookup holds no draft model's weights or KV: it keeps the plain pool's slots
            ngram: str | None = stack.enter_context(_emulator(seed, options, _ngram())).url if options.drafters else None
        else:
            spec, off, dynamic, ngram = dict(options.spec_on), options.spec_off, options.dynamic_k, options.ngram
        by_strategy: dict[str, tuple[str, list[str]]] = {}
        if spec and off:
            depth = GATED_DEPTH if GATED_DEPTH in spec else max(spec)
            gates = stack.enter_context(_gates(seed, options, spec[depth], depth, off, ngram, say))
            by_strategy[GATE] = (gates[GATE], [spec[depth], off])
            if ngram:
                by_strategy[GATE_METHODS] = (gates[GATE_METHODS], [ngram, spec[depth]])
        for depth, url in sorted(spec.items()):
            by_strategy[always_on(depth)] = (url, [url])
        if ngram:
            by_strategy[always_ngram(NGRAM_DEPTH)] = (ngram, [ngram])
        if off:
            by_strategy[OFF] = (off, [off])
        if dynamic:
            by_strategy[DYNAMIC] = (dynamic, [dynamic])
        yield Pools(by_strategy)


@contextlib.contextmanager
def _gates(seed: int, options: Options, on: str, depth: int, off: str, ngram: str | None,
           say: Callable[[str], None]) -> Iterator[dict[str, str]]:
    """The proxies, calibrated once on the calibration split (a fit per speculation pool): the gate in
    front of the draft-model and plain pools, and, with an ngram pool, the gate in front of it and the
    draft-model pool."""
    out = options.out / f"seed-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    others = (Pool("ngram", ngram, NGRAM_DEPTH, "ngram"),) if ngram else ()
    fitted = short_calibration(on, off, out / "calibration.yaml", options.model, CALIBRATION_REQUESTS, depth,
                               calibration_arms(), lambda i, n, label: draw(f"  seed {seed} calibration ", i, n,
                                                                             "batches"), CALIBRATION_LOADS, others)
    say(f"  seed {seed}: calibrated on the calibration split, kappa {fitted.calibration.kappa:.2f}; " + "; ".join(
        f"{name} ({pool.method}, K={pool.gamma}) d={pool.draft_cost:.3f}, delta "
        + (", ".join(f"{v:.3f} at {b:.0f}" for b, v in pool.delta) or "not identifiable (calibration's default)")
        for name, pool in fitted.pools.items()))
    # the emulated draft-model pools run with SPEC_SEQS slots; real ones as their operator started them
    slots = {"max_num_seqs": SPEC_SEQS} if options.emulated else {}
    draft = {"name": "spec-on", "urls": [on], "speculation": {"gamma": depth}, **slots}
    deployments = {GATE: [draft, {"name": "spec-off", "urls": [off]}]}
    if ngram:
        deployments[GATE_METHODS] = [{"name": "ngram", "urls": [ngram], "speculation": {
            "method": "ngram", "gamma": NGRAM_DEPTH, "prompt_lookup_min": NGRAM_LOOKUP[0],
            "prompt_lookup_max": NGRAM_LOOKUP[1]}}, draft]
    with contextlib.ExitStack() as stack:
        urls = {}
        for i, (name, pools) in enumerate(deployments.items()):
            config = {"pools": pools, "calibration_file": str((out / "calibration.yaml").resolve()),
                      "log_requests": False}
            path = out / f"draftgate-{i}.yaml"
            path.write_text(yaml.safe_dump(config))
            urls[name] = stack.enter_context(ServerProcess(["serve", "--config", str(path), "--log-level",
                                                            "warning"])).url
        yield urls


def calibration_arms() -> dict[str, list[dict[str, Any]]]:
    """The four arms from the calibration split: prose (A), tool calls forced, greedy (B),
    reasoning (C), agent turns (D). Nothing of the verdict split is among them."""
    found = mix.items("calibration")
    first = lambda kind: [item.requests[-1] for item in found[kind]]  # noqa: E731
    prose = [dict(body, max_tokens=min(128, body.get("max_tokens", 128))) for body in first("chat")]
    return {"A": prose, "B": [dict(body, tool_choice="required") for body in first("tool call")],
            "C": [dict(body, max_tokens=512) for body in first("reasoning")],
            "D": [body for item in found["agent session"] for body in item.requests]}


def _reset(pools: list[str]) -> None:
    with httpx.Client(timeout=30) as client:
        for url in pools:
            with contextlib.suppress(httpx.HTTPError):  # a real pool may not expose it
                client.post(f"{url}/reset_prefix_cache")


def run(options: Options, say: Callable[[str], None] = print) -> tuple[dict[str, Any], Results]:
    """The whole comparison; returns the summary (``--json``'s object) and the raw results."""
    # real pools: a strategy whose pool is not given is reported as not measured; emulated, the ngram
    # pool's two are left out when asked (the demo)
    drafters = options.drafters or not options.emulated
    ngram = [always_ngram(NGRAM_DEPTH)] if drafters else []
    strategies = [GATE, *([GATE_METHODS] if drafters else []), *(always_on(d) for d in DEPTHS), *ngram, OFF, DYNAMIC]
    results = Results(strategies, [always_on(d) for d in DEPTHS] + ngram + [OFF])
    levels: list[str] = [str(c) for c in options.concurrency] + (["burst"] if options.burst else [])
    streamed = not options.emulated
    for seed in range(options.first_seed, options.first_seed + options.seeds):
        with seed_pools(seed, options, say) as pools:
            total = len(levels) * len(pools.by_strategy)
            done = 0
            for level in levels:
                if level == "burst":
                    # single requests (a session's turns cannot all arrive at once): tool calls and chat
                    singles = [i for i in mix.sample("verdict", options.burst * 2, seed * 1000 + 999)
                               if i.kind in ("tool call", "chat")]
                    chosen = singles[: int(options.burst * options.scale) or 1]
                else:
                    chosen = mix.sample("verdict", items_at(int(level), options.scale), seed * 1000 + int(level))
                for name, (url, behind) in pools.by_strategy.items():
                    draw(f"  seed {seed} ", done, total, f"runs ({name}, {level})")
                    _reset(behind)
                    started = time.perf_counter()
                    measured = asyncio.run(burst(url, chosen, streamed) if level == "burst"
                                           else closed_loop(url, chosen, int(level), streamed))
                    results.add(level, name, seed, Run(measured, time.perf_counter() - started, len(behind)))
                    done += 1
            draw(f"  seed {seed} ", total, total, "runs")
    return verdict.summary(results, options.emulated), results


def report(summary_: dict[str, Any], options: Options, say: Callable[[str], None] = print) -> Path | None:
    """The table, the latencies, the findings in words, and the figure."""
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "verdict.json").write_text(json.dumps(summary_, indent=2))
    say(f"\nCost per output token, {summary_['cost_unit']}: mean [range over {summary_['seeds']} seeds]\n")
    say(verdict.table(summary_))
    say("\n" + verdict.latency_table(summary_))
    drafters = verdict.drafters_table(summary_, always_ngram(NGRAM_DEPTH), always_on(GATED_DEPTH))
    if drafters:
        say("\n" + drafters)
    say("\n" + "\n".join(verdict.findings(summary_)))
    path = verdict.figure(summary_, options.out / "cost_vs_concurrency.png")
    if path:
        say(f"\nfigure: {path}")
    return path


def main(options: Options) -> int:
    stream = sys.stderr if options.as_json else sys.stdout

    def say(text: str) -> None:
        print(text, file=stream, flush=True)

    if options.emulated:
        say("draftgate evaluate: EMULATED pools (no GPU; H200 physics). Point --spec-on/--spec-off at your own "
            "pools for your hardware's verdict.")
    summary_, _ = run(options, say)
    report(summary_, options, say)
    if options.as_json:
        print(json.dumps(summary_))
    return 0
