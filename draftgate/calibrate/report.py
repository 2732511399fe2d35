"""The falsification report: the fitted model, its break-even points, and verdicts.

Each verdict states the numbers it rests on; a criterion without the data to
judge it says why, and is never reported as passed.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draftgate.calibrate.protocol import ARM_NAMES, CalibrationPlan, Fit, predicted_tau, records_of
from draftgate.policy import law


@dataclass
class Verdict:
    name: str
    status: str  # "rejects", "consistent", "cannot be evaluated"
    evidence: str


def verdicts(plan: CalibrationPlan, state: dict[str, dict[str, Any]], fit: Fit) -> list[Verdict]:
    return [_r1(plan, fit), _r2(plan, state, fit), _r3(plan, state, fit), _r4(plan, state)]


def _r1(plan: CalibrationPlan, fit: Fit) -> Verdict:
    lines, rejected, judged = [], False, False
    for pool in plan.spec:
        t = fit.tau[pool.name]
        if t["s"] is None or t["f"] is None:
            continue
        judged = True
        order = "S > R > F" if t["r"] is not None and t["s"] > t["r"] > t["f"] else "not S > R > F"
        lines.append(f"{pool.name} (gamma={pool.gamma}): tau_S={t['s']:.2f}, tau_R="
                     f"{'n/a' if t['r'] is None else format(t['r'], '.2f')}, tau_F={t['f']:.2f}, "
                     f"tau_S/tau_F={t['s'] / max(t['f'], 1e-9):.2f} (P1: {order})")
        rejected = rejected or t["s"] <= t["f"]
    if not judged:
        return Verdict("R1 (tau_S <= tau_F rejects the law)", "cannot be evaluated",
                       "no pool has measured tau for both S and F (run arms A and B)")
    return Verdict("R1 (tau_S <= tau_F rejects the law)", "rejects" if rejected else "consistent", "; ".join(lines))


def _r2(plan: CalibrationPlan, state: dict[str, dict[str, Any]], fit: Fit) -> Verdict:
    savings = []
    for pool in plan.spec:
        for c, c_t in fit.c_t.items():
            for r in records_of(state, "timing", pool.name, regime="greedy", concurrency=c):
                if r.w["s"] >= 0.6 and r.tpot is not None:
                    savings.append(1.0 - r.tpot / c_t)
    if not savings:
        return Verdict("R2 (s < 0 at w_S >= 0.6 rejects the break-even model)", "cannot be evaluated",
                       "no speculated request with w_S >= 0.6 was timed")
    mean = statistics.mean(savings)
    status = "rejects" if mean < 0 else "consistent"
    return Verdict("R2 (s < 0 at w_S >= 0.6 rejects the break-even model)", status,
                   f"mean time-measured saving over {len(savings)} requests with w_S >= 0.6: {mean:+.1%} "
                   "(decode time per token against the plain pool at the same concurrency)")


def _r3(plan: CalibrationPlan, state: dict[str, dict[str, Any]], fit: Fit) -> Verdict:
    name = "R3 (composition residual over 15% rejects orthogonal composition)"
    if "D" not in plan.arms or not plan.spec:
        return Verdict(name, "cannot be evaluated", "arm D (agent replay with shared prefixes) was not run")
    pool, c = plan.spec[0], min(plan.concurrency)
    entry = state.get(f"timing|D|{pool.name}|{c}|greedy")
    if entry is None or c not in fit.c_t or c not in fit.overhead:
        return Verdict(name, "cannot be evaluated", "no arm-D timing run at the lowest concurrency")
    records = [r for r in records_of(state, "timing", pool.name, arm="D", regime="greedy", concurrency=c)
               if r.tau is not None]
    queries = entry["counters"].get("prefix_cache_queries", 0.0)
    if queries <= 0 or not records:
        return Verdict(name, "cannot be evaluated", "the pool's prefix-cache counters did not move during arm D")
    h = entry["counters"].get("prefix_cache_hits", 0.0) / queries
    cal = fit.calibration
    c_t = fit.c_t[c]
    prefill = sum(r.prompt_tokens for r in records) * cal.prefill_seconds_per_token
    decode = sum((1 + pool.gamma * fit.overhead[c]) / (r.tau + 1) * r.completion_tokens * c_t for r in records)
    predicted = (1 - h + h * cal.prefill_hit_cost_ratio) * prefill + decode
    measured = sum(r.ttft + r.decode_time for r in records) / c  # concurrent requests share the GPU
    residual = abs(predicted - measured) / measured
    return Verdict(name, "rejects" if residual > 0.15 else "consistent",
                   f"hit rate h={h:.2f} from vLLM's prefix-cache counters; predicted {predicted:.3f} s against "
                   f"measured {measured:.3f} s of busy time over {len(records)} requests: residual {residual:.1%}")


def _r4(plan: CalibrationPlan, state: dict[str, dict[str, Any]]) -> Verdict:
    name = "R4 (spec-on outputs differing from spec-off at temperature 0, beyond spec-off's own rate)"
    c = plan.concurrency[0]
    off = {r.index: r.digest for r in records_of(state, "timing", plan.off.name, arm="B", regime="greedy",
                                                  concurrency=c)}
    repeat = {r.index: r.digest for r in records_of(state, "repeat", plan.off.name, arm="B")}
    if not off or not repeat or not plan.spec:
        return Verdict(name, "cannot be evaluated", "arm B was not run on both pools and repeated on the plain pool")
    baseline = sum(off[i] != repeat.get(i) for i in off) / len(off)
    lines, rejected = [f"spec-off against itself: {baseline:.1%} of {len(off)} outputs differ"], False
    for pool in plan.spec:
        on = {r.index: r.digest for r in records_of(state, "timing", pool.name, arm="B", regime="greedy",
                                                     concurrency=c)}
        rate = sum(off[i] != on.get(i) for i in off) / len(off)
        excess = rate - baseline
        lines.append(f"{pool.name} against spec-off: {rate:.1%} (excess {excess:+.1%})")
        rejected = rejected or excess > max(0.02, 2.0 / len(off))
    return Verdict(name, "rejects" if rejected else "consistent", "; ".join(lines))


def rule_errors(plan: CalibrationPlan, state: dict[str, dict[str, Any]], fit: Fit) -> dict[str, dict[str, float]]:
    """Mean absolute error of predicted tau and saving per combination rule, on arm D (mixed)."""
    out: dict[str, dict[str, float]] = {}
    for rule in ("mixture", "spans"):
        tau_err, saving_err = [], []
        for pool in plan.spec:
            for c in plan.concurrency:
                ov = fit.overhead.get(c)
                for r in records_of(state, "timing", pool.name, arm="D", regime="greedy", concurrency=c):
                    if r.tau is None or ov is None:
                        continue
                    pred = predicted_tau(fit, pool.gamma, r.w, rule)
                    drafter = law.Drafter(pool.gamma, 0.0, ov)
                    tau_err.append(abs(pred - r.tau))
                    saving_err.append(abs(law.saving_from_tau(min(pred, pool.gamma), drafter)
                                          - law.saving_from_tau(min(r.tau, pool.gamma), drafter)))
        if tau_err:
            out[rule] = {"tau": statistics.mean(tau_err), "saving": statistics.mean(saving_err), "n": len(tau_err)}
    return out


def write_report(path: Path, plan: CalibrationPlan, state: dict[str, dict[str, Any]], fit: Fit) -> None:
    cal = fit.calibration
    figures = _figures(path, plan, state, fit)
    lines = [f"# draftgate calibration report: {cal.model}", "",
             f"Pools: {', '.join(f'{p.name} ({p.method}, gamma={p.gamma})' for p in plan.spec)} against "
             f"{plan.off.name}; "
             f"arms {', '.join(f'{a} ({ARM_NAMES[a]})' for a in plan.arms)}; concurrency "
             f"{', '.join(map(str, plan.concurrency))}; regimes {', '.join(plan.regimes)}; "
             f"{plan.requests} requests per arm and run.", "",
             "## Fitted parameters", "", "| parameter | value | uncertainty (bootstrap sd) |", "| --- | --- | --- |",
             f"| kappa | {cal.kappa:.3f} | {_fmt(fit.uncertainty.get('kappa'))} |"]
    for c in "srf":
        h = fit.entropy[c]
        lines.append(f"| rho_{c} (temperature 0) | {cal.rho_greedy.of(c):.3f} | entropy "
                     f"{'n/a' if h is None else format(h, '.3f')} nats |")
    for b, value in sorted(fit.c_t.items()):
        lines.append(f"| c_T({b}) target pass seconds | {value:.5f} | {_fmt(fit.uncertainty.get(f'c_T({b})'))} |")
    for b, value in sorted(fit.overhead.items()):
        extra = next((v for k, v in fit.uncertainty.items() if k.startswith(f"delta+d({b})")), None)
        lines.append(f"| delta+d at {b} running | {value:.4f} | {_fmt(extra)} |")
    lines.append(f"| prefill seconds per uncached token | {cal.prefill_seconds_per_token:.2e} | |")
    lines += ["", "## Each speculation pool's own fit", "",
              "Fitted per pool, never pooled across methods or depths: a draft pass's cost d, and the verification "
              "cost delta per draft token by load (a lookup's d is 0: it runs on the CPU).", "",
              "| pool | method | gamma | d | delta by running requests | kappa | drafted per round |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, pf in fit.pools.items():
        deltas = ", ".join(f"{b:.0f}: {v:.3f}" for b, v in pf.delta) or "not measured (defaults)"
        drafted = ", ".join(f"{b}: {v:.2f}" for b, v in sorted(pf.drafted_per_round.items()))
        kappa = "the calibration's" if pf.kappa is None and pf.method == "draft_model" else _fmt(pf.kappa)
        lines.append(f"| {name} | {pf.method} | {pf.gamma} | {pf.draft_cost:.3f} | {deltas} | {kappa} | {drafted} |")
    if fit.missing_mass is not None:
        lines += ["", f"rho comes from top-20 logprobs on the plain pool; the truncated distribution misses "
                      f"{fit.missing_mass:.2%} of probability mass on average, which biases entropy down and rho up."]
    lines += ["", "Residuals of the kappa fit (eps - kappa*(1-rho)): " +
              ", ".join(f"{v:+.3f}" for v in fit.residuals.values()), "",
              "## tau by class and depth", "", "| pool | gamma | tau_S | tau_R | tau_F |", "| --- | --- | --- | --- | --- |"]
    for p in plan.spec:
        t = fit.tau[p.name]
        lines.append(f"| {p.name} | {p.gamma} | " + " | ".join(_fmt(t[c]) for c in "srf") + " |")
    lines += ["", f"![tau by class]({figures[0]})", "", "## Break-even acceptance", "",
              "| pool | running | alpha* exact | alpha* closed form |", "| --- | --- | --- | --- |"]
    for p in plan.spec:
        pc = cal.pool(p.name, p.gamma, p.method)
        for b in sorted(fit.overhead):
            drafter = law.Drafter(p.gamma, pc.delta(b), pc.draft_cost)
            exact, closed = law.break_even_alpha(drafter), law.break_even_eps_closed_form(drafter)
            lines.append(f"| {p.name} | {b} | {_fmt(exact)} | {_fmt(None if closed is None else 1 - closed)} |")
    errors = rule_errors(plan, state, fit)
    lines += ["", "## Mixture or spans", ""]
    if errors:
        lines += ["| rule | mean abs error, tau | mean abs error, saving | requests |", "| --- | --- | --- | --- |"]
        lines += [f"| {rule} | {e['tau']:.3f} | {e['saving']:.3f} | {e['n']} |" for rule, e in errors.items()]
        if abs(errors["mixture"]["tau"] - errors["spans"]["tau"]) < 1e-9:
            lines += ["", "The two rules agree on this data: every response was of a single class."]
        else:
            best = min(errors, key=lambda r: errors[r]["tau"])
            lines += ["", f"On the mixed arm the **{best}** rule predicted the measured tau better."]
    else:
        lines.append("Cannot be evaluated: arm D (mixed) was not run on a speculation pool.")
    lines += ["", "## Saving against schema fraction", "", f"![saving against w_S]({figures[1]})", "",
              "## Verdicts", ""]
    for v in verdicts(plan, state, fit):
        lines += [f"- **{v.name}: {v.status}.** {v.evidence}"]
    lines += ["", "## Against vLLM's dynamic K", "", _dynamic_k(plan, state)]
    path.write_text("\n".join(lines) + "\n")


def _dynamic_k(plan: CalibrationPlan, state: dict[str, dict[str, Any]]) -> str:
    if plan.dynamic_k is None:
        return ("Cannot be evaluated: no `--dynamic-k` pool (one speculation pool started with "
                "`num_speculative_tokens_per_batch_size`) was given.")
    rows = ["| concurrency | plain | best fixed depth | dynamic K |", "| --- | --- | --- | --- |"]
    for c in plan.concurrency:
        def cost(pool: str) -> float | None:
            rs = records_of(state, "timing", pool, arm="D", regime="greedy", concurrency=c)
            tokens = sum(r.completion_tokens for r in rs)
            return sum(r.ttft + r.decode_time for r in rs) / c / tokens if tokens else None
        fixed = [v for p in plan.spec if (v := cost(p.name)) is not None]
        rows.append(f"| {c} | {_fmt(cost(plan.off.name), 5)} | {_fmt(min(fixed) if fixed else None, 5)} | "
                    f"{_fmt(cost(plan.dynamic_k.name), 5)} |")
    return "Busy seconds per output token on arm D:\n\n" + "\n".join(rows)


def _figures(path: Path, plan: CalibrationPlan, state: dict[str, dict[str, Any]], fit: Fit) -> tuple[str, str]:
    from draftgate.plots import plt

    stem = path.with_suffix("")
    tau_png, saving_png = Path(f"{stem}-tau.png"), Path(f"{stem}-saving.png")
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(1, len(plan.spec))
    for i, p in enumerate(plan.spec):
        t = fit.tau[p.name]
        ax.bar([j + i * width for j in range(3)], [t[c] or 0.0 for c in "srf"], width, label=f"gamma={p.gamma}")
    ax.set_xticks([j + width * (len(plan.spec) - 1) / 2 for j in range(3)], ["S", "R", "F"])
    ax.set_ylabel("tau (accepted per round)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(tau_png, dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [i / 50 for i in range(51)]
    c0 = min(fit.overhead) if fit.overhead else None
    for p in plan.spec:
        if c0 is None:
            break
        drafter = law.Drafter(p.gamma, 0.0, fit.overhead[c0])
        rho, kappa = fit.calibration.rho_greedy.as_law(), fit.calibration.kappa
        ax.plot(xs, [law.predict_spans(law.ClassMix(x, 0.0, 1 - x), rho, kappa, drafter).saving for x in xs],
                label=f"predicted, gamma={p.gamma}")
        points = [(r.w["s"], 1 - r.tpot / fit.c_t[r.concurrency])
                  for r in records_of(state, "timing", p.name, regime="greedy")
                  if r.tpot is not None and r.concurrency in fit.c_t]
        ax.scatter([x for x, _ in points], [y for _, y in points], s=8, alpha=0.5, label=f"measured, gamma={p.gamma}")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("schema fraction w_S")
    ax.set_ylabel("saving")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(saving_png, dpi=100)
    plt.close(fig)
    return tau_png.name, saving_png.name


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"
