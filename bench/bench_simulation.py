"""How fast the evaluation simulates: step times by sums (``physics.Physics``) against a pass at a time,
and simulated seconds of a fleet per wall second.

    python -m bench.bench_simulation

The baseline is the roofline written plainly, one pass of the drafter per draft
position over the sequences still drafting, each sequence's share taken in the
pass: the same figures (checked here), at the cost a plain reading of the model
gives. The verdict runs millions of steps; this is where its minutes go.
"""

from __future__ import annotations

import time

from draftgate.emulator.physics import Physics, Work, _Model, _pass
from draftgate.emulator.profile import EngineProfile
from draftgate.evaluate.bench import Unit, bank_of, simulate
from draftgate.evaluate.fleet import Fleet, PoolSpec
from draftgate.evaluate.simulation import Targets
from draftgate.policy.calibration import Calibration


def plain_step(physics: Physics, works: list[Work]) -> tuple[float, list[float]]:
    """The step as a pass at a time: the target's, then the drafter's, position by position."""
    seconds, charges = _pass(physics.target, [w.context for w in works], [w.new_tokens for w in works])
    overhead = physics.step_overhead
    drafting = [i for i, w in enumerate(works) if w.draft_len > 0]
    if physics.drafter is not None and drafting:
        overhead += physics.round_overhead
        draft: _Model | None = physics.draft
        if draft is not None:
            for p in range(max(works[i].draft_len for i in drafting)):
                still = [i for i in drafting if works[i].draft_len > p]
                pass_seconds, shares = _pass(draft, [works[i].context + p for i in still], [1] * len(still))
                seconds += pass_seconds + physics.drafter.pass_overhead_seconds
                for i, share in zip(still, shares):
                    charges[i] += share + physics.drafter.pass_overhead_seconds / len(still)
    seconds += overhead
    return seconds, [c + overhead / len(works) for c in charges]


def time_steps() -> None:
    profile = EngineProfile()
    print("one step, microseconds (by sums / a pass at a time):")
    for method, depth in ((None, 0), ("eagle3", 3), ("draft_model", 8)):
        physics = Physics(profile, method)
        for batch in (4, 64):
            works = [Work(1500 + 37 * i, 1 + depth, depth) for i in range(batch)]
            fast, slow = physics.step_time(works), plain_step(physics, works)
            assert abs(fast.seconds - slow[0]) < 1e-12 * slow[0]
            timings = []
            for step in (lambda: physics.step_time(works), lambda: plain_step(physics, works)):
                started = time.perf_counter()
                for _ in range(2000):
                    step()
                timings.append((time.perf_counter() - started) / 2000 * 1e6)
            print(f"  {method or 'plain':<12} K={depth} batch {batch:>3}: {timings[0]:7.1f} / {timings[1]:7.1f}")


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
