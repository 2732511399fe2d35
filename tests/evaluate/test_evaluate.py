"""``draftgate evaluate`` and ``draftgate demo`` end to end, and the simulation against the proxy over HTTP.

Nothing here asserts who wins: the verdict is whatever the simulation measures.
What must hold by construction is asserted: the same JSON on every run, every
strategy on the same fleet, a capacity and a figure at every rate for every
strategy, one clear line for bad input, nothing left running; and the
simulated gate sends requests where the proxy over HTTP sends them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
import yaml

from draftgate.emulator.profile import EngineProfile
from draftgate.evaluate.bench import Unit, same_as
from draftgate.evaluate.fleet import Fleet, PoolSpec
from draftgate.evaluate.replay import replay
from draftgate.evaluate.requests import Bank
from draftgate.evaluate.simulation import Simulation, proxy_settings
from draftgate.evaluate.strategies import FIXED, GATE, GATE_SPLIT, dynamic_pool
from draftgate.evaluate.traffic import OpenLoop, Schedule
from draftgate.policy.calibration import Calibration
from draftgate.servers import ServerProcess, free_port
from draftgate.workloads import mix

SMALL = ["--seeds", "1", "--gpus", "2", "--rates", "0.5,2", "--requests", "100", "--burst", "4"]


def evaluate(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "draftgate.cli.main", "evaluate", *argv],
                          capture_output=True, text=True, timeout=timeout)


def test_the_verdict_is_the_same_json_on_every_run_even_beside_a_busy_processor(tmp_path: Path) -> None:
    first = evaluate(*SMALL, "--json", "--out", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr[-2000:]
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:  # another process takes a core, and the runs are shared out among fewer workers
        second = evaluate(*SMALL, "--json", "--workers", "1", "--out", str(tmp_path / "b"))
    finally:
        burner.kill()
        burner.wait()
    assert second.returncode == 0, second.stderr[-2000:]
    assert first.stdout == second.stdout
    summary = json.loads(first.stdout)
    assert summary["seeds"] == 1 and summary["targets"] == {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 50.0,
                                                            "attainment": 0.99}
    strategies = summary["fleets"]["2"]["strategies"]
    assert set(strategies) == {*FIXED, "dynamic K", GATE}
    for name, entry in strategies.items():
        assert entry["gpus"] == 2 and sum(entry["composition"].values()) == 2, name  # the same fleet for every one
        capacity = entry["capacity_rps_per_gpu"]
        assert 0 <= capacity["min"] <= capacity["mean"] <= capacity["max"], name
        assert len(capacity["by_seed"]) == 1 and min(capacity["by_seed"]) == capacity["min"], name
        assert [r["rps_per_gpu"] for r in entry["rates"]] == [0.5, 2.0] and [r["rps"] for r in entry["rates"]] == [1, 4]
        for rate in entry["rates"]:
            assert 0 <= rate["slo_attainment"] <= 1 and rate["provisioned_gpu_ms_per_token"] > 0, name
            assert rate["busy_gpu_ms_per_token"] <= rate["provisioned_gpu_ms_per_token"] * 1.001, name
        assert entry["burst"]["requests"] == 8 and set(entry["cost_by_workload"]) <= set(mix.WORKLOADS)
    gate = strategies[GATE]
    predicted = gate["plan_predicted_capacity_rps_per_gpu"]
    assert 0 < predicted["min"] <= predicted["mean"] <= predicted["max"] and len(predicted["by_seed"]) == 1
    for error, p, c in zip(gate["plan_error_by_seed"], predicted["by_seed"], gate["capacity_rps_per_gpu"]["by_seed"]):
        assert error == pytest.approx(p / c - 1, abs=0.01)
    for kind, routes in gate["routes_by_workload"].items():
        assert set(routes) <= set(gate["composition"]) and abs(sum(routes.values()) - 1) < 0.01, kind
    # objective cost: a fleet planned for each light rate, run at it, beside the cheapest homogeneous one
    costed = summary["fleets"]["2"]["cost_objective"]
    assert [row["rps_per_gpu"] for row in costed] == [0.5, 2.0]
    assert costed[0]["predicted_busy_gpu_ms_per_token"] > 0  # at a light rate the plan has a fleet that carries it
    for row in costed:  # at a heavy one it may predict none does, and run the one that carries the most
        assert row["plan"] and row["busy_gpu_ms_per_token"] > 0
        assert row["predicted_busy_gpu_ms_per_token"] is None or row["predicted_busy_gpu_ms_per_token"] > 0
        cheapest = row.get("cheapest_homogeneous")
        assert cheapest is None or row["cheapest_homogeneous_busy_gpu_ms_per_token"] == next(
            r for r in strategies[cheapest]["rates"] if r["rps_per_gpu"] == row["rps_per_gpu"])["busy_gpu_ms_per_token"]
    printed = first.stderr
    assert "Capacity, requests a second per GPU" in printed and "On 2 GPUs the gate's fleet" in printed
    assert "Objective cost (a fleet that scales with load)" in printed
    assert (tmp_path / "a" / "attainment_vs_rate.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "a" / "verdict.json").read_text()) == summary


def test_the_demo_prints_the_short_verdict_then_leaves_a_stack_up_until_ctrl_c(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "draftgate.cli.main", "demo", "--keep-running",
                             "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    printed = []
    for line in proc.stdout:
        printed.append(line)
        if "The stack is up" in line:
            break
    verdict_done = time.monotonic() - started
    text = "".join(printed)
    assert "EMULATED" in text and "always EAGLE-3 K=3" in text
    assert "On 2 GPUs the gate's fleet" in text  # the verdict in words, whichever way it goes
    assert json.loads((tmp_path / "verdict.json").read_text())["fleets"]["2"]["strategies"]["gate"]["gpus"] == 2
    url = text.split("base_url=", 1)[1].split("/v1", 1)[0]
    body = {"model": mix.MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200 and answer.headers["x-draftgate-route"] in ("eagle3", "plain")
    stack = _children_of(proc.pid)
    assert len(stack) >= 3  # two emulated pools and the proxy
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) in (0, 130, -2, 1)
    time.sleep(0.5)
    assert not {pid for pid in stack if Path(f"/proc/{pid}").exists()
                and "Z" not in (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0])}
    print(f"the demo's verdict took {verdict_done:.0f} s")


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


def test_ctrl_c_stops_the_demo_and_every_process_it_started(tmp_path: Path) -> None:
    # in a session of its own, as a terminal runs a command: Ctrl-C is SIGINT to its whole process group
    proc = subprocess.Popen([sys.executable, "-m", "draftgate.cli.main", "demo", "--workers", "2",
                             "--out", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    started: set[int] = set()
    deadline = time.monotonic() + 60
    while not started and time.monotonic() < deadline:  # a worker running the simulations
        time.sleep(0.1)
        started |= _children_of(proc.pid)
    assert started
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=60) in (130, -2, 1)
    time.sleep(0.5)
    alive = {pid for pid in started if Path(f"/proc/{pid}").exists()
             and "Z" not in (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0])}
    assert not alive


def test_bad_input_is_one_line_and_exit_status_2(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    broken, empty = tmp_path / "broken.jsonl", tmp_path / "empty.jsonl"
    broken.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"request": \n')
    empty.write_text("\n\n")
    cases = {"--gpus 0": ["--gpus", "0"],
             "a fleet its requests cannot load": ["--gpus", "64", "--requests", "800"],
             "targets nothing meets": ["--tpot-target-ms", "1", "--ttft-target-ms", "10"],
             "an unreachable pool": ["--spec-on", dead, "--spec-off", dead, "--rates", "1", "--requests", "60",
                                     "--out", str(tmp_path)],
             "a bad rate": ["--rates", "1,x"],
             "an unknown GPU": ["--gpu", "A1"],
             "a target that does not fit one GPU": ["--model", "meta-llama/Llama-3.1-70B-Instruct"],
             "a profile that is not a file": ["--profile", str(tmp_path / "missing.yaml")],
             "a mix with an unknown workload": ["--mix", "tool_call=4,gossip=1"],
             "a mix weight that is not a number": ["--mix", "chat=lots"],
             "a mix that weighs nothing": ["--mix", "chat=0,reasoning=0"],
             "a traffic file with a broken line": ["--traffic", str(broken)],
             "a traffic file with no request": ["--traffic", str(empty)],
             "a traffic file that is not there": ["--traffic", str(tmp_path / "missing.jsonl")]}
    for case, argv in cases.items():
        done = evaluate(*argv, timeout=300)
        assert done.returncode == 2, (case, done.stderr[-2000:])
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("draftgate evaluate: error: ") and "Traceback" not in done.stderr, case


def test_a_fitted_profile_is_every_seeds_hardware_and_a_named_one_is_drawn_around(tmp_path: Path) -> None:
    from draftgate.evaluate.bench import hardware_key, profile_of

    fitted = EngineProfile.build("H100", "meta-llama/Llama-3.1-8B-Instruct").model_dump(mode="json")
    fixed = hardware_key(fitted, drawn=False)
    assert profile_of(1, fixed) == profile_of(2, fixed) == EngineProfile.from_mapping(fitted)
    named = hardware_key({"gpu": "B200"})
    one, two = profile_of(1, named), profile_of(2, named)
    assert one.gpu.name == two.gpu.name == "B200" and one.efficiency != two.efficiency
    assert profile_of(3, "") == EngineProfile.random(3)  # the built-in verdict: each seed draws its own


def test_a_fleet_is_run_once_however_many_strategies_name_it() -> None:
    eagle = FIXED["always EAGLE-3 K=3"]
    split = Fleet((PoolSpec("eagle3-k3", 1, "eagle3", 3), PoolSpec("eagle3-k3-b", 3, "eagle3", 3)))
    routing = (("prose", "eagle3-k3"), ("tool_auto", "eagle3-k3-b"))
    cal = Calibration()
    gate = Unit(1, 4, GATE, split, cal, True, routing)
    best_split = Unit(1, 4, GATE_SPLIT, split, cal, True, routing)
    by_cost = Unit(1, 4, "gate, objective cost", split, cal, True, routing, rate=0.5)
    rerouted = Unit(1, 4, GATE_SPLIT, split, cal, True, (("prose", "eagle3-k3-b"), ("tool_auto", "eagle3-k3")))
    alone = Unit(1, 4, GATE, Fleet((eagle,)).resized(4), cal, True)
    assert same_as(alone, []) == "always EAGLE-3 K=3"  # one pool: the gate routes every request to it
    assert same_as(gate, []) is None
    assert same_as(best_split, [gate]) == GATE and same_as(by_cost, [gate, best_split]) == GATE
    assert same_as(rerouted, [gate]) is None  # the same GPUs, routed otherwise: its own runs
    assert same_as(Unit(1, 4, "always EAGLE-3 K=3", Fleet((eagle,)).resized(4), cal, False), [gate]) is None
    # the plan may recommend vLLM's dynamic K on every GPU: the dynamic K strategy's runs
    table = ((1, 8, 4), (9, 1024, 0))
    dynamic = Unit(1, 4, "dynamic K", Fleet((dynamic_pool(table, 4),)), cal, False)
    assert same_as(Unit(1, 4, GATE, Fleet((dynamic_pool(table, 4),)), cal, True), [dynamic]) == "dynamic K"
    assert same_as(Unit(1, 2, GATE, Fleet((dynamic_pool(table, 2),)), cal, True), [dynamic]) is None


def test_the_simulated_gate_routes_as_the_proxy_does_over_http(tmp_path: Path) -> None:
    """One small fleet, the same arrivals: the proxy over HTTP in front of emulated pools in wall time,
    and the simulation with the proxy's own planner in virtual time, send each request to the same pool
    (at least 90% of them: the HTTP run's load, read by scrapes and in-flight counts, moves with the
    wall clock). Tool calls and prose are assigned a pool each; reasoning goes where the gate prices it."""
    seed, scale, rate = 3, 0.25, 2.0
    fleet = Fleet((PoolSpec("eagle3-k3", 1, "eagle3", 3), PoolSpec("plain", 1)))
    schedule = Schedule(5.0, 30.0, 5.0)
    items = list(itertools.islice(mix.stream("verdict", seed), 500))
    per_item = mix.requests_per_item("verdict")
    extra = {"exploration_share": 0.0,
             "plan": {"interval": 0.0, "routing": {"tool_auto": "eagle3-k3", "prose": "plain"}}}
    bank = Bank(EngineProfile.random(seed), seed)
    sim = Simulation(fleet, bank, proxy_settings(fleet, 1024, {**extra, "health": {"scrape_interval": 2.0}}),
                     Calibration(), seed, 1024)
    simulated = sim.run(OpenLoop(iter(items), bank, rate, per_item, schedule, seed), schedule.measured, 1e9).served
    common = ["emulate", "--enable-force-include-usage", "--time-scale", str(scale), "--profile-seed", str(seed),
              "--seed", str(seed)]
    with ServerProcess([*common, "--speculative-config", fleet.pools[0].speculative_config_json() or ""]) as eagle, \
            ServerProcess(common) as plain:
        settings = proxy_settings(fleet, 1024, {**extra, "health": {"scrape_interval": 2.0 * scale}})
        config = settings.model_dump(mode="json", exclude_unset=True)
        config["pools"] = [dict(p, urls=[u]) for p, u in zip(config["pools"], [eagle.url, plain.url])]
        (tmp_path / "draftgate.yaml").write_text(yaml.safe_dump(config))
        with ServerProcess(["serve", "--config", str(tmp_path / "draftgate.yaml"), "--log-level", "warning"]) as proxy:
            over_http = asyncio.run(replay(proxy.url, items, rate, per_item, schedule, seed, scale)).served
    # the window's requests (both runs stop sending a session's later turns at their own pace after it)
    routes = Counter((s.key, s.pool) for s in simulated if s.measured)
    sent = Counter((s.key, s.pool) for s in over_http if s.measured)
    total = max(sum(routes.values()), sum(sent.values()))
    assert abs(sum(routes.values()) - sum(sent.values())) <= 0.05 * total
    assert sum((routes & sent).values()) >= 0.9 * total, (routes, sent)
    assert {pool for _, pool in routes} == {"eagle3-k3", "plain"}  # both pools take some: routing is exercised


def test_a_tensor_parallel_verdict_is_counted_in_gpus(tmp_path: Path) -> None:
    """70B at tensor parallel size 4: two replicas are a fleet of 8 GPUs, and every rate, capacity and
    GPU-second is per GPU."""
    done = evaluate("--model", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "4", "--gpus", "8",
                    "--seeds", "1", "--requests", "200", "--rates", "0.5,1,2", "--burst", "0", "--json",
                    "--out", str(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert list(summary["fleets"]) == ["8"] and summary["tensor_parallel_size"] == 4
    off = summary["fleets"]["8"]["strategies"]["always off"]
    assert off["gpus"] == 8 and off["composition"] == {"plain": 8}
    assert [r["rps_per_gpu"] for r in off["rates"]] == [0.5, 1.0, 2.0]
    # within the heaviest rate tried a GPU (2.0), where a replica's would reach four times it
    assert 0 < off["capacity_rps_per_gpu"]["mean"] <= 2.0
    assert "8 GPUs" in done.stderr and "2 GPUs" not in done.stderr
    odd = evaluate("--model", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "4", "--gpus", "6",
                   timeout=60)
    assert odd.returncode == 2 and "whole number of 4-GPU replicas" in odd.stderr
