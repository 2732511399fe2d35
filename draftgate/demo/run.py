"""``draftgate demo``: the verdict's short version, then (if asked) a stack left up to try.

One seed of ``draftgate evaluate`` on a fleet of two emulated H200s, fewer
rates and requests: every strategy on the same fleet, its capacity at the
latency targets, the gate's fleet from its plan. The table it prints is the
evaluation's; ``draftgate evaluate`` gives the same over five seeds and three
fleet sizes.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from draftgate.evaluate import bench

GPUS = (2,)
RATES = (0.5, 1.0, 2.0, 4.0)
REQUESTS = 400
BURST = 32


def say(text: str = "") -> None:
    print(text, flush=True)


def run_demo(seed: int = 1, out_dir: Path = Path("demo-output"), keep_running: bool = False,
             workers: int = 0) -> dict[str, Any]:
    """Run the short verdict and print it; returns the summary (``evaluate --json``'s object)."""
    options = bench.Options(seeds=1, first_seed=seed, gpus=GPUS, rates=RATES, requests=REQUESTS, burst=BURST,
                            bisections=1, beyond=0, workers=workers, out=out_dir)
    say("draftgate demo")
    say("  The fleets are EMULATED H200s serving Qwen3-32B, in virtual time (no GPU): the figures show the\n"
        "  mechanism and its trade-offs, not your hardware. `draftgate evaluate --spec-on URL --spec-off URL`\n"
        "  against your own pools is how you get your own.")
    say(f"\n  every strategy on {GPUS[0]} GPUs: plain, a draft model at depth 2, 4 and 8, an EAGLE-3 head, ngram,\n"
        "  vLLM's dynamic K, and the gate in front of the fleet its plan recommends; arrival rates of "
        + ", ".join(f"{r:g}" for r in RATES) + " requests a second per GPU\n"
        "  (`draftgate evaluate` runs five seeds on 2, 4 and 8 GPUs)\n")
    summary = bench.run(options, say)
    bench.report(summary, options, say)
    if keep_running:
        _stack(seed, out_dir)
    return summary


def _stack(seed: int, out_dir: Path) -> None:
    """An EAGLE-3 pool and a plain pool, emulated in wall time, and the proxy in front of them, until Ctrl-C."""
    import yaml

    from draftgate.servers import ServerProcess

    common = ["emulate", "--enable-force-include-usage", "--per-request-spec-decode-metrics", "summary",
              "--profile-seed", str(seed)]
    eagle = '{"method": "eagle3", "model": "RedHatAI/Qwen3-32B-speculator.eagle3", "num_speculative_tokens": 3}'
    with ServerProcess([*common, "--speculative-config", eagle]) as on, ServerProcess(common) as off:
        config = out_dir / "draftgate.yaml"
        config.write_text(yaml.safe_dump({"pools": [
            {"name": "eagle3", "urls": [on.url], "speculation": {"method": "eagle3", "gamma": 3}},
            {"name": "plain", "urls": [off.url]}]}))
        with ServerProcess(["serve", "--config", str(config)]) as proxy:
            say(f"\nThe stack is up. Point your client at base_url={proxy.url}/v1 (any api_key); its metrics are "
                f"at {proxy.url}/metrics. Ctrl-C stops it.")
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
