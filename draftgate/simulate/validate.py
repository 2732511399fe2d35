"""``draftgate validate``: the same short ladder on real pools and on the emulator, side by side.

Run against the pools an operator has (one plain, one speculating, or either
alone) with the profile ``draftgate calibrate`` wrote for their GPUs, it prints
each figure measured, the emulator's, and the error: how far the verdict and
the plan, which rest on the emulator, can be trusted on that hardware.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from draftgate.cli.addresses import base_url
from draftgate.cli_error import CliError

FIGURES = (("TTFT p50", "ttft_ms", "p50"), ("TTFT p99", "ttft_ms", "p99"), ("TPOT p50", "tpot_ms", "p50"),
           ("TPOT p99", "tpot_ms", "p99"), ("ITL p50", "itl_ms", "p50"), ("E2E p50", "e2e_ms", "p50"),
           ("output tok/s", "output_tokens_per_s", None), ("acceptance", "acceptance_length", None))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from draftgate.simulate.cli import add_arguments as ladder_arguments

    parser.add_argument("--spec-on", metavar="URL", help="a speculation pool (its --speculative-config below)")
    parser.add_argument("--spec-off", metavar="URL", help="a plain pool")
    parser.add_argument("--served-model-name", help="the model id the pools serve (default: --model's)")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="wall seconds a second at the pools: 1 for real ones; an emulated pool's --time-scale")
    ladder_arguments(parser)
    parser.set_defaults(rates="1,2,4", duration=60.0, prompt_tokens="1000:300", output_tokens="200:50")


def run(args: argparse.Namespace) -> int:
    from draftgate.simulate import http_ladder
    from draftgate.simulate.cli import build_ladder
    from draftgate.simulate.ladder import run as emulate

    if not args.spec_on and not args.spec_off:
        raise CliError("give --spec-on URL, --spec-off URL or both")
    if args.spec_on and not args.speculative_config:
        raise CliError("--spec-on needs the pool's --speculative-config, as vllm serve was given it")
    if not args.time_scale > 0:
        raise CliError("--time-scale must be positive")
    pools = []
    if args.spec_off:
        pools.append(("spec-off", base_url(args.spec_off, "--spec-off"), None))
    if args.spec_on:
        pools.append(("spec-on", base_url(args.spec_on, "--spec-on"), args.speculative_config))
    result: dict[str, Any] = {}
    for name, url, config in pools:
        ladder = build_ladder(argparse.Namespace(**{**vars(args), "speculative_config": config}))
        try:
            served = args.served_model_name or ladder.profile.target.name
            measured = asyncio.run(http_ladder.run(ladder, url, served, args.time_scale))
        except http_ladder.PoolError as exc:
            raise CliError(str(exc)) from None
        result[name] = {"measured": measured["rates"], "emulated": emulate(ladder)["rates"]}
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(result))
    return 0


def error(measured: float | None, emulated: float | None) -> float | None:
    """The emulator's relative error against the measurement."""
    if measured is None or emulated is None or measured == 0:
        return None
    return emulated / measured - 1


def _figure(rung: dict[str, Any], key: str, quantile: str | None) -> float | None:
    value = rung[key]
    return value[quantile] if quantile else value


def render(result: dict[str, Any]) -> str:
    lines = [f"{'pool':<9} {'rate':>5} {'figure':<13} {'measured':>10} {'emulated':>10} {'error':>7}"]
    for pool, sides in result.items():
        for measured, emulated in zip(sides["measured"], sides["emulated"]):
            for label, key, quantile in FIGURES:
                m, e = _figure(measured, key, quantile), _figure(emulated, key, quantile)
                if m is None and e is None:
                    continue
                err = error(m, e)
                lines.append(f"{pool:<9} {measured['rps']:>5g} {label:<13} {_fmt(m):>10} {_fmt(e):>10} "
                             f"{'-' if err is None else f'{err:+.0%}':>7}")
    return "\n".join(lines) + "\n"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}" if value >= 10 else f"{value:.2f}"
