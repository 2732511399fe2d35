"""Entry point: parse the subcommand and hand over to its module.

Subcommand modules are imported only when chosen, so ``draftgate law`` does not
pay for (or require) the web stack.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from draftgate.cli_error import CliError
from draftgate.proxy import __version__

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "law": ("draftgate.cli.law", "evaluate the Draft Law for one set of parameters"),
    "explain": ("draftgate.cli.explain", "a request's estimated output structure (S/R/F) and the gate's route for it"),
    "emulate": ("draftgate.emulator.cli", "run an emulated vLLM OpenAI server (no GPU needed)"),
    "serve": ("draftgate.cli.serve", "run the draftgate proxy in front of vLLM pools"),
    "calibrate": ("draftgate.cli.calibrate", "run the four-arm protocol and write a calibration file"),
    "pools": ("draftgate.cli.pools", "print (or --run) the two vllm serve command lines"),
    "demo": ("draftgate.cli.demo", "emulated pools, calibration, a replay: what draftgate is worth"),
    "evaluate": ("draftgate.cli.evaluate", "the gate against always-on, always-off, dynamic K and the oracle"),
    "measure-ngram": ("draftgate.cli.measure_ngram",
                      "tau of ngram or suffix drafting, replayed exactly on real answers, beside the gate's prediction"),
    "simulate": ("draftgate.simulate.cli", "one emulated pool under a ladder of request rates, as vllm bench serve "
                                           "reports it"),
    "validate": ("draftgate.simulate.validate", "a short ladder on real pools and on the emulator, and the error "
                                                "between them"),
    "plan": ("draftgate.cli.plan", "how to split N GPUs between the pools, from a proxy's traffic, a traffic "
                                   "file or a mix of the built-in workloads"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, status 2, no usage dump
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="draftgate", description="Gate speculative decoding per request.")
    parser.add_argument("--version", action="version", version=f"draftgate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except CliError as exc:
        sys.stderr.write(f"draftgate {args.command}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. piped into head: not an error worth a traceback
        sys.stderr.close()
        return 141


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
