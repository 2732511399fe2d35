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
ORACLE = "oracle"
OFF = "always off"
DYNAMIC = "dynamic K"


def always_on(depth: int) -> str:
    return f"always on K={depth}"


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
            strategies[name] = entry
        oracles = [o for seed in _seeds(by_strategy) if (o := results.oracle(level, seed)) is not None]
        if oracles:
            strategies[ORACLE] = {"measured": True, "cost_per_token": {
                "mean": _ms(statistics.fmean(oracles)), "min": _ms(min(oracles)), "max": _ms(max(oracles))}}
        levels[level] = {"strategies": strategies}
    return {"cost_unit": "busy GPU-milliseconds per output token" + (" (emulated H200)" if emulated else ""),
            "latency_unit": "milliseconds" + (" (simulated)" if emulated else ""),
            "seeds": len(_seeds(next(iter(results.runs.values()), {}))), "levels": levels}


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


def findings(summary_: dict[str, Any]) -> list[str]:
    """Plain sentences: at each level, where the gate stands against the cheapest alternative."""
    out = []
    for level, entry in summary_["levels"].items():
        strategies = entry["strategies"]
        gate = strategies.get(GATE, {})
        if not gate.get("measured"):
            continue
        others = {n: s["cost_per_token"]["mean"] for n, s in strategies.items()
                  if n not in (GATE, ORACLE) and s.get("measured")}
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
                linewidth=2.5 if name == GATE else 1.2, linestyle="--" if name == ORACLE else "-")
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
