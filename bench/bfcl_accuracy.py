"""How well the estimator sizes BFCL tool calls, and predicts call / no call.

    python -m bench.bfcl_accuracy [--sample draftgate/workloads/bfcl_sample.jsonl]

For every entry with a ground-truth call, the estimator's expected tool-call
output under ``tool_choice=auto``, given that a call comes (its expected
schema-bound tokens over its p(call)), is compared with the ground truth
rendered as the model writes it unforced: ``{"name": ..., "arguments": ...}``
per call, converted to tokens with the same characters-per-token prior and the
same allowance for the parser's tags, so the comparison is of sizes, not of
tokenizers. (Forced, vLLM's grammar writes the calls otherwise, and the
estimator sizes them so; BFCL's calls are free.) For ``tool_choice=auto`` it
reports how often the estimator's call / no-call expectation (p(call) >= 0.5)
matches the truth; irrelevance entries expect no call.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from draftgate.policy.structure import DEFAULT_PRIORS, estimate
from draftgate.policy.structure.families import family_of
from draftgate.workloads import BFCL_SAMPLE

SAMPLE = BFCL_SAMPLE


def truth_tokens(calls: list[dict[str, Any]], model: str) -> float:
    p = DEFAULT_PRIORS
    total = 0.0
    for call in calls:
        fn = call["function"]
        args = json.dumps(json.loads(fn["arguments"]), separators=(",", ":"))
        text = json.dumps({"name": fn["name"], "arguments": "X"}, separators=(",", ":")).replace('"X"', args)
        total += len(text) / p.json_chars_per_token + family_of(model).tool_call_wrapper_tokens
    return total


def evaluate(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by_category: dict[str, dict[str, Any]] = defaultdict(lambda: {"errors": [], "agree": 0, "n": 0, "worst": []})
    for row in rows:
        stats = by_category[row["category"]]
        request = row["request"]
        truth = row["ground_truth"]
        expects_call = estimate(request).p_tool_call >= 0.5
        stats["n"] += 1
        stats["agree"] += int(expects_call == (truth is not None))
        if truth is None:
            continue
        free = estimate(dict(request, tool_choice="auto"))
        expected = free.expected_tokens.s / free.p_tool_call  # the length of the calls, given that they come
        actual = truth_tokens(truth["tool_calls"], request.get("model"))
        stats["errors"].append((expected - actual, actual))
        stats["worst"].append((abs(expected - actual), row["id"], expected, actual))
    return by_category


def report(by_category: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| category | n | mean abs error (tokens) | mean rel error | median signed error | call/no-call agreement | worst case |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    all_errors: list[tuple[float, float]] = []
    agree = n = 0
    for category, stats in by_category.items():
        errors = stats["errors"]
        all_errors += errors
        agree, n = agree + stats["agree"], n + stats["n"]
        agreement = f"{stats['agree'] / stats['n']:.0%}"
        if errors:
            mae = statistics.mean(abs(e) for e, _ in errors)
            rel = statistics.mean(abs(e) / a for e, a in errors)
            med = statistics.median(e for e, _ in errors)
            worst = max(stats["worst"])
            worst_text = f"{worst[1]}: est {worst[2]:.0f} vs {worst[3]:.0f}"
            lines.append(f"| {category} | {stats['n']} | {mae:.1f} | {rel:.0%} | {med:+.1f} | {agreement} | {worst_text} |")
        else:
            lines.append(f"| {category} | {stats['n']} | - | - | - | {agreement} | - |")
    mae = statistics.mean(abs(e) for e, _ in all_errors)
    rel = statistics.mean(abs(e) / a for e, a in all_errors)
    lines.append(f"| all | {n} | {mae:.1f} | {rel:.0%} | {statistics.median(e for e, _ in all_errors):+.1f} | {agree / n:.0%} | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", default=str(SAMPLE))
    args = parser.parse_args()
    rows = [json.loads(line) for line in Path(args.sample).open()]
    print(report(evaluate(rows)))


if __name__ == "__main__":
    main()
