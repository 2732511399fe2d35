"""``draftgate evaluate``: the gate's standing against every alternative, with its spread over seeds."""

from __future__ import annotations

import argparse
from pathlib import Path

from draftgate.cli_error import CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", type=int, default=5, help="emulated hardware and traffic draws (default 5)")
    parser.add_argument("--concurrency", default="1,8,32,64", help="closed-loop levels, comma-separated")
    parser.add_argument("--burst", type=int, default=96, help="requests of the open-loop burst; 0 leaves it out")
    parser.add_argument("--scale", type=float, default=1.0, help="requests per level, relative to the default")
    parser.add_argument("--time-scale", type=float, default=0.05,
                        help="emulated pools: wall seconds per simulated second (figures do not depend on it)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--out", default="evaluate-output", help="where calibrations, verdict.json and the figure go")
    parser.add_argument("--spec-on", action="append", default=[], metavar="[K=]URL",
                        help="a real speculation pool (depth K, 8 if not given); repeat for more depths")
    parser.add_argument("--spec-off", help="the real plain pool")
    parser.add_argument("--dynamic-k", help="a real pool running num_speculative_tokens_per_batch_size")
    parser.add_argument("--ngram", metavar="URL", help="a real pool drafting with ngram, num_speculative_tokens 4, "
                                                       "prompt_lookup_min 2 and prompt_lookup_max 4")


def run(args: argparse.Namespace) -> int:
    import httpx

    from draftgate.evaluate.bench import Options, main
    from draftgate.evaluate.replay import ReplayError
    from draftgate.servers import ServerStartError

    try:
        levels = [int(part) for part in args.concurrency.split(",") if part.strip()]
    except ValueError:
        raise CliError(f"--concurrency takes whole numbers separated by commas, got {args.concurrency!r}") from None
    if not levels or min(levels) < 1:
        raise CliError("--concurrency needs at least one level, each 1 or more")
    if args.seeds < 1 or args.burst < 0 or args.scale <= 0 or args.time_scale <= 0:
        raise CliError("--seeds must be 1 or more, --burst 0 or more, --scale and --time-scale above 0")
    spec_on: dict[int, str] = {}
    for given in args.spec_on:
        depth, _, url = given.rpartition("=") if "=" in given.split("://")[0] else ("8", "", given)
        if not depth.isdigit() or not url.startswith(("http://", "https://")):
            raise CliError(f"--spec-on takes URL or K=URL, got {given!r}")
        spec_on[int(depth)] = url.rstrip("/")
    if bool(spec_on) != bool(args.spec_off):
        raise CliError("give --spec-on and --spec-off together (real pools), or neither (emulated pools)")
    options = Options(seeds=args.seeds, concurrency=levels, burst=args.burst, scale=args.scale,
                      time_scale=args.time_scale, out=Path(args.out), spec_on=spec_on,
                      spec_off=args.spec_off.rstrip("/") if args.spec_off else None,
                      dynamic_k=args.dynamic_k.rstrip("/") if args.dynamic_k else None,
                      ngram=args.ngram.rstrip("/") if args.ngram else None, as_json=args.json)
    try:
        return main(options)
    except (ServerStartError, ReplayError) as exc:
        raise CliError(str(exc)) from None
    except httpx.HTTPError as exc:
        raise CliError(f"a pool could not be reached: {type(exc).__name__} {exc}") from None
