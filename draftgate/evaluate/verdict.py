"""From what every strategy's requests cost to the verdict: a table, a JSON object, a figure.

Cost is docs/model.md's: busy GPU-seconds per output token, prefill included, at
the stated load, shown in GPU-milliseconds. Each strategy's figure is the mean
over seeds with its range beside it. The oracle sends each request to whichever
fixed pool was cheaper for it, as measured by running it on each; it needs
per-request ground truth, so it exists against emulated pools only.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftgate.evaluate.replay import Measured

GATE = "gate"
GATE_METHODS = "gate, ngram + draft"  # the gate in front of an ngram pool and a draft-model pool
ORACLE = "oracle"
OFF = "always off"
DYNAMIC = "dynamic K"
GATES = (GATE, GATE_METHODS)
GATED_DEPTH = 8  # the draft-model pool both gates use


def always_on(depth: int) -> str:
    return f"always on K={depth}"


def always_ngram(depth: int) -> str:
    return f"always ngram K={depth}"


@dataclass
class Run:
    """One strategy at one level under one seed."""

    measured: list[Measured]
    wall_seconds: float
    pools: int  # pools the strategy keeps busy, for the real-pool cost

    @property
    def tokens(self) -> int:
        return sum(m.tokens for m in self.measured)

    def cost_per_token(self) -> float:
        """Busy GPU-seconds per output token: the ground truth where there is one, else the
        run's wall time on every pool it used (exact for a pool that never idled)."""
        if all(m.gpu_seconds is not None for m in self.measured):
            return sum(m.gpu_seconds or 0.0 for m in self.measured) / max(1, self.tokens)
        return self.wall_seconds * self.pools / max(1, self.tokens)


@dataclass
class Results:
    """runs[level][strategy][seed]; ``level`` is a concurrency, or "burst"."""

    strategies: list[str]
    fixed: list[str]  # the pools the oracle chooses among
    runs: dict[str, dict[str, dict[int, Run]]] = field(default_factory=dict)  # a strategy not run: not measured

    def add(self, level: str, strategy: str, seed: int, run: Run) -> None:
        self.runs.setdefault(level, {}).setdefault(strategy, {})[seed] = run

    def oracle(self, level: str, seed: int) -> float | None:
        """Per request, the cheapest fixed pool's cost; None without ground truth for every one."""
        per_key: dict[str, float] = {}
        tokens: dict[str, int] = {}
        for name in self.fixed:
            run = self.runs.get(level, {}).get(name, {}).get(seed)
            if run is None:
                return None
            for m in run.measured:
                if m.gpu_seconds is None:
                    return None
                per_key[m.key] = min(per_key.get(m.key, m.gpu_seconds), m.gpu_seconds)
                tokens[m.key] = m.tokens
        return sum(per_key.values()) / max(1, sum(tokens.values())) if per_key else None


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 3)


def summary(results: Results, emulated: bool) -> dict[str, Any]:
    """The ``--json`` object: ``levels`` maps each level to ``strategies``, each with its cost per
    token (mean, min, max over seeds) and latency percentiles, or ``measured: false``."""
    levels: dict[str, Any] = {}
    for level, by_strategy in results.runs.items():
        strategies: dict[str, Any] = {}
        for name in results.strategies:
            seeds = by_strategy.get(name)
            if not seeds:
                strategies[name] = {"measured": False}
                continue
            costs = [run.cost_per_token() for run in seeds.values()]
            every = [m for run in seeds.values() for m in run.measured]
            entry: dict[str, Any] = {
                "measured": True,
                "cost_per_token": {"mean": _ms(statistics.fmean(costs)), "min": _ms(min(costs)), "max": _ms(max(costs))},
                "tpot_p50_ms": _ms(_percentile([m.tpot for m in every], 0.5)),
                "tpot_p99_ms": _ms(_percentile([m.tpot for m in every], 0.99)),
                "ttft_p50_ms": _ms(_percentile([m.ttft for m in every], 0.5)),
                "ttft_p99_ms": _ms(_percentile([m.ttft for m in every], 0.99)),
                "requests": len(every),
            }
            if name == GATE:
                entry["to_speculation"] = round(sum(m.route.startswith("spec-on") for m in every) / max(1, len(every)), 3)
            if name in GATES:
                entry["routes_by_kind"] = _routes_by_kind(every)
            by_kind = _cost_by_kind(every)
            if by_kind:
                entry["cost_by_kind"] = by_kind
            strategies[name] = entry
        oracles = [o for seed in _seeds(by_strategy) if (o := results.oracle(level, seed)) is not None]
        if oracles:
            strategies[ORACLE] = {"measured": True, "cost_per_token": {
                "mean": _ms(statistics.fmean(oracles)), "min": _ms(min(oracles)), "max": _ms(max(oracles))}}
        levels[level] = {"strategies": strategies}
    return {"cost_unit": "busy GPU-milliseconds per output token" + (" (emulated H200)" if emulated else ""),
            "latency_unit": "milliseconds" + (" (simulated)" if emulated else ""),
            "seeds": len(_seeds(next(iter(results.runs.values()), {}))), "levels": levels}


def _routes_by_kind(measured: list[Measured]) -> dict[str, dict[str, float]]:
    """Per kind of request, the share the gate sent to each pool."""
    counts: dict[str, dict[str, int]] = {}
    for m in measured:
        counts.setdefault(m.kind, {}).setdefault(m.route, 0)
        counts[m.kind][m.route] += 1
    return {kind: {route: round(n / sum(by_route.values()), 3) for route, n in sorted(by_route.items())}
            for kind, by_route in sorted(counts.items())}


def _cost_by_kind(measured: list[Measured]) -> dict[str, float]:
    """Per kind of request, busy GPU-milliseconds per output token over every seed (ground truth only)."""
    if any(m.gpu_seconds is None for m in measured):
        return {}
    seconds: dict[str, float] = {}
    tokens: dict[str, int] = {}
    for m in measured:
        seconds[m.kind] = seconds.get(m.kind, 0.0) + (m.gpu_seconds or 0.0)
        tokens[m.kind] = tokens.get(m.kind, 0) + m.tokens
    return {kind: round(seconds[kind] / max(1, tokens[kind]) * 1000, 3) for kind in sorted(seconds)}


def _seeds(by_strategy: dict[str, dict[int, Run]]) -> list[int]:
    return sorted({seed for seeds in by_strategy.values() for seed in seeds})


def table(summary_: dict[str, Any]) -> str:
    """Cost per token by level (rows) and strategy (columns): mean, and the range over seeds."""
    levels = summary_["levels"]
    names = list(dict.fromkeys(name for level in levels.values() for name in level["strategies"]))
    header = ["concurrency", *names]
    rows = []
    for level, entry in levels.items():
        cells = [level]
        for name in names:
            s = entry["strategies"].get(name, {"measured": False})
            if not s.get("measured"):
                cells.append("not measured")
                continue
            c = s["cost_per_token"]
            cells.append(f"{c['mean']:.2f} [{c['min']:.2f}-{c['max']:.2f}]")
        rows.append(cells)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)])


def latency_table(summary_: dict[str, Any]) -> str:
    """p50 / p99 time per output token and p99 time to first token, per level and strategy."""
    lines = []
    for level, entry in summary_["levels"].items():
        parts = []
        for name, s in entry["strategies"].items():
            if s.get("measured") and "tpot_p50_ms" in s:
                parts.append(f"{name} {s['tpot_p50_ms']:.0f}/{s['tpot_p99_ms']:.0f}/{s['ttft_p99_ms']:.0f}")
        lines.append(f"  {level:>6}: " + ", ".join(parts))
    return "time per output token p50/p99, time to first token p99 (ms):\n" + "\n".join(lines)


def drafters_table(summary_: dict[str, Any], ngram: str, draft: str) -> str:
    """Where each drafter pays: per level and kind of request, the cost on the ngram pool alone, on
    the draft-model pool alone, with no speculation, and through the gate in front of the first two,
    with the share of the kind the gate sent to the ngram pool."""
    lines = [f"where each drafter pays ({ngram} / {draft} / {OFF} / {GATE_METHODS}, GPU-ms per token; "
             "share the gate sent to ngram):"]
    for level, entry in summary_["levels"].items():
        strategies = entry["strategies"]
        gated = strategies.get(GATE_METHODS, {})
        if "cost_by_kind" not in gated:
            continue
        lines.append(f"  {level}:")
        for kind, cost in gated["cost_by_kind"].items():
            alone = [strategies.get(name, {}).get("cost_by_kind", {}).get(kind) for name in (ngram, draft, OFF)]
            share = gated["routes_by_kind"].get(kind, {}).get("ngram", 0.0)
            lines.append(f"    {kind:<14} " + " / ".join("-" if c is None else f"{c:.2f}" for c in alone)
                         + f" / {cost:.2f}   to ngram {share:.0%}")
    return "\n".join(lines) if len(lines) > 1 else ""


def findings(summary_: dict[str, Any]) -> list[str]:
    """Plain sentences: at each level, where the gate stands against the cheapest alternative."""
    out = []
    for level, entry in summary_["levels"].items():
        strategies = entry["strategies"]
        gate = strategies.get(GATE, {})
        if not gate.get("measured"):
            continue
        others = {n: s["cost_per_token"]["mean"] for n, s in strategies.items()
                  if n not in (*GATES, ORACLE) and s.get("measured")}
        if not others:
            continue
        best = min(others, key=lambda n: others[n])
        g = gate["cost_per_token"]["mean"]
        where = "in the burst" if level == "burst" else f"at concurrency {level}"
        change = g / others[best] - 1
        if change > 0.005:
            out.append(f"{where} the gate LOSES: {change:.1%} more than {best} ({g:.2f} against {others[best]:.2f}).")
        elif change < -0.005:
            out.append(f"{where} the gate is the cheapest: {-change:.1%} less than {best}.")
        else:
            out.append(f"{where} the gate ties {best}.")
        oracle = strategies.get(ORACLE)
        if oracle:
            out[-1] += f" The oracle: {oracle['cost_per_token']['mean']:.2f}."
        methods = strategies.get(GATE_METHODS, {})
        alone = {n: s["cost_per_token"]["mean"] for n, s in strategies.items()
                 if n.startswith(("always ngram", f"always on K={GATED_DEPTH}")) and s.get("measured")}
        if methods.get("measured") and alone:
            cheaper = min(alone, key=lambda n: alone[n])
            m = methods["cost_per_token"]["mean"]
            out.append(f"  {where}, in front of an ngram pool and a draft-model pool, the gate costs {m:.2f}: "
                       f"{m / alone[cheaper] - 1:+.1%} against the cheaper of the two alone ({cheaper}, "
                       f"{alone[cheaper]:.2f}).")
    return out


def figure(summary_: dict[str, Any], path: Path) -> Path | None:
    """Cost per token against concurrency, one line per strategy (the burst is left out: it has no concurrency)."""
    try:
        from draftgate.plots import plt
    except ImportError:
        return None
    levels = [(int(level), entry) for level, entry in summary_["levels"].items() if level != "burst"]
    if not levels:
        return None
    names = list(dict.fromkeys(n for _, entry in levels for n in entry["strategies"]))
    fig, ax = plt.subplots(figsize=(8, 5))
    for name in names:
        points = [(c, entry["strategies"][name]["cost_per_token"]) for c, entry in levels
                  if entry["strategies"].get(name, {}).get("measured")]
        if not points:
            continue
        xs = [c for c, _ in points]
        ax.plot(xs, [p["mean"] for _, p in points], marker="o", label=name,
                linewidth=2.5 if name in GATES else 1.2, linestyle="--" if name == ORACLE else "-")
        ax.fill_between(xs, [p["min"] for _, p in points], [p["max"] for _, p in points], alpha=0.12)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([c for c, _ in levels], [str(c) for c, _ in levels])
    ax.set_xlabel("concurrency (closed loop)")
    ax.set_ylabel(summary_["cost_unit"])
    ax.set_title("Cost per output token against load (mean, band = range over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
