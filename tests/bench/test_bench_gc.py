"""bench.bench_gc runs end to end and prints its table (the pauses are docs/performance.md's, not asserted)."""

from __future__ import annotations

import subprocess
import sys


def test_the_collector_benchmark_fills_the_tables_and_compares_both_heaps() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.bench_gc", "--rounds", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()[1:]}
    assert sorted(rows) == ["collected", "frozen"]
    tracked = {heap: int(row[1].replace(",", "")) for heap, row in rows.items()}
    # the startup heap (tens of thousands of objects) is what freezing takes away; the full
    # tables add little to either, as what they hold is not tracked
    assert tracked["collected"] - tracked["frozen"] > 30_000
    assert tracked["frozen"] < 20_000
    assert all(float(row[2]) >= 0 and float(row[4]) >= 0 for row in rows.values())
