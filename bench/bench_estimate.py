"""Benchmark: ``estimate`` (with the shape digest) against ``json.loads`` of the same body.

    python -m bench.bench_estimate [--rounds 2000]

Bodies are distinct (a tool name differs in each), so nothing could be reused
between them. There is no target: what a user notices is the proxy's overhead
end to end (``bench.bench_proxy``), of which this is a part. The parse is the
baseline because the proxy pays it on every request anyway.

The ``visit`` column is the time pure Python takes to visit every value of the
parsed body once and do nothing with it; ``repr(tools)`` is what even the
cheapest digest of the tool list would cost, and so what a cache of the
per-tool-set work keyed by such a digest would pay on every request, hit or
miss.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from draftgate.policy.structure import estimate, shape_key
from draftgate.workloads import BFCL_SAMPLE

SAMPLE = BFCL_SAMPLE


def bodies(template: dict[str, Any], tools: int, count: int) -> list[bytes]:
    base_tools = template["tools"]
    out = []
    for i in range(count):
        body = dict(template)
        body["tools"] = [
            {**base_tools[k % len(base_tools)], "function": {**base_tools[k % len(base_tools)]["function"],
                                                              "name": f"tool_{i}_{k}"}}
            for k in range(tools)
        ]
        out.append(json.dumps(body).encode())
    return out


def visit(value: Any) -> None:
    """Touch every value once, doing nothing: the floor under reading a request in Python."""
    if type(value) is dict:
        for item in value.values():
            visit(item)
    elif type(value) is list:
        for item in value:
            visit(item)


def paired_medians_ns(parse, work, raw: list[bytes]) -> tuple[float, float]:
    """Median times of ``parse(raw[i])`` and of ``work`` on what it returned, body by body.

    ``work`` gets the body just parsed, as in the proxy, where the estimate reads
    the objects ``json.loads`` has just built; and taking the two in turn puts a
    shared machine's slow spells on both alike.
    """
    parse_times, work_times = [], []
    for blob in raw:
        start = time.perf_counter_ns()
        body = parse(blob)
        middle = time.perf_counter_ns()
        work(body)
        parse_times.append(middle - start)
        work_times.append(time.perf_counter_ns() - middle)
    return statistics.median(parse_times), statistics.median(work_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    rows = [json.loads(line) for line in SAMPLE.open()]
    template = next(r["request"] for r in rows if r["category"] == "multiple")
    print(f"{'request':>22} {'json.loads':>12} {'estimate+digest':>16} {'ratio':>7} "
          f"{'visit':>9} {'ratio':>7} {'repr(tools)':>12}")
    sampled = dict(template, temperature=0, max_tokens=512)
    for label, body, tools in (("BFCL-sized (3 tools)", template, len(template["tools"])),
                               ("+ temperature, cap", sampled, len(template["tools"])),
                               ("128 tools", template, 128)):
        raw = bodies(body, tools, args.rounds)
        parse, est = paired_medians_ns(json.loads, lambda body: (estimate(body), shape_key(body)), raw)
        parse_again, floor = paired_medians_ns(json.loads, visit, raw)
        _, digest = paired_medians_ns(json.loads, lambda body: hash(repr(body["tools"])), raw)
        print(f"{label:>22} {parse / 1000:>10.1f}us {est / 1000:>14.1f}us {est / parse:>7.2f} "
              f"{floor / 1000:>7.1f}us {floor / parse_again:>7.2f} {digest / 1000:>10.1f}us")


if __name__ == "__main__":
    main()
