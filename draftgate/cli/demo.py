"""``draftgate demo``: what draftgate does and what it is worth, in about a minute."""

from __future__ import annotations

import argparse
from pathlib import Path

from draftgate.cli_error import CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=1, help="emulator profile and workload seed")
    parser.add_argument("--out", default="demo-output", help="where the verdict and its figure go")
    parser.add_argument("--workers", type=int, default=0, help="processes running the simulations (default: one "
                                                                "per core)")
    parser.add_argument("--keep-running", action="store_true",
                        help="then leave an emulated stack up to try: an EAGLE-3 pool, a plain pool, the proxy")


def run(args: argparse.Namespace) -> int:
    from draftgate.demo.run import run_demo
    from draftgate.servers import ServerStartError

    if args.workers < 0:
        raise CliError("--workers must be 0 or more")
    try:
        run_demo(seed=args.seed, out_dir=Path(args.out), keep_running=args.keep_running, workers=args.workers)
    except ServerStartError as exc:
        raise CliError(str(exc)) from None
    return 0
