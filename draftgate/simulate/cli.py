"""``draftgate simulate``: what ``vllm bench serve``, GuideLLM and inference-perf would measure on one
pool, from the emulator, so the same ladder run on a real pool can be set beside it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from draftgate.cli_error import CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", help="a catalogue GPU: H100, H200, B200 (default: the profile's, or H200)")
    parser.add_argument("--model", help="the target, by its Hugging Face name (default: the profile's, or "
                                        "Qwen/Qwen3-32B)")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int,
                        help="GPUs per replica: 1, 2, 4 or 8 (default: the profile's, or 1)")
    parser.add_argument("--speculative-config", help="vLLM's JSON, e.g. "
                        '\'{"method": "eagle3", "model": "RedHatAI/Qwen3-32B-speculator.eagle3", '
                        '"num_speculative_tokens": 3}\'')
    parser.add_argument("--rates", default="1,2,4,8,16", help="requests a second, comma-separated")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of arrivals at each rate")
    parser.add_argument("--prompt-tokens", default="1000:300", help="MEAN:SD, LO-HI or N")
    parser.add_argument("--output-tokens", default="300:100", help="MEAN:SD, LO-HI or N")
    parser.add_argument("--max-num-batched-tokens", type=int, help="vLLM's (default 8192)")
    parser.add_argument("--max-num-seqs", type=int, help="vLLM's (default 1024)")
    parser.add_argument("--gpu-memory-utilization", type=float, help="vLLM's (default 0.9)")
    parser.add_argument("--temperature", type=float,
                        help="sampling temperature (default: the profile's generation defaults, Qwen3's 0.6, as "
                        "vLLM samples a request that names none; 0 is greedy)")
    parser.add_argument("--profile", help="a profile YAML: efficiencies and overheads, and gpus/models entries "
                        "that extend the catalogue")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def run(args: argparse.Namespace) -> int:
    from draftgate.simulate.ladder import run as run_ladder

    ladder = build_ladder(args)
    result = run_ladder(ladder)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(ladder, result))
    return 0


def build_ladder(args: argparse.Namespace) -> Any:
    """The ladder the arguments ask for, every mistake in them one ``CliError``."""
    from pydantic import ValidationError

    from draftgate.emulator.cli import parse_speculative_config
    from draftgate.emulator.hardware import Catalogue
    from draftgate.emulator.profile import EngineProfile, read_profile_file
    from draftgate.simulate.ladder import Ladder, Lengths

    try:
        rates = tuple(float(r) for r in args.rates.split(","))
    except ValueError:
        raise CliError(f"--rates {args.rates!r}: comma-separated numbers") from None
    if not rates or any(not r > 0 or r != r or r == float("inf") for r in rates):
        raise CliError("--rates: every rate must be a positive number")
    if not args.duration > 0:
        raise CliError("--duration must be positive")
    lengths = {}
    for flag, text in (("--prompt-tokens", args.prompt_tokens), ("--output-tokens", args.output_tokens)):
        try:
            lengths[flag] = Lengths.parse(text)
        except ValueError as exc:
            raise CliError(f"{flag} {exc}") from None
    for flag, value in (("--max-num-seqs", args.max_num_seqs),
                        ("--max-num-batched-tokens", args.max_num_batched_tokens)):
        if value is not None and value < 1:
            raise CliError(f"{flag} must be at least 1")
    if args.gpu_memory_utilization is not None and not 0 < args.gpu_memory_utilization <= 1:
        raise CliError("--gpu-memory-utilization must be in (0, 1]")
    if args.temperature is not None and not 0 <= args.temperature <= 2:
        raise CliError("--temperature must be between 0 and 2")
    spec = parse_speculative_config(args.speculative_config)
    try:
        raw = read_profile_file(args.profile) if args.profile else {}
        profile = EngineProfile.from_mapping(raw, args.gpu, args.model, args.tensor_parallel_size)
        if args.gpu_memory_utilization is not None:
            profile = profile.model_copy(update={"efficiency": profile.efficiency.model_copy(
                update={"memory_utilization": args.gpu_memory_utilization})})
        if spec is not None:
            profile = profile.with_drafter(spec.method, spec.draft_model, Catalogue.load(raw))
        temperature = (profile.generation_defaults.get("temperature", 1.0) if args.temperature is None
                       else args.temperature)
        ladder = Ladder(profile, spec, rates, args.duration, lengths["--prompt-tokens"], lengths["--output-tokens"],
                        args.max_num_seqs, args.max_num_batched_tokens, temperature, args.seed)
        ladder.profile.kv_capacity_tokens(spec.method if spec else None)  # does it fit at all
    except ValidationError as exc:
        error = exc.errors()[0]
        raise CliError(f"{'.'.join(str(p) for p in error['loc']) or 'profile'}: {error['msg']}") from None
    except OSError as exc:
        raise CliError(f"--profile {args.profile}: {exc.strerror}") from None
    except ValueError as exc:
        raise CliError(str(exc).splitlines()[0]) from None
    return ladder


def render(ladder: Any, result: dict[str, Any]) -> str:
    """The ladder as a table, the columns ``vllm bench serve`` prints (milliseconds)."""
    p = ladder.profile
    spec = ladder.spec
    lines = [f"{p.target.name} on {p.tensor_parallel_size} x {p.gpu.name}, "
             + (f"{spec.method} K={spec.num_speculative_tokens}" if spec else "no speculation")
             + f"; KV cache {result['kv_cache_tokens']:,} tokens; {ladder.duration:g} s of arrivals a rate, "
             f"seed {ladder.seed} (emulated, virtual time)",
             f"{'rate':>6} {'done':>5} {'req/s':>6} {'out tok/s':>9} {'batch':>6} "
             f"{'TTFT p50':>8} {'p99':>7} {'TPOT p50':>8} {'p99':>6} {'ITL p50':>7} {'p99':>6} "
             f"{'E2E p50':>8} {'p99':>8} {'accept':>6}"]

    def ms(values: dict[str, float | None], key: str, width: int) -> str:
        value = values[key]
        return f"{'-':>{width}}" if value is None else f"{value:>{width}.1f}"

    for r in result["rates"]:
        accept = "-" if r["acceptance_length"] is None else f"{r['acceptance_length']:.2f}"
        lines.append(f"{r['rps']:>6g} {r['requests']:>5} {r['requests_per_s']:>6.2f} {r['output_tokens_per_s']:>9.0f} "
                     f"{r['mean_batch']:>6.1f} {ms(r['ttft_ms'], 'p50', 8)} {ms(r['ttft_ms'], 'p99', 7)} "
                     f"{ms(r['tpot_ms'], 'p50', 8)} {ms(r['tpot_ms'], 'p99', 6)} {ms(r['itl_ms'], 'p50', 7)} "
                     f"{ms(r['itl_ms'], 'p99', 6)} {ms(r['e2e_ms'], 'p50', 8)} {ms(r['e2e_ms'], 'p99', 8)} {accept:>6}")
    return "\n".join(lines) + "\n"
