"""How fast the evaluation simulates: one step's time (``physics.Physics``) by batch, and simulated
seconds of a fleet per wall second.

    python -m bench.bench_simulation

The verdict runs millions of steps; this is where its minutes go.
"""

from __future__ import annotations

import time

from draftgate.emulator.physics import Physics, Work
from draftgate.emulator.profile import EngineProfile
from draftgate.evaluate.bench import Unit, bank_of, simulate
from draftgate.evaluate.fleet import Fleet, PoolSpec
from draftgate.policy.calibration import Calibration
from draftgate.policy.plan import Targets


def time_steps() -> None:
    profile = EngineProfile()
    print("one step, microseconds:")
    for method, depth in ((None, 0), ("eagle3", 3), ("draft_model", 8)):
        physics = Physics(profile, method)
        for batch in (4, 64, 256):
            works = [Work(1500 + 37 * i, 1 + depth, depth) for i in range(batch)]
            started = time.perf_counter()
            for _ in range(2000):
                physics.step_time(works)
            print(f"  {method or 'plain':<12} K={depth} batch {batch:>3}: "
                  f"{(time.perf_counter() - started) / 2000 * 1e6:7.1f}")


def time_fleet() -> None:
    print("a fleet at 2 requests a second per GPU, 800 requests measured:")
    for gpus in (2, 8):
        unit = Unit(1, gpus, "", Fleet((PoolSpec("eagle3", gpus, "eagle3", 3),)), Calibration(), False)
        simulate(unit, 2.0 * gpus, 200, Targets())  # the bank prepared
        started = time.perf_counter()
        run = simulate(unit, 2.0 * gpus, 800, Targets())
        wall = time.perf_counter() - started
        print(f"  {gpus} GPUs: {run.ended_at:.0f} simulated seconds, {len(run.served)} requests in {wall:.2f} s "
              f"({run.ended_at * gpus / wall:.0f} GPU-seconds simulated a second)")


if __name__ == "__main__":
    bank_of(1)
    time_steps()
    time_fleet()
