"""``draftgate plan``: how to split N GPUs between the speculation and plain pools for the traffic seen.

Reads the traffic from the proxy's request log (``event: request`` lines: class,
lengths, time) or from its metrics (two scrapes a window apart:
``draftgate_request_tokens`` and ``draftgate_observed_schema_fraction`` by
request class), the calibration and pools of a configuration file, and prints every split
with its busy GPU-seconds per output token and time per output token
(``draftgate.policy.fleet`` says how they are worked out), the alternatives
beside them: all GPUs speculating, all with vLLM's dynamic K when the
configuration's speculation pool runs it, all plain.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from draftgate.cli_error import CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-log", metavar="FILE", help="the proxy's log (JSON lines); its request lines "
                                                           "describe the traffic")
    source.add_argument("--from-metrics", metavar="URL", help="a proxy's base URL: its /metrics, scraped twice "
                                                              "--window seconds apart, describe the traffic")
    parser.add_argument("--window", type=float, default=60.0, help="seconds between the two scrapes (default 60)")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs to split between the pools")
    parser.add_argument("--config", help="the proxy's configuration: calibration file, depth, max_num_seqs, "
                                         "dynamic K, latency target (defaults where omitted)")
    parser.add_argument("--tpot-target-ms", type=float, help="time per output token to hold (overrides the config)")
    parser.add_argument("--json", action="store_true", help="print the options as one JSON object")


def _traffic(rate: float, per_class: dict[str, tuple[float, float, float, float]], gamma: int,
             calibration: Any) -> Any:
    """``per_class``: name -> (requests, mean output tokens, mean prompt tokens, mean w_S)."""
    from draftgate.policy import law
    from draftgate.policy.fleet import ClassTraffic, Traffic
    from draftgate.policy.gate import PoolView, predicted_taus

    taus = predicted_taus(calibration, PoolView("spec-on", "draft_model", gamma=gamma), 0.0)
    count = sum(n for n, _, _, _ in per_class.values())
    classes = []
    for name, (n, output, prompt, w_s) in sorted(per_class.items()):
        rest = 1.0 - w_s
        mix = law.ClassMix(w_s, rest if name == "reasoning" else 0.0, 0.0 if name == "reasoning" else rest)
        classes.append(ClassTraffic(name, n / count, output, prompt, mix, taus))
    return Traffic(rate, tuple(classes))


def traffic_from_metrics(url: str, window: float, gamma: int, calibration: Any) -> Any:
    """The same from two scrapes of a proxy's metrics ``window`` seconds apart."""
    import time

    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    def scrape() -> dict[tuple[str, str, str], float]:
        try:
            text = httpx.get(f"{url.rstrip('/')}/metrics", timeout=30).text
        except httpx.HTTPError as exc:
            raise CliError(f"cannot read {url}/metrics: {type(exc).__name__} {exc}") from None
        out: dict[tuple[str, str, str], float] = defaultdict(float)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                cls = sample.labels.get("class", "")
                if sample.name in ("draftgate_request_tokens_sum", "draftgate_request_tokens_count"):
                    out[(sample.name, cls, sample.labels.get("kind", ""))] += sample.value
                elif sample.name in ("draftgate_observed_schema_fraction_sum", "draftgate_observed_schema_fraction_count"):
                    out[(sample.name, cls, "")] += sample.value
        return out

    first = scrape()
    time.sleep(window)
    second = scrape()
    delta = {key: second[key] - first.get(key, 0.0) for key in second}
    per_class = {}
    for (name, cls, kind), n in delta.items():
        if name != "draftgate_request_tokens_count" or kind != "output" or n <= 0:
            continue
        output = delta[("draftgate_request_tokens_sum", cls, "output")] / n
        prompts = delta.get(("draftgate_request_tokens_count", cls, "prompt"), 0.0)
        prompt = delta.get(("draftgate_request_tokens_sum", cls, "prompt"), 0.0) / prompts if prompts else 0.0
        seen = delta.get(("draftgate_observed_schema_fraction_count", cls, ""), 0.0)
        w_s = delta.get(("draftgate_observed_schema_fraction_sum", cls, ""), 0.0) / seen if seen else 0.0
        per_class[cls] = (n, output, prompt, w_s)
    count = sum(n for n, _, _, _ in per_class.values())
    if count < 2:
        raise CliError(f"{url} completed {count:.0f} request(s) in {window:g} s; the plan needs traffic to size")
    return _traffic(count / window, per_class, gamma, calibration)


def traffic_from_log(path: Path, gamma: int, calibration: Any) -> Any:
    """Request rate and, per request class, share, lengths and S/R/F mix from the log's request lines."""
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
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
        if not isinstance(record.get("completion_tokens"), (int, float)) or not isinstance(record.get("ts"), (int, float)):
            continue
        rows[str(record.get("class", "prose"))].append(record)
        times.append(float(record["ts"]))
    count = sum(len(r) for r in rows.values())
    if count < 2:
        raise CliError(f"{path} has {count} completed request line(s); the plan needs traffic to size")
    span = max(1.0, max(times) - min(times))
    per_class = {name: (float(len(found)),
                        sum(float(r["completion_tokens"]) for r in found) / len(found),
                        sum(float(r.get("prompt_tokens") or 0.0) for r in found) / len(found),
                        sum(float(r.get("w_s_observed") or 0.0) for r in found) / len(found))
                 for name, found in rows.items()}
    return _traffic(count / span, per_class, gamma, calibration)


def run(args: argparse.Namespace) -> int:
    from draftgate.policy.calibration import Calibration
    from draftgate.policy.fleet import plan
    from draftgate.proxy.config import ConfigError, load_settings
    from draftgate.proxy.planner import load_calibration_or_defaults

    if args.gpus < 1:
        raise CliError("--gpus must be 1 or more")
    gamma, plain_seqs, spec_seqs, dynamic, target_ms = 8, 256, 256, [], None
    calibration = Calibration()
    if args.config:
        try:
            settings = load_settings(args.config)
            calibration = load_calibration_or_defaults(settings)
        except ConfigError as exc:
            raise CliError(str(exc)) from None
        spec = next((p for p in settings.pools if p.speculation is not None), None)
        plain = next((p for p in settings.pools if p.speculation is None), None)
        if spec is not None and spec.speculation is not None:
            gamma, spec_seqs = spec.speculation.gamma, spec.max_num_seqs
            dynamic = spec.speculation.num_speculative_tokens_per_batch_size
        plain_seqs = plain.max_num_seqs if plain is not None else plain_seqs
        target_ms = settings.default_policy.tpot_target_ms
    if args.tpot_target_ms is not None:
        target_ms = args.tpot_target_ms
    if args.window <= 0:
        raise CliError("--window must be above 0 seconds")
    traffic = (traffic_from_log(Path(args.from_log), gamma, calibration) if args.from_log
               else traffic_from_metrics(args.from_metrics, args.window, gamma, calibration))
    options = plan(traffic, calibration, args.gpus, gamma, plain_seqs, spec_seqs,
                   target_ms / 1000.0 if target_ms else None, dynamic)
    if args.json:
        print(json.dumps({"requests_per_second": traffic.requests_per_second,
                          "classes": {c.name: {"share": c.share, "output_tokens": c.output_tokens,
                                               "prompt_tokens": c.prompt_tokens} for c in traffic.classes},
                          "options": [{"name": o.name, "spec_gpus": o.spec_gpus, "plain_gpus": o.plain_gpus,
                                       "speculated": list(o.speculated), "cost_per_token": o.cost_per_token,
                                       "tpot": o.tpot, "feasible": o.feasible, "meets_target": o.meets_target}
                                      for o in options]}, indent=2))
        return 0
    print(_report(traffic, options, args.gpus, target_ms, calibration.is_default))
    return 0


def _report(traffic: Any, options: list[Any], gpus: int, target_ms: float | None, default_calibration: bool) -> str:
    lines = [f"traffic: {traffic.requests_per_second:.2f} requests/s; "
             + ", ".join(f"{c.name} {c.share:.0%} ({c.output_tokens:.0f} tokens out)" for c in traffic.classes)]
    if default_calibration:
        lines.append("calibration: the defaults (run draftgate calibrate for your pools' own figures)")
    lines.append(f"\n{gpus} GPUs, busy GPU-ms per output token (lower is better)"
                 + (f", time per output token target {target_ms:g} ms" if target_ms else "") + ":\n")
    best = options[0]
    alternatives = [o for o in options if o.plain_gpus == 0 or o.spec_gpus == 0]
    shown = [best] + [o for o in alternatives if o is not best]
    for o in shown:
        notes = ([] if o.feasible else ["cannot carry the traffic"]) + ([] if o.meets_target else ["misses the target"])
        on = ", ".join(o.speculated) if o.speculated and o.plain_gpus else ("everything" if o.speculated else "-")
        lines.append(f"  {'PLAN ' if o is best else '     '}{o.name:<44} {o.cost_per_token * 1000:8.3f} GPU-ms/token  "
                     f"{o.tpot * 1000:6.1f} ms/token  speculating: {on}" + (f"  ({'; '.join(notes)})" if notes else ""))
    if not (best.feasible and best.meets_target):
        lines.append("\nNo split carries this traffic within the target: more GPUs, or a looser target.")
    dynamic = next((o for o in options if o.name.startswith("all with dynamic K")), None)
    if dynamic is not None and dynamic.feasible and dynamic.cost_per_token <= best.cost_per_token * 1.02:
        lines.append("\nOne pool with dynamic K is as good as the split (within 2%): draftgate's split is not worth it "
                     "for this traffic.")
    return "\n".join(lines)
