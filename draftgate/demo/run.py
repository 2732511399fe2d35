"""``draftgate demo``: emulated pools, a short calibration, the replay, the verdict.

Starts three emulated vLLM servers (speculation on at depth 8; off; and one
with vLLM's own dynamic K), calibrates against the first two, puts the proxy in
front with that calibration, then replays the same agent workload four ways:
through the gate, always on, always off, and dynamic K. Independent requests
run one at a time, so each one's GPU time is exact, and the oracle (each
request on whichever pool was cheaper for it) comes from the always-on and
always-off replays.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from draftgate.calibrate import protocol
from draftgate.demo.replay import Meter, Result, progress_line, replay
from draftgate.demo.workload import build
from draftgate.policy import law
from draftgate.proxy.calibration_file import save_calibration
from draftgate.servers import ServerProcess

TIME_SCALE = "0.1"
SPEC_SEQS = 16  # small enough that the burst saturates the speculation pool
DYNAMIC_K = '[[1, 4, 8], [5, 12, 4], [13, 1024, 0]]'
STRATEGIES = ("gated", "always on", "always off", "dynamic K")


@dataclass
class Outcome:
    results: dict[str, list[Result]]
    cost_per_token: dict[str, float]  # strategy (and "oracle") -> GPU-seconds per output token
    table: str
    figure: Path | None = None
    calibration: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def say(text: str = "") -> None:
    print(text, flush=True)


@contextlib.contextmanager
def emulated_pools(seed: int) -> Iterator[tuple[str, str, str]]:
    common = ["--enable-force-include-usage", "--time-scale", TIME_SCALE, "--profile-seed", str(seed),
              "--seed", str(seed)]
    spec = ["emulate", *common, "--max-num-seqs", str(SPEC_SEQS), "--per-request-spec-decode-metrics", "summary",
            "--speculative-config", '{"method": "draft_model", "model": "Qwen/Qwen3-4B", "num_speculative_tokens": 8}']
    dynamic = ["emulate", *common, "--max-num-seqs", str(SPEC_SEQS), "--speculative-config",
               '{"method": "draft_model", "model": "Qwen/Qwen3-4B", "num_speculative_tokens": 8, '
               f'"num_speculative_tokens_per_batch_size": {DYNAMIC_K}}}']
    with ServerProcess(spec) as on, ServerProcess(["emulate", *common]) as off, ServerProcess(dynamic) as dyn:
        yield on.url, off.url, dyn.url


def calibrate(on: str, off: str, out_dir: Path, model: str, requests: int) -> Path:
    arms = ["A", "B", "C", "D"]
    plan = protocol.Plan(model, [protocol.Pool("spec-on", on, 8)], protocol.Pool("spec-off", off, 0), arms, [1, 8],
                         ["greedy"], requests, None, {a: protocol.load_arm(a) for a in arms})
    with tempfile.TemporaryDirectory() as tmp:
        state = protocol.execute(plan, Path(tmp) / "state.jsonl",
                                 lambda i, n, label: progress_line("calibration", i, n))
        fitted = protocol.fit(plan, state, 0.6)
    path = out_dir / "calibration.yaml"
    save_calibration(fitted.calibration, path)
    say(f"  kappa {fitted.calibration.kappa:.2f}, tau S/R/F "
        + "/".join(f"{fitted.tau['spec-on'][c] or 0:.2f}" for c in "srf")
        + f", delta+d at 1 running {fitted.overhead.get(1, float('nan')):.3f}; written to {path}")
    return path


def run_demo(seed: int = 1, scale: float = 1.0, out_dir: Path = Path("demo-output"), spec_on: str | None = None,
             spec_off: str | None = None, dynamic_k: str | None = None, keep_running: bool = False,
             calibration_requests: int = 4) -> Outcome:
    out_dir.mkdir(parents=True, exist_ok=True)
    emulated = spec_on is None
    say("draftgate demo")
    if emulated:
        say("  The backends are EMULATED vLLM servers (no GPU): the figures show the mechanism, not your hardware.")
        say("  `draftgate calibrate` against your own pools is how you get your own numbers.")
    with (emulated_pools(seed) if emulated else contextlib.nullcontext((spec_on, spec_off, dynamic_k))) as urls:
        on, off, dyn = urls
        say(f"\n1. calibrating against {on} (speculation on) and {off} (off), short run")
        cal_path = calibrate(on, off, out_dir, "Qwen/Qwen3-32B", calibration_requests)
        config = {"pools": [{"name": "spec-on", "urls": [on], "speculation": {"gamma": 8}, "max_num_seqs": SPEC_SEQS},
                            {"name": "spec-off", "urls": [off]}],
                  "calibration_file": str(cal_path.resolve()), "exploration_share": 0.0, "log_requests": False,
                  # as the README's example configuration: a predicted saving under 5% is a coin flip
                  # (the same prompt's reasoning share varies 0.4-0.8 between draws), and speculation's
                  # draft cost is certain, so such requests stay on the plain pool
                  "default_policy": {"margin": 0.05}}
        (out_dir / "draftgate.yaml").write_text(yaml.safe_dump(config))
        with ServerProcess(["serve", "--config", str(out_dir / "draftgate.yaml"), "--log-level", "warning"]) as proxy:
            say(f"\n2. proxy on {proxy.url}/v1 — while it runs, its metrics are at {proxy.url}/metrics")
            steps = build(seed, scale)
            say(f"\n3. replaying {sum(s.turns if s.session is not None else len(s.burst) or 1 for s in steps)} "
                "requests four ways (tool calls, JSON, reasoning, prose, agent sessions, a burst)")
            results: dict[str, list[Result]] = {}
            with httpx.Client(timeout=300) as client:
                targets = {"gated": (proxy.url, [on, off]), "always on": (on, [on]), "always off": (off, [off])}
                if dyn:
                    targets["dynamic K"] = (dyn, [dyn])
                for name, (url, pools) in targets.items():
                    results[name] = replay(name, url, steps, Meter(client, pools, emulated), explain=name == "gated",
                                           progress=progress_line)
            outcome = summarise(results, cal_path)
            say("\n4. results: cost per output token, busy GPU-milliseconds"
                + (" (simulated H200)" if emulated else "") + "\n")
            say(outcome.table)
            outcome.figure = plot(results, cal_path, out_dir / "saving_vs_schema.png")
            say(f"\n  figure: {outcome.figure}")
            if keep_running:
                say(f"\nThe stack is up. Point your client at base_url={proxy.url}/v1 (any api_key). Ctrl-C stops it.")
                with contextlib.suppress(KeyboardInterrupt):
                    while True:
                        time.sleep(3600)
    return outcome


BURST = "burst (tool calls)"


def summarise(results: dict[str, list[Result]], cal_path: Path) -> Outcome:
    """Per class and in total. Requests that ran one at a time have an exact cost on
    every pool, hence an oracle; the concurrent burst has none, and is judged on
    GPU cost and on latency (where shedding to the idle plain pool pays)."""
    gated, on, off = results["gated"], results["always on"], results["always off"]
    oracle = [min(a.cost, b.cost) for a, b in zip(on, off)]
    labels = [label for label in dict.fromkeys(r.label for r in gated) if label != BURST]
    strategies = [s for s in STRATEGIES if s in results]
    header = ["class", "share", "to spec", "tau pred", "tau obs", "saving pred", "saving obs", *strategies, "oracle"]
    rows = []

    def per_token(rs: list[Result], costs: list[float] | None = None) -> float:
        tokens = sum(r.tokens for r in rs)
        return (sum(costs) if costs is not None else sum(r.cost for r in rs)) / max(1, tokens)

    sequential = [i for i, r in enumerate(gated) if r.label != BURST]
    burst = [i for i, r in enumerate(gated) if r.label == BURST]
    groups = [(label, [i for i in sequential if gated[i].label == label]) for label in labels]
    groups.append(("total (one at a time)", sequential))
    if burst:
        groups.append((BURST, burst))
    for label, idx in groups:
        pick = lambda rs: [rs[i] for i in idx]  # noqa: E731
        g = pick(gated)
        to_spec = sum(r.route == "spec-on" for r in g) / len(g)
        pred_tau = [r.predicted_tau for r in g if r.predicted_tau is not None]
        obs_tau = [r.observed_tau for r in pick(on) if r.observed_tau is not None]
        pred_saving = [r.predicted_saving for r in g if r.predicted_saving is not None]
        obs_saving = 1 - sum(r.cost for r in pick(on)) / max(1e-12, sum(r.cost for r in pick(off)))
        costs = [f"{per_token(pick(results[s])) * 1000:.2f}" for s in strategies]
        costs.append("-" if label == BURST else f"{per_token(pick(on), [oracle[i] for i in idx]) * 1000:.2f}")
        rows.append([label, f"{len(idx) / len(gated):.0%}", f"{to_spec:.0%}",
                     f"{statistics.mean(pred_tau):.2f}" if pred_tau else "-",
                     f"{statistics.mean(obs_tau):.2f}" if obs_tau else "-",
                     f"{statistics.mean(pred_saving):+.0%}" if pred_saving else "-", f"{obs_saving:+.0%}", *costs])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    table = "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])
    seq = lambda rs: [rs[i] for i in sequential]  # noqa: E731
    totals = {s: per_token(seq(results[s])) for s in strategies}
    totals["oracle"] = per_token(seq(on), [oracle[i] for i in sequential])
    best = min((s for s in strategies if s != "gated"), key=lambda s: totals[s])
    table += (f"\n\nOne request at a time: gated {totals['gated'] * 1000:.2f} ms/token, "
              f"{_relative(totals['gated'], totals[best])} the best fixed strategy ({best}), "
              f"{_relative(totals['gated'], totals['oracle'])} the oracle.")
    if burst:
        p99 = {s: sorted(r.latency for r in (results[s][i] for i in burst))[-1] for s in strategies}
        verdict = ("it shortened the slowest request" if p99["gated"] < p99["always on"]
                   else "here it did not shorten the slowest request")
        table += ("\nBurst (concurrent, more than the speculation pool's max_num_seqs): slowest request "
                  + ", ".join(f"{s} {v:.2f} s" for s, v in p99.items())
                  + f". The gate sheds marginal traffic from the full speculation pool to the plain one, which "
                  f"costs GPU-seconds there; {verdict}.")
    return Outcome(results, totals, table, calibration=cal_path)


def _relative(cost: float, other: float) -> str:
    """``cost`` against ``other`` in words a reader cannot take the wrong way round."""
    change = cost / other - 1
    return f"{abs(change):.1%} {'more than' if change > 0 else 'less than'}" if abs(change) >= 0.0005 else "the same as"


def plot(results: dict[str, list[Result]], cal_path: Path, path: Path) -> Path | None:
    try:
        from draftgate.plots import plt
    except ImportError:
        return None
    from draftgate.proxy.calibration_file import load_calibration

    cal = load_calibration(cal_path)
    pool = cal.pool("spec-on", 8)
    drafter = law.Drafter(8, pool.delta(1), pool.draft_cost)
    taus = pool.tau_greedy.model_dump() if pool.tau_greedy else None
    xs = [i / 50 for i in range(51)]
    fig, ax = plt.subplots(figsize=(8, 5))
    if taus:
        ax.plot(xs, [law.predict_spans_from_tau(law.ClassMix(x, 0, 1 - x), taus, drafter).saving for x in xs],
                label="predicted (calibrated, S:F mixes, 1 running)")
        ws = law.break_even_ws_spans(taus, drafter, law.ClassMix(0, 0, 1))
        if ws.value is not None and ws.clipped is None:
            ax.axvline(ws.value, color="red", linestyle="--", label=f"break-even w_S* = {ws.value:.2f}")
    on, off = results["always on"], results["always off"]
    points = [(a.w_s, 1 - a.cost / b.cost) for a, b in zip(on, off) if b.cost > 0 and a.label != "burst (tool calls)"]
    ax.scatter([x for x, _ in points], [y for _, y in points], s=12, alpha=0.6, label="observed, per request")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("schema fraction w_S (observed)")
    ax.set_ylabel("saving (1 - GPU time on spec / GPU time plain)")
    ax.set_title("Speculative saving against schema fraction (emulated pools)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


if __name__ == "__main__":  # pragma: no cover
    run_demo(seed=int(sys.argv[1]) if len(sys.argv) > 1 else 1)
