"""``draftgate explain REQUEST.json``: what the estimator reads in a request, and
the route the gate would give it.

The decision is the one ``POST /draftgate/explain`` returns, made on idle pools:
those of ``--config`` (with its calibration file, policies and priors), or the
quick-start pair, speculation on at depth 8 and off, with calibration defaults.
Nothing is sent anywhere.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from draftgate.cli_error import CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("request", help="a chat, completions or responses request body (JSON file, or - for stdin)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--completions", action="store_true", help="the body is a /v1/completions request")
    parser.add_argument("--config", help="the proxy's configuration: its pools, calibration file, policies and "
                                         "priors (default: spec-on at depth 8 and spec-off, calibration defaults)")
    parser.add_argument("--calibration", help="a calibration file written by draftgate calibrate (overrides the "
                                              "configuration's)")
    parser.add_argument("--max-model-len", type=int, metavar="TOKENS",
                        help="the model's context, as the pools' /v1/models reports it: bounds the expected "
                             "output as the proxy's estimate is bounded (default: unbounded)")


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
    t, tau = result["expected_tokens"], result["predicted_tau"]
    break_even = result["break_even_ws"]
    lines = [
        f"schema-bound w_S {result['w_s']:.2f}   reasoning w_R {result['w_r']:.2f}   prose w_F {result['w_f']:.2f}",
        f"expected output tokens: S {t['s']:.0f}, R {t['r']:.0f}, F {t['f']:.0f}"
        f"   (prompt ~{result['prompt_tokens']:.0f} tokens, temperature {result['temperature']:g})",
        f"route: {result['route']}   predicted saving {result['predicted_saving']:+.1%}"
        f"   tau S {tau.get('s', 0.0):.2f}, R {tau.get('r', 0.0):.2f}, F {tau.get('f', 0.0):.2f}",
        "break-even w_S* " + (f"{break_even:.2f}" if break_even is not None else f"none: {result['break_even_note']}"),
        _confidence(result),
        "pools:",
        *(f"  - {p['pool']}: saving {p['saving']:+.1%}, {p['cost_per_token'] * 1000:.2f} GPU-ms per token caused "
          f"({p['steps']:.0f} steps, adding {p['step_increment'] * 1000:.2f} ms to each, {p['running']:.0f} running; "
          f"{p['predicted_tpot'] * 1000:.0f} ms per token{'' if p['meets_targets'] else ', misses a latency target'})"
          + (f" ({p['note']})" if p["note"] else "") for p in result["pools"]),
        *_outcomes(result),
        *_plan_law(result),
        "reasons:",
        *(f"  - {reason}" for reason in result["reasons"]),
    ]
    return "\n".join(lines)


def _confidence(result: dict[str, Any]) -> str:
    seen = result["observations"]
    if not seen:
        return "confidence 0.00: priors alone, no response of this shape seen yet"
    return f"confidence {result['confidence']:.2f}: {seen} earlier response(s) of this shape"


def _outcomes(result: dict[str, Any]) -> list[str]:
    """The two outcomes of an answer that may be a call or prose, as each pool would cost them."""
    pools = [p for p in result["pools"] if p["if_call_seconds"] is not None]
    if not pools:
        return []
    p_call = result["p_tool_call"]
    return [f"priced over two outcomes, a call (p {p_call:.2f}) or an answer without one (p {1 - p_call:.2f}):",
            *(f"  - {p['pool']}: {p['if_call_seconds']:.2f} GPU-s if it calls, "
              f"{p['if_answer_seconds']:.2f} if it answers" for p in pools)]


def _plan_law(result: dict[str, Any]) -> list[str]:
    """The fleet plan's Draft Law for the request's kind, at the batch its pool runs (a live proxy's
    explain, once it has planned)."""
    law = result.get("plan_law")
    return [] if law is None else [f"fleet plan: {law['summary']}"]


# The quick-start pools, named as `draftgate serve --spec-on --spec-off` names them;
# explain sends nothing, so their addresses are never used, and with no pool to
# read a depth from, the speculation pool is priced at 8 tokens a round (--config
# says otherwise).
_QUICK_START = (["http://spec-on:8000"], ["http://spec-off:8000"], 8)


def run(args: argparse.Namespace) -> int:
    from draftgate.proxy.config import ConfigError, load_settings, quick_start_pools
    from draftgate.proxy.endpoints import endpoint_of_body
    from draftgate.proxy.metrics import ProxyMetrics
    from draftgate.proxy.planner import Planner
    from draftgate.proxy.pools import PoolSet

    if args.max_model_len is not None and args.max_model_len < 1:
        raise CliError("--max-model-len must be a positive number of tokens")
    body = read_body(args.request)
    if not isinstance(body, dict):
        raise CliError("the request body must be a JSON object")
    overrides: dict[str, Any] = {"exploration_share": 0.0}  # the gate's own choice, never an exploration
    if not args.config:
        overrides["pools"] = quick_start_pools(*_QUICK_START)
    if args.calibration:
        overrides["calibration_file"] = args.calibration
    try:
        settings = load_settings(args.config, **overrides)
        planner = Planner(settings, PoolSet(settings.pools, settings.queue_depth_per_replica), ProxyMetrics())
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    endpoint = endpoint_of_body(body, args.completions)
    plan = planner.plan(endpoint.gate_view(body), endpoint.name, context=args.max_model_len)
    result = planner.explanation(plan, gated=endpoint.gated_by(settings))
    if args.json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(render(result))
    return 0
