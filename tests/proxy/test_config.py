"""The proxy's configuration: what cannot start it is one line, settings come in groups, the
environment overrides the file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from draftgate.proxy.config import ConfigError, load_settings

DRAFTGATE = [sys.executable, "-m", "draftgate.cli.main"]


def test_invalid_configuration_stops_startup_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"pools": [{"name": "a", "urls": ["127.0.0.1:80"]}]}))
    for args in (["--config", str(bad)], ["--config", str(tmp_path / "missing.yaml")], []):
        proc = subprocess.run([*DRAFTGATE, "serve", *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = subprocess.run([*DRAFTGATE, "serve", "--config", str(bad)], capture_output=True, text=True, timeout=60)
    assert "pools.0.urls" in proc.stderr


def test_check_validates_a_configuration_without_serving(tmp_path: Path) -> None:
    """``serve --check`` is a deploy pipeline's gate: the validation a start does,
    calibration file included, then exit."""
    cfg = tmp_path / "draftgate.yaml"
    config = {"pools": [{"name": "spec-on", "urls": ["http://127.0.0.1:1"], "speculation": {"gamma": 4}}], "port": 0}
    cfg.write_text(yaml.safe_dump(config))
    ok = subprocess.run([*DRAFTGATE, "serve", "--config", str(cfg), "--check"], capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0 and "configuration ok: would serve on http://127.0.0.1:0/v1" in ok.stdout, ok.stderr
    (tmp_path / "calibration.yaml").write_text("kappa: not-a-number\n")
    cfg.write_text(yaml.safe_dump({**config, "calibration_file": str(tmp_path / "calibration.yaml")}))
    bad = subprocess.run([*DRAFTGATE, "serve", "--config", str(cfg), "--check"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "calibration_file" in bad.stderr and bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("url", "needle"), [
    ("http://vllm:8000/v1", "the proxy adds /v1 itself"),
    ("http://vllm:99999", "port outside"),
    ("http://", "with a host"),
    ("vllm:8000", "with a host"),
    ("http://vllm:8000/?x=1", "without a path or query"),
    ("http://user:key@vllm:8000", "api_key"),
])
def test_pool_urls_that_could_not_serve_stop_startup(url: str, needle: str) -> None:
    """Each of these used to be accepted, then failed every request (a port out of range with a 500)."""
    with pytest.raises(ConfigError, match="pools.0.urls") as raised:
        load_settings(None, pools=[{"name": "p", "urls": [url]}])
    assert needle in str(raised.value)
    assert load_settings(None, pools=[{"name": "p", "urls": ["https://[::1]:8000/"]}]).pools[0].urls == [
        "https://[::1]:8000"]


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"port": 9000, "pools": [{"name": "p", "urls": ["http://127.0.0.1:1"]}],
                                   "default_policy": {"margin": 0.1}}))
    monkeypatch.setenv("DRAFTGATE_PORT", "9001")
    monkeypatch.setenv("DRAFTGATE_DEFAULT_POLICY__MARGIN", "0.2")
    settings = load_settings(cfg)
    assert settings.port == 9001 and settings.default_policy.margin == 0.2
    monkeypatch.setenv("DRAFTGATE_PORT", "not-a-port")
    with pytest.raises(ConfigError, match="port"):
        load_settings(cfg)


def test_settings_come_in_groups_and_the_flat_keys_of_before_still_load_with_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Grouped keys, in the file and the environment; the flat keys they replace (file and
    environment) are moved into their groups with a warning naming where they go, and a key
    written in its group wins over its flat form."""
    pools = [{"name": "p", "urls": ["http://127.0.0.1:1"]}]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"pools": pools, "timeouts": {"queue": 3.0}, "health": {"interval": 0.5},
                                   "plan": {"routing": {"prose": "p"}}}))
    monkeypatch.setenv("DRAFTGATE_HEALTH__SCRAPE_INTERVAL", "4")
    grouped = load_settings(cfg)
    assert (grouped.timeouts.queue, grouped.health.interval, grouped.health.scrape_interval) == (3.0, 0.5, 4.0)
    assert grouped.plan.routing == {"prose": "p"} and not caplog.records
    cfg.write_text(yaml.safe_dump({"pools": pools, "queue_timeout": 3.0, "routing": {"prose": "p"},
                                   "timeouts": {"connect": 1.0}, "health_interval": 9.0, "health": {"interval": 0.5}}))
    monkeypatch.setenv("DRAFTGATE_STATE", "redis://store:6379/0")
    flat = load_settings(cfg)
    assert (flat.timeouts.queue, flat.timeouts.connect, flat.plan.routing) == (3.0, 1.0, {"prose": "p"})
    assert flat.health.interval == 0.5 and flat.shared_state.address == "redis://store:6379/0"
    warned = {r.getMessage() for r in caplog.records if r.name == "draftgate.config"}
    assert "configuration key queue_timeout is deprecated and will be removed: write timeouts.queue" in warned
    assert any("state is deprecated" in w and "shared_state.address" in w for w in warned)
    with pytest.raises(ConfigError, match="timeouts.queue"):
        load_settings(None, pools=pools, queue_timeout=-1)
