"""The verdict's simulation beside the wall-clock path, on one fleet both can run.

    python -m bench.simulation_vs_wall_clock [--rates 1,2,3] [--seconds 90]

One small fleet (an EAGLE-3 pool and a plain pool, one GPU each, tool calls
assigned to the first and prose to the second) takes the same arrivals twice:
in virtual time, the emulators' engines and the proxy's planner on one clock
(``draftgate/evaluate/simulation.py``), and over HTTP in wall time, the proxy
under uvicorn in front of two emulators pacing the same profile
(``draftgate/evaluate/replay.py``, the path ``draftgate evaluate --spec-on``
takes against real pools). It prints, for each, the share within the targets
(``capacity.attainment``), TTFT and TPOT at p50 and p99, and the share routed
to the EAGLE-3 pool: what the simulated verdict would be off by if it drifted
from the product. Each rate takes its window plus about twenty seconds of wall
time.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
from pathlib import Path

import httpx
import yaml

from draftgate.emulator.profile import EngineProfile
from draftgate.evaluate.capacity import attainment, percentile
from draftgate.evaluate.fleet import Fleet, PoolSpec
from draftgate.evaluate.replay import replay
from draftgate.evaluate.requests import Bank
from draftgate.evaluate.simulation import Served, Simulation, proxy_settings
from draftgate.evaluate.traffic import OpenLoop, Schedule
from draftgate.policy.calibration import Calibration
from draftgate.policy.plan import Targets
from draftgate.servers import ServerProcess
from draftgate.workloads import mix

SEED = 3
FLEET = Fleet((PoolSpec("eagle3-k3", 1, "eagle3", 3), PoolSpec("plain", 1)))
PROXY = {"exploration_share": 0.0, "health": {"scrape_interval": 2.0},
         "plan": {"interval": 0.0, "routing": {"tool_auto": "eagle3-k3", "prose": "plain"}}}


def figures(served: list[Served], targets: Targets) -> str:
    measured = [s for s in served if s.measured]
    within = attainment(measured, targets)
    ttft = [s.ttft for s in measured]
    tpot = [s.tpot if s.finished else float("inf") for s in measured]
    eagle = sum(s.pool == "eagle3-k3" for s in measured) / len(measured)
    ms = [1000 * percentile(values, q) for values in (ttft, tpot) for q in (0.5, 0.99)]
    return f"{len(measured):>5} {within:>8.3f} {ms[0]:>9.0f} {ms[1]:>9.0f} {ms[2]:>9.1f} {ms[3]:>9.1f} {eagle:>8.2f}"


def simulated(items: list[mix.Item], rate: float, schedule: Schedule) -> list[Served]:
    bank = Bank(EngineProfile.random(SEED), SEED)
    sim = Simulation(FLEET, bank, proxy_settings(FLEET, 1024, PROXY), Calibration(), SEED, 1024)
    traffic = OpenLoop(iter(items), bank, rate, mix.requests_per_item("verdict"), schedule, SEED)
    return sim.run(traffic, schedule.measured, float("inf")).served


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1,2,3", help="requests a second over the two GPUs")
    parser.add_argument("--seconds", type=float, default=90.0, help="the measurement window of each rate")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    schedule = Schedule(10.0, args.seconds, 10.0)
    items = list(itertools.islice(mix.stream("verdict", SEED), 2000))
    targets = Targets()
    common = ["emulate", "--enable-force-include-usage", "--profile-seed", str(SEED), "--seed", str(SEED)]
    eagle_config = FLEET.pools[0].speculative_config_json() or ""
    with tempfile.TemporaryDirectory() as tmp, \
            ServerProcess([*common, "--speculative-config", eagle_config]) as eagle, ServerProcess(common) as plain:
        config = proxy_settings(FLEET, 1024, PROXY).model_dump(mode="json", exclude_unset=True)
        config["pools"] = [dict(p, urls=[u]) for p, u in zip(config["pools"], [eagle.url, plain.url])]
        path = Path(tmp) / "draftgate.yaml"
        path.write_text(yaml.safe_dump(config))
        with ServerProcess(["serve", "--config", str(path), "--log-level", "warning"]) as proxy:
            print(f"{FLEET.gpus} GPUs (eagle3-k3, plain), seed {SEED}, p99 targets TTFT {targets.ttft:g} s and TPOT "
                  f"{1000 * targets.tpot:g} ms; latencies in ms")
            print(f"{'rate/s':<8}{'path':<13}{'n':>5} {'within':>8} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9}"
                  f" {'TPOT p99':>9} {'to eagle':>8}")
            for rate in rates:
                print(f"{rate:<8g}{'simulated':<13}" + figures(simulated(items, rate, schedule), targets), flush=True)
                over_http = asyncio.run(replay(proxy.url, items, rate, mix.requests_per_item("verdict"), schedule,
                                               SEED)).served
                print(f"{'':<8}{'wall clock':<13}" + figures(over_http, targets), flush=True)
                for server in (eagle, plain):  # each rate starts from empty caches, as its simulation does
                    httpx.post(f"{server.url}/reset_prefix_cache")


if __name__ == "__main__":
    main()
