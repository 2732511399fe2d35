"""The emulator beside published measurements (docs/emulator.md).

    python -m bench.emulator_vs_published [--seeds 3]

First, kernels and steps that others profiled: BF16 GEMMs at the token counts
a decode or verification step runs, and a cost model fitted to vLLM's profiled
steps. Then step times and serving figures that others measured on real GPUs, each
row with its source, the published figure, the emulator's (default profile,
virtual time) and the error. Then the speculative speedups on the committed
ShareGPT chat prompts, greedy, at concurrency 1 and 64 (speculation off; a
Qwen3-4B draft model, an EAGLE-3 head and ngram, each at K=4): the latency
speedup at 1 (time per output token off / on) and the throughput ratio at 64
(GPU time per token off / on), mean over seeds.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

from draftgate.emulator.engine import SpecConfig
from draftgate.emulator.physics import Physics, Work, gemm_seconds
from draftgate.emulator.profile import EngineProfile
from draftgate.evaluate.fleet import Fleet, PoolSpec
from draftgate.evaluate.requests import Bank
from draftgate.evaluate.simulation import Served, Simulation, proxy_settings
from draftgate.evaluate.traffic import ClosedLoop
from draftgate.policy.calibration import Calibration
from draftgate.simulate.ladder import Ladder, Lengths, run_rate
from draftgate.workloads import mix

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_8B_EAGLE3 = SpecConfig("eagle3", 4, draft_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
# NVIDIA L20 (datasheet: 48 GB GDDR6 at 864 GB/s, 119.5 TFLOPS dense BF16, PCIe Gen4): not in the
# catalogue, added here as a profile file would add it
L20 = {"gpus": {"L20": {"memory_bytes": 48e9, "hbm_bytes_per_second": 864e9, "bf16_flops": 119.5e12,
                        "link_bytes_per_second": 32e9}}}


@dataclass(frozen=True)
class Row:
    source: str
    what: str
    published: float
    emulated: float
    unit: str

    @property
    def error(self) -> float:
        return self.emulated / self.published - 1


def one_at_a_time(profile: EngineProfile, spec: SpecConfig | None, prompt: str, output: str) -> dict:
    """A rung so light that requests rarely overlap: concurrency 1, as a latency benchmark runs."""
    ladder = Ladder(profile, spec, (0.05,), 400.0, Lengths.parse(prompt), Lengths.parse(output), seed=1)
    return run_rate(ladder, 0.05, 0)


def closed_loop(bank: Bank, items: list[mix.Item], concurrency: int) -> list[Served]:
    """The items' chat requests, greedy, ``concurrency`` at a time on one plain emulated server."""
    fleet = Fleet((OFF,))
    sim = Simulation(fleet, bank, proxy_settings(fleet, 1024), Calibration(), bank.seed, 1024)
    requests = [bank.prepared(f"{i.id}#greedy", i.workload, dict(i.requests[-1], temperature=0)) for i in items]
    return sim.run(ClosedLoop(requests, concurrency), (0.0, float("inf")), float("inf")).served


def published_rows() -> list[Row]:
    h100_8b = EngineProfile.build("H100", LLAMA_8B)
    l20_8b = EngineProfile.from_mapping(L20, "L20", LLAMA_8B)
    rows = []
    # SGLang docs, speculative decoding (EAGLE-3 section): Llama-3.1-8B-Instruct on one H100,
    # MT-bench, batch 1: 158 tokens/s without speculation
    plain = one_at_a_time(h100_8b, None, "100-200", "300-500")
    rows.append(Row("SGLang docs: EAGLE-3, Llama 3.1 8B, 1 x H100, batch 1", "decode, tokens/s",
                    158.0, 1000 / plain["tpot_ms"]["mean"], "tok/s"))
    # the same page: 373 tokens/s with EAGLE-3 (SGLang drafts a tree, vLLM and the emulator a chain)
    eagle = one_at_a_time(h100_8b, LLAMA_8B_EAGLE3, "100-200", "300-500")
    rows.append(Row("SGLang docs (tree drafting; the emulator drafts a chain, K=4)", "EAGLE-3 speedup, batch 1",
                    373.0 / 158.0, plain["tpot_ms"]["mean"] / eagle["tpot_ms"]["mean"], "x"))
    # vLLM PR 25872: Llama-3.1-8B-Instruct + EAGLE-3 K=4 on an L20, MT-bench, concurrency 1,
    # async scheduling: mean ITL 27.17 ms (one round), mean TPOT 9.57 ms
    round_ms = Physics(l20_8b, "eagle3").step_time([Work(400, 5, 4)]).seconds * 1e3
    rows.append(Row("vLLM PR 25872: EAGLE-3 K=4, Llama 3.1 8B, 1 x L20, concurrency 1", "round (mean ITL), ms",
                    27.17, round_ms, "ms"))
    l20 = one_at_a_time(l20_8b, LLAMA_8B_EAGLE3, "100-200", "300-500")
    rows.append(Row("vLLM PR 25872 (the emulator's prose acceptance, not MT-bench's)", "mean TPOT, ms",
                    9.57, l20["tpot_ms"]["mean"], "ms"))
    rows.extend(depth_sweep_rows(h100_8b))
    # GPUStack performance lab, Qwen3-8B latency on H100: vLLM 0.11.0, Qwen3-8B in BF16 on one H100 SXM,
    # ShareGPT, 100 prompts at concurrency 4: mean TPOT 7.38 ms, median TTFT 60.26 ms; mean latency a
    # request at concurrency 1, 2, 4 and 8: 1.66, 1.68, 1.68 and 1.78 s
    qwen_8b = Bank(EngineProfile.build("H100", "Qwen/Qwen3-8B"), 1)
    chat = mix.items("verdict")["chat"][:100]
    at_four = closed_loop(qwen_8b, chat, 4)
    rows.append(Row("GPUStack lab: Qwen3-8B, 1 x H100, vLLM 0.11, ShareGPT, concurrency 4", "mean TPOT, ms",
                    7.38, statistics.fmean(s.tpot for s in at_four) * 1e3, "ms"))
    rows.append(Row("the same", "median TTFT, ms", 60.26,
                    statistics.median(s.first_token - s.arrived for s in at_four) * 1e3, "ms"))
    latency = {c: statistics.fmean(s.last_token - s.arrived for s in closed_loop(qwen_8b, chat, c)) for c in (1, 8)}
    rows.append(Row("the same, concurrency 1 to 8", "mean latency, 8 against 1", 1.78 / 1.66,
                    latency[8] / latency[1], "x"))
    # vLLM PR 18566: Llama-3.1-8B-Instruct, ShareGPT, 1,000 prompts sent at once (GPU not stated;
    # an H100 assumed): 32.42 requests/s, 6,582.87 output tokens/s, mean 230 prompt and 203 answer tokens
    burst = Ladder(h100_8b, None, (1000.0,), 1.0, Lengths.parse("230:200"), Lengths.parse("203:150"), seed=1)
    served = run_rate(burst, 1000.0, 0)
    rows.append(Row("vLLM PR 18566: ShareGPT, 1,000 at once, Llama 3.1 8B (H100 assumed)", "output tokens/s",
                    6582.87, served["output_tokens_per_s"], "tok/s"))
    return rows


# vLLM issue 20780 (July 2025, vLLM 0.9): Llama-3.1-8B-Instruct with yuhuili/EAGLE3-LLaMA3.1-Instruct-8B,
# MT-bench, batch 1 (the GPU is not stated; the author's earlier figures on the same benchmark, in vLLM
# PR 16937, were on an H100): TPOT 7.07 ms without speculation; by depth K, TPOT and acceptance length
EAGLE3_DEPTH_SWEEP = {2: (4.32, 2.36), 3: (4.09, 2.79), 4: (4.05, 3.08), 7: (4.29, 3.54)}


def depth_sweep_rows(profile: EngineProfile, context: int = 300) -> list[Row]:
    """A batch-1 EAGLE-3 round (TPOT times acceptance length) by depth, and a plain step: what each
    further draft position costs."""
    plain = Physics(profile, None).step_time([Work(context, 1)]).seconds * 1e3
    rows = [Row("vLLM issue 20780: Llama 3.1 8B, batch 1, vLLM 0.9 (H100 assumed)", "plain step (TPOT), ms",
                7.07, plain, "ms")]
    eagle = Physics(profile, "eagle3")
    for k, (tpot, length) in EAGLE3_DEPTH_SWEEP.items():
        round_ms = eagle.step_time([Work(context, 1 + k, k)]).seconds * 1e3
        rows.append(Row("the same, EAGLE-3 (TPOT x acceptance length)", f"K={k} round, ms", tpot * length,
                        round_ms, "ms"))
    return rows


# torch BF16 GEMM TFLOP/s by rows (tokens), from vLLM's benchmarks/kernels/bench_fp8_gemm.py as run in
# two pull requests: PR 49363 on an H100 (gemma-4-31B-it, N=12288 K=5376) and PR 17126 (Llama 3.1 8B's
# QKV projection, N=6144 K=4096; the GPU is not stated, an H100 assumed)
GEMM_TFLOPS = {
    ("vLLM PR 49363: H100, BF16 GEMM 12288 x 5376", 12288, 5376): {
        1: 2.870333, 16: 46.541434, 64: 182.588263, 128: 352.560566},
    ("vLLM PR 17126: BF16 GEMM 6144 x 4096 (H100 assumed)", 6144, 4096): {
        1: 2.513023, 16: 39.110705, 64: 160.586644, 128: 307.854920, 256: 544.327503},
}


def gemm_rows() -> list[Row]:
    """One GEMM's time by the tokens it runs, published against the emulator's roofline."""
    profile = EngineProfile.build("H100", LLAMA_8B)
    rows = []
    for (source, n, k), by_tokens in GEMM_TFLOPS.items():
        for tokens, tflops in by_tokens.items():
            published = 2.0 * n * k * tokens / (tflops * 1e12)
            emulated = gemm_seconds(profile.gpu, profile.efficiency, n, k, tokens)
            rows.append(Row(source, f"{tokens} tokens, us", published * 1e6, emulated * 1e6, "us"))
    return rows


class ProfiledSteps:
    """The step cost model of SpecDecode-Bench ("Speculative Decoding: Performance or Illusion?",
    arXiv 2601.11580; github.com/SpecDecode-Bench/simulator, predictor.py), fitted to vLLM's profiled
    steps of Llama-3.1-8B-Instruct with an EAGLE-3 head on one H100, InstructCoder at batch 1 to 64:
    a forward pass is linear in the tokens in the KV cache and the tokens batched, an EAGLE proposal
    in the KV tokens and the tokens drafted, and every step adds the same CPU overhead. One line
    fitted over prefills and decodes alike: its slope in the tokens batched is prefill's arithmetic,
    so between a handful of tokens and a few hundred it is an extrapolation, not a measurement."""

    KV, TOKEN, FIXED = 3.92645679e-08, 2.10103129e-05, 5.88590713e-03
    DRAFT_KV, DRAFT_TOKEN, DRAFT_FIXED = 2.37768493e-09, 8.41429603e-07, 2.13526175e-03
    OVERHEAD = 1.20683946e-03

    def forward(self, kv_tokens: int, batched: int) -> float:
        return kv_tokens * self.KV + batched * self.TOKEN + self.FIXED + self.OVERHEAD

    def round(self, kv_tokens: int, batched: int) -> float:
        draft = kv_tokens * self.DRAFT_KV + batched * self.DRAFT_TOKEN + self.DRAFT_FIXED
        return self.forward(kv_tokens, batched) + draft


def profiled_step_rows(context: int = 1000, k: int = 3) -> list[Row]:
    """Plain steps and EAGLE-3 rounds (K=3, as the profile's FIXED_3) by batch, each sequence
    ``context`` tokens in, and one prefill, against the profiled cost model."""
    profile = EngineProfile.build("H100", LLAMA_8B)
    plain, eagle = Physics(profile, None), Physics(profile, "eagle3")
    fitted = ProfiledSteps()
    source = "SpecDecode-Bench cost model: vLLM, Llama 3.1 8B, 1 x H100"
    rows = []
    for batch in (1, 16, 64):
        rows.append(Row(source, f"plain step, batch {batch}, ms", fitted.forward(batch * context, batch) * 1e3,
                        plain.step_time([Work(context, 1)] * batch).seconds * 1e3, "ms"))
    for batch in (1, 16, 64):
        rows.append(Row(source, f"EAGLE-3 K={k} round, batch {batch}, ms",
                        fitted.round(batch * context, batch * (k + 1)) * 1e3,
                        eagle.step_time([Work(context, 1 + k, k)] * batch).seconds * 1e3, "ms"))
    rows.append(Row(source, "2,048-token prefill, ms", fitted.forward(0, 2048) * 1e3,
                    plain.step_time([Work(0, 2048)]).seconds * 1e3, "ms"))
    return rows


OFF = PoolSpec("plain", 1)
METHODS = {"draft model K=4": PoolSpec("draft", 1, "draft_model", 4),
           "EAGLE-3 K=4": PoolSpec("eagle3", 1, "eagle3", 4),
           "ngram K=4": PoolSpec("ngram", 1, "ngram", 4, (4, 4))}


def measure(bank: Bank, pool: PoolSpec, items: list[mix.Item], concurrency: int) -> tuple[float, float]:
    """(mean time per output token, busy GPU seconds per output token) of one emulated server at
    ``concurrency``, in virtual time."""
    fleet = Fleet((pool,))
    sim = Simulation(fleet, bank, proxy_settings(fleet, 1024), Calibration(), bank.seed, 1024)
    requests = [bank.prepared(f"{i.id}#greedy", i.workload, dict(i.requests[-1], temperature=0)) for i in items]
    run = sim.run(ClosedLoop(requests, concurrency), (0.0, float("inf")), float("inf"))
    tokens = sum(s.tokens for s in run.served)
    return statistics.fmean(s.tpot for s in run.served), sum(s.gpu_seconds for s in run.served) / tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print("Profiled kernels and steps beside the emulator (default profile):")
    print(f"  {'source':<72} {'what':<30} {'published':>10} {'emulator':>10} {'error':>7}")
    for row in gemm_rows() + profiled_step_rows():
        print(f"  {row.source:<72} {row.what:<30} {row.published:>10.2f} {row.emulated:>10.2f} {row.error:>+7.0%}")
    print()
    print("Published measurements beside the emulator (default profile):")
    print(f"  {'source':<72} {'what':<26} {'published':>10} {'emulator':>10} {'error':>7}")
    for row in published_rows():
        print(f"  {row.source:<72} {row.what:<26} {row.published:>10.2f} {row.emulated:>10.2f} {row.error:>+7.0%}")
    print()
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
