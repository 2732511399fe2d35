"""bench.bench_disconnect runs end to end and prints its table (the figures are the README's, not asserted)."""

from __future__ import annotations

import subprocess
import sys


def test_the_disconnect_benchmark_prints_both_paths_for_both_kinds_of_request() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.bench_disconnect", "--trials", "2"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] in (["streamed"], ["non-streamed"])]
    assert sorted((row[0], row[1]) for row in rows) == [
        ("non-streamed", "direct"), ("non-streamed", "proxy"), ("streamed", "direct"), ("streamed", "proxy")]
    for row in rows:
        p50, p90, worst = map(float, row[2:5])
        assert 0 < p50 <= p90 <= worst < 30_000  # each trial ended: the request did go
