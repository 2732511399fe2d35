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
import asyncio
import statistics

from draftgate.evaluate.replay import closed_loop
from draftgate.servers import ServerProcess
from draftgate.workloads import mix

METHODS = {"draft model K=4": '{"method": "draft_model", "model": "Qwen/Qwen3-4B", "num_speculative_tokens": 4}',
           "EAGLE-3 K=4": '{"method": "eagle3", "model": "eagle3-head", "num_speculative_tokens": 4}',
           "ngram K=4": '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'}


def measure(url: str, items: list[mix.Item], concurrency: int) -> tuple[float, float]:
    """(mean time per output token, GPU seconds per output token) at ``concurrency``."""
    measured = asyncio.run(closed_loop(url, items, concurrency, streamed=False))
    tokens = sum(m.tokens for m in measured)
    return statistics.fmean(m.tpot for m in measured), sum(m.gpu_seconds or 0.0 for m in measured) / tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    chat = [mix.Item(i.id, i.kind, tuple(dict(b, temperature=0) for b in i.requests))
            for i in mix.items("verdict")["chat"]]
    rows: dict[str, list[tuple[float, float]]] = {name: [] for name in METHODS}
    for seed in range(1, args.seeds + 1):
        common = ["emulate", "--time-scale", "0.02", "--profile-seed", str(seed), "--seed", str(seed)]
        with ServerProcess(common) as off:
            base1, _ = measure(off.url, chat[:12], 1)
            _, base64 = measure(off.url, chat[:128], 64)
            for name, config in METHODS.items():
                with ServerProcess([*common, "--speculative-config", config]) as on:
                    tpot1, _ = measure(on.url, chat[:12], 1)
                    _, cost64 = measure(on.url, chat[:128], 64)
                rows[name].append((base1 / tpot1, base64 / cost64))
    print(f"ShareGPT chat, greedy, {args.seeds} seeds: speedup at concurrency 1 (latency), at 64 (throughput)")
    for name, values in rows.items():
        print(f"  {name:<16} {statistics.fmean(v[0] for v in values):.2f}x   {statistics.fmean(v[1] for v in values):.2f}x")


if __name__ == "__main__":
    main()
