"""Benchmark: how long a full garbage collection stops the proxy.

    python -m bench.bench_gc [--rounds 7]

CPython's cycle collector runs a full collection now and then (about once a
minute under ``bench.soak``'s load), and while it walks every object it tracks,
the event loop, and every stream through the proxy, waits. This builds the
proxy's app as ``draftgate serve`` does, then fills its bounded tables to
their configured capacity (affinity, learned shapes, stored responses) as a
long-running proxy's are, and prints the median pause of ``gc.collect()``
side by side: with the startup heap left to the collector, and frozen
(``draftgate.proxy.serving.settle_startup_heap``, which ``draftgate serve`` calls).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

from draftgate.policy.structure.estimates import ClassTokens
from draftgate.policy.structure.measure import ObservedStructure
from draftgate.proxy.affinity import Conversation
from draftgate.proxy.app import create_app
from draftgate.proxy.config import ProxySettings
from draftgate.proxy.serving import settle_startup_heap

POOLS: list[dict[str, Any]] = [
    {"name": "spec-on", "urls": ["http://127.0.0.1:9"],
     "speculation": {"method": "draft_model", "gamma": 8}},
    {"name": "spec-off", "urls": ["http://127.0.0.1:10"]},
]


def pause_ms(rounds: int) -> float:
    """The median time of a full collection, once what is garbage now is gone."""
    gc.collect()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def fill_tables(app: Any, salt: int) -> None:
    """Every bounded table of a proxy that has run a long while, full to its capacity."""
    proxy = app.state.proxy
    settings = proxy.settings
    for i in range(settings.affinity_capacity):
        conversation = Conversation((((salt << 32) + i, 4000),), None)
        proxy.planner.affinity.record(conversation, "spec-on", "http://127.0.0.1:9", 1000.0 + i)
    observed = ObservedStructure(ClassTokens(40.0, 0.0, 10.0), ClassTokens(160.0, 0.0, 40.0), 50.0, 1, "usage")
    for i in range(settings.learner_capacity):
        proxy.planner.learner.observe(f"shape-{salt}-{i}", observed)
    for i in range(settings.response_holders_capacity):
        proxy.holders.remember(f"resp_{salt}_{i:024d}", "spec-off", "http://127.0.0.1:10")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    settings = ProxySettings.model_validate({"pools": POOLS})
    rows = []
    for frozen in (False, True):
        gc.unfreeze()
        app = create_app(settings)
        if frozen:
            settle_startup_heap()  # undone by the unfreeze above, or at the end
        empty = pause_ms(args.rounds)
        fill_tables(app, int(frozen))
        full = pause_ms(args.rounds)
        rows.append((frozen, len(gc.get_objects()), empty, full))
        del app
    gc.unfreeze()
    print(f"{'startup heap':>14} {'tracked after fill':>19} {'pause, tables empty':>20} {'pause, tables full':>19}")
    for frozen, tracked, empty, full in rows:
        print(f"{'frozen' if frozen else 'collected':>14} {tracked:>19,} {empty:>17.2f} ms {full:>16.2f} ms")


if __name__ == "__main__":
    main()
