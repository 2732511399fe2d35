"""The emulator's speculative speedups beside published measurements (docs/emulator.md).

    python -m bench.emulator_vs_published [--seeds 3]

Runs ShareGPT chat prompts, greedy, at concurrency 1 and 64 against emulated
pools (speculation off; a Qwen3-4B draft model at K=4; an EAGLE-3 head at K=4;
ngram at K=4) and prints the latency speedup at concurrency 1 (time per output
token off / on) and the throughput ratio at 64 (GPU time per token off / on),
mean over seeds. The published figures it is compared with are in
docs/emulator.md, each with its source.
"""

from __future__ import annotations

import argparse
import statistics

from draftgate.emulator.profile import EngineProfile
from draftgate.evaluate.fleet import Fleet, PoolSpec
from draftgate.evaluate.requests import Bank
from draftgate.evaluate.simulation import Simulation, proxy_settings
from draftgate.evaluate.traffic import ClosedLoop
from draftgate.policy.calibration import Calibration
from draftgate.workloads import mix

OFF = PoolSpec("plain", 1)
METHODS = {"draft model K=4": PoolSpec("draft", 1, "draft_model", 4),
           "EAGLE-3 K=4": PoolSpec("eagle3", 1, "eagle3", 4),
           "ngram K=4": PoolSpec("ngram", 1, "ngram", 4, (4, 4))}


def measure(bank: Bank, pool: PoolSpec, items: list[mix.Item], concurrency: int) -> tuple[float, float]:
    """(mean time per output token, busy GPU seconds per output token) of one emulated server at
    ``concurrency``, in virtual time."""
    fleet = Fleet((pool,))
    sim = Simulation(fleet, bank, proxy_settings(fleet, 1024), Calibration(), bank.seed, 1024)
    requests = [bank.prepared(f"{i.id}#greedy", i.kind, dict(i.requests[-1], temperature=0)) for i in items]
    run = sim.run(ClosedLoop(requests, concurrency), (0.0, float("inf")), float("inf"))
    tokens = sum(s.tokens for s in run.served)
    return statistics.fmean(s.tpot for s in run.served), sum(s.gpu_seconds for s in run.served) / tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    chat = mix.items("verdict")["chat"]
    rows: dict[str, list[tuple[float, float]]] = {name: [] for name in METHODS}
    for seed in range(1, args.seeds + 1):
        bank = Bank(EngineProfile.random(seed), seed)
        base1, _ = measure(bank, OFF, chat[:12], 1)
        _, base64 = measure(bank, OFF, chat[:128], 64)
        for name, pool in METHODS.items():
            tpot1, _ = measure(bank, pool, chat[:12], 1)
            _, cost64 = measure(bank, pool, chat[:128], 64)
            rows[name].append((base1 / tpot1, base64 / cost64))
    print(f"ShareGPT chat, greedy, {args.seeds} seeds: speedup at concurrency 1 (latency), at 64 (throughput)")
    for name, values in rows.items():
        print(f"  {name:<16} {statistics.fmean(v[0] for v in values):.2f}x   {statistics.fmean(v[1] for v in values):.2f}x")


if __name__ == "__main__":
    main()
