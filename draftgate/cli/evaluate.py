"""``draftgate evaluate``: every strategy on the same fleet, capacity at the latency targets, over seeds."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from draftgate.cli.addresses import base_url
from draftgate.cli.traffic_input import checked
from draftgate.cli_error import CliError

if TYPE_CHECKING:
    from draftgate.evaluate.bench import Options
    from draftgate.policy.plan import Targets

MIN_REQUESTS_PER_REPLICA = 50  # a run that brings each replica fewer requests never loads it
REQUESTS_PER_REPLICA = 75  # measured per run by default, for each replica of the largest fleet (600 at least)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", type=int, default=5, help="emulated hardware and traffic draws (default 5)")
    parser.add_argument("--gpus", help="fleet sizes, comma-separated (default 2,4,8; with --grid 1,4,16)")
    parser.add_argument("--rates", default=None, help="arrival rates per GPU, requests a second, comma-separated: "
                        "exactly these (default 0.5,1,2,4,8, light to past saturation, then 16 and 32 for a fleet "
                        "still within the targets at 8)")
    parser.add_argument("--ttft-target-ms", type=float, help="p99 time to first token (default 2000)")
    parser.add_argument("--tpot-target-ms", type=float, help="p99 time per output token (default 50)")
    parser.add_argument("--requests", type=int, help="requests measured per run (default 600, or more for a large "
                        f"fleet: {REQUESTS_PER_REPLICA} for each replica of the largest)")
    parser.add_argument("--burst", type=int, default=64, help="requests per GPU of the burst; 0 leaves it out")
    parser.add_argument("--workers", type=int, default=0, help="processes running the simulations (default: "
                                                                "one per core); the figures do not depend on it")
    parser.add_argument("--mix", metavar="WORKLOAD=WEIGHT,...", help="the traffic: weights over the workloads "
                        "tool_call, agent_session, chat, reasoning, conversation; one not named weighs 0 (default "
                        "tool_call=4,agent_session=2,chat=2,reasoning=1,conversation=1)")
    parser.add_argument("--traffic", metavar="FILE", help="emulated: your own requests to replay instead of the "
                        "built-in data, JSON lines (docs/traffic.md), in their own mix unless --mix says otherwise")
    parser.add_argument("--grid", action="store_true", help="emulated: the plan against the verdict across the "
                        "operating space: fleet sizes x interactive, relaxed and throughput targets x the agent-, "
                        "chat- and reasoning-heavy mixes (or --traffic's own), two seeds each (docs/plan.md)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--out", default="evaluate-output", help="where verdict.json and the figure go")
    parser.add_argument("--spec-on", action="append", default=[], metavar="[K=]URL",
                        help="a real pool drafting with a draft model at depth K (8 if not given); repeat for more")
    parser.add_argument("--spec-off", help="a real plain pool")
    parser.add_argument("--eagle3", metavar="URL", help="a real pool drafting with an EAGLE-3 head")
    parser.add_argument("--ngram", metavar="URL", help="a real pool drafting with ngram, num_speculative_tokens 4, "
                                                       "prompt_lookup_min 2 and prompt_lookup_max 4")
    parser.add_argument("--dynamic-k", help="a real pool running num_speculative_tokens_per_batch_size")
    parser.add_argument("--gpu", help="emulated: a catalogue GPU (H100, H200, B200; default H200)")
    parser.add_argument("--model", help="emulated: the target (a catalogue model; default Qwen/Qwen3-32B)")
    parser.add_argument("--tensor-parallel-size", type=int, help="emulated: GPUs a replica, every pool alike "
                        "(1, 2, 4 or 8; default the profile's, or 1); fleet sizes are in GPUs")
    parser.add_argument("--profile", help="emulated: a profile file, e.g. the one draftgate calibrate fitted to your "
                        "pools; every seed then runs it as it is (seeds vary the traffic)")


def _numbers(text: str, name: str, kind: type) -> list:
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CliError(f"--{name} takes numbers separated by commas, got {text!r}") from None
    if not values:
        raise CliError(f"--{name} needs at least one value")
    return values


def run(args: argparse.Namespace) -> int:
    import httpx

    from draftgate.evaluate import grid
    from draftgate.evaluate.replay import ReplayError
    from draftgate.policy.plan import Targets
    from draftgate.servers import ServerStartError

    gpus = _numbers(args.gpus, "gpus", int) if args.gpus else list(grid.SIZES if args.grid else (2, 4, 8))
    if min(gpus) < 1:
        raise CliError(f"--gpus takes fleet sizes of 1 GPU or more, got {args.gpus!r}")
    rates = _numbers(args.rates, "rates", float) if args.rates else None
    if rates is not None and min(rates) <= 0:
        raise CliError("--rates must all be above 0 requests a second")
    if args.seeds < 1 or args.burst < 0 or args.workers < 0:
        raise CliError("--seeds must be 1 or more, --burst and --workers 0 or more")
    if args.grid and (args.mix is not None or args.ttft_target_ms is not None or args.tpot_target_ms is not None):
        raise CliError("--grid sets its own targets and mixes: leave out --mix, --ttft-target-ms and --tpot-target-ms")
    args.ttft_target_ms = 2000.0 if args.ttft_target_ms is None else args.ttft_target_ms
    args.tpot_target_ms = 50.0 if args.tpot_target_ms is None else args.tpot_target_ms
    if args.ttft_target_ms <= 0 or args.tpot_target_ms <= 0:
        raise CliError("--ttft-target-ms and --tpot-target-ms must be above 0")
    targets = Targets(args.ttft_target_ms / 1000.0, args.tpot_target_ms / 1000.0)
    weights = checked(args.mix, args.traffic)
    spec_on: dict[int, str] = {}
    for given in args.spec_on:
        depth, _, url = given.rpartition("=") if "=" in given.split("://")[0] else ("8", "", given)
        if not depth.isdigit():
            raise CliError(f"--spec-on takes URL or K=URL, got {given!r}")
        spec_on[int(depth)] = base_url(url, "--spec-on")
    real = [u for u in (args.spec_off, args.eagle3, args.ngram, args.dynamic_k) if u] + list(spec_on.values())
    if real and args.grid:
        raise CliError("--grid runs emulated fleets; against your own pools, run the verdict at each point")
    try:
        if real:
            return _real(args, spec_on, rates, targets, weights)
        return _simulated(args, gpus, rates, targets, weights)
    except (ServerStartError, ReplayError) as exc:
        raise CliError(str(exc)) from None
    except httpx.HTTPError as exc:
        raise CliError(f"a pool could not be reached: {type(exc).__name__} {exc}") from None


def _simulated(args: argparse.Namespace, gpus: list[int], rates: list[float] | None, targets: Targets,
               weights: dict[str, float] | None) -> int:
    from draftgate.evaluate.bench import BEYOND_GRID, RATES_PER_GPU, Options, main, meetable

    hardware, tp = _hardware(args)
    if any(n % tp for n in gpus):
        raise CliError(f"--gpus: at tensor parallel size {tp} a fleet is a whole number of {tp}-GPU replicas, "
                       f"got {args.gpus!r}")
    _resolve_requests(args, max(gpus) // tp)
    # the verdict runs in replicas; its summary is put back in GPUs (verdict.in_gpus)
    options = Options(seeds=args.seeds, gpus=tuple(n // tp for n in gpus),
                      rates=tuple(r * tp for r in rates or RATES_PER_GPU), targets=targets, requests=args.requests,
                      beyond=0 if rates else BEYOND_GRID, burst=args.burst, workers=args.workers,
                      out=Path(args.out), as_json=args.json,
                      hardware=hardware, tensor_parallel_size=tp,
                      mix=tuple(weights.items()) if weights else (), traffic=args.traffic or "")
    if args.grid:
        return _grid(options)
    if not meetable(options):
        raise CliError(f"no strategy holds p99 TTFT {args.ttft_target_ms:g} ms and TPOT {args.tpot_target_ms:g} ms "
                       f"for 99% of requests even at {min(options.rates) / tp:g} requests a second per GPU: "
                       "loosen the targets")
    return main(options)


def _resolve_requests(args: argparse.Namespace, replicas: int) -> None:
    """``--requests``, by default grown with the largest fleet, and refused where it never loads one
    (counted in replicas: a tensor-parallel replica takes a request on all its GPUs at once)."""
    if args.requests is None:
        args.requests = max(600, REQUESTS_PER_REPLICA * replicas)
    if args.requests < MIN_REQUESTS_PER_REPLICA * replicas:
        least = MIN_REQUESTS_PER_REPLICA * replicas
        raise CliError(f"a fleet of {replicas} replicas needs --requests of at least {least}: with {args.requests}, "
                       "its GPUs are never loaded")


def _grid(options: Options) -> int:
    import json
    import sys

    from draftgate.evaluate import grid

    stream = sys.stderr if options.as_json else sys.stdout

    def say(text: str) -> None:
        print(text, file=stream, flush=True)

    rows = grid.run(options, say)
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "grid.json").write_text(json.dumps(rows, indent=2))
    say("\n" + grid.table(rows))
    if options.as_json:
        print(json.dumps(rows, sort_keys=True))
    return 0


def _hardware(args: argparse.Namespace) -> tuple[str, int]:
    """The verdict's hardware (``bench.hardware_key``) from --profile, --gpu, --model and
    --tensor-parallel-size, checked here, and its GPUs a replica."""
    from draftgate.emulator.profile import EngineProfile, read_profile_file
    from draftgate.evaluate.bench import hardware_key

    if not (args.profile or args.gpu or args.model or args.tensor_parallel_size):
        return "", 1
    try:
        raw = read_profile_file(args.profile) if args.profile else {}
        profile = EngineProfile.from_mapping(raw, args.gpu, args.model, args.tensor_parallel_size)
        for method in (None, "draft_model", "eagle3"):
            profile.kv_capacity_tokens(method)
    except (OSError, ValueError) as exc:
        raise CliError(f"the emulated hardware: {str(exc).splitlines()[0]}") from None
    mapping = {**raw, **({"gpu": args.gpu} if args.gpu else {}), **({"target": args.model} if args.model else {}),
               "tensor_parallel_size": profile.tensor_parallel_size}
    return hardware_key(mapping, drawn=not args.profile), profile.tensor_parallel_size


def _real(args: argparse.Namespace, spec_on: dict[int, str], rates: list[float] | None, targets: Targets,
          weights: dict[str, float] | None) -> int:
    import json
    import sys

    from draftgate.evaluate import real, verdict

    _resolve_requests(args, 1)
    given = real.real_pools(spec_on, _url(args.spec_off, "--spec-off"), _url(args.ngram, "--ngram"),
                            _url(args.eagle3, "--eagle3"), _url(args.dynamic_k, "--dynamic-k"))
    stream = sys.stderr if args.json else sys.stdout

    def say(text: str) -> None:
        print(text, file=stream, flush=True)

    say("draftgate evaluate: your pools, in wall time; each strategy is reported under the GPUs it uses")
    summary = real.run(given, tuple(rates or real.RATES_PER_GPU), args.requests, targets, 1, Path(args.out), say,
                       weights, args.traffic or "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "verdict.json").write_text(json.dumps(summary, indent=2))
    say("\n" + verdict.capacity_table(summary))
    say("\n" + verdict.rates_table(summary))
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    return 0


def _url(value: str | None, flag: str) -> str | None:
    return None if value is None else base_url(value, flag)
