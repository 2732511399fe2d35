"""The step and round times calibration fits by load, beside what the arms' own batches read and beside
answers long enough that few prefills fall among the steps.

    python -m bench.calibration_step_time [--loads 1,4,16,64,128] [--seed 2]

A closed loop replaces each finished request at once, so where answers are short and the load high, a
new prompt is prefilled every step or two and the TPOTs carry those prefills, which the plan's model
prices again as stalls. So the protocol times a plain step and a model drafter's round in step batches
(``protocol.STEP_ANSWER`` tokens an answer) rather than in the arms' batches. Here, on an emulated H200
with the seed's profile and the verdict's arms: the fit, the plain step each arm's batches would give,
and the same prompts answered at ``LONG_ANSWER`` tokens, where a prefill comes every eight steps at most.
"""

from __future__ import annotations

import argparse
import statistics

from draftgate.calibrate.protocol import records_of, step_bodies
from draftgate.calibrate.runner import Record
from draftgate.evaluate import bench
from draftgate.evaluate.calibration import OFF, calibrate, closed_loop
from draftgate.evaluate.fleet import PoolSpec
from draftgate.evaluate.strategies import FIXED
from draftgate.workloads.mix import MODEL

LONG_ANSWER = 1024  # tokens: a closed loop at 128 running then starts a new request every 8 steps
EAGLE = FIXED["always EAGLE-3 K=3"]


def step_of(records: list[Record], speculative: bool) -> float:
    """The protocol's reading of a step: the median TPOT; for a model drafter's round, TPOT times the
    tokens a round emits (tau + 1)."""
    if speculative:
        return statistics.median(r.tpot * (r.tau + 1.0) for r in records if r.tpot is not None and r.tau is not None)
    return statistics.median(r.tpot for r in records if r.tpot is not None)


def few_prefills(seed: int, server: PoolSpec, arm: list[dict], load: int) -> float:
    """A step (or round) at ``load`` running, the prose arm's prompts answered at ``LONG_ANSWER`` tokens."""
    bodies = step_bodies(arm, load, LONG_ANSWER)
    template = Record(arm="A", pool=server.name, gamma=server.depth, concurrency=load, regime="greedy",
                      kind="timing", index=0)
    records, _ = closed_loop(bench.bank_of(seed), server, bodies, template, MODEL, bench.MAX_NUM_SEQS)
    return step_of(records, server.speculative)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", default="1,4,16,64,128", help="running sequences, comma-separated")
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    loads = tuple(int(n) for n in args.loads.split(","))
    arms = bench.calibration_arms()
    calibrated = calibrate(bench.bank_of(args.seed), [EAGLE], arms, bench.CALIBRATION_REQUESTS, loads,
                           bench.MAX_NUM_SEQS)
    fit, state = calibrated.fit, calibrated.state
    plain, eagle = PoolSpec(OFF, 1), PoolSpec(EAGLE.name, 1, EAGLE.method, EAGLE.depth, EAGLE.lookup)
    print(f"seed {args.seed}: a plain step and an EAGLE-3 K=3 round (ms) as calibration fits them, as every arm's "
          f"batches together read them, the plain step in each arm's batches, and both with {LONG_ANSWER}-token "
          "answers (few prefills); each reading over the few-prefill figure")
    print("load  plain fitted  all arms  arm A  arm B  arm C  arm D  few prefills  |  EAGLE-3 fitted  all arms  "
          "few prefills")
    for load in loads:
        by_arm = [step_of(records_of(state, "timing", OFF, arm, "greedy", load), False) for arm in "ABCD"]
        arms_plain = step_of(records_of(state, "timing", OFF, regime="greedy", concurrency=load), False)
        arms_round = step_of(records_of(state, "timing", EAGLE.name, regime="greedy", concurrency=load), True)
        clean, clean_round = (few_prefills(args.seed, pool, arms["A"], load) for pool in (plain, eagle))
        fitted, fitted_round = fit.c_t[load], fit.round_time[(EAGLE.name, load)]
        print(f"{load:>4}  {_over(fitted, clean):>12}  {_over(arms_plain, clean):>8}  "
              + "  ".join(f"{1000 * t:5.1f}" for t in by_arm)
              + f"  {1000 * clean:12.1f}  |  {_over(fitted_round, clean_round):>14}  {_over(arms_round, clean_round):>8}"
              f"  {1000 * clean_round:12.1f}")


def _over(seconds: float, clean: float) -> str:
    return f"{1000 * seconds:.1f} {seconds / clean - 1:+.0%}"


if __name__ == "__main__":
    main()
