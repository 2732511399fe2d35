"""Routing regret: how often the gate sends a request to the pool that was dearer for it.

    python -m bench.routing_regret [--seeds 2] [--per-kind 24]

For each held-out request of every workload (BFCL tool calls by category, ShareGPT
chat and conversations turn by turn, BFCL agent sessions turn by turn, reasoning) the proxy's explain says where
the gate would send it, with the default calibration and with one calibrated on
the calibration split; the request then runs on the speculation pool and on the
plain pool, one at a time, and the emulator's ground truth says what it cost on
each. Printed per workload: the share sent to speculation, the share sent to the
dearer pool, the gate's cost over the per-request oracle and over the better
of the two pools for the whole workload, and the median error of the output
length the estimate gives the outcome that came (a call, or a plain answer).
This is the estimator's accuracy as the gate uses it: a call probability of
0.45 that routes a tool call to the plain pool is a miss however close it is
to 0.5.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from draftgate.calibrate.short import short_calibration
from draftgate.emulator import truth
from draftgate.evaluate.bench import calibration_arms
from draftgate.servers import ServerProcess
from draftgate.workloads import mix

SPEC = '{"method": "draft_model", "model": "Qwen/Qwen3-4B", "num_speculative_tokens": 8}'


def workload(item: mix.Item) -> str:
    """The item's kind, with a BFCL tool call's category (its id up to the number)."""
    if item.workload != "tool_call":
        return item.workload
    return "tool call: " + re.sub(r"_\d+$", "", item.id).removesuffix("_python")


def requests(per_kind: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(workload, key, body), at most ``per_kind`` items of each workload, every turn of a session."""
    out = []
    taken: dict[str, int] = defaultdict(int)
    for items in mix.items("verdict").values():
        for item in items:
            name = workload(item)
            if taken[name] >= per_kind:
                continue
            taken[name] += 1
            out += [(name, f"{item.id}#{turn}", body) for turn, body in enumerate(item.requests)]
    return out


@contextlib.contextmanager
def gate(on: str, off: str, calibration: Path | None, folder: Path) -> Iterator[str]:
    config: dict[str, Any] = {"pools": [{"name": "spec-on", "urls": [on], "speculation": {"gamma": 8}},
                                        {"name": "spec-off", "urls": [off]}], "log_requests": False}
    if calibration is not None:
        config["calibration_file"] = str(calibration)
    path = folder / ("calibrated.yaml" if calibration else "default.yaml")
    path.write_text(yaml.safe_dump(config))
    with ServerProcess(["serve", "--config", str(path), "--log-level", "warning"]) as proxy:
        yield proxy.url


def cost(client: httpx.Client, url: str, body: dict[str, Any]) -> tuple[float, float, bool]:
    """The busy GPU-seconds ``body`` causes on the server at ``url``, its output tokens, and
    whether it called a tool."""
    client.post(f"{url}/reset_prefix_cache")
    response = client.post(f"{url}/v1/chat/completions", json=body)
    response.raise_for_status()
    said = truth.read(response.headers[truth.HEADER])
    called = bool(response.json()["choices"][0]["message"].get("tool_calls"))
    return said["gpu_seconds"], said["tokens"], called


# route, cost on spec, cost plain, the output's tokens as expected for the outcome that came, its tokens
Row = tuple[str, float, float, float, float]


def measure(seed: int, per_kind: int) -> dict[str, dict[str, list[Row]]]:
    """calibration -> workload -> [(route, cost on spec, cost plain, expected tokens, tokens)]."""
    common = ["emulate", "--enable-force-include-usage", "--time-scale", "0.02", "--profile-seed", str(seed),
              "--seed", str(seed)]
    out: dict[str, dict[str, list[Row]]] = {}
    with ServerProcess([*common, "--speculative-config", SPEC]) as on, ServerProcess(common) as off, \
            tempfile.TemporaryDirectory() as tmp, httpx.Client(timeout=600) as client:
        folder = Path(tmp)
        short_calibration(on.url, off.url, folder / "cal.yaml", mix.MODEL, 4, 8, calibration_arms())
        work = requests(per_kind)
        costs = [(cost(client, on.url, body), cost(client, off.url, body)) for _, _, body in work]
        for label, calibration in (("default calibration", None), ("calibrated", folder / "cal.yaml")):
            with gate(on.url, off.url, calibration, folder) as proxy:
                rows = out.setdefault(label, defaultdict(list))
                for (name, _, body), ((spec, tokens, called), (plain, _, _)) in zip(work, costs):
                    said = client.post(f"{proxy}/draftgate/explain", json=body).raise_for_status().json()
                    # the length the estimate gives the outcome that came: a call's, or a plain answer's
                    expected = sum(said["if_call" if called else "if_answer"].values())
                    rows[name].append((said["route"], spec, plain, expected, tokens))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--per-kind", type=int, default=24, help="items per workload and seed")
    args = parser.parse_args()
    merged: dict[str, dict[str, list[Row]]] = {}
    for seed in range(1, args.seeds + 1):
        for label, rows in measure(seed, args.per_kind).items():
            for name, values in rows.items():
                merged.setdefault(label, defaultdict(list))[name] += values
    print(f"Routing regret against the emulator's ground truth, {args.seeds} seeds, one request at a time\n")
    header = (f"{'workload':<30} {'requests':>8} {'to spec':>8} {'dearer pool':>11} {'over oracle':>11} "
              f"{'over best pool':>14} {'length error':>12}")
    for label, rows in merged.items():
        print(f"{label}:\n{header}")
        every = []
        for name in sorted(rows):
            every += rows[name]
            print(line(name, rows[name]))
        print(line("all", every) + "\n")


def line(name: str, rows: list[Row]) -> str:
    """One workload: share sent to speculation, share sent to the dearer pool, cost over the
    per-request oracle and over the better of the two pools for the whole workload, and the
    median relative error of the expected length of the outcome that came."""
    to_spec = sum(row[0] == "spec-on" for row in rows) / len(rows)
    chosen = [spec if route == "spec-on" else plain for route, spec, plain, _, _ in rows]
    best = [min(row[1], row[2]) for row in rows]
    dearer = sum(c > b * 1.0001 for c, b in zip(chosen, best)) / len(rows)
    best_pool = min(sum(row[1] for row in rows), sum(row[2] for row in rows))
    errors = sorted(abs(expected - tokens) / max(tokens, 1.0) for _, _, _, expected, tokens in rows)
    return (f"{name:<30} {len(rows):>8} {to_spec:>8.0%} {dearer:>11.0%} {sum(chosen) / sum(best) - 1:>+11.1%} "
            f"{sum(chosen) / best_pool - 1:>+14.1%} {errors[len(errors) // 2]:>12.0%}")


if __name__ == "__main__":
    main()
