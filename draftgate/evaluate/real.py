"""The verdict on real pools, in wall time: each pool given alone, and the gate in front of all of them.

Real pools are what an operator has, one replica each, not fleets of one size:
each strategy is reported under the number of GPUs it uses (a pool alone: 1;
the gate: every pool given), at the same arrival rates per GPU, and the
verdict says so. Latencies are timed at the client; busy GPU time is not
known from outside a server, so only provisioned GPU-seconds per token are
given. Capacity is interpolated between the rates measured, without the
search's extra rates: each costs real minutes. The gate is calibrated on the
calibration split first, against the pools themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from draftgate.calibrate.protocol import Pool
from draftgate.calibrate.short import short_calibration
from draftgate.evaluate.capacity import Capacity, Point, point, schedule_for, search
from draftgate.evaluate.fleet import PoolSpec
from draftgate.evaluate.replay import replay
from draftgate.evaluate.simulation import Run, Window
from draftgate.evaluate.strategies import GATE, NGRAM_LOOKUP
from draftgate.policy.plan import Targets
from draftgate.servers import ServerProcess
from draftgate.workloads import mix

RATES_PER_GPU = (0.5, 1.0, 2.0, 4.0)  # each a run of real minutes

@dataclass
class RealPools:
    """The pools an operator gives, each a running vLLM: strategy name -> (its pool, its base URL)."""

    pools: dict[str, tuple[PoolSpec, str]] = field(default_factory=dict)

    @property
    def plain(self) -> tuple[PoolSpec, str] | None:
        return next((p for p in self.pools.values() if not p[0].speculative), None)


def real_pools(spec_on: dict[int, str], spec_off: str | None, ngram: str | None, eagle3: str | None,
               dynamic_k: str | None) -> RealPools:
    pools = RealPools()
    for depth, url in sorted(spec_on.items()):
        pools.pools[f"always on K={depth}"] = (PoolSpec(f"draft-k{depth}", 1, "draft_model", depth), url)
    if eagle3:
        pools.pools["always EAGLE-3"] = (PoolSpec("eagle3", 1, "eagle3", 3), eagle3)
    if ngram:
        pools.pools["always ngram K=4"] = (PoolSpec("ngram-k4", 1, "ngram", 4, NGRAM_LOOKUP), ngram)
    if spec_off:
        pools.pools["always off"] = (PoolSpec("plain", 1), spec_off)
    if dynamic_k:
        pools.pools["dynamic K"] = (PoolSpec("dynamic-k", 1, "draft_model", 8), dynamic_k)
    return pools


def run(given: RealPools, rates: tuple[float, ...], requests: int, targets: Targets, seed: int, out: Path,
        say: Callable[[str], None], weights: Mapping[str, float] | None = None, traffic: str = "") -> dict[str, Any]:
    """Every given pool alone and the gate in front of them all, at each rate per GPU, under the
    verdict split (of the built-in data, or of the ``traffic`` file) drawn by ``weights`` (when None,
    the built-in mix, or the file's own)."""
    weights = mix.weights_for(weights, traffic)
    items = list(itertools.islice(mix.stream("verdict", seed, weights, traffic), 100_000))
    per_item = mix.requests_per_item("verdict", weights, traffic)
    results: dict[str, tuple[int, dict[str, int], Capacity]] = {}
    with contextlib.ExitStack() as stack:
        endpoints = {name: (url, 1, {pool.name: 1}) for name, (pool, url) in given.pools.items()}
        gate = _gate(given, out, say, stack)
        if gate is not None:
            endpoints[GATE] = gate
        for name, (url, gpus, composition) in endpoints.items():
            def measure(per_gpu: float, url: str = url, gpus: int = gpus, name: str = name) -> Point:
                rate = per_gpu * gpus
                schedule = schedule_for(rate, requests, targets)
                say(f"  {name}: {rate:g} requests a second for about {schedule.arrivals_end:.0f} s")
                replayed = asyncio.run(replay(url, items, rate, per_item, schedule, seed))
                window = Window(*schedule.measured)
                return point(Run(replayed.served, window, gpus, schedule.arrivals_end), rate, targets)

            results[name] = (gpus, composition, search(measure, list(rates), 0))
    return summary(results, targets)


def _gate(given: RealPools, out: Path, say: Callable[[str], None], stack: contextlib.ExitStack
          ) -> tuple[str, int, dict[str, int]] | None:
    """A proxy in front of every given pool, calibrated on the calibration split against them: its URL,
    its GPUs, its composition. None without a plain pool and a speculating one to calibrate against."""
    plain = given.plain
    spec = [(pool, url) for pool, url in given.pools.values() if pool.speculative and not pool.dynamic]
    if plain is None or not spec:
        return None
    from draftgate.evaluate.bench import calibration_arms

    out.mkdir(parents=True, exist_ok=True)
    draft = next(((p, u) for p, u in spec if p.method == "draft_model"), spec[0])
    others = tuple(Pool(p.name, u, p.depth, p.method or "draft_model") for p, u in spec if (p, u) != draft)
    say("  calibrating the gate on the calibration split against the given pools")
    short_calibration(draft[1], plain[1], out / "calibration.yaml", mix.MODEL, 4, draft[0].depth, calibration_arms(),
                      None, (1, 8), others)
    # the calibration names the draft-model pool spec-on and the plain pool spec-off; the rest keep their names
    names = {draft[0].name: "spec-on", plain[0].name: "spec-off"}
    pools = [pool.proxy_pool([url], 1024) for pool, url in given.pools.values() if not pool.dynamic]
    pools = [dict(p, name=names.get(p["name"], p["name"])) for p in pools]
    config = {"pools": pools, "calibration_file": str((out / "calibration.yaml").resolve()), "log_requests": False}
    path = out / "draftgate.yaml"
    path.write_text(yaml.safe_dump(config))
    proxy = stack.enter_context(ServerProcess(["serve", "--config", str(path), "--log-level", "warning"]))
    return proxy.url, len(pools), {p["name"]: 1 for p in pools}


def summary(results: dict[str, tuple[int, dict[str, int], Capacity]], targets: Targets) -> dict[str, Any]:
    """The same object as the simulated verdict's, each strategy under the GPUs it used."""
    fleets: dict[str, Any] = {}
    for name, (gpus, composition, capacity) in results.items():
        rates = []
        for p in capacity.points:
            rates.append({"rps": round(p.rps, 4), "rps_per_gpu": round(p.rps / gpus, 4),
                          "ttft_p99_ms": _ms(p.ttft_p99), "tpot_p99_ms": _ms(p.tpot_p99), "e2e_p99_ms": _ms(p.e2e_p99),
                          "slo_attainment": round(p.attainment, 4), "busy_gpu_ms_per_token": None,
                          "provisioned_gpu_ms_per_token": _ms(p.provisioned_gpu_seconds_per_token)})
        per_gpu = capacity.rate  # searched per GPU
        fleets.setdefault(str(gpus), {"strategies": {}})["strategies"][name] = {
            "gpus": gpus, "composition": composition,
            "capacity_rps_per_gpu": {"mean": round(per_gpu, 4), "min": round(per_gpu, 4), "max": round(per_gpu, 4)},
            "capacity_bounded": capacity.bounded, "rates": rates}
    return {"targets": {"ttft_p99_ms": round(targets.ttft * 1000, 3), "tpot_p99_ms": round(targets.tpot * 1000, 3),
                        "attainment": 0.99},
            "seeds": 1, "real_pools": True,
            "units": {"rps": "requests a second over the pools the strategy uses", "latency": "wall milliseconds",
                      "cost": "provisioned GPU-milliseconds per output token (busy time is not known from outside)"},
            "fleets": {size: fleets[size] for size in sorted(fleets, key=int)}}


def _ms(seconds: float) -> float | None:
    return None if seconds != seconds or seconds in (float("inf"),) else round(seconds * 1000, 3)

