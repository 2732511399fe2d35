"""``draftgate plan``: the fleet of N GPUs that serves the traffic seen best, beside the one running.

Reads the traffic from the proxy's request log (``event: request`` lines: kind,
lengths, what was cached, time), from its metrics (two scrapes a window apart:
``draftgate_request_tokens`` by kind of request), or from requests replayed
through an emulated GPU (a traffic file, the built-in workloads), and the calibration,
pools, targets and candidates of a configuration file. It weighs every fleet
of N GPUs made of up to ``--max-pools`` pools from the candidates, each kind of
request going whole to one pool (``draftgate.policy.fleet`` says how each is
worked out), and prints the best by the objective, the best of one
configuration, and the running fleet, with the ``plan.routing`` that applies it.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from draftgate.cli.addresses import base_url
from draftgate.cli_error import CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--from-log", metavar="FILE", help="the proxy's log (JSON lines); its request lines "
                                                           "describe the traffic")
    source.add_argument("--from-metrics", metavar="URL", help="a proxy's base URL: its /metrics, scraped twice "
                                                              "--window seconds apart, describe the traffic")
    source.add_argument("--traffic", metavar="FILE", help="your requests (JSON lines, docs/traffic.md), replayed "
                        "through an emulated plain GPU for their answers' lengths: the part of the file the verdict "
                        "calibrates and plans on")
    parser.add_argument("--mix", metavar="WORKLOAD=WEIGHT,...", help="the built-in workloads in these proportions "
                        "(tool_call, agent_session, chat, reasoning, conversation), or --traffic's reweighted")
    parser.add_argument("--rate", type=float, help="with --traffic or --mix: requests a second the traffic comes at "
                                                   "(default: one a GPU)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds between the two scrapes (default 60)")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs of the fleet to plan")
    parser.add_argument("--config", help="the proxy's configuration: calibration file, pools (the running fleet), "
                                         "latency targets, objective, plan.candidates (defaults where omitted)")
    parser.add_argument("--objective", choices=["capacity", "cost"], help="capacity: the most traffic within the "
                        "targets (a fixed fleet); cost: the fewest busy GPU-seconds per token at the traffic's rate "
                        "(a fleet that scales); default: the configuration's fleet_objective")
    parser.add_argument("--tpot-target-ms", type=float, help="p99 time per output token to hold (default: the "
                                                              "configuration's, else 50)")
    parser.add_argument("--ttft-target-ms", type=float, help="p99 time to first token to hold (default: the "
                                                              "configuration's, else 2000)")
    parser.add_argument("--max-pools", type=int, help="pools a fleet may be split into (default 3)")
    parser.add_argument("--candidates", help="the candidate configurations to weigh, by name, comma-separated "
                                             "(default: every one: the configuration's plan.candidates, else plain, "
                                             "draft-k2, draft-k4, draft-k8, dynamic-k, eagle3-k3, ngram-k4, "
                                             "suffix-k24)")
    parser.add_argument("--json", action="store_true", help="print the plan as one JSON object")


def rows_from_log(path: Path) -> tuple[list[dict[str, Any]], float]:
    """Per-request rows and the span they came over, from the log's request lines."""
    rows: list[dict[str, Any]] = []
    times: list[float] = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # other processes' lines in the same file
        if not isinstance(record, dict) or record.get("event") != "request" or record.get("status") != 200:
            continue
        if not all(isinstance(record.get(key), (int, float)) for key in ("completion_tokens", "ts")):
            continue
        prompt = float(record.get("prompt_tokens") or 0.0)
        rows.append({"kind": str(record.get("kind", "prose")), "output_tokens": float(record["completion_tokens"]),
                     "prefill_tokens": max(0.0, prompt - float(record.get("cached_tokens") or 0.0)),
                     "w_s": float(record.get("w_s_observed") or 0.0), "w_r": float(record.get("w_r_observed") or 0.0),
                     "temperature": float(record.get("temperature") or 0.0)})
        times.append(float(record["ts"]))
    if len(rows) < 2:
        raise CliError(f"{path} has {len(rows)} completed request line(s); the plan needs traffic to size")
    return rows, max(1.0, max(times) - min(times))


def rows_from_metrics(url: str, window: float) -> tuple[list[dict[str, Any]], float]:
    """Rows from two scrapes of a proxy's metrics ``window`` seconds apart: each kind's prompt and output
    tokens as their histograms' buckets hold them, a row per bucket and request."""
    import time

    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    address = f"{base_url(url, '--from-metrics')}/metrics"

    def scrape() -> dict[tuple[str, str, str, str], float]:
        try:
            response = httpx.get(address, timeout=30)
            if response.status_code != 200:
                raise CliError(f"cannot read {address}: it answered {response.status_code}")
            families = list(text_string_to_metric_families(response.text))
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise CliError(f"cannot read {address}: {type(exc).__name__} {exc}") from None
        except ValueError:
            raise CliError(f"{address} does not answer with Prometheus metrics: is it a draftgate proxy?") from None
        out: dict[tuple[str, str, str, str], float] = defaultdict(float)
        for family in families:
            for sample in family.samples:
                if sample.name.startswith(("draftgate_request_tokens", "draftgate_observed_schema_fraction")):
                    key = (sample.name, sample.labels.get("kind", ""), sample.labels.get("part", ""),
                           sample.labels.get("le", ""))
                    out[key] += sample.value
        return out

    first = scrape()
    time.sleep(window)
    second = scrape()
    delta = {key: second[key] - first.get(key, 0.0) for key in second}
    rows: list[dict[str, Any]] = []
    kinds = {kind for (name, kind, part, _), n in delta.items()
             if name == "draftgate_request_tokens_count" and part == "output" and n > 0}
    for kind in sorted(kinds):
        seen = delta.get(("draftgate_observed_schema_fraction_count", kind, "", ""), 0.0)
        w_s = delta.get(("draftgate_observed_schema_fraction_sum", kind, "", ""), 0.0) / seen if seen else 0.0
        outputs, prompts = _bucket_values(delta, kind, "output"), _bucket_values(delta, kind, "prompt")
        for i, output in enumerate(outputs):
            rows.append({"kind": kind, "output_tokens": output, "prefill_tokens": prompts[i % len(prompts)]
                         if prompts else 0.0, "w_s": w_s, "w_r": 1.0 - w_s if kind == "reasoning" else 0.0,
                         "temperature": 0.0})
    if len(rows) < 2:
        raise CliError(f"{url} completed {len(rows)} request(s) in {window:g} s; the plan needs traffic to size")
    return rows, window


def _bucket_values(delta: dict[tuple[str, str, str, str], float], kind: str, part: str) -> list[float]:
    """A value per request counted in the histogram's buckets: each bucket's middle (the last finite
    bound for the open one), and the buckets' mean scaled to the histogram's own sum."""
    buckets = sorted((float(le), n) for (name, k, p, le), n in delta.items()
                     if name == "draftgate_request_tokens_bucket" and k == kind and p == part)
    values: list[float] = []
    below, previous = 0.0, 0.0
    for bound, cumulative in buckets:
        count = int(round(cumulative - below))
        middle = previous if bound == float("inf") else (previous + bound) / 2
        values += [middle] * count
        below, previous = cumulative, bound if bound != float("inf") else previous
    total = delta.get(("draftgate_request_tokens_sum", kind, part, ""), 0.0)
    if values and sum(values) > 0:
        values = [v * total / sum(values) for v in values]
    return values


def run(args: argparse.Namespace) -> int:
    from draftgate.policy import plan as plans
    from draftgate.policy.calibration import Calibration
    from draftgate.proxy.config import ConfigError, load_settings
    from draftgate.proxy.planner import candidate_of, load_calibration_or_defaults

    if args.gpus < 1:
        raise CliError("--gpus must be 1 or more")
    if args.window <= 0:
        raise CliError("--window must be above 0 seconds")
    max_pools = plans.MAX_POOLS if args.max_pools is None else args.max_pools
    if max_pools < 1:
        raise CliError("--max-pools must be 1 or more")
    calibration = Calibration()
    running: list[tuple[Any, int]] = []
    candidates: tuple[Any, ...] = plans.default_candidates()
    objective, tpot_ms, ttft_ms = "capacity", None, None
    if args.config:
        try:
            settings = load_settings(args.config)
            calibration = load_calibration_or_defaults(settings)
        except ConfigError as exc:
            raise CliError(str(exc)) from None
        unknown_depth = [p.name for p in settings.pools if p.speculation is not None and p.speculation.gamma is None]
        if unknown_depth:
            raise CliError(f"{args.config}: pools {', '.join(unknown_depth)} leave speculation.gamma to what the pool "
                           "reports, which a plan made from a file cannot ask: set it")
        running = [(candidate_of(p.name, p.speculation, p.max_num_seqs, p.max_num_batched_tokens), len(p.urls))
                   for p in settings.pools]
        candidates = tuple(candidate_of(c.name, c.speculation, c.max_num_seqs, c.max_num_batched_tokens)
                           for c in settings.plan.candidates) or candidates
        policy = settings.default_policy
        objective, tpot_ms, ttft_ms = policy.fleet_objective, policy.tpot_target_ms, policy.ttft_target_ms
    if args.candidates:
        wanted = [name.strip() for name in args.candidates.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in {c.name for c in candidates}]
        if unknown or not wanted:
            raise CliError(f"--candidates: {', '.join(unknown) or 'none given'}; the candidates are "
                           + ", ".join(c.name for c in candidates))
        candidates = tuple(c for c in candidates if c.name in wanted)
    objective = args.objective or objective
    targets = plans.Targets((args.ttft_target_ms or ttft_ms or 2000.0) / 1000.0,
                            (args.tpot_target_ms or tpot_ms or 50.0) / 1000.0)
    if args.from_log or args.from_metrics:
        if args.mix or args.rate is not None:
            raise CliError("--mix and --rate go with --traffic or the built-in workloads, not a proxy's traffic")
        rows, span = rows_from_log(Path(args.from_log)) if args.from_log else rows_from_metrics(args.from_metrics,
                                                                                                args.window)
        traffic = plans.Traffic(len(rows) / span, plans.kinds_from(rows))
    elif args.traffic or args.mix:
        traffic = replayed(args.traffic, args.mix, args.rate if args.rate is not None else float(args.gpus),
                           calibration)
    else:
        raise CliError("say where the traffic comes from: --from-log, --from-metrics, --traffic or --mix")
    current = None
    if running and sum(n for _, n in running) == args.gpus:
        current, _ = plans.best_assignment(traffic, calibration, running, targets, objective)
    try:
        plan = plans.recommend(traffic, calibration, args.gpus, candidates, targets, objective, max_pools,
                               current.pools if current is not None else None)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    needed = _gpus_needed(traffic, plan)
    laws = plans.law_by_kind(plan.best, traffic, calibration, candidates)
    if args.json:
        print(json.dumps({**_as_json(traffic, plan, args.gpus, targets, objective), "gpus_the_traffic_fills": needed,
                          "law_by_kind": [law.as_dict() for law in laws]}, indent=2))
        return 0
    print(_report(traffic, plan, args.gpus, targets, objective, calibration.is_default))
    if laws:
        print("\nThe Draft Law per kind, at the batch its pool runs in the plan (w_S: the schema-bound share of its "
              "output; w_S*: the share at which speculation breaks even):")
        print("\n".join(f"  {law.describe()}" for law in laws))
    if needed < args.gpus / 2:
        print(f"\nNote: the traffic seen ({traffic.requests_per_second:.2f} requests/s) fills about {needed} of the "
              f"{args.gpus} GPUs within the targets; most of the rest would idle. For a fleet that grows with load, "
              "--objective cost.")
    return 0


REPLAYED_REQUESTS = 400  # of a traffic file or the built-in workloads, for their kinds' lengths


def replayed(path: str | None, weights_text: str | None, rate: float, calibration: Any) -> Any:
    """The traffic of a file's requests, or of the built-in workloads (reweighted by ``weights_text``),
    as the gate's proxy reads it when they are replayed through an emulated plain GPU: the answers'
    lengths are the emulated target's. The part replayed is the one the verdict calibrates on."""
    from draftgate.cli.traffic_input import checked
    from draftgate.evaluate.bench import Options, plan_traffic
    from draftgate.policy import plan as plans

    if not rate > 0:
        raise CliError("--rate must be above 0 requests a second")
    weights = tuple((checked(weights_text, path, ("calibration",)) or {}).items())
    kinds = plan_traffic(1, calibration, Options(requests=REPLAYED_REQUESTS, mix=weights, traffic=path or "")).kinds
    return plans.Traffic(rate, kinds)


def _gpus_needed(traffic: Any, plan: Any) -> int:
    """GPUs of the recommended fleet's kind that carry the traffic's rate within the targets."""
    per_gpu = plan.best.capacity / max(1, plan.best.gpus)
    return max(1, math.ceil(traffic.requests_per_second / per_gpu)) if per_gpu > 0 else plan.best.gpus


def _composition(c: Any, gpus: int) -> dict[str, Any]:
    return {"name": c.name, "pools": [{"pool": p.candidate.name, "gpus": p.gpus, "kinds": list(p.kinds),
                                       "method": p.candidate.method, "depth": p.candidate.gamma} for p in c.pools],
            "capacity_rps": round(c.capacity, 4), "capacity_rps_per_gpu": round(c.capacity / gpus, 4),
            "busy_gpu_ms_per_token": None if c.cost_per_token != c.cost_per_token or c.cost_per_token == float("inf")
            else round(c.cost_per_token * 1000, 4)}


def _as_json(traffic: Any, plan: Any, gpus: int, targets: Any, objective: str) -> dict[str, Any]:
    return {"requests_per_second": traffic.requests_per_second, "objective": objective,
            "targets": {"ttft_p99_ms": targets.ttft * 1000, "tpot_p99_ms": targets.tpot * 1000},
            "kinds": {k.name: {"share": k.share, "output_tokens": k.output_tokens, "prefill_tokens": k.prefill_tokens}
                      for k in traffic.kinds},
            "recommended": _composition(plan.best, gpus),
            "best_homogeneous": _composition(plan.best_homogeneous, gpus),
            "running": None if plan.current is None else _composition(plan.current, gpus),
            "gain_over_running": plan.gain,
            "routing": plan.best.assignment()}


def _report(traffic: Any, plan: Any, gpus: int, targets: Any, objective: str, default_calibration: bool) -> str:
    lines = [f"traffic: {traffic.requests_per_second:.2f} requests/s; "
             + ", ".join(f"{k.name} {k.share:.0%} ({k.output_tokens:.0f} tokens out, {k.prefill_tokens:.0f} to "
                         "prefill)" for k in traffic.kinds)]
    if default_calibration:
        lines.append("calibration: the defaults (run draftgate calibrate for your pools' own figures)")
    lines.append(f"\n{gpus} GPUs, objective {objective}; capacity within p99 TTFT {targets.ttft * 1000:g} ms and "
                 f"TPOT {targets.tpot * 1000:g} ms, as predicted:\n")
    shown = [("PLAN", plan.best), ("one configuration", plan.best_homogeneous)]
    if plan.current is not None:
        shown.append(("running", plan.current))
    for label, c in shown:
        cost = "-" if c.cost_per_token != c.cost_per_token or c.cost_per_token == float("inf") else \
            f"{c.cost_per_token * 1000:.2f}"
        lines.append(f"  {label:<18} {c.capacity:7.2f} requests/s ({c.capacity / gpus:.2f} per GPU), "
                     f"{cost} busy GPU-ms/token: {c.name}")
    if plan.best.homogeneous:
        lines.append(f"\nNo split beats one configuration for this traffic: run {plan.best.pools[0].candidate.name} "
                     "on every GPU.")
    else:
        lines.append("\nTo apply it, run these pools and route the kinds so (draftgate.yaml):\n  plan:\n    routing:")
        lines += [f"      {kind}: {pool}" for kind, pool in sorted(plan.best.assignment().items())]
    if plan.gain is not None:
        lines.append(f"\nThe plan would serve {plan.gain:+.0%} against the running fleet.")
    return "\n".join(lines)
