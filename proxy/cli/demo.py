"""``draftgate demo``: what draftgate does and what it is worth, in a few minutes."""

from __future__ import annotations

import argparse
from pathlib import Path

from draftgate.cli_error import CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=1, help="emulator profile and workload seed")
    parser.add_argument("--scale", type=float, default=1.0, help="workload size multiplier")
    parser.add_argument("--out", default="demo-output", help="where the calibration, config, verdict and figure go")
    parser.add_argument("--keep-running", action="store_true", help="leave the stack up afterwards")
    parser.add_argument("--spec-on", help="run against a real speculation pool instead of emulators")
    parser.add_argument("--spec-off", help="the real plain pool (with --spec-on)")
    parser.add_argument("--dynamic-k", help="optionally, a real pool with num_speculative_tokens_per_batch_size")


def run(args: argparse.Namespace) -> int:
    from draftgate.demo.run import run_demo
    from draftgate.servers import ServerStartError

    if bool(args.spec_on) != bool(args.spec_off):
        raise CliError("give both --spec-on and --spec-off, or neither (emulated pools)")
    if args.scale <= 0:
        raise CliError("--scale must be > 0")
    try:
        run_demo(seed=args.seed, scale=args.scale, out_dir=Path(args.out), spec_on=args.spec_on,
                 spec_off=args.spec_off, dynamic_k=args.dynamic_k, keep_running=args.keep_running)
    except ServerStartError as exc:
        raise CliError(str(exc)) from None
    return 0
