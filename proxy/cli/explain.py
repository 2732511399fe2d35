"""``draftgate explain REQUEST.json``: what the estimator reads in a request."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from proxy.cli.errors import CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("request", help="a chat or completions request body (JSON file, or - for stdin)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--completions", action="store_true", help="the body is a /v1/completions request")


def read_body(source: str) -> Any:
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as exc:
        raise CliError(f"cannot read {source}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise CliError(f"{source} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{source} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise CliError(f"{source} is nested too deeply to parse") from None
    except ValueError:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise CliError(f"{source} has an integer too long to parse") from None


def render(result: dict[str, Any]) -> str:
    t = result["expected_tokens"]
    lines = [
        f"schema-bound w_S {result['w_s']:.2f}   reasoning w_R {result['w_r']:.2f}   prose w_F {result['w_f']:.2f}",
        f"expected output tokens: S {t['s']:.0f}, R {t['r']:.0f}, F {t['f']:.0f}"
        f"   (prompt ~{result['prompt_tokens']:.0f} tokens, temperature {result['temperature']:g})",
        "reasons:",
        *(f"  - {reason}" for reason in result["reasons"]),
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from policy.structure import estimate

    body = read_body(args.request)
    if not isinstance(body, dict):
        raise CliError("the request body must be a JSON object")
    result = estimate(body, endpoint="completions" if args.completions or "prompt" in body else "chat").as_dict()
    if args.json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(render(result))
    return 0
