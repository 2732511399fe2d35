"""From every strategy's runs to the verdict: the JSON object, the tables, the findings, the figure.

The headline is capacity: the highest arrival rate per GPU at which the run
keeps the latency targets at the attainment required (``within_targets``: of
requests for time to first token, of output tokens for time per output token),
each strategy on the same number of GPUs. Every figure is the mean over seeds,
with the range beside the capacity. Busy GPU-seconds per output token are
docs/model.md's cost at a rate; provisioned GPU-seconds per token are what a
fixed fleet pays at that rate, idle time included.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from draftgate.evaluate.capacity import ATTAINMENT, FAR_PAST, Point
from draftgate.evaluate.strategies import GATE, GATE_SPLIT
from draftgate.policy.plan import Targets

if TYPE_CHECKING:
    from draftgate.evaluate.bench import SeedSetup, UnitResult


def _ms(seconds: float) -> float | None:
    return None if not math.isfinite(seconds) else round(seconds * 1000, 3)


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    if len(known) < len(values) or not known:
        return None  # a seed whose requests were never answered: no finite figure
    return round(statistics.fmean(known), 4)


def _rate(points: Sequence[Point], gpus: int) -> dict[str, Any]:
    first = points[0]
    return {
        "rps": round(first.rps, 4),
        "rps_per_gpu": round(first.rps / gpus, 4),
        "ttft_p99_ms": _mean([_ms(p.ttft_p99) for p in points]),
        "tpot_p99_ms": _mean([_ms(p.tpot_p99) for p in points]),
        "e2e_p99_ms": _mean([_ms(p.e2e_p99) for p in points]),
        "slo_attainment": round(statistics.fmean(p.attainment for p in points), 4),
        "busy_gpu_ms_per_token": _mean([_ms(p.busy_gpu_seconds_per_token) for p in points]),
        "provisioned_gpu_ms_per_token": _mean([_ms(p.provisioned_gpu_seconds_per_token) for p in points]),
    }


def _spread(values: Sequence[float]) -> dict[str, Any]:
    """Figures over seeds: mean, min, max and each seed's, in seed order."""
    return {"mean": round(statistics.fmean(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4), "by_seed": [round(v, 4) for v in values]}


def summary(results: Sequence[UnitResult], setups: Sequence[SeedSetup], targets: Targets, seeds: Sequence[int],
            rates: Sequence[float]) -> dict[str, Any]:
    """The ``--json`` object: ``targets``, ``seeds``, and ``fleets`` -> size -> ``strategies`` -> name ->
    ``gpus``, ``composition``, ``capacity_rps_per_gpu`` {mean, min, max over seeds}, ``rates``; and per size
    ``cost_objective``, the fleets planned for objective cost at their rates (``_cost_objective``)."""
    fleets: dict[str, Any] = {}
    by_key: dict[tuple[int, str], list[UnitResult]] = {}
    for result in results:
        if result.unit.rate is None:
            by_key.setdefault((result.unit.gpus, result.unit.strategy), []).append(result)
    predicted = {(s.seed, gpus, GATE): c for s in setups for gpus, c in s.compositions.items()}
    predicted.update({(s.seed, gpus, GATE_SPLIT): c for s in setups for gpus, c in s.splits.items()})
    for (gpus, name), found in by_key.items():
        found.sort(key=lambda r: r.unit.seed)
        capacities = [r.capacity.rate for r in found]  # searched per GPU
        compositions = [r.unit.fleet.composition() for r in found]
        common = Counter(tuple(sorted(c.items())) for c in compositions).most_common(1)[0][0]
        entry: dict[str, Any] = {
            "gpus": gpus,
            "composition": dict(common),
            "capacity_rps_per_gpu": _spread(capacities),
            "capacity_bounded": all(r.capacity.bounded for r in found),
            "rates": [],
        }
        if any(c != dict(common) for c in compositions):
            entry["compositions_by_seed"] = {str(r.unit.seed): c for r, c in zip(found, compositions)}
        for rate in rates:
            entry["rates"].append(_rate([r.capacity.at(rate * gpus) for r in found], gpus))
        bursts = [r.burst for r in found if r.burst is not None]
        if bursts:
            entry["burst"] = {k: v for k, v in _rate(bursts, gpus).items() if k not in ("rps_per_gpu",)}
            entry["burst"]["requests"] = entry["burst"].pop("rps")
        workloads = sorted({w for r in found for w in r.by_workload})
        entry["cost_by_workload"] = {w: _mean([r.by_workload[w]["busy_gpu_ms_per_token"] if w in r.by_workload
                                               else None for r in found]) for w in workloads}
        if name.startswith(GATE):
            entry["routes_by_workload"] = {w: _mean_shares([r.routes.get(w, {}) for r in found]) for w in workloads}
            plans = [predicted.get((r.unit.seed, gpus, name)) for r in found]
            forecast = [p.capacity / gpus for p in plans if p is not None]
            entry["plan_predicted_capacity_rps_per_gpu"] = _spread(forecast)
            # the plan's error seed by seed: its prediction against what the verdict measured
            entry["plan_error_by_seed"] = [round(p.capacity / gpus / c - 1, 4) if p is not None and c > 0 else None
                                           for p, c in zip(plans, capacities)]
            entry["plan"] = Counter(p.name for p in plans if p is not None).most_common(1)[0][0]
            if any(p is not None and p.name != entry["plan"] for p in plans):
                entry["plans_by_seed"] = {str(r.unit.seed): p.name for r, p in zip(found, plans) if p is not None}
        same = {r.same_as for r in found}
        if same != {None}:
            # a gate in front of one configuration routes every request to it, and two gates on one fleet
            # route alike: the same runs, not run twice
            entry["same_runs_as"] = sorted(s for s in same if s is not None)
        fleets.setdefault(str(gpus), {"strategies": {}})["strategies"][name] = entry
    _cost_objective([r for r in results if r.unit.rate is not None], setups, fleets)
    return {
        "targets": {"ttft_p99_ms": round(targets.ttft * 1000, 3), "tpot_p99_ms": round(targets.tpot * 1000, 3),
                    "attainment": ATTAINMENT},
        "seeds": len(seeds),
        "units": {"rps": "requests a second over the fleet, every turn of a session counted",
                  "latency": "simulated milliseconds", "cost": "GPU-milliseconds per output token (emulated H200)"},
        "fleets": {size: fleets[size] for size in sorted(fleets, key=int)},
    }


def in_gpus(summary_: dict[str, Any], tensor_parallel_size: int) -> dict[str, Any]:
    """``summary``'s figures, worked out in replicas, in GPUs: each replica of a tensor-parallel
    pool is ``tensor_parallel_size`` GPUs, so fleet sizes and GPU-seconds grow by that much and
    rates per GPU shrink by it. At one GPU a replica, the summary as it is."""
    tp = tensor_parallel_size
    if tp == 1:
        return summary_
    per_gpu = ("rps_per_gpu",)
    gpu_time = ("busy_gpu_ms_per_token", "provisioned_gpu_ms_per_token", "predicted_busy_gpu_ms_per_token",
                "cheapest_homogeneous_busy_gpu_ms_per_token")

    def scaled(row: dict[str, Any]) -> dict[str, Any]:
        out = dict(row)
        for key in per_gpu:
            if out.get(key) is not None:
                out[key] = round(out[key] / tp, 4)
        for key in gpu_time:
            if out.get(key) is not None:
                out[key] = round(out[key] * tp, 4)
        for key in ("plan", "cheapest_homogeneous"):
            if isinstance(out.get(key), str):
                out[key] = _plan_in_gpus(out[key], tp)
        if "plans_by_seed" in out:
            out["plans_by_seed"] = {seed: _plan_in_gpus(plan, tp) for seed, plan in out["plans_by_seed"].items()}
        return out

    fleets = {}
    for size, fleet in summary_["fleets"].items():
        strategies = {}
        for name, entry in fleet["strategies"].items():
            entry = scaled(entry)
            entry["gpus"] = entry["gpus"] * tp
            entry["composition"] = {pool: n * tp for pool, n in entry["composition"].items()}
            if "compositions_by_seed" in entry:
                entry["compositions_by_seed"] = {seed: {pool: n * tp for pool, n in c.items()}
                                                 for seed, c in entry["compositions_by_seed"].items()}
            for key in ("capacity_rps_per_gpu", "plan_predicted_capacity_rps_per_gpu"):
                if key in entry:
                    entry[key] = {k: ([round(v / tp, 4) for v in spread] if k == "by_seed" else round(spread / tp, 4))
                                  for k, spread in entry[key].items()}
            entry["rates"] = [scaled(r) for r in entry["rates"]]
            if "burst" in entry:
                entry["burst"] = scaled(entry["burst"])
            entry["cost_by_workload"] = {w: None if v is None else round(v * tp, 4)
                                         for w, v in entry["cost_by_workload"].items()}
            strategies[name] = entry
        converted: dict[str, Any] = {"strategies": strategies}
        if "cost_objective" in fleet:
            converted["cost_objective"] = [scaled(row) for row in fleet["cost_objective"]]
        fleets[str(int(size) * tp)] = converted
    return {**summary_, "fleets": fleets, "tensor_parallel_size": tp}


def _plan_in_gpus(plan: str, tp: int) -> str:
    """A plan's name (``policy.fleet.Composition.name``) with its pools' replicas counted as GPUs."""
    return re.sub(r"(^|\+ )(\d+) ", lambda m: f"{m[1]}{int(m[2]) * tp} ", plan)


def _cost_objective(results: Sequence[UnitResult], setups: Sequence[SeedSetup], fleets: dict[str, Any]) -> None:
    """Per fleet size, ``cost_objective``: at each rate, the fleet the plan recommends when cost is the objective
    (one per seed, planned for that rate), run there, beside the homogeneous fleet with the fewest busy GPU-ms
    per token among those that kept the targets at that rate (mean attainment at least 99%), or where none did,
    among those that came closest."""
    planned = {(s.seed, gpus, rate): c for s in setups for (gpus, rate), c in s.by_cost.items()}
    by_rate: dict[tuple[int, float], list[UnitResult]] = {}
    for result in results:
        assert result.unit.rate is not None
        by_rate.setdefault((result.unit.gpus, result.unit.rate), []).append(result)
    for (gpus, rate), found in sorted(by_rate.items()):
        found.sort(key=lambda r: r.unit.seed)
        plans = [planned[(r.unit.seed, gpus, rate)] for r in found]
        row = _rate([r.at_rate for r in found if r.at_rate is not None], gpus)
        row["plan"] = Counter(p.name for p in plans).most_common(1)[0][0]
        if any(p.name != row["plan"] for p in plans):
            row["plans_by_seed"] = {str(r.unit.seed): p.name for r, p in zip(found, plans)}
        row["predicted_busy_gpu_ms_per_token"] = _mean([_ms(p.cost_per_token) for p in plans])
        strategies = fleets[str(gpus)]["strategies"]
        fixed = {name: next(r for r in entry["rates"] if math.isclose(r["rps_per_gpu"], rate))
                 for name, entry in strategies.items() if not name.startswith(GATE)}
        costed = {name: r for name, r in fixed.items() if r["busy_gpu_ms_per_token"] is not None}
        closest = max((r["slo_attainment"] for r in costed.values()), default=0.0)
        within = {name: r for name, r in costed.items() if r["slo_attainment"] >= min(ATTAINMENT, closest)}
        if within:
            best = min(within, key=lambda name: within[name]["busy_gpu_ms_per_token"])
            row["cheapest_homogeneous"] = best
            row["cheapest_homogeneous_busy_gpu_ms_per_token"] = within[best]["busy_gpu_ms_per_token"]
            row["cheapest_homogeneous_slo_attainment"] = within[best]["slo_attainment"]
        fleets[str(gpus)].setdefault("cost_objective", []).append(row)


def _mean_shares(shares: Sequence[dict[str, float]]) -> dict[str, float]:
    pools = sorted({p for s in shares for p in s})
    return {p: round(statistics.fmean(s.get(p, 0.0) for s in shares), 4) for p in pools}


def best_homogeneous(strategies: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The homogeneous strategy that serves the most (mean capacity over seeds): its name and entry."""
    fixed = {n: s for n, s in strategies.items() if not n.startswith(GATE)}
    name = max(fixed, key=lambda n: fixed[n]["capacity_rps_per_gpu"]["mean"])
    return name, fixed[name]


def capacity_table(summary_: dict[str, Any]) -> str:
    """Capacity per GPU at the targets: fleet sizes across, strategies down (mean [range over seeds])."""
    t = summary_["targets"]
    sizes = list(summary_["fleets"])
    names = list(dict.fromkeys(n for size in sizes for n in summary_["fleets"][size]["strategies"]))
    header = ["strategy", *(f"{s} GPUs" for s in sizes)]
    rows = []
    for name in names:
        cells = [name]
        for size in sizes:
            entry = summary_["fleets"][size]["strategies"].get(name)
            if entry is None:
                cells.append("-")
                continue
            c = entry["capacity_rps_per_gpu"]
            more = "" if entry["capacity_bounded"] else "+"  # the heaviest rate tried still met the targets
            cells.append(f"{c['mean']:.2f} [{c['min']:.2f}-{c['max']:.2f}]{more}")
        rows.append(cells)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    lines = [f"Capacity, requests a second per GPU with {t['attainment']:.0%} of requests within TTFT "
             f"{t['ttft_p99_ms'] / 1000:g} s and {t['attainment']:.0%} of output tokens within TPOT "
             f"{t['tpot_p99_ms']:g} ms: mean [range over "
             f"{summary_['seeds']} seeds]", "", fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)]
    for size in sizes:
        gate = summary_["fleets"][size]["strategies"].get(GATE)
        if gate is None:
            continue
        pools = ", ".join(f"{pool} x{n}" for pool, n in gate["composition"].items())
        line = f"  the gate's fleet on {size} GPUs: {pools}"
        if "plans_by_seed" in gate:
            by_seed = gate["plans_by_seed"]
            line += f" on {sum(p == gate['plan'] for p in by_seed.values())} of {len(by_seed)} seeds"
        if "plan_predicted_capacity_rps_per_gpu" in gate:  # real pools: the gate's fleet is what was given
            line += (f" (its plan predicted {gate['plan_predicted_capacity_rps_per_gpu']['mean']:.2f} per GPU, "
                     f"measured {gate['capacity_rps_per_gpu']['mean']:.2f}; {_errors(gate)})")
        lines.append(line)
    return "\n".join(lines)


def rates_table(summary_: dict[str, Any]) -> str:
    """p99 TPOT and attainment at each rate, per fleet size and strategy."""
    lines = [("p99 time per output token (ms) / share within the targets, by arrival rate per GPU (-/0.000 "
              f"where not run: past a rate at which the run kept the targets for less than {FAR_PAST:.0%}):")]
    for size, fleet in summary_["fleets"].items():
        strategies = fleet["strategies"]
        first = next(iter(strategies.values()))
        rates = [r["rps_per_gpu"] for r in first["rates"]]
        lines.append(f"  {size} GPUs" + "".join(f"{r:>14g}" for r in rates))
        for name, entry in strategies.items():
            cells = [f"{_fmt(r['tpot_p99_ms'])}/{r['slo_attainment']:.3f}" for r in entry["rates"]]
            lines.append(f"    {name:<22}" + "".join(f"{c:>14}" for c in cells))
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def workloads_table(summary_: dict[str, Any]) -> str:
    """Busy GPU-ms per token by workload at the reference rate, and where the gate sent each workload."""
    lines = ["Busy GPU-ms per output token by workload, at 1 request a second per GPU (gate: its routes):"]
    for size, fleet in summary_["fleets"].items():
        strategies = fleet["strategies"]
        workloads = sorted({w for e in strategies.values() for w in e.get("cost_by_workload", {})})
        lines.append(f"  {size} GPUs" + "".join(f"{w:>16}" for w in workloads))
        for name, entry in strategies.items():
            lines.append(f"    {name:<22}" + "".join(f"{_fmt2(entry['cost_by_workload'].get(w)):>16}"
                                                     for w in workloads))
            if "routes_by_workload" in entry:
                if "compositions_by_seed" in entry:
                    lines.append("      (its fleets differ between seeds: the shares are over all of them)")
                for workload, routes in entry["routes_by_workload"].items():
                    lines.append(f"      {workload}: " + ", ".join(f"{p} {s:.0%}" for p, s in routes.items()))
    return "\n".join(lines)


def _fmt2(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def cost_table(summary_: dict[str, Any]) -> str:
    """Objective cost: at each light rate, busy GPU-ms per token of the fleet the plan recommends for it, beside
    the cheapest homogeneous fleet that kept the targets there."""
    lines = ["Objective cost (a fleet that scales with load): busy GPU-ms per output token of the fleet the plan "
             "recommends for each rate, predicted / measured / share within the targets, beside the cheapest "
             "homogeneous fleet within the targets (where none kept them, of those that came closest):"]
    for size, fleet in summary_["fleets"].items():
        for row in fleet.get("cost_objective", []):
            cheapest = row.get("cheapest_homogeneous")
            against = ("no homogeneous fleet to compare" if cheapest is None else
                       f"{cheapest} {row['cheapest_homogeneous_busy_gpu_ms_per_token']:.2f} / "
                       f"{row['cheapest_homogeneous_slo_attainment']:.3f}")
            lines.append(f"  {size} GPUs at {row['rps_per_gpu']:g}/GPU: {_fmt2(row['predicted_busy_gpu_ms_per_token'])}"
                         f" / {_fmt2(row['busy_gpu_ms_per_token'])} / {row['slo_attainment']:.3f}; {against}")
            lines.append(f"      plan: {row['plan']}" + (" (on most seeds)" if "plans_by_seed" in row else ""))
    return "\n".join(lines)


def _errors(gate: dict[str, Any]) -> str:
    """The plan's error seed by seed, as the capacity table prints it."""
    errors = [e for e in gate.get("plan_error_by_seed", []) if e is not None]
    if not errors:
        return "no seed measured"
    return "error " + ", ".join(f"{e:+.0%}" for e in errors) + " seed by seed"


def findings(summary_: dict[str, Any]) -> list[str]:
    """Plain sentences: at each fleet size, where the gate's fleet stands against the best homogeneous one."""
    out = []
    for size, fleet in summary_["fleets"].items():
        strategies = fleet["strategies"]
        gate = strategies.get(GATE)
        best_name, best = best_homogeneous(strategies)
        b = best["capacity_rps_per_gpu"]
        where = f"On {size} GPUs"
        if gate is None:
            out.append(f"{where} the best fleet is {best_name}: {b['mean']:.2f} requests a second per GPU.")
            continue
        g = gate["capacity_rps_per_gpu"]
        change = g["mean"] / b["mean"] - 1 if b["mean"] > 0 else 0.0
        spread = g["min"] > b["max"] or g["max"] < b["min"]
        verb = "serves" if change >= 0 else "LOSES:"
        out.append(f"{where} the gate's fleet ({', '.join(f'{p} x{n}' for p, n in gate['composition'].items())}) "
                   f"{verb} {abs(change):.1%} {'more' if change >= 0 else 'less'} than the best homogeneous fleet, "
                   f"{best_name} ({g['mean']:.2f} against {b['mean']:.2f} requests a second per GPU; "
                   + ("beyond" if spread else "within") + f" the spread between seeds; {_paired(g, b)}).")
        by_seed = gate.get("plans_by_seed", {})
        if by_seed:
            out.append("  Its plans differ between seeds: " + "; ".join(f"seed {seed} {plan}"
                                                                         for seed, plan in by_seed.items()) + ".")
        elif len(gate["composition"]) == 1:
            out.append("  Its plan found no split better at this size: it recommends one configuration, and the gate "
                       "only balances it.")
        split = strategies.get(GATE_SPLIT)
        if split is not None:
            s_ = split["capacity_rps_per_gpu"]
            out.append(f"  The best split its plan found ({split['plan']}), run: {s_['mean']:.2f} requests a second "
                       f"per GPU, {s_['mean'] / b['mean'] - 1:+.1%} against {best_name} (predicted "
                       f"{split['plan_predicted_capacity_rps_per_gpu']['mean']:.2f}).")
        worse = [r["rps_per_gpu"] for r, o in zip(gate["rates"], best["rates"])
                 if r["rps_per_gpu"] * int(size) <= g["mean"] * int(size) and r["tpot_p99_ms"] is not None
                 and o["tpot_p99_ms"] is not None and r["tpot_p99_ms"] > o["tpot_p99_ms"] * 1.05]
        if worse:
            out.append(f"  Below its capacity its p99 TPOT is over 5% worse than {best_name}'s at "
                       + ", ".join(f"{r:g}" for r in worse) + " requests a second per GPU.")
        out.extend(_cost_findings(fleet.get("cost_objective", [])))
    return out


def _paired(gate: dict[str, Any], best: dict[str, Any]) -> str:
    """Seed by seed (each seed its own hardware and traffic): on how many the gate's fleet served more."""
    changes = [g / b - 1 for g, b in zip(gate["by_seed"], best["by_seed"]) if b > 0]
    if not changes:
        return "no seed to compare"
    if max(abs(c) for c in changes) < 1e-9:
        return "the same on every seed"
    ahead = sum(c > 1e-9 for c in changes)
    return f"ahead on {ahead} of {len(changes)} seeds, {min(changes):+.0%} to {max(changes):+.0%} seed by seed"


def _cost_findings(rows: Sequence[dict[str, Any]]) -> list[str]:
    compared = [r for r in rows if r.get("cheapest_homogeneous") is not None and r["busy_gpu_ms_per_token"] is not None]
    if not compared:
        return []
    changes = ", ".join(f"{r['busy_gpu_ms_per_token'] / r['cheapest_homogeneous_busy_gpu_ms_per_token'] - 1:+.0%} "
                        f"at {r['rps_per_gpu']:g}" for r in compared)
    missed = [f"{r['rps_per_gpu']:g}" for r in compared
              if r["slo_attainment"] < min(ATTAINMENT, r["cheapest_homogeneous_slo_attainment"])]
    return [f"  Objective cost: the plan's fleets cost {changes} requests a second per GPU in busy GPU-ms per token "
            "against the cheapest homogeneous fleet within the targets (or closest to them)"
            + (f"; fewer of their requests kept the targets at {', '.join(missed)}." if missed else ".")]


FLOOR = 1e-4  # the figure's lowest share missing the targets: a run that kept them all is drawn here


def figure(summary_: dict[str, Any], path: Path) -> Path | None:
    """The share of each run that missed the targets (``within_targets``) against arrival rate per GPU,
    one panel per fleet size, one line per strategy: a line crosses the dashed 1% at its capacity."""
    try:
        from draftgate.plots import plt
    except ImportError:
        return None
    sizes = list(summary_["fleets"])
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4.5), squeeze=False, sharey=True)
    limit = 1.0 - summary_["targets"]["attainment"]
    for ax, size in zip(axes[0], sizes):
        for name, entry in summary_["fleets"][size]["strategies"].items():
            points = [(r["rps_per_gpu"], max(FLOOR, 1.0 - r["slo_attainment"])) for r in entry["rates"]]
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=name,
                    linewidth=2.5 if name.startswith(GATE) else 1.2)
        ax.axhline(limit, color="grey", linestyle="--", linewidth=1)
        ax.set_xscale("log", base=2)
        rates = [r["rps_per_gpu"] for r in next(iter(summary_["fleets"][size]["strategies"].values()))["rates"]]
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        ax.set_yscale("log")
        ax.set_xlabel("arrival rate, requests/s per GPU")
        ax.set_title(f"{size} GPUs")
    axes[0][0].set_ylabel("share missing the targets")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("Share of the run missing the targets against load (mean over seeds; dashed: 1%, the capacity's "
                 "limit; TTFT by request, TPOT by output token)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
