"""TLS on both sides of the proxy: pools served over https by a private CA, and
the proxy serving https itself."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from draftgate.emulator.app import EmulatorConfig
from draftgate.emulator.app import create_app as create_emulator
from draftgate.proxy.app import create_app
from draftgate.proxy.config import ConfigError, load_settings
from draftgate.servers import ServerProcess, ServerThread, free_port
from tests.conftest import emulator
from tests.proxy_harness import (
    container_health_check,
    proxy_server,
    proxy_settings,
    wait_until,
)

MODEL = "Qwen/Qwen3-32B"
USER = [{"role": "user", "content": "hello"}]
TLS = Path(__file__).resolve().parents[1] / "data" / "tls"


def test_dns_expansion_of_an_https_pool_stops_startup() -> None:
    """Replicas found by DNS are reached by address, which the server's certificate does not name."""
    with pytest.raises(ConfigError, match="dns_refresh_seconds needs http"):
        load_settings(None, pools=[{"name": "p", "urls": ["https://vllm:8000"], "dns_refresh_seconds": 5}])


def test_a_pool_served_over_https_by_a_private_ca() -> None:
    """Trusted with tls_ca_file, on the hot path and by the health checks alike;
    without it the pool fails its checks and the other pool serves."""
    served_tls = {"ssl_certfile": str(TLS / "server.pem"), "ssl_keyfile": str(TLS / "server-key.pem")}
    plain = ServerThread(create_emulator(EmulatorConfig(seed=28, force_include_usage=True,
                                                     default_chat_template_kwargs={"enable_thinking": False})), options=served_tls)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 8}
    with emulator(28, True) as on, plain:
        https_url = f"https://127.0.0.1:{plain.port}"
        for ca, expected in ((str(TLS / "ca.pem"), "spec-off"), (None, "spec-on")):
            app = create_app(proxy_settings(on.url, https_url, tls={"ca_file": ca}))
            with proxy_server(app) as proxy:
                pool = app.state.proxy.upstreams.pool("spec-off")
                assert wait_until(lambda: pool.replicas[https_url].checked_at > 0), "never health-checked"
                assert pool.replicas[https_url].healthy is (ca is not None)
                r = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=30)
                assert r.status_code == 200 and r.headers["x-draftgate-route"] == expected
    with pytest.raises(ConfigError, match="tls.ca_file"):
        load_settings(None, pools=[{"name": "p", "urls": [https_url]}], tls={"ca_file": str(TLS / "README.md")})


def test_a_pool_that_requires_a_client_certificate() -> None:
    """Mutual TLS, as vLLM runs it with --ssl-ca-certs and --ssl-cert-reqs 2: the
    proxy shows tls.client_certfile, on the hot path and to the health checks;
    without one the pool refuses it and the other pool serves."""
    served_tls = {"ssl_certfile": str(TLS / "server.pem"), "ssl_keyfile": str(TLS / "server-key.pem"),
                  "ssl_ca_certs": str(TLS / "client-ca.pem"), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    plain = ServerThread(create_emulator(EmulatorConfig(seed=33, force_include_usage=True,
                                                     default_chat_template_kwargs={"enable_thinking": False})), options=served_tls)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 8}
    client = {"client_certfile": str(TLS / "client.pem"), "client_keyfile": str(TLS / "client-key.pem")}
    with emulator(33, True) as on, plain:
        https_url = f"https://127.0.0.1:{plain.port}"
        for shown, expected in ((client, "spec-off"), ({}, "spec-on")):
            app = create_app(proxy_settings(on.url, https_url, tls={"ca_file": str(TLS / "ca.pem"), **shown}))
            with proxy_server(app) as proxy:
                pool = app.state.proxy.upstreams.pool("spec-off")
                assert wait_until(lambda: pool.replicas[https_url].checked_at > 0), "never health-checked"
                assert pool.replicas[https_url].healthy is bool(shown)
                r = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=30)
                assert r.status_code == 200 and r.headers["x-draftgate-route"] == expected
    pools = [{"name": "p", "urls": [https_url]}]
    with pytest.raises(ConfigError, match="client_certfile and client_keyfile go together"):
        load_settings(None, pools=pools, tls={"client_certfile": str(TLS / "client.pem")})
    with pytest.raises(ConfigError, match="cannot serve"):
        load_settings(None, pools=pools, tls={"client_certfile": str(TLS / "client.pem"),
                                              "client_keyfile": str(TLS / "server-key.pem")})


def test_the_proxy_serves_https_with_a_configured_certificate(tmp_path: Path) -> None:
    """As vLLM does with --ssl-certfile: clients that reach their pools over https
    reach the proxy the same way."""
    ca = str(TLS / "ca.pem")
    with emulator(29, True) as on, emulator(29, False) as off:
        cfg = tmp_path / "draftgate.yaml"
        cfg.write_text(yaml.safe_dump({
            "pools": [{"name": "spec-on", "urls": [on.url], "speculation": {"gamma": 8}},
                      {"name": "spec-off", "urls": [off.url]}],
            "tls": {"certfile": str(TLS / "server.pem"), "keyfile": str(TLS / "server-key.pem")}}))
        with ServerProcess(["serve", "--config", str(cfg)], ca_file=ca) as proxy:
            assert proxy.url.startswith("https://")
            client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="none", max_retries=0,
                                   http_client=httpx.Client(verify=proxy.verify, timeout=30))
            answer = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2)
            assert answer.choices[0].message.content
            with pytest.raises(httpx.TransportError):  # plain http is not served beside it
                httpx.get(f"{proxy.url.replace('https', 'http', 1)}/health", timeout=5)
            assert "serving on https://127.0.0.1" in proxy.output()
            assert container_health_check(proxy.port) == 0
    assert container_health_check(free_port()) == 1
    pools = [{"name": "p", "urls": ["http://127.0.0.1:1"]}]
    with pytest.raises(ConfigError, match="certfile and keyfile go together"):
        load_settings(None, pools=pools, tls={"certfile": str(TLS / "server.pem")})
    with pytest.raises(ConfigError, match="cannot serve"):
        load_settings(None, pools=pools, tls={"certfile": str(TLS / "server.pem"), "keyfile": str(TLS / "ca.pem")})
