"""``draftgate demo``: the evaluation's short version, then (if asked) the stack left up to try.

One seed of ``draftgate evaluate``: emulated pools (speculation at depth 2, 4
and 8; off; vLLM's dynamic K), a short calibration on the calibration split,
the proxy in front of the depth-8 and plain pools, and the held-out traffic
replayed through every strategy at concurrency 1, 8 and 32 and in a burst. The
table it prints is the evaluation's; ``draftgate evaluate`` gives the same
with its spread over seeds.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from draftgate.evaluate import bench

LEVELS = [1, 8, 32]
BURST = 48


def say(text: str = "") -> None:
    print(text, flush=True)


def run_demo(seed: int = 1, scale: float = 1.0, out_dir: Path = Path("demo-output"), spec_on: str | None = None,
             spec_off: str | None = None, dynamic_k: str | None = None, keep_running: bool = False) -> dict[str, Any]:
    """Run the short evaluation and print its verdict; returns the summary (``evaluate --json``'s object)."""
    options = bench.Options(seeds=1, first_seed=seed, concurrency=LEVELS, burst=max(1, int(BURST * scale)),
                            scale=0.5 * scale, out=out_dir, spec_on={8: spec_on} if spec_on else {},
                            spec_off=spec_off, dynamic_k=dynamic_k, drafters=False)
    say("draftgate demo")
    if options.emulated:
        say("  The backends are EMULATED vLLM servers (no GPU) with an H200's physics: the figures show the\n"
            "  mechanism and its trade-offs, not your hardware. `draftgate evaluate --spec-on URL --spec-off URL`\n"
            "  against your own pools is how you get your own verdict.")
    say(f"\n  strategies: the gate, always on at depth 2, 4 and 8, always off, dynamic K, and the per-request oracle;\n"
        f"  concurrency {', '.join(map(str, LEVELS))} (closed loop) and a burst of {options.burst} requests\n"
        f"  (`draftgate evaluate` also compares an ngram pool, alone and gated with the depth-8 pool)\n")
    summary, _ = bench.run(options, say)
    bench.report(summary, options, say)
    if keep_running:
        with bench.seed_pools(seed, options, say) as pools:
            gate_url, _ = pools.by_strategy[bench.GATE]
            say(f"\nThe stack is up. Point your client at base_url={gate_url}/v1 (any api_key); its metrics are at "
                f"{gate_url}/metrics. Ctrl-C stops it.")
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
    return summary
