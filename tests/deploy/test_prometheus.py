"""A real Prometheus scrapes the proxy and the emulators; every dashboard and alert
expression must parse, name draftgate_ or vllm: series, and (panels) return data."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from draftgate.servers import free_port
from tests.proxy_harness import stack


def _dashboard_source():  # type: ignore[no-untyped-def]
    """The dashboard's source, beside the JSON the chart ships (not a package: loaded by its path)."""
    import importlib.util

    path = Path(__file__).parents[2] / "helm" / "draftgate" / "dashboards" / "dashboard.py"
    spec = importlib.util.spec_from_file_location("draftgate_dashboard", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SOURCE = _dashboard_source()
PANELS, dashboard, render = SOURCE.PANELS, SOURCE.dashboard, SOURCE.render

ROOT = Path(__file__).parents[2]
ALERTS = ROOT / "helm" / "draftgate" / "rules" / "alerts.yml"
DASHBOARD = ROOT / "helm" / "draftgate" / "dashboards" / "draftgate.json"
MODEL = "Qwen/Qwen3-32B"
PROMETHEUS = shutil.which("prometheus")
SERIES = re.compile(r"\b(draftgate_[a-z_]+|vllm:[a-z_:]+)")

needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="Prometheus is not installed: apt-get install prometheus (.ci/run does)")


def concrete(expr: str) -> str:
    return expr.replace("$__rate_interval", "30s").replace("$model", ".*").replace("$pool", ".*")


def test_committed_dashboard_is_the_generated_one() -> None:
    assert json.loads(DASHBOARD.read_text()) == dashboard()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with: apt-get install prometheus")
def test_promtool_accepts_the_alert_rules() -> None:
    proc = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with: apt-get install prometheus")
def test_every_alert_fires_on_its_symptom_and_only_there() -> None:
    """An expression can parse and evaluate and still never fire: a ratio of a
    labelled sum to an unlabelled one matched nothing until this test ran it."""
    tests = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
    proc = subprocess.run(["promtool", "test", "rules", str(tests)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tested = {case["alertname"] for group in yaml.safe_load(tests.read_text())["tests"]
              for case in group["alert_rule_test"]}
    assert tested == {rule["alert"] for rule in yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]}


@needs_prometheus
def test_every_expression_evaluates_against_real_prometheus(tmp_path: Path) -> None:
    with stack(31, exploration_share=0.3, price_per_gpu_hour=3.0, health={"scrape_interval": 0.5},
               plan={"interval": 3.0, "assignment_interval": 1.0}) as st:
        port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [
                {"job_name": "draftgate", "static_configs": [{"targets": [st.proxy.url[7:]]}]},
                {"job_name": "vllm", "static_configs": [{"targets": [st.on.url[7:]], "labels": {"pool": "spec-on"}},
                                                        {"targets": [st.off.url[7:]], "labels": {"pool": "spec-off"}}]},
            ],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for expr in (e for _, _, targets, _ in PANELS for _, e in targets):
                assert SERIES.search(expr), expr
            # traffic until every query of every panel returns data: on a busy machine the
            # savings and plan panels need more answers and plan intervals than on a quiet one
            # (12 s there; beside a long evaluation on the same two cores, more than 90), so
            # wait for the condition
            deadline = time.monotonic() + 240
            empty = ["(no traffic yet)"]
            while empty and time.monotonic() < deadline:
                _drive_traffic(st, seconds=4)
                empty = []
                for title, _, targets, _ in PANELS:
                    for legend, expr in targets:
                        r = httpx.get(f"{url}/api/v1/query", params={"query": concrete(expr)}).json()
                        assert r["status"] == "success", (expr, r)
                        if not r["data"]["result"]:
                            empty.append(f"{title}: {legend}")
            assert not empty, empty
            rules = yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
            for rule in rules:
                assert SERIES.search(rule["expr"]), rule["expr"]
                r = httpx.get(f"{url}/api/v1/query", params={"query": rule["expr"]}).json()
                assert r["status"] == "success", (rule["alert"], r)
            loaded = httpx.get(f"{url}/api/v1/rules").json()["data"]["groups"][0]["rules"]
            assert {x["name"] for x in loaded} == {r["alert"] for r in rules}
            assert all(x["health"] == "ok" for x in loaded)
            png = tmp_path / "dashboard.png"
            render(url, png, seconds=12)
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
        finally:
            prom.terminate()
            prom.wait(timeout=10)


def _drive_traffic(st, seconds: float) -> None:  # type: ignore[no-untyped-def]
    schema = {"type": "object", "properties": {"a": {"type": "array", "minItems": 6, "items": {"type": "string"}}},
              "required": ["a"]}
    deadline = time.monotonic() + seconds
    i = 0
    httpx.post(f"{st.on.url}/debug/faults", json={"error_status": 503, "error_rate": 0.2})
    while time.monotonic() < deadline:
        i += 1
        httpx.post(f"{st.proxy.url}/v1/chat/completions", timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": f"json {i}"}], "temperature": 0, "stream": i % 2 == 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
        httpx.post(f"{st.proxy.url}/v1/chat/completions", timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": f"story {i}"}], "max_tokens": 40, "stream": True})
        if i % 10 == 0:
            httpx.post(f"{st.proxy.url}/v1/chat/completions", json={"model": "missing", "messages": [
                {"role": "user", "content": "x"}]})
            # a background response is passed through ungated, and counted so
            httpx.post(f"{st.proxy.url}/v1/responses", timeout=60, json={
                "model": MODEL, "input": f"later {i}", "background": True, "max_output_tokens": 5})
        time.sleep(0.05)
