"""bench.bench_burst runs end to end and prints its table (the figures are docs/performance.md's, not asserted)."""

from __future__ import annotations

import subprocess
import sys


def test_the_burst_benchmark_counts_every_stream_on_both_paths() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.bench_burst", "--streams", "40", "--rounds", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line.split()[1]: line.split() for line in proc.stdout.splitlines()[1:]}
    assert sorted(rows) == ["direct", "proxy"]
    for path, row in rows.items():
        last, p50, events, reads = float(row[2]), float(row[3]), int(row[4]), int(row[5])
        assert 0 < p50 <= last and events >= 40 * 3 and reads >= 40, row  # each: a chunk or more, and [DONE]
        assert row[-1] == "0", row  # no stream failed
    assert float(rows["proxy"][7]) > 0  # the proxy's CPU per event was measured
