"""The error no plan can go below: one fleet's capacity on the calibration part of the traffic against
the verdict part, on the seed's own hardware, and the verdict part's capacity measured over a window of
the default size against one four times as long (its cap in seconds too).

    python -m bench.plan_error_floor [--gpus 8] [--strategy "always EAGLE-3 K=3"]
        [--ttft-target-ms 2000] [--tpot-target-ms 50] [--seeds 1,2,3,4,5] [--requests N]

A plan reads the calibration part and predicts the verdict part. Even one that knew the hardware
exactly and simulated its part of the traffic without error predicts the first figure for the second:
their difference is the floor under the plan's error at that point. The window's own spread is the
floor under the verdict's: a capacity is where the window keeps the targets at 99%, and the tail of a
few hundred requests is a sample.
"""

from __future__ import annotations

import argparse

from draftgate.evaluate import bench, capacity
from draftgate.evaluate.fleet import Fleet
from draftgate.evaluate.strategies import FIXED
from draftgate.policy.calibration import Calibration
from draftgate.policy.plan import Targets
from draftgate.workloads import mix


def capacity_on(unit: bench.Unit, split: mix.Split, requests: int, targets: Targets, longest: float) -> float:
    """``unit``'s capacity a GPU on ``split``, searched as the verdict searches it, its windows at most
    ``longest`` seconds (the verdict's is ``capacity.LONGEST_WINDOW_SECONDS``)."""

    def measure(per_gpu: float) -> capacity.Point:
        rate = per_gpu * unit.gpus
        return capacity.point(bench.simulate(unit, rate, requests, targets, split, longest), rate, targets)

    return capacity.search(measure, list(bench.RATES_PER_GPU), bench.Options().bisections).rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--strategy", default="always EAGLE-3 K=3", choices=sorted(FIXED))
    parser.add_argument("--ttft-target-ms", type=float, default=2000.0)
    parser.add_argument("--tpot-target-ms", type=float, default=50.0)
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--requests", type=int, help="the window (default: the verdict's, 75 a GPU and 600 at least)")
    args = parser.parse_args()
    targets = Targets(args.ttft_target_ms / 1000.0, args.tpot_target_ms / 1000.0)
    requests = args.requests or max(600, 75 * args.gpus)
    print(f"{args.strategy} on {args.gpus} GPUs, p99 TTFT {args.ttft_target_ms:g} ms / TPOT "
          f"{args.tpot_target_ms:g} ms; capacity in requests a second per GPU, windows of {requests} and "
          f"{4 * requests} requests")
    print("seed  calibration part  verdict part  plan floor  verdict, 4x window  window spread")
    for seed in (int(s) for s in args.seeds.split(",")):
        unit = bench.Unit(seed, args.gpus, args.strategy, Fleet((FIXED[args.strategy],)).resized(args.gpus),
                          Calibration(), False)
        window = capacity.LONGEST_WINDOW_SECONDS
        planned = capacity_on(unit, "calibration", requests, targets, window)
        measured = capacity_on(unit, "verdict", requests, targets, window)
        longer = capacity_on(unit, "verdict", 4 * requests, targets, 4 * window)
        print(f"{seed:>4}  {planned:16.2f}  {measured:12.2f}  {_against(planned, measured):>10}  {longer:18.2f}  "
              f"{_against(measured, longer):>13}", flush=True)


def _against(figure: float, reference: float) -> str:
    """``figure`` over ``reference``, less one; "-" where the reference met the targets at no rate tried."""
    return f"{figure / reference - 1:+.0%}" if reference > 0 else "-"


if __name__ == "__main__":
    main()
