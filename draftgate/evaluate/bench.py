"""``draftgate evaluate``: every strategy on the same fleet, at arrival rates up to past saturation, in virtual time.

For each seed: an emulated hardware profile (Qwen3-32B on an H200 unless
told otherwise) with its uncertain figures drawn from the seed, or an
operator's fitted profile as it is, the gate's
calibration fitted on the calibration split (the four-arm protocol, run in
simulation), vLLM's dynamic-K table chosen on the calibration split, and for
each fleet size the composition the gate's plan recommends for the
calibration split's traffic (for objective cost, one for each light rate).
Then every strategy, on a fleet of that size, at every rate of the grid and at
the rates the capacity search adds, and in a burst; and the fleets planned
for objective cost at their rates. Nothing of the verdict split is seen before
its runs.

Runs are independent and deterministic, so they are shared out among worker
processes and the result is the same whatever their number or the machine's
load. Against real pools the wall-clock path (``real.py``) runs instead.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import statistics
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftgate.emulator.profile import EngineProfile
from draftgate.evaluate import trial, verdict
from draftgate.evaluate.calibration import calibrate
from draftgate.evaluate.capacity import (
    ATTAINMENT,
    BEYOND_GRID,
    DRAIN_LIMIT_SECONDS,
    LONGEST_WINDOW_SECONDS,
    Capacity,
    Point,
    point,
    schedule_for,
    search,
)
from draftgate.evaluate.fleet import Fleet
from draftgate.evaluate.requests import Bank
from draftgate.evaluate.simulation import Run, Simulation, proxy_settings
from draftgate.evaluate.strategies import (
    DYNAMIC,
    DYNAMIC_TABLES,
    FIXED,
    GATE,
    GATE_COST,
    GATE_SPLIT,
    candidates,
    dynamic_pool,
    fleet_of,
)
from draftgate.evaluate.traffic import Burst, OpenLoop, Schedule
from draftgate.policy import plan as plans
from draftgate.policy.calibration import Calibration
from draftgate.policy.plan import Targets
from draftgate.progress import draw
from draftgate.workloads import mix

RATES_PER_GPU = (0.5, 1.0, 2.0, 4.0, 8.0)  # from light to past saturation
REFERENCE_RATE_PER_GPU = 1.0  # where cost and routes by workload are reported
MAX_NUM_SEQS = 1024  # vLLM's defaults on an H200
MAX_NUM_BATCHED_TOKENS = 8192
CALIBRATION_REQUESTS = 4
# running sequences the calibration times the pools at: up to where relaxed and throughput targets put a GPU,
# past the batch at which verifying K+1 tokens a sequence turns compute-bound (about 40 at K=3 on an H200)
CALIBRATION_LOADS = (1, 8, 32, 128)
PLAN_TRAFFIC_RATE = 0.5  # per GPU: the calibration split replayed lightly, for the plan to read
TABLE_RATES = (1.0, 2.0, 4.0)  # per GPU, choosing the dynamic-K table
SPLIT_FROM_GPUS = 4  # fleet sizes from which the best split is run beside the gate's fleet
TRIAL_SHARE = 2  # the plan's trials measure this much fewer requests a run than the verdict's
COST_RATES_UP_TO = 2.0  # per GPU: the grid's rates up to here (below the best fleets' capacity) weigh objective cost


@dataclass
class Options:
    seeds: int = 5
    first_seed: int = 1
    gpus: tuple[int, ...] = (2, 4, 8)
    rates: tuple[float, ...] = RATES_PER_GPU  # per GPU
    targets: Targets = Targets()
    requests: int = 600  # measured per run (fewer at light load: LONGEST_WINDOW_SECONDS)
    bisections: int = 2
    beyond: int = BEYOND_GRID  # doublings past the heaviest rate while a fleet still meets the targets there
    burst: int = 64  # requests per GPU, all at once; 0 leaves the burst out
    workers: int = 0  # 0: one per core
    out: Path = Path("evaluate-output")
    as_json: bool = False
    hardware: str = ""  # ``hardware_key``: "" for the default profile drawn from each seed
    # GPUs a replica: fleet sizes (``gpus``) and ``rates`` are then in replicas, and the summary in GPUs
    tensor_parallel_size: int = 1
    mix: tuple[tuple[str, float], ...] = ()  # weights by workload (``mix.parse_mix``); () for the traffic's own
    traffic: str = ""  # a traffic file (``workloads.traffic_file``) replayed instead of the built-in data
    # besides the gate: the best split the plan tried, and the fleets it plans for objective cost (an
    # accuracy grid leaves them out)
    extras: bool = True

    @property
    def shared(self) -> dict[str, Any]:
        """What every unit of the verdict runs on: the hardware and the traffic (``Unit``'s fields)."""
        return {"hardware": self.hardware, "mix": self.mix, "traffic": self.traffic}

    def per_replica(self, per_gpu: float) -> float:
        """A rate (or count) a GPU, as the runs count it: a replica's."""
        return per_gpu * self.tensor_parallel_size


@dataclass(frozen=True)
class SeedSetup:
    """What a seed's runs share, worked out on the calibration split alone."""

    seed: int
    calibration: Calibration
    dynamic_table: tuple[tuple[int, int, int], ...]
    compositions: dict[int, plans.Composition]  # fleet size -> the gate's composition
    splits: dict[int, plans.Composition]  # fleet size -> the best composition of more than one pool tried
    by_cost: dict[tuple[int, float], plans.Composition]  # (fleet size, rate per GPU) -> objective cost's choice


@dataclass(frozen=True)
class Unit:
    """One strategy on one fleet under one seed: the work of one worker call."""

    seed: int
    gpus: int
    strategy: str
    fleet: Fleet
    calibration: Calibration
    gated: bool
    routing: tuple[tuple[str, str], ...] = ()  # the gate's: kind -> pool, as its plan recommends
    rate: float | None = None  # per GPU: the one rate run, for a fleet planned for that rate (objective cost)
    hardware: str = ""  # the profile the seed's engines run (``hardware_key``)
    mix: tuple[tuple[str, float], ...] = ()  # the traffic's weights by workload (``Options.mix``)
    traffic: str = ""  # ``Options.traffic``

    @property
    def weights(self) -> Mapping[str, float]:
        return mix.weights_for(dict(self.mix), self.traffic)


@dataclass
class UnitResult:
    unit: Unit
    capacity: Capacity
    by_workload: dict[str, dict[str, float]] = field(default_factory=dict)  # workload -> busy GPU-ms per token
    routes: dict[str, dict[str, float]] = field(default_factory=dict)  # workload -> pool -> share
    burst: Point | None = None
    same_as: str | None = None  # the strategy whose runs these are (``same_as``)
    at_rate: Point | None = None  # a unit run at its one rate: what it got there


# ---------------------------------------------------------------- one process's banks


def hardware_key(profile: dict[str, Any] | None = None, drawn: bool = True) -> str:
    """What the verdict's engines run, as a key workers share: ``profile`` (a profile file's mapping,
    or GPU and target by name), its uncertain figures drawn from each seed when ``drawn``, else as
    given (a profile fitted to an operator's pools). "" is the default profile, drawn."""
    if not profile:
        return ""
    return json.dumps({"profile": profile, "drawn": drawn}, sort_keys=True)


def profile_of(seed: int, hardware: str) -> EngineProfile:
    """The seed's engine profile under ``hardware`` (``hardware_key``): ``base_profile`` with its
    uncertain figures drawn from the seed, unless the key says to run it as it is."""
    base = base_profile(hardware)
    drawn = not hardware or json.loads(hardware)["drawn"]
    return EngineProfile.random(seed, base) if drawn else base


@functools.lru_cache(maxsize=3)
def bank_of(seed: int, hardware: str = "") -> Bank:
    """The seed's profile and prepared requests, kept while this process works on the seed."""
    return Bank(profile_of(seed, hardware), seed)


def simulate(unit: Unit, rate: float, requests: int, targets: Targets, split: mix.Split = "verdict",
             longest: float = LONGEST_WINDOW_SECONDS) -> Run:
    """``unit``'s fleet from empty under ``rate`` requests a second (over the fleet) of ``split``, its
    measured window at most ``longest`` seconds."""
    bank = bank_of(unit.seed, unit.hardware)
    schedule = schedule_for(rate, requests, targets, longest)
    sim = Simulation(unit.fleet, bank, _settings(unit, targets), unit.calibration, unit.seed, MAX_NUM_SEQS)
    traffic = OpenLoop(mix.stream(split, unit.seed, unit.weights, unit.traffic), bank, rate,
                       mix.requests_per_item(split, unit.weights, unit.traffic), schedule, unit.seed)
    return sim.run(traffic, schedule.measured, schedule.arrivals_end + DRAIN_LIMIT_SECONDS)


def _settings(unit: Unit, targets: Targets) -> Any:
    """The proxy in front of the unit's fleet: for the gate, with the verdict's targets configured."""
    extra: dict[str, Any] = {}
    if unit.gated:
        extra["default_policy"] = {"tpot_target_ms": targets.tpot * 1000, "ttft_target_ms": targets.ttft * 1000}
        extra["plan"] = {"routing": dict(unit.routing)}
    return proxy_settings(unit.fleet, MAX_NUM_SEQS, extra)


def run_unit(unit: Unit, options: Options) -> UnitResult:
    """The unit's capacity search over the rate grid, its cost and routes by workload at the reference rate,
    and its burst."""
    result = UnitResult(unit, Capacity(0.0, (), True))
    if unit.rate is not None:
        rate = unit.rate * unit.gpus
        result.at_rate = point(simulate(unit, rate, options.requests, options.targets), rate, options.targets)
        return result

    def measure(per_gpu: float) -> Point:
        rate = per_gpu * unit.gpus
        run = simulate(unit, rate, options.requests, options.targets)
        if per_gpu == options.per_replica(REFERENCE_RATE_PER_GPU):
            result.by_workload, result.routes = _by_workload(run)
        return point(run, rate, options.targets)

    grid = sorted({*options.rates, options.per_replica(REFERENCE_RATE_PER_GPU)})
    result.capacity = search(measure, grid, options.bisections, beyond=options.beyond)
    if options.burst:
        result.burst = _burst(unit, options)
    return result


def _by_workload(run: Run) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    seconds: dict[str, float] = {}
    tokens: dict[str, int] = {}
    routes: dict[str, dict[str, int]] = {}
    for s in run.served:
        if not s.measured:
            continue
        seconds[s.workload] = seconds.get(s.workload, 0.0) + s.gpu_seconds
        tokens[s.workload] = tokens.get(s.workload, 0) + s.tokens
        by_pool = routes.setdefault(s.workload, {})
        by_pool[s.pool] = by_pool.get(s.pool, 0) + 1
    cost = {k: {"busy_gpu_ms_per_token": round(1000 * seconds[k] / max(1, tokens[k]), 4)} for k in sorted(seconds)}
    shares = {k: {p: round(n / sum(by_pool.values()), 4) for p, n in sorted(by_pool.items())}
              for k, by_pool in sorted(routes.items())}
    return cost, shares


def _burst(unit: Unit, options: Options) -> Point:
    """Tool calls and chat turns, ``burst`` a GPU, all at once."""
    bank = bank_of(unit.seed, unit.hardware)
    count = round(options.per_replica(options.burst)) * unit.gpus
    drawn = mix.sample("verdict", count * 3, unit.seed * 1000 + 999, unit.weights, unit.traffic)
    singles = [i for i in drawn if i.workload in ("tool_call", "chat")]
    if len(singles) < count:  # a mix with few of those: its own one-request items
        singles = [i for i in drawn if len(i.requests) == 1]
    traffic = Burst(singles[:count], bank)
    sim = Simulation(unit.fleet, bank, _settings(unit, options.targets), unit.calibration, unit.seed, MAX_NUM_SEQS)
    run = sim.run(traffic, (0.0, float("inf")), DRAIN_LIMIT_SECONDS * 4)
    run.window.end = run.ended_at
    return point(run, float(count), options.targets)


# ---------------------------------------------------------------- what each seed shares


def setup_seed(seed: int, options: Options) -> SeedSetup:
    """The gate's calibration, the dynamic-K table and the gate's compositions, from the calibration split:
    the plan's model ranks every composition, and its shortlist is tried in simulation on the profile
    calibration fitted (``trial``), each composition then carrying the capacity its trial measured."""
    bank = bank_of(seed, options.hardware)
    spec_pools = [p for p in FIXED.values() if p.speculative]  # the pools the gate may run, calibrated
    calibrated = calibrate(bank, spec_pools, calibration_arms(), CALIBRATION_REQUESTS, CALIBRATION_LOADS,
                           MAX_NUM_SEQS, base_profile(options.hardware))
    calibration = calibrated.fit.calibration
    fitted = hardware_key(calibrated.hardware.as_file(), drawn=False)
    table = _best_table(seed, calibration, options)
    traffic = plan_traffic(seed, calibration, options)
    choices = candidates(MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS, table)
    target = options.targets
    chosen = {}
    for n in options.gpus:
        requests = options.requests // TRIAL_SHARE
        tried = functools.partial(_tried_capacity, seed, n, calibration, fitted, options, requests)
        again = functools.partial(_tried_capacity, seed, n, calibration, fitted, options,
                                  requests * trial.CONFIRM_SHARE)
        chosen[n] = trial.choose(plans.recommend(traffic, calibration, n, choices, target), tried, confirm_of=again)
    splits = {n: c.best_split for n, c in chosen.items()
              if options.extras and n >= SPLIT_FROM_GPUS and c.best_split is not None}
    by_cost = {(n, rate): plans.recommend(plans.Traffic(rate * n, traffic.kinds), calibration, n, choices, target,
                                          objective="cost").best
               for n in options.gpus for rate in cost_rates(options)}
    return SeedSetup(seed, calibration, table, {n: c.best for n, c in chosen.items()}, splits, by_cost)


def base_profile(hardware: str) -> EngineProfile:
    """What the plan knows of the hardware before calibration: the catalogue's GPU and target (or the
    operator's profile file), none of a seed's draws."""
    return EngineProfile.from_mapping(json.loads(hardware)["profile"]) if hardware else EngineProfile()


def _tried_capacity(seed: int, gpus: int, calibration: Calibration, fitted: str, options: Options,
                    requests: int, composition: plans.Composition) -> float:
    """``composition``'s capacity on ``gpus``, simulated on the calibration split with the ``fitted``
    profile (``hardware_key``) behind the gate, ``requests`` a run, searched around what the plan's
    model predicted."""
    fleet, routing = fleet_of(composition)
    unit = Unit(seed, gpus, "trial", fleet, calibration_for(fleet, calibration), True, tuple(sorted(routing.items())),
                **{**options.shared, "hardware": fitted})

    def measure(rate: float) -> Point:
        run_ = simulate(unit, rate, requests, options.targets, "calibration")
        return point(run_, rate, options.targets)

    return trial.search_around(measure, composition.capacity)


def cost_rates(options: Options) -> tuple[float, ...]:
    """The rates per GPU at which the plan's fleet for objective cost is run (none without ``extras``)."""
    if not options.extras:
        return ()
    return tuple(r for r in options.rates if r <= options.per_replica(COST_RATES_UP_TO))


def plan_traffic(seed: int, calibration: Calibration, options: Options) -> plans.Traffic:
    """The calibration split as the gate's proxy sees it: ``options.requests`` of it replayed lightly
    through one plain GPU, and read from the proxy's own traffic window, as ``draftgate plan`` reads a
    running proxy's."""
    fleet = Fleet((FIXED["always off"],))
    unit = Unit(seed, 1, "plan", fleet, calibration, True, **options.shared)
    bank = bank_of(seed, options.hardware)
    schedule = Schedule(10.0, options.requests / PLAN_TRAFFIC_RATE, 0.0)
    sim = Simulation(fleet, bank, _settings(unit, Targets()), calibration, seed, MAX_NUM_SEQS)
    per_item = mix.requests_per_item("calibration", unit.weights, unit.traffic)
    sim.run(OpenLoop(mix.stream("calibration", seed, unit.weights, unit.traffic), bank, PLAN_TRAFFIC_RATE, per_item,
                     schedule, seed),
            schedule.measured, schedule.arrivals_end + DRAIN_LIMIT_SECONDS)
    traffic = sim.planner.traffic.traffic(sim.now)
    assert traffic is not None
    return traffic


def _best_table(seed: int, calibration: Calibration, options: Options) -> tuple[tuple[int, int, int], ...]:
    """The dynamic-K table that keeps the most requests within the targets on one GPU of the calibration
    split, over rates around where fleets reach their capacity (``TABLE_RATES``)."""
    best, best_share = DYNAMIC_TABLES[0], -1.0
    for table in DYNAMIC_TABLES:
        unit = Unit(seed, 1, DYNAMIC, Fleet((dynamic_pool(table),)), calibration, False, **options.shared)
        share = statistics.fmean(point(simulate(unit, rate, options.requests // 2, options.targets, "calibration"),
                                       rate, options.targets).attainment
                                 for rate in map(options.per_replica, TABLE_RATES))
        if share > best_share:
            best, best_share = table, share
    return best


def meetable(options: Options, requests: int = 200) -> bool:
    """Whether any fixed strategy meets the targets at the lightest rate on one GPU (first seed): when none
    does, the verdict would be every capacity 0, minutes later."""
    lightest = min(options.rates)
    for pool in FIXED.values():
        unit = Unit(options.first_seed, 1, "", Fleet((pool,)), Calibration(), False, **options.shared)
        run_ = simulate(unit, lightest, requests, options.targets)
        if point(run_, lightest, options.targets).attainment >= ATTAINMENT:
            return True
    return False


def calibration_arms() -> dict[str, list[dict[str, Any]]]:
    """The four arms from the calibration split: prose (A), tool calls forced, greedy (B),
    reasoning (C), agent turns (D). Nothing of the verdict split is among them."""
    found = mix.items("calibration")
    first = lambda workload: [item.requests[-1] for item in found[workload]]  # noqa: E731
    prose = [dict(body, max_tokens=min(128, body.get("max_tokens", 128))) for body in first("chat")]
    return {"A": prose, "B": [dict(body, tool_choice="required") for body in first("tool_call")],
            "C": [dict(body, max_tokens=512) for body in first("reasoning")],
            "D": [body for item in found["agent_session"] for body in item.requests]}


def units(setup: SeedSetup, options: Options) -> Iterator[Unit]:
    for gpus in options.gpus:
        for name, pool in FIXED.items():
            yield Unit(setup.seed, gpus, name, Fleet((pool,)).resized(gpus), setup.calibration, False,
                       **options.shared)
        yield Unit(setup.seed, gpus, DYNAMIC, Fleet((dynamic_pool(setup.dynamic_table, gpus),)),
                   setup.calibration, False, **options.shared)
        gated = [(GATE, setup.compositions[gpus])]
        if gpus in setup.splits:
            gated.append((GATE_SPLIT, setup.splits[gpus]))
        for name, composition in gated:
            fleet, routing = fleet_of(composition)
            yield Unit(setup.seed, gpus, name, fleet, calibration_for(fleet, setup.calibration), True,
                       tuple(sorted(routing.items())), **options.shared)
        for rate in cost_rates(options):
            fleet, routing = fleet_of(setup.by_cost[(gpus, rate)])
            yield Unit(setup.seed, gpus, GATE_COST, fleet, calibration_for(fleet, setup.calibration), True,
                       tuple(sorted(routing.items())), rate, **options.shared)


def same_as(unit: Unit, others: Sequence[Unit]) -> str | None:
    """The strategy whose runs a gate's are, among ``others`` of its seed: a homogeneous strategy's on the
    same GPUs, when its fleet is that strategy's one configuration (with one pool the gate routes every
    request to it, through the same proxy on the same seed); else an earlier gate's with the same fleet and
    routing."""
    if not unit.gated:
        return None
    if len(unit.fleet.pools) == 1:
        pool = unit.fleet.pools[0]
        named = next((name for name, fixed in FIXED.items() if fixed.signature == pool.signature), None)
        return named or next((other.strategy for other in others if not other.gated and other.gpus == unit.gpus
                              and other.fleet.pools[0].signature == pool.signature), None)
    return next((other.strategy for other in others
                 if other is not unit and other.gated and other.rate is None and other.gpus == unit.gpus
                 and other.fleet == unit.fleet and other.routing == unit.routing), None)


def calibration_for(fleet: Fleet, calibration: Calibration) -> Calibration:
    """``calibration`` with each of ``fleet``'s pools under its own name (a second pool of a
    configuration takes the first's fit)."""
    pools = {}
    for pool in fleet.pools:
        source = next((p for p in FIXED.values() if p.signature == pool.signature), None)
        fitted = calibration.pools.get(source.name) if source is not None else None
        if fitted is not None:
            pools[pool.name] = fitted
    return calibration.model_copy(update={"pools": pools})


# ---------------------------------------------------------------- the whole verdict


def run(options: Options, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Every seed's setup, then its units, as workers come free; returns the summary (``--json``'s object).

    A seed's units are submitted once its setup is done, behind what is already queued, so no worker idles
    while another works out a setup. The results are put in order before the summary: it depends on what
    was run, never on which worker ran it when."""
    seeds = list(range(options.first_seed, options.first_seed + options.seeds))
    workers = options.workers or os.cpu_count() or 1
    tp = options.tensor_parallel_size
    setups: list[SeedSetup] = []
    every: list[Unit] = []
    results: list[UnitResult] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending: set[Future[SeedSetup]] = {pool.submit(setup_seed, seed, options) for seed in seeds}
        running: set[Future[UnitResult]] = set()
        total = 0
        while pending or running:
            waiting: set[Future[Any]] = pending | running
            done, _ = wait(waiting, return_when=FIRST_COMPLETED)
            for future in done:
                if future in pending:
                    pending.discard(future)
                    setup = future.result()
                    setups.append(setup)
                    say(f"  seed {setup.seed}: kappa {setup.calibration.kappa:.2f}; dynamic K table "
                        f"{[list(row) for row in setup.dynamic_table]}; the gate's fleets: "
                        + "; ".join(f"{n * tp} GPUs {c.name}" for n, c in setup.compositions.items()))
                    mine = list(units(setup, options))
                    every += mine
                    runs = [unit for i, unit in enumerate(mine) if same_as(unit, mine[:i]) is None]
                    running |= {pool.submit(run_unit, unit, options) for unit in runs}
                    total += len(runs)
                else:
                    running.discard(future)
                    results.append(future.result())
                    unit = results[-1].unit
                    draw("  ", len(results), total + (len(pending) * len(results) // max(1, len(setups))),
                         f"runs ({unit.strategy}, {unit.gpus * tp} GPUs, seed {unit.seed})")
    ran = {(r.unit.seed, r.unit.gpus, r.unit.strategy): r for r in results if r.unit.rate is None}
    for i, unit in enumerate(every):
        other = same_as(unit, [u for u in every[:i] if u.seed == unit.seed])
        if other is None:
            continue
        source = ran[(unit.seed, unit.gpus, other)]
        if unit.rate is None:
            results.append(dataclasses.replace(source, unit=unit, same_as=other))
        else:
            results.append(UnitResult(unit, Capacity(0.0, (), True), same_as=other,
                                      at_rate=source.capacity.at(unit.rate * unit.gpus)))
    setups.sort(key=lambda s: s.seed)
    results.sort(key=lambda r: (r.unit.seed, r.unit.gpus, r.unit.strategy, r.unit.rate or 0.0))
    return verdict.in_gpus(verdict.summary(results, setups, options.targets, seeds, options.rates), tp)


def report(summary: dict[str, Any], options: Options, say: Callable[[str], None] = print) -> Path | None:
    """The capacity table, the latencies, cost and routes by workload, the findings, and the figure."""
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "verdict.json").write_text(json.dumps(summary, indent=2))
    say("\n" + verdict.capacity_table(summary))
    say("\n" + verdict.rates_table(summary))
    say("\n" + verdict.workloads_table(summary))
    say("\n" + verdict.cost_table(summary))
    say("\n" + "\n".join(verdict.findings(summary)))
    path = verdict.figure(summary, options.out / "attainment_vs_rate.png")
    if path:
        say(f"\nfigure: {path}")
    return path


def main(options: Options) -> int:
    stream = sys.stderr if options.as_json else sys.stdout

    def say(text: str) -> None:
        print(text, file=stream, flush=True)

    profile = profile_of(options.first_seed, options.hardware)
    say(f"draftgate evaluate: {profile.target.name} on EMULATED {profile.gpu.name}s in virtual time (no GPU). "
        "Point --spec-on/--spec-off at your own pools for your hardware's figures.")
    summary = run(options, say)
    report(summary, options, say)
    if options.as_json:
        print(json.dumps(summary, sort_keys=True))
    return 0
