"""Render the dashboard's key panels to a PNG from a Prometheus server, with the
same queries Grafana runs (bench/dashboard_spec.py).

    python -m bench.render_dashboard [--seconds 90] [--out docs/dashboard.png]

Without --prometheus it starts the whole laptop stack itself (two emulated
pools, the proxy, Debian's Prometheus), drives a mixed agent workload through
the proxy, and renders what an operator would see.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from bench.dashboard_spec import PANELS
from draftgate.plots import plt

KEY_PANELS = ("Saving: predicted against measured", "tau per kind of request: predicted, observed, and vLLM's own",
              "Traffic by route", "Schema fraction against break-even")


def concrete(expr: str, step: str) -> str:
    return expr.replace("$__rate_interval", step).replace("$model", ".*").replace("$pool", ".*")


def render(prometheus: str, out: str | Path, seconds: float, rate_window: str = "30s") -> None:
    end = time.time()
    start = end - seconds
    fig, axes = plt.subplots(2, 2, figsize=(13, 7.5))
    for ax, title in zip(axes.flat, KEY_PANELS):
        panel = next(p for p in PANELS if p[0] == title)
        for legend, expr in panel[2]:
            r = httpx.get(f"{prometheus}/api/v1/query_range", params={
                "query": concrete(expr, rate_window), "start": start, "end": end, "step": "2s"}).json()
            if r.get("status") != "success":
                raise RuntimeError(f"Prometheus rejected {expr!r}: {r.get('error')}")
            for series in r.get("data", {}).get("result", []):
                label = legend
                for key, value in series["metric"].items():
                    label = label.replace("{{" + key + "}}", value)
                xs = [float(t) - start for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                ax.plot(xs, ys, label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("seconds")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("draftgate dashboard (emulated pools: the figures show the mechanism, not your hardware)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main() -> None:
    from draftgate.emulator.app import EmulatorConfig
    from draftgate.emulator.app import create_app as emulator_app
    from draftgate.emulator.engine import SpecConfig
    from draftgate.proxy.app import create_app
    from draftgate.proxy.config import load_settings
    from draftgate.servers import ServerThread, free_port

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--out", default="docs/dashboard.png")
    args = parser.parse_args()
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("Prometheus is not installed: apt-get install prometheus")
    spec = EmulatorConfig(spec=SpecConfig("draft_model", 8), per_request_metrics="summary", force_include_usage=True,
                          time_scale=0.05, seed=1)
    plain = EmulatorConfig(force_include_usage=True, time_scale=0.05, seed=1)
    with ServerThread(emulator_app(spec)) as on, ServerThread(emulator_app(plain)) as off:
        settings = load_settings(None, pools=[
            {"name": "spec-on", "urls": [on.url], "speculation": {"gamma": 8}},
            {"name": "spec-off", "urls": [off.url]}], log_requests=False, exploration_share=0.1,
            price_per_gpu_hour=3.0)
        with ServerThread(create_app(settings)) as proxy, tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            config = Path(tmp) / "prometheus.yml"
            config.write_text(
                "global: {scrape_interval: 1s}\nscrape_configs:\n"
                f"  - {{job_name: draftgate, static_configs: [{{targets: ['{proxy.url[7:]}']}}]}}\n"
                f"  - {{job_name: vllm, static_configs: [{{targets: ['{on.url[7:]}', '{off.url[7:]}']}}]}}\n")
            prom = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
                                     f"--web.listen-address=127.0.0.1:{port}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                from draftgate.workloads.agent import replay_for

                replay_for(proxy.url, args.seconds)
                render(f"http://127.0.0.1:{port}", args.out, args.seconds)
            finally:
                prom.terminate()
                prom.wait(timeout=10)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
