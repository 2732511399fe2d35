"""``draftgate evaluate --grid``: the plan held against the verdict across the operating space.

At every point of fleet sizes x latency targets x traffic mixes (and the
operator's traffic file, when given), two seeds of the verdict without its
extras: every homogeneous fleet and the gate in front of the fleet its plan
recommends. Per point it prints the best homogeneous fleet, the gate, their
ratio, the plan's prediction for the gate's fleet and its error, seed by seed
where they matter: what the plan promises an operator who stands there.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping
from typing import Any

from draftgate.evaluate import bench, verdict
from draftgate.evaluate.strategies import GATE
from draftgate.policy.plan import Targets
from draftgate.workloads import mix

SIZES = (1, 4, 16)  # GPUs
SEEDS = 2
TARGETS: Mapping[str, Targets] = {"interactive": Targets(2.0, 0.050), "relaxed": Targets(10.0, 0.150),
                                  "throughput": Targets(30.0, 0.300)}


def points(traffic: str = "") -> list[tuple[str, str, Targets, tuple[tuple[str, float], ...]]]:
    """(targets' name, traffic's name, targets, mix) for every point: the built-in mixes, or the
    operator's file in its own mix."""
    mixes = {"file": ()} if traffic else {name: tuple(weights.items()) for name, weights in mix.MIXES.items()}
    return [(t_name, m_name, targets, weights) for t_name, targets in TARGETS.items()
            for m_name, weights in mixes.items()]


def run(base: bench.Options, say: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every point's rows (one per fleet size), each as ``row`` makes it."""
    rows = []
    for t_name, m_name, targets, weights in points(base.traffic):
        options = dataclasses.replace(base, targets=targets, mix=weights, seeds=SEEDS, burst=0, extras=False)
        say(f"grid: {t_name} targets (p99 TTFT {targets.ttft:g} s, TPOT {targets.tpot * 1000:g} ms), {m_name} traffic")
        summary = bench.run(options, say)
        for size, fleet in summary["fleets"].items():
            rows.append(row(t_name, m_name, int(size), fleet["strategies"]))
    return rows


def row(targets: str, traffic: str, gpus: int, strategies: dict[str, Any]) -> dict[str, Any]:
    """One point at one fleet size: the best homogeneous fleet (by mean capacity), the gate, their
    ratio (mean, and the worst seed's), and the plan's prediction and error seed by seed."""
    best, entry = verdict.best_homogeneous(strategies)
    gate = strategies[GATE]
    b, g = entry["capacity_rps_per_gpu"], gate["capacity_rps_per_gpu"]
    by_seed = [gs / bs for gs, bs in zip(g["by_seed"], b["by_seed"]) if bs > 0]
    errors = [e for e in gate["plan_error_by_seed"] if e is not None]
    return {"targets": targets, "traffic": traffic, "gpus": gpus, "best_homogeneous": best,
            "best_rps_per_gpu": b["mean"], "gate_rps_per_gpu": g["mean"], "gate_fleet": _fleets(gate),
            # False where a fleet met the targets at every rate tried: its figure is a floor
            "best_bounded": entry["capacity_bounded"], "gate_bounded": gate["capacity_bounded"],
            "ratio": round(g["mean"] / b["mean"], 4) if b["mean"] > 0 else None,
            "worst_seed_ratio": round(min(by_seed), 4) if by_seed else None,
            "plan_predicted_rps_per_gpu": gate["plan_predicted_capacity_rps_per_gpu"]["mean"],
            "plan_error_by_seed": errors,
            "plan_error_mean_abs": round(statistics.fmean(abs(e) for e in errors), 4) if errors else None}


def _fleets(gate: dict[str, Any]) -> str:
    """The fleet the gate ran: one, or each seed's where the seeds' plans differ (the worst seed's ratio is
    then read against its own)."""
    by_seed = gate.get("plans_by_seed")
    if not by_seed:
        return gate["plan"]
    return "; ".join(f"seed {seed}: {fleet}" for seed, fleet in sorted(by_seed.items(), key=lambda kv: int(kv[0])))


def table(rows: list[dict[str, Any]]) -> str:
    """The grid as the closing note and docs/plan.md carry it."""
    header = ["targets", "traffic", "GPUs", "best homogeneous", "best", "gate", "gate/best", "worst seed",
              "plan", "plan error by seed", "gate's fleet"]
    cells = [[r["targets"], r["traffic"], str(r["gpus"]), r["best_homogeneous"],
              _capacity(r["best_rps_per_gpu"], r["best_bounded"]), _capacity(r["gate_rps_per_gpu"], r["gate_bounded"]),
              _ratio(r["ratio"]), _ratio(r["worst_seed_ratio"]),
              f"{r['plan_predicted_rps_per_gpu']:.2f}", ", ".join(f"{e:+.0%}" for e in r["plan_error_by_seed"]),
              r["gate_fleet"]] for r in rows]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c) + " |" for c in cells]
    within = [r for r in rows if r["plan_error_by_seed"] and max(abs(e) for e in r["plan_error_by_seed"]) <= 0.10]
    kept = [r for r in rows if r["ratio"] is not None and r["ratio"] >= 0.98]
    lines.append(f"\nThe plan within 10% on every seed at {len(within)} of {len(rows)} points; the gate at least "
                 f"0.98x the best homogeneous fleet at {len(kept)} of {len(rows)}. Capacity in requests a second "
                 "per GPU, mean over seeds; + where a fleet met the targets at every rate tried (a floor).")
    return "\n".join(lines)


def _capacity(value: float, bounded: bool) -> str:
    return f"{value:.2f}" + ("" if bounded else "+")


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
