"""The demo (one seed of the evaluation) and ``draftgate evaluate`` itself, end to end.

Nothing here asserts the gate wins: the verdict is whatever the bench measures.
What must hold by construction is asserted: the oracle (each request on its
cheapest fixed pool) costs no more than any fixed pool, every strategy of every
level is either measured or said not to be, the verdict is said in words for
every level, and every server started is gone afterwards.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from draftgate.demo.run import run_demo
from draftgate.workloads import mix


def children() -> set[int]:
    return _children_of(os.getpid())


FIXED = ["always on K=2", "always on K=4", "always on K=8", "always off"]


def _check_verdict(summary: dict, levels: list[str]) -> None:
    assert list(summary["levels"]) == levels
    for level in levels:
        strategies = summary["levels"][level]["strategies"]
        oracle = strategies["oracle"]["cost_per_token"]
        for name in FIXED:
            cost = strategies[name]["cost_per_token"]
            assert cost["min"] <= cost["mean"] <= cost["max"]
            # per seed, the oracle takes each request's cheapest fixed pool
            assert oracle["mean"] <= cost["mean"] * (1 + 1e-9), (level, name)
        gate = strategies["gate"]
        assert gate["measured"] and gate["tpot_p99_ms"] >= gate["tpot_p50_ms"] > 0 and gate["ttft_p99_ms"] > 0
        assert 0.0 <= gate["to_speculation"] <= 1.0


def test_the_demo_prints_the_evaluations_verdict_and_leaves_nothing_running(tmp_path: Path, capsys) -> None:
    before = children()
    summary = run_demo(seed=2, scale=0.4, out_dir=tmp_path)
    _check_verdict(summary, ["1", "8", "32", "burst"])
    assert "always ngram K=4" not in summary["levels"]["1"]["strategies"]  # the demo is the short verdict
    printed = capsys.readouterr().out
    assert "EMULATED" in printed and "oracle" in printed
    # the verdict in words, for every level, whichever way it goes
    for where in ("at concurrency 1 ", "at concurrency 8 ", "at concurrency 32 ", "in the burst "):
        assert re.search(where + r"the gate (LOSES: \d+\.\d% more than|is the cheapest|ties)", printed), where
    assert (tmp_path / "cost_vs_concurrency.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "verdict.json").read_text()) == summary
    assert (tmp_path / "seed-2" / "calibration.yaml").exists()
    assert children() <= before  # every server the demo started is gone


def test_evaluate_json_over_two_seeds(tmp_path: Path) -> None:
    """``draftgate evaluate --json``: one object on standard output, the spread over seeds."""
    done = subprocess.run([sys.executable, "-m", "draftgate.proxy.cli.main", "evaluate", "--seeds", "2",
                           "--concurrency", "1,4", "--burst", "6", "--scale", "0.3", "--time-scale", "0.02", "--json",
                           "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["seeds"] == 2
    _check_verdict(summary, ["1", "4", "burst"])
    strategies = summary["levels"]["4"]["strategies"]
    ranges = [s["cost_per_token"] for s in strategies.values()]
    assert any(r["max"] > r["min"] for r in ranges)  # two seeds, two hardware draws: a spread
    # an ngram pool, alone and behind the gate with the depth-8 pool: where each pays, by kind of request
    alone, gated = strategies["always ngram K=4"], strategies["gate, ngram + draft"]
    assert alone["measured"] and gated["measured"]
    for kind, routes in gated["routes_by_kind"].items():
        assert kind in mix.KINDS and set(routes) <= {"ngram", "spec-on"}, routes
        assert abs(sum(routes.values()) - 1.0) < 0.01
    assert set(alone["cost_by_kind"]) == set(gated["cost_by_kind"]) and min(alone["cost_by_kind"].values()) > 0
    assert "where each drafter pays" in done.stderr


def test_evaluate_against_given_pools_reports_the_rest_as_not_measured(tmp_path: Path) -> None:
    """Against pools given by URL (here emulators standing in for real ones), the strategies
    whose pools are missing are not measured, never estimated, and the cost is wall time."""
    from draftgate.servers import ServerProcess

    spec = '{"method": "draft_model", "model": "Qwen/Qwen3-4B", "num_speculative_tokens": 4}'
    with ServerProcess(["emulate", "--enable-force-include-usage", "--time-scale", "0.05",
                        "--speculative-config", spec]) as on, \
            ServerProcess(["emulate", "--enable-force-include-usage", "--time-scale", "0.05"]) as off:
        done = subprocess.run([sys.executable, "-m", "draftgate.proxy.cli.main", "evaluate", "--seeds", "1",
                               "--concurrency", "2", "--burst", "0", "--scale", "0.3", "--json", "--out", str(tmp_path),
                               "--spec-on", f"4={on.url}", "--spec-off", off.url],
                              capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    strategies = json.loads(done.stdout)["levels"]["2"]["strategies"]
    assert strategies["always on K=2"] == {"measured": False} and strategies["dynamic K"] == {"measured": False}
    assert strategies["always on K=4"]["measured"] and strategies["always off"]["measured"]
    assert strategies["gate"]["measured"] and "oracle" not in strategies  # no per-request truth from real pools


@pytest.mark.parametrize("argv", [["--concurrency", "1,x"], ["--seeds", "0"], ["--spec-on", "http://a:1"],
                                  ["--spec-on", "x=http://a:1", "--spec-off", "http://b:1"]])
def test_evaluate_refuses_bad_options_in_one_line(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "draftgate.proxy.cli.main", "evaluate", *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("draftgate evaluate: error: ")
    assert len(done.stderr.strip().splitlines()) == 1


def _children_of(pid: int) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.add(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def test_ctrl_c_stops_everything(tmp_path: Path) -> None:
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "draftgate.proxy.cli.main", "demo", "--scale", "0.1", "--out", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    started: set[int] = set()
    deadline = time.monotonic() + 120
    while len(started) < 4 and time.monotonic() < deadline:  # emulators coming up, one by one
        time.sleep(0.2)
        started |= _children_of(proc.pid)
    assert len(started) >= 4
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) in (130, -2, 1)
    time.sleep(0.5)
    alive = {pid for pid in started if Path(f"/proc/{pid}").exists()
             and "Z" not in (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0])}
    assert not alive


def test_evaluate_says_in_one_line_when_a_given_pool_cannot_be_reached(tmp_path: Path) -> None:
    from draftgate.servers import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    done = subprocess.run([sys.executable, "-m", "draftgate.proxy.cli.main", "evaluate", "--seeds", "1",
                           "--concurrency", "1", "--burst", "0", "--scale", "0.2", "--out", str(tmp_path),
                           "--spec-on", dead, "--spec-off", dead],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("draftgate evaluate: error: ")
    assert "Traceback" not in done.stderr
