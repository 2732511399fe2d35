"""Where a request's time goes inside the running proxy, stage by stage.

    python -m bench.trace_proxy [--rate 200] [--seconds 10]

``bench.bench_proxy`` says how much the proxy adds; this says where. It starts
the same two emulated pools and a proxy process with timers wrapped around the
stages of the hot path (the functions themselves are untouched), drives the
same open-loop load through it, and prints the median and p99 of each stage,
per request. It also times a fixed arithmetic loop inside every request and
alone: on a shared machine under load the same code runs several times slower
than in an idle microbenchmark, and that ratio says how far microbenchmark
figures carry over.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.bench_proxy import BODY, load, pct
from draftgate.servers import NO_THINKING, ServerProcess

# stage name -> what it spans; printed in this order
STAGES = {
    "to_plan": "request in -> planning starts (read, parse, validate)",
    "estimate": "  structure estimate",
    "shape_key": "  shape digest",
    "blend": "  learner blend",
    "conversation": "  conversation key",
    "affinity": "  affinity lookup",
    "views": "  pool views",
    "decide": "  the gate's decision",
    "plan_to_upstream": "decision made -> request written upstream",
    "upstream_to_client": "upstream headers -> last byte written to the client",
    "after_response": "after the response (recording, in the background)",
    "fixed_loop": "a fixed arithmetic loop, inside the request",
}
_current: contextvars.ContextVar[dict[str, float]] = contextvars.ContextVar("draftgate_trace")


def fixed_loop() -> int:
    total = 0
    for i in range(300):
        total += i
    return total


def _time_fixed_loop() -> float:
    start = time.perf_counter()
    fixed_loop()
    return time.perf_counter() - start


def _timed(stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            marks = _current.get(None)
            if marks is not None:
                marks[stage + "_end"] = end = time.perf_counter()
                marks[stage] = end - start
    return wrapper


def install_timers(samples: list[dict[str, float]]) -> None:
    """Wrap the hot path's stages with timers; each finished request appends its marks."""
    import draftgate.proxy.hot_routes as hot_routes
    import draftgate.proxy.planner as planner
    import draftgate.proxy.upstream as upstream
    from draftgate.policy.structure import StructureLearner
    from draftgate.proxy.affinity import AffinityTable, Conversation
    from draftgate.proxy.pools import PoolSet

    for name in ("estimate", "shape_key", "decide"):
        setattr(planner, name, _timed(name, getattr(planner, name)))
    StructureLearner.blend = _timed("blend", StructureLearner.blend)  # type: ignore[method-assign]
    Conversation.of = staticmethod(_timed("conversation", Conversation.of))  # type: ignore[method-assign]
    AffinityTable.lookup = _timed("affinity", AffinityTable.lookup)  # type: ignore[method-assign]
    PoolSet.views = _timed("views", PoolSet.views)  # type: ignore[method-assign]

    serve = hot_routes.HotRoutes.__call__

    async def traced_call(self: Any, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await serve(self, scope, receive, send)
            return
        marks = {"fixed_loop": _time_fixed_loop(), "entered": time.perf_counter()}
        _current.set(marks)

        async def traced_send(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                marks["answered"] = time.perf_counter()

        await serve(self, scope, receive, traced_send)
        marks["done"] = time.perf_counter()
        samples.append(marks)

    hot_routes.HotRoutes.__call__ = traced_call  # type: ignore[method-assign]
    request = upstream.Origin.request

    async def traced_request(self: Any, *args: Any, **kwargs: Any) -> Any:
        marks = _current.get(None)
        if marks is not None:
            marks["sent"] = time.perf_counter()
        response = await request(self, *args, **kwargs)
        if marks is not None:
            marks["headers"] = time.perf_counter()
        return response

    upstream.Origin.request = traced_request  # type: ignore[method-assign]


def stage_times(marks: dict[str, float]) -> dict[str, float]:
    """One request's stage durations from its marks (durations and timestamps mixed).
    The time before planning ends where the estimate starts: its end less its own time."""
    spans = {
        "to_plan": ("entered", "estimate_end", "estimate"),
        "plan_to_upstream": ("decide_end", "sent", None),
        "upstream_to_client": ("headers", "answered", None),
        "after_response": ("answered", "done", None),
    }
    out = {k: v for k, v in marks.items() if k in STAGES}
    for stage, (begin, end, minus) in spans.items():
        if begin in marks and end in marks:
            out[stage] = marks[end] - marks[begin] - (marks.get(minus, 0.0) if minus else 0.0)
    return out


def serve_traced(out: Path, argv: list[str]) -> None:
    """Run ``draftgate serve`` with timers; SIGUSR1 writes the stage times to ``out``."""
    samples: list[dict[str, float]] = []
    install_timers(samples)

    def dump(*_: Any) -> None:
        rows = [stage_times(m) for m in samples[len(samples) // 10:]]  # the first tenth warms up
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(rows))
        tmp.replace(out)

    signal.signal(signal.SIGUSR1, dump)
    from draftgate.cli.main import main

    sys.exit(main(argv))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--serve-traced", help=argparse.SUPPRESS)  # the proxy side of this script
    args, rest = parser.parse_known_args()
    if args.serve_traced:
        serve_traced(Path(args.serve_traced), rest)
        return
    emulate = ["emulate", "--enable-force-include-usage", "--time-scale", "0.002", "--max-num-seqs", "1024",
               *NO_THINKING]
    out = Path(tempfile.gettempdir()) / f"draftgate-trace-{os.getpid()}.json"
    with ServerProcess(emulate) as on, ServerProcess(emulate) as off:
        proxy = ServerProcess(["--serve-traced", str(out), "serve", "--spec-on", on.url, "--spec-off", off.url],
                              module="bench.trace_proxy")
        with proxy:
            latencies, _ = asyncio.run(load(proxy.url, BODY, args.rate, args.seconds))
            assert proxy.process is not None
            proxy.process.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 10
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
    if not out.exists():
        raise SystemExit(f"the traced proxy wrote no timings; its output:\n{proxy.output()[-2000:]}")
    rows = json.loads(out.read_text())
    out.unlink()
    alone = min(statistics.median(_time_fixed_loop() for _ in range(1000)) for _ in range(5))  # idle: best of 5
    print(f"{len(rows)} requests at {args.rate:g}/s through the proxy; end-to-end p50 "
          f"{pct(latencies, 50) * 1000:.2f} ms")
    print(f"{'stage':<58} {'p50 us':>8} {'p99 us':>8}")
    for stage, label in STAGES.items():
        values = [r[stage] for r in rows if stage in r]
        if values:
            print(f"{label:<58} {pct(values, 50) * 1e6:>8.0f} {pct(values, 99) * 1e6:>8.0f}")
    print(f"{'the same fixed loop, alone in this process':<58} {alone * 1e6:>8.0f}")


if __name__ == "__main__":
    main()
